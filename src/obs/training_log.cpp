#include "obs/training_log.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "core/error.h"

namespace megatron::obs {

namespace {

// Python writes inf/nan without a sign for nan, and with '-' for -inf.
std::optional<std::string> non_finite(double x, bool upper) {
  if (std::isnan(x)) return upper ? "NAN" : "nan";
  if (std::isinf(x)) return std::string(x < 0 ? "-" : "") + (upper ? "INF" : "inf");
  return std::nullopt;
}

std::string printf_str(const char* fmt, int precision, double x) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), fmt, precision, x);
  return buf;
}

std::string padded_int(int64_t v, int width) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%*lld", width, static_cast<long long>(v));
  return buf;
}

}  // namespace

std::string py_format_e(double x, int precision) {
  if (auto s = non_finite(x, true)) return *s;
  // C's %E matches Python's 'E': correctly rounded, exponent with a sign and >= 2 digits.
  return printf_str("%.*E", precision, x);
}

std::string py_format_f(double x, int precision) {
  if (auto s = non_finite(x, false)) return *s;
  return printf_str("%.*f", precision, x);
}

std::string py_repr(double x) {
  if (auto s = non_finite(x, false)) return *s;
  // Shortest round-trip digits (Python's repr uses the same David Gay shortest form), then
  // Python's layout: positional when -4 <= exponent < 16, else d.ddde+XX.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(sci.substr(e + 1));
  if (exponent >= -4 && exponent < 16) {
    std::string int_part, frac_part;
    if (exponent >= 0) {
      if (static_cast<int>(digits.size()) <= exponent + 1) {
        int_part = digits + std::string(exponent + 1 - digits.size(), '0');
      } else {
        int_part = digits.substr(0, exponent + 1);
        frac_part = digits.substr(exponent + 1);
      }
    } else {
      int_part = "0";
      frac_part = std::string(-exponent - 1, '0') + digits;
    }
    if (frac_part.empty()) frac_part = "0";
    return sign + int_part + "." + frac_part;
  }
  std::string mantissa = digits.substr(0, 1);
  if (digits.size() > 1) mantissa += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return sign + mantissa + exp_buf;
}

std::string format_timestamp(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  localtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count() % 1000000;
  if (micros < 0) micros += 1000000;
  char frac[16];
  std::snprintf(frac, sizeof(frac), ".%06lld", static_cast<long long>(micros));
  return std::string(buf) + frac;
}

std::string format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-:--:--";
  const long long total = std::llround(seconds);
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", total / 3600, total / 60 % 60, total % 60);
  return buf;
}

std::string format_iteration_line(const IterationLog& l, LogStyle style) {
  const bool head = style == LogStyle::kHead;
  std::string s;
  if (head && l.timestamp) s += " [" + *l.timestamp + "]";
  s += " iteration " + padded_int(l.iteration, 8) + "/" + padded_int(l.train_iters, 8) + " |";
  s += " consumed samples: " + padded_int(l.consumed_samples, 12) + " |";
  if (head && l.skipped_samples > 0) s += " skipped samples: " + padded_int(l.skipped_samples, 12) + " |";
  s += " elapsed time per iteration (ms): " + py_format_f(l.elapsed_ms, 1) + " |";
  if (l.tflops_per_gpu) s += " throughput per GPU (TFLOP/s/GPU): " + py_format_f(*l.tflops_per_gpu, 1) + " |";
  if (head && l.energy_per_gpu_j) {
    s += " energy per GPU (J/iter/GPU): " + py_format_f(*l.energy_per_gpu_j, 1) + " |";
    s += " power per GPU (W/GPU): " + py_format_f(l.power_per_gpu_w.value_or(0.0), 1) + " |";
  }
  s += " learning rate: " + py_format_e(l.learning_rate, head ? 6 : 3) + " |";
  s += " global batch size: " + padded_int(l.global_batch_size, 5) + " |";
  for (const LossValue& loss : l.losses) {
    // C23 prints a loss only when avg > 0, HEAD when avg >= 0 (a NaN average is never shown).
    const bool show = head ? loss.second >= 0.0 : loss.second > 0.0;
    if (show) s += " " + loss.first + ": " + py_format_e(loss.second, 6) + " |";
  }
  s += " loss scale: " + py_format_f(l.loss_scale, 1) + " |";
  if (l.grad_norm) s += " grad norm: " + py_format_f(*l.grad_norm, 3) + " |";
  if (l.num_zeros) s += " num zeros: " + (head ? py_repr(*l.num_zeros) : py_format_f(*l.num_zeros, 1)) + " |";
  if (l.params_norm) s += " params norm: " + py_format_f(*l.params_norm, 3) + " |";
  s += " number of skipped iterations: " + padded_int(l.skipped_iterations, 3) + " |";
  s += " number of nan iterations: " + padded_int(l.nan_iterations, 3) + " |";
  if (l.tokens_per_second) {
    const double tps = *l.tokens_per_second;
    s += " tokens per second: " + (std::isfinite(tps) ? std::to_string(std::llround(tps)) : py_format_f(tps, 0)) + " |";
  }
  if (l.eta_seconds) s += " ETA: " + format_eta(*l.eta_seconds) + " |";
  return s;
}

std::string format_validation_block(const std::string& prefix, const std::vector<LossValue>& losses) {
  std::string line = " validation loss at " + prefix + " | ";
  for (const LossValue& loss : losses) {
    line += loss.first + " value: " + py_format_e(loss.second, 6) + " | ";
    // std::min(20, nan) is 20, as Python's min(20, nan).
    line += loss.first + " PPL: " + py_format_e(std::exp(std::min(20.0, loss.second)), 6) + " | ";
  }
  const std::string dashes(line.size() + 1, '-');
  return dashes + "\n" + line + "\n" + dashes + "\n";
}

std::string format_memory_line(int64_t rank, int64_t iterations, int64_t allocated_bytes, int64_t max_allocated_bytes,
                               int64_t reserved_bytes, int64_t max_reserved_bytes) {
  constexpr double kMiB = 1024.0 * 1024.0;
  return str_cat("[Rank ", rank, "] (after ", iterations, " iterations) memory (MB)",
                 " | allocated: ", py_repr(static_cast<double>(allocated_bytes) / kMiB),
                 " | max allocated: ", py_repr(static_cast<double>(max_allocated_bytes) / kMiB),
                 " | reserved: ", py_repr(static_cast<double>(reserved_bytes) / kMiB),
                 " | max reserved: ", py_repr(static_cast<double>(max_reserved_bytes) / kMiB));
}

}  // namespace megatron::obs
