// Megatron C23 megatron/microbatches.py and training.py update_train_iters.
#include "train/microbatches.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/error.h"

namespace megatron::train {
namespace {

// Python's `a // b` for b > 0.
int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

constexpr const char* kStepFlag = "--step-batch-size-schedule";

// Megatron-Core _parse_numeric_value: strip, upper, an optional K/M/B/T suffix, then
// int(float(value) * multiplier).
int64_t parse_numeric_value(const std::string& word, const std::string& text) {
  std::string v = word;
  for (char& ch : v) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  double multiplier = 1.0;
  if (!v.empty()) {
    switch (v.back()) {
      case 'T':
        multiplier = 1e12;
        break;
      case 'B':
        multiplier = 1e9;
        break;
      case 'M':
        multiplier = 1e6;
        break;
      case 'K':
        multiplier = 1e3;
        break;
      default:
        break;
    }
    if (multiplier != 1.0) v.pop_back();
  }
  char* end = nullptr;
  const double x = v.empty() ? 0.0 : std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || v.find_first_of("XP") != std::string::npos) {
    throw_error("[", kStepFlag, "] '", text, "': '", word, "' is not a number (with an optional K, M, B or T)");
  }
  const double product = x * multiplier;
  if (!std::isfinite(product) || std::fabs(product) >= 0x1p63) {
    throw_error("[", kStepFlag, "] '", text, "': '", word, "' does not fit a 64-bit count");
  }
  return static_cast<int64_t>(product);  // int(): truncation toward 0
}

// Python's f"{n:,}".
std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

}  // namespace

StepBatchSizeSchedule parse_step_batch_size_schedule(const std::string& text, std::optional<int64_t> seq_length) {
  MT_CHECK(!seq_length || *seq_length >= 1) << *seq_length;
  StepBatchSizeSchedule s;
  s.text = text;
  s.seq_length = seq_length;
  std::string spaced = text;
  std::replace(spaced.begin(), spaced.end(), ',', ' ');
  size_t i = 0;
  while (true) {
    while (i < spaced.size() && std::isspace(static_cast<unsigned char>(spaced[i]))) ++i;
    if (i == spaced.size()) break;
    size_t j = i;
    while (j < spaced.size() && !std::isspace(static_cast<unsigned char>(spaced[j]))) ++j;
    const std::string entry = spaced.substr(i, j - i);
    i = j;
    const size_t colon = entry.find(':');
    if (colon == std::string::npos) {
      throw_error("[", kStepFlag, "] invalid schedule entry \"", entry, "\" (expected THRESHOLD:BATCH_SIZE)");
    }
    StepBatchSizeSchedule::Step step;
    step.threshold = parse_numeric_value(entry.substr(0, colon), text);
    step.batch_size = parse_numeric_value(entry.substr(colon + 1), text);
    if (seq_length) step.threshold = floor_div(step.threshold, *seq_length);
    s.steps.push_back(step);
  }
  std::stable_sort(s.steps.begin(), s.steps.end(),
                   [](const auto& a, const auto& b) { return a.threshold < b.threshold; });
  if (s.steps.empty()) throw_error("[", kStepFlag, "] '", text, "': the schedule must have at least one entry");
  if (s.steps[0].threshold != 0) {
    throw_error("[", kStepFlag, "] '", text, "': the first schedule entry must have threshold 0, got ",
                s.steps[0].threshold, seq_length ? " samples" : "");
  }
  for (size_t k = 1; k < s.steps.size(); ++k) {
    if (s.steps[k].threshold <= s.steps[k - 1].threshold) {
      throw_error("[", kStepFlag, "] '", text, "': schedule thresholds must be strictly increasing, got ",
                  s.steps[k - 1].threshold, " before ", s.steps[k].threshold, seq_length ? " (in samples)" : "");
    }
  }
  for (const auto& step : s.steps) {
    if (step.batch_size <= 0) {
      throw_error("[", kStepFlag, "] '", text, "': batch size must be positive, got ", step.batch_size);
    }
  }
  return s;
}

RampupBatchSize rampup_from_flag(std::span<const int64_t> values) {
  if (values.size() != 3)
    throw_error(
        "[--rampup-batch-size] expected 3 values: <start batch size> <batch size "
        "increment> <ramp-up samples>, got ",
        values.size());
  return RampupBatchSize{values[0], values[1], values[2]};
}

