// Megatron C23 megatron/microbatches.py and training.py update_train_iters.
#include "train/microbatches.h"

#include <limits>

#include "core/error.h"

namespace megatron::train {
namespace {

// Python's `a // b` for b > 0.
int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

}  // namespace

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

int64_t NumMicroBatchesCalculator::ramp_steps(int64_t consumed_samples) const {
  // int(consumed / samples_per_increment) in Python: double division, truncation. Inside the
  // ramp (consumed <= ramp_samples) the quotient is at most the number of increments.
  return static_cast<int64_t>(static_cast<double>(consumed_samples) / samples_per_increment_);
}

int64_t NumMicroBatchesCalculator::global_batch_size_at(int64_t consumed_samples) const {
  if (!rampup_ || consumed_samples > rampup_->ramp_samples) return global_batch_size_;
  const int64_t gbs = rampup_->start_batch_size + ramp_steps(consumed_samples) * rampup_->batch_size_increment;
  MT_CHECK(gbs <= global_batch_size_) << "ramp batch " << gbs << " > " << global_batch_size_;
  return gbs;
}

void NumMicroBatchesCalculator::update(int64_t consumed_samples) {
  MT_CHECK(consumed_samples >= 0) << "consumed samples " << consumed_samples;
  current_global_batch_size_ = global_batch_size_at(consumed_samples);
}

std::vector<int64_t> NumMicroBatchesCalculator::reachable_num_microbatches(int64_t at_most) const {
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
  if (!rampup_) return str_cat("setting number of micro-batches to constant ", final_num_microbatches());
  return str_cat("will use batch size rampup starting from global batch size ", rampup_->start_batch_size,
                 " to global batch size ", global_batch_size_, " with batch size increments ",
                 rampup_->batch_size_increment, " over ", rampup_->ramp_samples, " samples.");
}

int64_t train_iters_from_samples(const NumMicroBatchesCalculator& calculator, int64_t train_samples) {
  const int64_t g = calculator.global_batch_size();
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

}  // namespace megatron::train
