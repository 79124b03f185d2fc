#include "obs/progress_log.h"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace megatron::obs {
namespace {

constexpr const char* kTimeFormat = "%Y-%m-%d %H:%M:%S";

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == '\t') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  return out;
}

// The value after "Name: " in a field, or nullopt.
std::optional<std::string> field_value(const std::string& field) {
  const size_t at = field.find(": ");
  if (at == std::string::npos) return std::nullopt;
  return field.substr(at + 2);
}

std::optional<std::chrono::system_clock::time_point> parse_time(const std::string& s) {
  std::tm tm{};
  std::istringstream in(s);
  in >> std::get_time(&tm, kTimeFormat);
  if (in.fail()) return std::nullopt;
  tm.tm_isdst = -1;
  return std::chrono::system_clock::from_time_t(std::mktime(&tm));
}

}  // namespace

std::string progress_line(std::chrono::system_clock::time_point when, const std::string& job_id, int64_t gpus,
                          const std::string& text) {
  const std::time_t t = std::chrono::system_clock::to_time_t(when);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), kTimeFormat, &tm);
  return str_cat(stamp, "\tJob ID: ", job_id, "\t# GPUs: ", gpus, "\t", text, "\n");
}

std::optional<ProgressStart> cumulative_start(const std::string& contents, int64_t gpus) {
  std::optional<ProgressStart> start;
  double latest_flops = 0.0;
  std::istringstream in(contents);
  std::string line;
  while (std::getline(in, line)) {
    const std::vector<std::string> f = split_tabs(line);
    if (f.size() < 4) continue;  // not one of ours (a torn last line, a hand edit)
    const std::optional<std::string> g = field_value(f[2]);
    int64_t line_gpus = -1;
    try {
      if (g) line_gpus = std::stoll(*g);
    } catch (const std::exception&) {
      continue;
    }
    // Megatron counts finished saves only: an async save's line is written when it starts.
    if (f[3] == "Saved checkpoint" && f.size() >= 8) {
      if (const std::optional<std::string> v = field_value(f[7])) {
        try {
          latest_flops = std::stod(*v);
        } catch (const std::exception&) {
        }
      }
    }
    if (line_gpus != gpus) {
      start.reset();  // another GPU count: the run of jobs starts again
      continue;
    }
    if (f[3] == "Starting job" && !start) {
      if (const auto t = parse_time(f[0])) start = ProgressStart{*t, latest_flops};
    }
  }
  return start;
}

std::string checkpoint_progress_text(bool async, int64_t iteration, double job_tflops_per_gpu,
                                     double cumulative_tflops_per_gpu, double flops_so_far, double tokens_so_far) {
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "%s\tIteration: %lld\tJob throughput: %.1f TFLOP/s/GPU\tCumulative throughput: %.1f TFLOP/s/GPU\t"
                "Floating-point operations: %.2e\tTokens (in billions): %.2f",
                async ? "Saving async checkpoint" : "Saved checkpoint", static_cast<long long>(iteration),
                job_tflops_per_gpu, cumulative_tflops_per_gpu, flops_so_far, tokens_so_far / 1e9);
  return buf;
}

void append_progress_line(const std::string& path, const std::string& line) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream out(path, std::ios::app | std::ios::binary);
  out << line;
  out.flush();
  if (!out) throw_error("[--log-progress] ", path, ": cannot append");
}

}  // namespace megatron::obs