NumMicroBatchesCalculator::NumMicroBatchesCalculator(int64_t global_batch_size, int64_t micro_batch_size,
                                                     int64_t data_parallel_size, std::optional<RampupBatchSize> rampup)
    : global_batch_size_(global_batch_size),
      micro_batch_size_(micro_batch_size),
      data_parallel_size_(data_parallel_size),
      micro_times_dp_(0),
      rampup_(rampup),
      current_global_batch_size_(global_batch_size) {
  if (micro_batch_size <= 0) throw_error("[--micro-batch-size] must be positive, got ", micro_batch_size);
  if (global_batch_size <= 0) throw_error("[--global-batch-size] must be positive, got ", global_batch_size);
  MT_CHECK(data_parallel_size > 0) << "data parallel size " << data_parallel_size;
  if (__builtin_mul_overflow(micro_batch_size, data_parallel_size, &micro_times_dp_) ||
      global_batch_size % micro_times_dp_ != 0)
    throw_error("[--global-batch-size] global batch size (", global_batch_size,
                ") is not divisible by micro batch size (--micro-batch-size ", micro_batch_size,
                ") times data parallel size (", data_parallel_size, ")");
  if (global_batch_size / micro_times_dp_ > kMaxMicroBatches)
    throw_error("[--global-batch-size] ", global_batch_size, " samples per iteration make ",
                global_batch_size / micro_times_dp_, " micro-batches per data-parallel rank (--micro-batch-size ",
                micro_batch_size, ", data-parallel size ", data_parallel_size, "); at most ", kMaxMicroBatches,
                " are supported");
  if (!rampup_) return;

  const RampupBatchSize& r = *rampup_;
  if (r.start_batch_size <= 0)
    throw_error("[--rampup-batch-size] start batch size must be positive, got ", r.start_batch_size);
  if (r.batch_size_increment <= 0)
    throw_error("[--rampup-batch-size] batch size increment must be positive, got ", r.batch_size_increment);
  if (r.ramp_samples <= 0) throw_error("[--rampup-batch-size] ramp-up samples must be positive, got ", r.ramp_samples);
  if (r.ramp_samples > std::numeric_limits<int64_t>::max() - global_batch_size)
    throw_error("[--rampup-batch-size] ramp-up samples ", r.ramp_samples, " plus --global-batch-size ",
                global_batch_size, " do not fit in 64 bits");
  const int64_t diff = global_batch_size - r.start_batch_size;
  if (diff <= 0)
    throw_error("[--rampup-batch-size] start batch size ", r.start_batch_size,
                " must be smaller than --global-batch-size ", global_batch_size);
  if (diff % r.batch_size_increment != 0)
    throw_error("[--rampup-batch-size] expected global batch size interval (", diff,
                ") to be divisible by global batch size increment (", r.batch_size_increment, ")");
  // start and start+incr divisible <=> every start + k*incr divisible.
  if (r.start_batch_size % micro_times_dp_ != 0 || r.batch_size_increment % micro_times_dp_ != 0)
    throw_error("[--rampup-batch-size] start batch size (", r.start_batch_size, ") and increment (",
                r.batch_size_increment, ") must be divisible by micro batch size (--micro-batch-size ",
                micro_batch_size, ") times data parallel size (", data_parallel_size, ")");
  const int64_t num_increments = diff / r.batch_size_increment;
  samples_per_increment_ = static_cast<double>(r.ramp_samples) / static_cast<double>(num_increments);
  update(0);
}

