#include "obs/straggler_detector.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <numeric>
#include <span>
#include <utility>

#include "comm/profiled_communicator.h"
#include "core/error.h"
#include "core/host_name.h"

namespace megatron::obs {
namespace {

// The rank with the least (most) value of `get` among those `has`; ties go to the lower rank.
template <class Get, class Has>
std::pair<int64_t, int64_t> min_max_ranks(const std::vector<StragglerRankStats>& ranks, Get get, Has has) {
  int64_t lo = -1, hi = -1;
  for (int64_t r = 0; r < static_cast<int64_t>(ranks.size()); ++r) {
    const StragglerRankStats& s = ranks[static_cast<size_t>(r)];
    if (!has(s)) continue;
    if (lo < 0 || get(s) < get(ranks[static_cast<size_t>(lo)])) lo = r;
    if (hi < 0 || get(s) > get(ranks[static_cast<size_t>(hi)])) hi = r;
  }
  return {lo, hi};
}

std::string value_at(double v, const char* unit, int64_t rank) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f%s/%lld", v, unit, static_cast<long long>(rank));
  return buf;
}

std::string local_timestamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "[%Y-%m-%d %H:%M:%S]", &tm);
  return buf;
}

// A gathered row: what one rank sends at a report.
// (Missing readings travel as a flag and a 0, never NaN: the rows are summed.)
enum Field {
  kRequested,
  kIterations,
  kRtt,
  kBatch,
  kEtpt,
  kGpu,
  kPower,
  kClock,
  kHasTemperature,
  kTemperature,
  kHasUtilization,
  kUtilization,
  kFields
};

}  // namespace

std::string format_straggler_report(const std::vector<StragglerRankStats>& ranks, const std::vector<std::string>& hosts,
                                    int64_t minmax_count, const std::string& timestamp) {
  MT_CHECK(!ranks.empty() && hosts.size() == ranks.size()) << ranks.size() << " ranks, " << hosts.size() << " hosts";
  std::string line = timestamp;
  auto pair = [&](const char* name, const char* unit, auto get, auto has) {
    const auto [lo, hi] = min_max_ranks(ranks, get, has);
    if (lo < 0) return;
    line += str_cat(" | Mn", name, "/Rnk: ", value_at(get(ranks[static_cast<size_t>(lo)]), unit, lo), " | Mx", name,
                    "/Rnk: ", value_at(get(ranks[static_cast<size_t>(hi)]), unit, hi));
  };
  auto all = [](const StragglerRankStats&) { return true; };
  auto gpu = [](const StragglerRankStats& s) { return s.gpu; };
  auto has_temperature = [](const StragglerRankStats& s) { return s.gpu && !std::isnan(s.temperature_c); };
  auto has_utilization = [](const StragglerRankStats& s) { return s.gpu && !std::isnan(s.utilization_pct); };
  pair(
      "Rtt", "ms", [](const StragglerRankStats& s) { return s.rtt_ms; }, all);
  pair(
      "Pwr", "W", [](const StragglerRankStats& s) { return s.power_w; }, gpu);
  pair(
      "Tmp", "C", [](const StragglerRankStats& s) { return s.temperature_c; }, has_temperature);
  pair(
      "Utl", "%", [](const StragglerRankStats& s) { return s.utilization_pct; }, has_utilization);
  pair(
      "Clk", "MHz", [](const StragglerRankStats& s) { return s.sm_clock_mhz; }, gpu);
  pair(
      "DRtt", "ms", [](const StragglerRankStats& s) { return s.batch_ms; }, all);
  pair(
      "Etpt", "TF", [](const StragglerRankStats& s) { return s.etpt_tflops; }, all);
  const auto [fast, slow] = min_max_ranks(
      ranks, [](const StragglerRankStats& s) { return s.rtt_ms; }, all);
  const double fastest = ranks[static_cast<size_t>(fast)].rtt_ms, slowest = ranks[static_cast<size_t>(slow)].rtt_ms;
  char over[32];
  std::snprintf(over, sizeof(over), "%.1f%%", fastest > 0 ? 100.0 * (slowest / fastest - 1.0) : 0.0);
  line +=
      str_cat(" | slowest: rank ", slow, " on ", hosts[static_cast<size_t>(slow)], ", ", over, " over the fastest\n");

  const int64_t n = std::min<int64_t>(minmax_count, static_cast<int64_t>(ranks.size()));
  if (n > 1) {
    // Ranks by Etpt, ascending (ties by rank); the N lowest and the N highest, each ascending.
    std::vector<int64_t> order(ranks.size());
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return ranks[static_cast<size_t>(a)].etpt_tflops < ranks[static_cast<size_t>(b)].etpt_tflops;
    });
    auto list = [&](int64_t from) {
      std::string s;
      for (int64_t i = from; i < from + n; ++i) {
        const int64_t r = order[static_cast<size_t>(i)];
        s += value_at(ranks[static_cast<size_t>(r)].etpt_tflops, "", r) + ", ";
      }
      if (!s.empty()) s.pop_back();  // Megatron's lines end with the last ','
      return s;
    };
    line += str_cat("^^^^ Bottom ", n, " Ranks with lowest  Etpt(TF): ", list(0), "\n");
    line += str_cat("^^^^ Top    ", n, " Ranks with highest Etpt(TF): ", list(static_cast<int64_t>(ranks.size()) - n),
                    "\n");
  }
  return line;
}

