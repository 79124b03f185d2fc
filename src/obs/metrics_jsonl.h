// --log-jsonl FILE: one JSON object per logged iteration, for scripts and W&B-style sidecars.
//
//   {"iteration": 10, "consumed_samples": 640, "lr": 0.00015, "lm_loss": 10.5, "grad_norm": null}
//
// Keys appear in the order given. Doubles are printed in the shortest form that reads back to
// the same double (so 1.5e-4 prints as 0.00015, never 0.00014999999999999999), always with a
// '.' or exponent so they stay floats in Python/pandas; NaN and +-inf, which JSON cannot
// represent, are written as null. Every line is appended with one write(2) on an O_APPEND
// descriptor, so a killed run keeps every finished line and lines never interleave.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace megatron::obs {

// A JSON scalar: null, boolean, int64, double or string. Any integer type converts to int64
// (unsigned values above INT64_MAX are not supported); float converts to double.
class MetricValue {
 public:
  using Variant = std::variant<std::nullptr_t, bool, int64_t, double, std::string>;

  MetricValue() : v_(nullptr) {}
  MetricValue(std::nullptr_t) : v_(nullptr) {}
  MetricValue(bool b) : v_(b) {}
  template <std::integral T>
  requires(!std::same_as<T, bool>) MetricValue(T i) : v_(static_cast<int64_t>(i)) {}
  template <std::floating_point T>
  MetricValue(T d) : v_(static_cast<double>(d)) {}
  MetricValue(const char* s) : v_(std::string(s)) {}
  MetricValue(std::string s) : v_(std::move(s)) {}
  MetricValue(std::string_view s) : v_(std::string(s)) {}
  // An empty optional is null (e.g. grad_norm when no norm was computed).
  template <class T>
  MetricValue(const std::optional<T>& o) : MetricValue(o ? MetricValue(*o) : MetricValue(nullptr)) {}

  const Variant& variant() const { return v_; }

 private:
  Variant v_;
};

using MetricFields = std::vector<std::pair<std::string, MetricValue>>;

// The JSON text of one object, without the newline.
std::string metrics_json_object(const MetricFields& fields);

// Appends `x` to `out` as a JSON number that strtod reads back to exactly `x`; null if not finite.
void append_json_double(std::string& out, double x);
// Appends `s` as a JSON string literal (quotes, backslash and control characters escaped;
// other bytes, UTF-8 included, are copied).
void append_json_string(std::string& out, std::string_view s);

class MetricsJsonlWriter {
 public:
  // Opens `path` for appending (creating the file, whose directory must exist); an existing
  // file is kept, so a resumed run continues the same log. Throws megatron::Error naming the
  // flag and the file, or the missing directory.
  explicit MetricsJsonlWriter(const std::string& path);
  ~MetricsJsonlWriter();
  MetricsJsonlWriter(const MetricsJsonlWriter&) = delete;
  MetricsJsonlWriter& operator=(const MetricsJsonlWriter&) = delete;

  // Appends metrics_json_object(fields) + "\n". Throws megatron::Error naming the file.
  void write(const MetricFields& fields);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace megatron::obs