NumMicroBatchesCalculator::NumMicroBatchesCalculator(StepBatchSizeSchedule schedule, int64_t micro_batch_size,
                                                     int64_t data_parallel_size)
    : global_batch_size_(0),
      micro_batch_size_(micro_batch_size),
      data_parallel_size_(data_parallel_size),
      micro_times_dp_(0),
      step_(std::move(schedule)),
      current_global_batch_size_(0) {
  if (micro_batch_size <= 0) throw_error("[--micro-batch-size] must be positive, got ", micro_batch_size);
  MT_CHECK(data_parallel_size > 0) << "data parallel size " << data_parallel_size;
  MT_CHECK(!step_->steps.empty() && step_->steps[0].threshold == 0) << "an unparsed schedule";
  if (__builtin_mul_overflow(micro_batch_size, data_parallel_size, &micro_times_dp_)) {
    throw_error("[--micro-batch-size] ", micro_batch_size, " times data parallel size ", data_parallel_size,
                " does not fit in 64 bits");
  }
  for (const auto& s : step_->steps) {
    if (s.batch_size / micro_times_dp_ > kMaxMicroBatches) {
      throw_error("[", kStepFlag, "] batch size ", s.batch_size, " makes ", s.batch_size / micro_times_dp_,
                  " micro-batches per data-parallel rank; at most ", kMaxMicroBatches, " are supported");
    }
  }
  global_batch_size_ = step_->steps.back().batch_size;
  current_global_batch_size_ = global_batch_size_at(0);  // Megatron-Core: update(0, consistency_check=False)
}

int64_t NumMicroBatchesCalculator::ramp_steps(int64_t consumed_samples) const {
  // int(consumed / samples_per_increment) in Python: double division, truncation. Inside the
  // ramp (consumed <= ramp_samples) the quotient is at most the number of increments.
  return static_cast<int64_t>(static_cast<double>(consumed_samples) / samples_per_increment_);
}

int64_t NumMicroBatchesCalculator::global_batch_size_at(int64_t consumed_samples) const {
  if (step_) {
    int64_t batch = step_->steps[0].batch_size;
    for (const auto& s : step_->steps) {
      if (consumed_samples < s.threshold) break;
      batch = s.batch_size;
    }
    return batch;
  }
  if (!rampup_ || consumed_samples > rampup_->ramp_samples) return global_batch_size_;
  const int64_t gbs = rampup_->start_batch_size + ramp_steps(consumed_samples) * rampup_->batch_size_increment;
  MT_CHECK(gbs <= global_batch_size_) << "ramp batch " << gbs << " > " << global_batch_size_;
  return gbs;
}

void NumMicroBatchesCalculator::update(int64_t consumed_samples) {
  MT_CHECK(consumed_samples >= 0) << "consumed samples " << consumed_samples;
  current_global_batch_size_ = global_batch_size_at(consumed_samples);
  if (step_ && current_global_batch_size_ % micro_times_dp_ != 0) {
    throw_error("[", kStepFlag, "] current global batch size (", current_global_batch_size_,
                ") is not divisible by micro_batch_size (", micro_batch_size_, ") * data_parallel_size (",
                data_parallel_size_, ") at ", consumed_samples, " consumed samples");
  }
}

std::vector<int64_t> NumMicroBatchesCalculator::reachable_num_microbatches(int64_t at_most) const {
  if (step_) {
    // Every batch size of the schedule that this layout can run (the others stop the run when
    // reached), the last first.
    std::vector<int64_t> counts;
    for (auto it = step_->steps.rbegin(); it != step_->steps.rend(); ++it) {
      if (it->batch_size % micro_times_dp_ != 0) continue;
      const int64_t m = it->batch_size / micro_times_dp_;
      if ((m <= at_most || counts.empty()) && std::find(counts.begin(), counts.end(), m) == counts.end()) {
        counts.push_back(m);
      }
    }
    if (counts.empty()) counts.push_back(1);
    return counts;
  }
  std::vector<int64_t> counts{final_num_microbatches()};
  if (!rampup_) return counts;
  for (int64_t b = rampup_->start_batch_size; b < global_batch_size_; b += rampup_->batch_size_increment) {
    const int64_t m = parallel::num_micro_batches(b, micro_batch_size_, data_parallel_size_);
    if (m > at_most) break;
    counts.push_back(m);
  }
  return counts;
}