StragglerDetector::StragglerDetector(backend::Backend& backend, const StragglerOptions& options, int64_t world_rank,
                                     int cuda_device)
    : backend_(backend), options_(options), world_rank_(world_rank), on_(options.on_at_start) {
  MT_CHECK(options_.minmax_count >= 1) << "--straggler-minmax-count " << options_.minmax_count;
  if (world_rank_ == 0) {
    try {
      control_ = std::make_unique<StragglerControl>(options_.control_port, on_);
    } catch (const Error& e) {
      control_error_ = e.what();
    }
  }
  if (cuda_device >= 0) gpu_ = backend::start_telemetry(cuda_device, 100, &gpu_missing_);
  iteration_timer_ = backend::make_op_timer(backend_);
  comm_timer_ = backend::make_op_timer(backend_);
}

StragglerDetector::~StragglerDetector() = default;

std::unique_ptr<comm::Communicator> StragglerDetector::watch(std::unique_ptr<comm::Communicator> world) {
  return std::make_unique<comm::ProfiledCommunicator>(std::move(world), *this);
}

std::string StragglerDetector::start_up_note() const {
  std::string note = str_cat(" > straggler detector (--log-straggler): ", on_ ? "on" : "off",
                             ", rank 0 reports the slowest and fastest rank at every log interval");
  if (control_) {
    note += str_cat("; `curl ", host_name("<rank 0 host>"), ":", control_->port(), "` turns it ", on_ ? "off" : "on",
                    " and back");
  } else {
    note += str_cat("; it cannot be turned ", on_ ? "off" : "on", " while running: ", control_error_);
  }
  if (!gpu_missing_.empty()) note += str_cat("; no GPU readings on rank 0: ", gpu_missing_);
  return note + "\n";
}

void StragglerDetector::begin_iteration() {
  if (!on_) return;
  MT_CHECK(!in_iteration_) << "StragglerDetector::begin_iteration twice";
  iteration_timer_->begin();
  in_iteration_ = true;
}

void StragglerDetector::end_iteration(double model_flops) {
  if (!in_iteration_) return;
  iteration_timer_->end(0);
  in_iteration_ = false;
  ++iterations_;
  model_flops_ += model_flops;
}

void StragglerDetector::add_batch_seconds(double seconds) {
  if (in_iteration_) batch_seconds_ += seconds;
}

void StragglerDetector::time_region(const std::string&, const std::function<void()>& f) {
  // A region inside another (a collective issued while one is timed) counts once, in the outer.
  if (!in_iteration_ || in_region_) {
    f();
    return;
  }
  in_region_ = true;
  comm_timer_->begin();
  try {
    f();
  } catch (...) {
    comm_timer_->end(0);
    in_region_ = false;
    throw;
  }
  comm_timer_->end(0);
  in_region_ = false;
}

std::optional<std::string> StragglerDetector::report(comm::Communicator& world) {
  MT_CHECK(!in_iteration_) << "StragglerDetector::report inside an iteration";
  const size_t ranks = static_cast<size_t>(world.size()), me = static_cast<size_t>(world.rank());
  if (hosts_.empty()) hosts_ = comm::all_gather_strings(world, host_name("unknown"));  // once

  std::vector<double> row(kFields, 0.0);
  if (world_rank_ == 0) row[kRequested] = (control_ ? control_->requested() : on_) ? 1.0 : 0.0;
  const std::vector<backend::OpTime> whole = iteration_timer_->report(), comm = comm_timer_->report();
  iteration_timer_->reset();
  comm_timer_->reset();
  const backend::TelemetrySummary gpu = gpu_ ? gpu_->take() : backend::TelemetrySummary{};
  if (iterations_ > 0) {
    const double n = static_cast<double>(iterations_);
    const double whole_ms = whole.empty() ? 0.0 : whole[0].total_ms;
    const double comm_ms = comm.empty() ? 0.0 : comm[0].total_ms;
    const double compute_ms = std::max(whole_ms - comm_ms, 0.0);
    row[kIterations] = n;
    row[kRtt] = compute_ms / n;
    row[kBatch] = 1000.0 * batch_seconds_ / n;
    row[kEtpt] = compute_ms > 0 ? model_flops_ / (compute_ms / 1000.0) / 1e12 : 0.0;
    if (gpu.samples > 0) {
      row[kGpu] = 1.0;
      row[kPower] = gpu.power_median_w;
      row[kClock] = gpu.sm_clock_median_mhz;
      if (!std::isnan(gpu.temperature_median_c)) {
        row[kHasTemperature] = 1.0;
        row[kTemperature] = gpu.temperature_median_c;
      }
      if (!std::isnan(gpu.utilization_median_pct)) {
        row[kHasUtilization] = 1.0;
        row[kUtilization] = gpu.utilization_median_pct;
      }
    }
  }
  iterations_ = 0;
  batch_seconds_ = model_flops_ = 0.0;
  const std::vector<double> table = comm::all_gather_host(world, row);

  const bool was_on = on_;
  on_ = table[kRequested] > 0.5;  // rank 0's row
  if (me != 0) return std::nullopt;
  std::string text;
  bool timed = was_on;
  std::vector<StragglerRankStats> stats(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    const double* t = &table[r * kFields];
    timed = timed && t[kIterations] > 0;
    StragglerRankStats& s = stats[r];
    s.rtt_ms = t[kRtt];
    s.batch_ms = t[kBatch];
    s.etpt_tflops = t[kEtpt];
    s.gpu = t[kGpu] > 0.5;
    s.power_w = t[kPower];
    s.sm_clock_mhz = t[kClock];
    if (t[kHasTemperature] > 0.5) s.temperature_c = t[kTemperature];
    if (t[kHasUtilization] > 0.5) s.utilization_pct = t[kUtilization];
  }
  if (timed) text = format_straggler_report(stats, hosts_, options_.minmax_count, local_timestamp());
  if (on_ != was_on) text += str_cat(" > straggler detector ", on_ ? "on" : "off", " from the next iteration\n");
  if (text.empty()) return std::nullopt;
  return text;
}

}  // namespace megatron::obs
