// Megatron-LM's training log lines, formatting only (docs/megatron-formats.md, "Log lines"): the
// caller prints the returned strings on the right rank (the iteration line on the last rank).
//
// The iteration line, HEAD style (the default), fields in Megatron's order, each " ... |":
//   " [2026-01-02 03:04:05.123456] iteration       10/    1000 | consumed samples:          640 |
//    elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 123.4 |
//    learning rate: 1.500000E-04 | global batch size:    64 | lm loss: 1.054321E+01 |
//    loss scale: 4294967296.0 | grad norm: 12.345 | num zeros: 0.0 | params norm: 250.125 |
//    number of skipped iterations:   0 | number of nan iterations:   0 |
//    tokens per second: 53084 | ETA: 0:18:31 |"            (one line; wrapped here)
// Optional pieces: the timestamp (when given), "skipped samples" (HEAD, when > 0), throughput
// (--log-throughput), energy and power per GPU (HEAD, --log-energy; obs/energy_monitor.h), grad norm (when not None),
// num zeros (--log-num-zeros-in-grad), params norm
// (--log-params-norm). Our two additions come after all of Megatron's fields so that parsers
// of Megatron logs keep working:
//   " tokens per second: {rounded integer} |"   tokens of the global batch / elapsed seconds
//   " ETA: {h}:{mm}:{ss} |"                     hours not wrapped at 24 (e.g. "31:02:09")
// LogStyle::kC23 prints classic Megatron (2023-10): no timestamp, "learning rate: {:.3E}",
// losses only when > 0 and "num zeros: {:.1f}". Numbers follow Python's format(): "{:.6E}"
// gives 1.054321E+01 (two-digit exponent at least), inf/nan print as INF/NAN and inf/nan.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace megatron::obs {

enum class LogStyle { kHead, kC23 };

// A named loss average ("lm loss", 10.54321).
using LossValue = std::pair<std::string, double>;

struct IterationLog {
  std::optional<std::string> timestamp;  // from format_timestamp(); HEAD style only
  int64_t iteration = 0;
  int64_t train_iters = 0;
  int64_t consumed_samples = 0;
  int64_t skipped_samples = 0;           // HEAD prints it when > 0
  double elapsed_ms = 0;                 // per iteration, averaged over the interval
  std::optional<double> tflops_per_gpu;  // --log-throughput
  // --log-energy: " energy per GPU (J/iter/GPU): {:.1f} | power per GPU (W/GPU): {:.1f} |"
  std::optional<double> energy_per_gpu_j;
  std::optional<double> power_per_gpu_w;
  double learning_rate = 0;
  int64_t global_batch_size = 0;
  std::vector<LossValue> losses;
  double loss_scale = 1.0;
  std::optional<double> grad_norm;    // None when clipping is off or the step was skipped
  std::optional<double> num_zeros;    // --log-num-zeros-in-grad
  std::optional<double> params_norm;  // --log-params-norm
  int64_t skipped_iterations = 0;
  int64_t nan_iterations = 0;
  // Our additions (omitted when empty).
  std::optional<double> tokens_per_second;
  std::optional<double> eta_seconds;
};

// One line, no trailing newline.
std::string format_iteration_line(const IterationLog& log, LogStyle style = LogStyle::kHead);

// " [YYYY-mm-dd HH:MM:SS.ffffff]" content without the brackets, local time (HEAD's strftime).
std::string format_timestamp(std::chrono::system_clock::time_point t);
// h:mm:ss from seconds (rounded to the nearest second; negative or non-finite gives "-:--:--").
std::string format_eta(double seconds);

// Megatron's evaluate_and_print_results block: a dash line, the loss line, a dash line, each
// followed by '\n'. prefix is e.g. "iteration 1000" or "iteration 1000 on test set".
// PPL = exp(min(20, loss)).
std::string format_validation_block(const std::string& prefix, const std::vector<LossValue>& losses);

// Megatron's report_memory line, byte counts converted to MiB and printed like Python's str():
// "[Rank 0] (after 10 iterations) memory (MB) | allocated: 1234.5 | max allocated: ... |
// reserved: ... | max reserved: ..." (no trailing newline).
std::string format_memory_line(int64_t rank, int64_t iterations, int64_t allocated_bytes, int64_t max_allocated_bytes,
                               int64_t reserved_bytes, int64_t max_reserved_bytes);

// Python's format(x, '.{precision}E'), format(x, '.{precision}f') and repr(x) for a float.
std::string py_format_e(double x, int precision);
std::string py_format_f(double x, int precision);
std::string py_repr(double x);

}  // namespace megatron::obs