std::string NumMicroBatchesCalculator::describe() const {
  if (step_) {
    const StepBatchSizeSchedule& s = *step_;
    std::string out = str_cat("> initializing step batch size schedule\n  raw schedule string: \"", s.text, "\"\n");
    out += s.seq_length ? str_cat("  seq_length: ", *s.seq_length, " (thresholds interpreted as tokens)\n")
                        : std::string("  seq_length: None (thresholds interpreted as samples)\n");
    out += str_cat("  micro_batch_size: ", micro_batch_size_, "\n  data_parallel_size: ", data_parallel_size_, "\n");
    out += str_cat("step batch size schedule (", s.steps.size(), " steps):");
    for (const auto& step : s.steps) {
      const int64_t m = step.batch_size / micro_times_dp_;
      if (s.seq_length) {
        out += str_cat("\n  >= ", with_commas(step.threshold * *s.seq_length), " tokens (", with_commas(step.threshold),
                       " samples) -> batch_size=", step.batch_size, ", num_microbatches=", m);
      } else {
        out += str_cat("\n  >= ", with_commas(step.threshold), " samples -> batch_size=", step.batch_size,
                       ", num_microbatches=", m);
      }
    }
    return out;
  }
  if (!rampup_) return str_cat("setting number of micro-batches to constant ", final_num_microbatches());
  return str_cat("will use batch size rampup starting from global batch size ", rampup_->start_batch_size,
                 " to global batch size ", global_batch_size_, " with batch size increments ",
                 rampup_->batch_size_increment, " over ", rampup_->ramp_samples, " samples.");
}

int64_t train_iters_from_samples(const NumMicroBatchesCalculator& calculator, int64_t train_samples) {
  const int64_t g = calculator.global_batch_size();
  if (const auto& step = calculator.step_schedule()) {
    // while consumed < train_samples: consumed += gbs(consumed); iterations += 1, counted one
    // schedule step at a time: in step k (batch B, next threshold T) the iterations that start
    // below min(T, train_samples) are ceil((min(T, train_samples) - consumed) / B).
    int64_t iterations = 0, consumed = 0;
    for (size_t k = 0; k < step->steps.size() && consumed < train_samples; ++k) {
      const int64_t next = k + 1 < step->steps.size() ? step->steps[k + 1].threshold : train_samples;
      const int64_t stop = std::min(next, train_samples);
      if (consumed >= stop) continue;
      const int64_t b = step->steps[k].batch_size;
      const int64_t n = (stop - consumed + b - 1) / b;
      iterations += n;
      consumed += n * b;  // < stop + b
    }
    return iterations;
  }
  const std::optional<RampupBatchSize>& rampup = calculator.rampup();
  if (!rampup) return floor_div(train_samples, g);
  // Megatron's loop, `while consumed <= ramp: consumed += gbs(consumed); iterations += 1`, taken
  // one batch size at a time: ramp_steps() does not decrease as consumed grows, so the
  // iterations of one step are the i in 0..n with ramp_steps(consumed + i * gbs) unchanged (and
  // consumed + i * gbs <= ramp), found by bisection.
  const int64_t ramp = rampup->ramp_samples;
  int64_t iterations = 0;
  int64_t consumed = 0;
  while (consumed <= ramp) {
    const int64_t gbs = calculator.global_batch_size_at(consumed);
    const int64_t step = calculator.ramp_steps(consumed);
    int64_t lo = 0, hi = (ramp - consumed) / gbs;  // the last i is in [lo, hi]
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (calculator.ramp_steps(consumed + mid * gbs) == step) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    iterations += lo + 1;
    consumed += (lo + 1) * gbs;  // <= ramp + gbs, which the constructor checked fits
  }
  return iterations + floor_div(train_samples - consumed, g);
}

int64_t samples_of_iterations(const NumMicroBatchesCalculator& calculator, int64_t iterations) {
  MT_CHECK(iterations >= 0) << iterations;
  int64_t consumed = 0;
  for (int64_t i = 0; i < iterations;) {
    const int64_t b = calculator.global_batch_size_at(consumed);
    // The iterations until the batch can change: with a step schedule the next threshold above
    // `consumed`; otherwise one at a time inside a ramp, all the rest after it.
    int64_t n = iterations - i;
    if (const auto& step = calculator.step_schedule()) {
      for (const auto& s : step->steps) {
        if (s.threshold > consumed) {
          n = std::min(n, (s.threshold - consumed + b - 1) / b);
          break;
        }
      }
    } else if (calculator.rampup() && consumed <= calculator.rampup()->ramp_samples) {
      n = 1;
    }
    int64_t add = 0;
    if (__builtin_mul_overflow(n, b, &add) || __builtin_add_overflow(consumed, add, &consumed)) {
      throw_error("[--train-iters] ", iterations, " iterations consume more samples than a 64-bit count holds");
    }
    i += n;
  }
  return consumed;
}

}  // namespace megatron::train
