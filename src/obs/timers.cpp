#include "obs/timers.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <limits>

#include "core/error.h"

namespace megatron::obs {
namespace {

// printf into a string (the lines are short: a name of at most a few dozen characters).
std::string printf_string(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

}  // namespace

TimingLogOption parse_timing_log_option(const std::string& s) {
  if (s == "minmax") return TimingLogOption::kMinMax;
  if (s == "max") return TimingLogOption::kMax;
  if (s == "all") return TimingLogOption::kAll;
  throw_error("[--timing-log-option] '", s, "' is not one of minmax, max, all");
}

Timers::Timers(int64_t log_level, TimingLogOption option, std::function<void()> synchronize_device)
    : log_level_(log_level), option_(option), synchronize_device_(std::move(synchronize_device)) {
  if (log_level < 0 || log_level > 2) throw_error("[--timing-log-level] must be 0, 1 or 2, got ", log_level);
}

void Timers::sync(comm::Communicator* world, bool barrier) {
  if (barrier) {
    MT_CHECK(world != nullptr) << "a timer barrier needs the world group";
    world->barrier();
  }
  if (synchronize_device_) synchronize_device_();
}

void Timers::start(const std::string& name, int64_t level, comm::Communicator* world, bool barrier) {
  auto it = timers_.find(name);
  if (it == timers_.end()) {
    if (!active(level)) return;
    it = timers_.emplace(name, Timer{level}).first;
  }
  Timer& t = it->second;
  MT_CHECK(!t.running) << "timer " << name << " has already been started";
  sync(world, barrier);
  t.started = std::chrono::steady_clock::now();
  t.running = true;
}

void Timers::stop(const std::string& name, comm::Communicator* world, bool barrier) {
  auto it = timers_.find(name);
  if (it == timers_.end()) return;
  Timer& t = it->second;
  MT_CHECK(t.running) << "timer " << name << " is not started";
  sync(world, barrier);
  t.elapsed += std::chrono::duration<double>(std::chrono::steady_clock::now() - t.started).count();
  t.running = false;
}

double Timers::elapsed_seconds(const std::string& name) const {
  auto it = timers_.find(name);
  if (it == timers_.end()) return 0.0;
  const Timer& t = it->second;
  double s = t.elapsed;
  if (t.running) s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t.started).count();
  return s;
}

std::vector<std::vector<double>> Timers::gather(const std::vector<std::string>& names, comm::Communicator& world,
                                                bool reset) {
  const size_t n = names.size(), ranks = static_cast<size_t>(world.size());
  std::vector<double> mine(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    auto it = timers_.find(names[i]);
    if (it == timers_.end()) continue;
    Timer& t = it->second;
    // Megatron's elapsed(reset): a running timer is stopped, read and restarted.
    const auto now = std::chrono::steady_clock::now();
    double s = t.elapsed;
    if (t.running) {
      s += std::chrono::duration<double>(now - t.started).count();
      if (reset) t.started = now;
    }
    if (reset) t.elapsed = 0.0;
    mine[i] = s;
  }
  const std::vector<double> table = comm::all_gather_host(world, mine);
  std::vector<std::vector<double>> out(ranks, std::vector<double>(n));
  for (size_t r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < n; ++i) out[r][i] = table[r * n + i];
  }
  return out;
}

std::optional<std::string> Timers::log(const std::vector<std::string>& names, comm::Communicator& world,
                                       double normalizer) {
  MT_CHECK(normalizer > 0.0) << normalizer;
  const std::vector<std::vector<double>> t = gather(names, world, /*reset=*/true);
  const double to_ms = 1000.0 / normalizer;
  std::string out;
  bool any = false;
  if (option_ == TimingLogOption::kAll) {
    out = "times across ranks (ms):";
    for (size_t i = 0; i < names.size(); ++i) {
      bool first = true;
      for (size_t r = 0; r < t.size(); ++r) {
        if (!(t[r][i] > 0.0)) continue;
        if (first) out += "\n  " + names[i] + ":";
        first = false;
        any = true;
        out += printf_string("\n     rank %2d: %.2f", static_cast<int>(r), t[r][i] * to_ms);
      }
    }
  } else {
    const bool max_only = option_ == TimingLogOption::kMax;
    out = max_only ? "max time across ranks (ms):" : "(min, max) time across ranks (ms):";
    for (size_t i = 0; i < names.size(); ++i) {
      double lo = std::numeric_limits<double>::infinity(), hi = 0.0;
      for (const auto& row : t) {
        if (!(row[i] > 0.0)) continue;
        lo = std::min(lo, row[i]);
        hi = std::max(hi, row[i]);
      }
      if (!(hi > 0.0)) continue;
      any = true;
      std::string label = names[i] + " ";
      if (label.size() < 48) label.append(48 - label.size(), '.');
      out += max_only ? printf_string("\n    %s: %.2f", label.c_str(), hi * to_ms)
                      : printf_string("\n    %s: (%.2f, %.2f)", label.c_str(), lo * to_ms, hi * to_ms);
    }
  }
  if (!any || world.rank() != world.size() - 1) return std::nullopt;
  return out;
}

std::vector<std::pair<std::string, double>> Timers::max_seconds(const std::vector<std::string>& names,
                                                                comm::Communicator& world, double normalizer) {
  MT_CHECK(normalizer > 0.0) << normalizer;
  const std::vector<std::vector<double>> t = gather(names, world, /*reset=*/false);
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 0; i < names.size(); ++i) {
    double hi = 0.0;
    for (const auto& row : t) hi = std::max(hi, row[i]);
    if (hi > 0.0) out.emplace_back(names[i] + "-time", hi / normalizer);
  }
  return out;
}

const std::vector<std::string>& iteration_timer_names() {
  static const std::vector<std::string> names = {
      "forward-backward",
      "forward-compute",
      "backward-compute",
      "batch-generator",
      "forward-recv",
      "forward-send",
      "backward-recv",
      "backward-send",
      "forward-send-forward-recv",
      "forward-send-backward-recv",
      "backward-send-forward-recv",
      "backward-send-backward-recv",
      "forward-backward-send-forward-backward-recv",
      "layernorm-grads-all-reduce",
      "embedding-grads-all-reduce",
      "all-grads-sync",
      "params-all-gather",
      "optimizer-copy-to-main-grad",
      "optimizer-unscale-and-check-inf",
      "optimizer-clip-main-grad",
      "optimizer-count-zeros",
      "optimizer-inner-step",
      "optimizer-copy-main-to-model-params",
      "optimizer",
  };
  return names;
}

}  // namespace megatron::obs
