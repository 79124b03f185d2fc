// How many micro-batches one iteration runs: Megatron's num-microbatches calculator
// (C23 megatron/microbatches.py, ConstantNumMicroBatches / RampupBatchsizeNumMicroBatches).
//
//   num_microbatches = current_global_batch / (micro_batch_size * data_parallel_size)
//
// Without a ramp the global batch is --global-batch-size. With
// `--rampup-batch-size <start> <incr> <ramp_samples>` it grows from start to
// --global-batch-size in (G - start)/incr increments, one every ramp_samples/increments
// consumed samples (a float), and is G once consumed_samples > ramp_samples:
//   gbs(c) = G                                                   if c > ramp_samples
//          = start + int(c / (ramp_samples/increments)) * incr   otherwise
// Worked example (BigScience: 16 16 5_000_000, G = 1024): 63 increments of
// 5e6/63 = 79365.08 samples; gbs(0) = 16, gbs(79365) = 16, gbs(79366) = 32,
// gbs(5_000_000) = 16 + 63*16 = 1024.
// (--rampup-batch-size is a silent no-op at Megatron HEAD; this is the C23 behaviour.)
//
// With `--step-batch-size-schedule "THRESHOLD:BS THRESHOLD:BS ..."` (Megatron-Core
// num_microbatches_calculator.py StepBatchsizeNumMicroBatchesCalculator) the global batch is
// the BS of the last entry whose threshold is <= the consumed samples. The thresholds count
// tokens (Megatron passes --seq-length) and are converted to samples by threshold // seq_length;
// both numbers take a suffix K, M, B, T (1e3 .. 1e12) and are int(float(x) * multiplier).
// Entries are separated by spaces or commas and sorted by threshold; the first threshold must be
// 0, the thresholds strictly increasing (after the conversion), every BS positive. A batch size
// must divide by micro_batch * dp only once it is reached (Megatron's runtime consistency check).
// Worked example (seq 1024, mbs 1, dp 8): "0:8 16K:32 1M:64" -> samples (0, 8), (15, 32),
// (976, 64) (16000 // 1024 = 15, 1000000 // 1024 = 976): gbs(0..14) = 8, gbs(15..975) = 32,
// gbs(976..) = 64.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "parallel/micro_batches.h"

namespace megatron::train {

// The most micro-batches one iteration may run per data-parallel rank: the pipeline schedules
// are tables with entries per micro-batch (parallel/pipeline_schedule.h), which the trainer
// builds every iteration. 2^20 is hundreds of times any real job's count (GPT-3 175B: 1536
// sequences of global batch over 8 to 64 data-parallel ranks).
constexpr int64_t kMaxMicroBatches = int64_t{1} << 20;

struct RampupBatchSize {
  int64_t start_batch_size = 0;
  int64_t batch_size_increment = 0;
  int64_t ramp_samples = 0;
};

// The three values of --rampup-batch-size; throws naming the flag unless there are 3.
RampupBatchSize rampup_from_flag(std::span<const int64_t> values);

struct StepBatchSizeSchedule {
  std::string text;                   // the flag as given (logged)
  std::optional<int64_t> seq_length;  // thresholds counted tokens, converted with this
  struct Step {
    int64_t threshold = 0;   // consumed samples from which `batch_size` applies
    int64_t batch_size = 0;  // global batch size
    bool operator==(const Step&) const = default;
  };
  std::vector<Step> steps;  // sorted, steps[0].threshold == 0
};

// Megatron-Core's _parse_schedule and _validate_schedule; throws one line naming
// --step-batch-size-schedule. seq_length: thresholds are tokens (// seq_length); none: samples.
StepBatchSizeSchedule parse_step_batch_size_schedule(const std::string& text, std::optional<int64_t> seq_length);

class NumMicroBatchesCalculator {
 public:
  // Validates the batch arithmetic and throws megatron::Error with a one-line message
  // naming --global-batch-size / --micro-batch-size / --rampup-batch-size. With a ramp,
  // every batch size it reaches (start + k*incr) must be divisible by mbs*dp; Megatron
  // asserts that only when the batch size is reached, here it is checked up front. At most
  // kMaxMicroBatches micro-batches per iteration, and ramp samples + global batch must fit in
  // int64 (the samples consumed when the ramp ends). Starts at consumed_samples = 0.
  NumMicroBatchesCalculator(int64_t global_batch_size, int64_t micro_batch_size, int64_t data_parallel_size,
                            std::optional<RampupBatchSize> rampup = std::nullopt);
  // --step-batch-size-schedule: the batch follows `schedule`; global_batch_size() is its last
  // batch size (Megatron-Core's self.global_batch_size). Starts at consumed_samples = 0.
  NumMicroBatchesCalculator(StepBatchSizeSchedule schedule, int64_t micro_batch_size, int64_t data_parallel_size);

  // Called at the start of each iteration with the samples consumed so far. With a step
  // schedule the batch reached must divide by micro_batch * dp, else megatron::Error naming
  // --step-batch-size-schedule (Megatron-Core's consistency check).
  void update(int64_t consumed_samples);

  // The micro-batches of the current iteration (parallel/micro_batches.h).
  int64_t num_microbatches() const {
    return parallel::num_micro_batches(current_global_batch_size_, micro_batch_size_, data_parallel_size_);
  }
  // The micro-batches at --global-batch-size, after any ramp.
  int64_t final_num_microbatches() const {
    return parallel::num_micro_batches(global_batch_size_, micro_batch_size_, data_parallel_size_);
  }
  // The micro-batch counts of every global batch the run can reach: the final count first, then
  // the ramp's batch sizes (start, start + incr, ... below --global-batch-size) in increasing
  // order while their count is at most `at_most`.
  std::vector<int64_t> reachable_num_microbatches(int64_t at_most) const;
  // The batch of the current iteration: what the log's "global batch size" field shows.
  int64_t current_global_batch_size() const { return current_global_batch_size_; }
  // The global batch for a given number of consumed samples (pure; no state change).
  int64_t global_batch_size_at(int64_t consumed_samples) const;
  // With a ramp: the increments reached after `consumed_samples` (<= ramp samples), Megatron's
  // int(consumed / (ramp_samples / increments)).
  int64_t ramp_steps(int64_t consumed_samples) const;

  int64_t global_batch_size() const { return global_batch_size_; }  // after the ramp
  int64_t micro_batch_size() const { return micro_batch_size_; }
  int64_t data_parallel_size() const { return data_parallel_size_; }
  const std::optional<RampupBatchSize>& rampup() const { return rampup_; }
  const std::optional<StepBatchSizeSchedule>& step_schedule() const { return step_; }

  // Megatron's start-up line: "setting number of micro-batches to constant N" or
  // "will use batch size rampup starting from global batch size ... over N samples.", or with a
  // step schedule Megatron-Core's lines ("> initializing step batch size schedule", ...).
  std::string describe() const;

 private:
  int64_t global_batch_size_;
  int64_t micro_batch_size_;
  int64_t data_parallel_size_;
  int64_t micro_times_dp_;
  std::optional<RampupBatchSize> rampup_;
  std::optional<StepBatchSizeSchedule> step_;
  double samples_per_increment_ = 0.0;  // ramp_samples / num_increments, as Python's float
  int64_t current_global_batch_size_;
};

// --train-samples -> the number of iterations (C23 update_train_iters):
//  - no ramp: train_samples // G;
//  - ramp: one iteration per batch while consumed <= ramp_samples (adding the current gbs each
//    time), then (train_samples - consumed) // G more, floor division as Python's `//`
//    (so a train_samples inside the ramp gives fewer iterations than the ramp itself).
//    The iterations of one batch size are counted at once, so the time grows with the number of
//    increments, not with ramp_samples.
//  - step schedule (Megatron-Core update_train_iters): one iteration per batch while
//    consumed < train_samples, adding the batch of the consumed samples each time (so a last,
//    partial batch counts), again one schedule step at a time.
int64_t train_iters_from_samples(const NumMicroBatchesCalculator& calculator, int64_t train_samples);

// The samples `iterations` iterations consume from 0 (the sum of their global batches): what
// the training split must hold. Throws naming --train-iters past int64.
int64_t samples_of_iterations(const NumMicroBatchesCalculator& calculator, int64_t iterations);

// MegatronPretrainingSampler (docs/megatron-formats.md §3.9): the dataset index of sample i of
// micro-batch k on data-parallel rank `dp_rank` in the iteration that starts at
// `first_sample`: first_sample + k*mbs*dp + dp_rank*mbs + i (each batch of mbs*dp indices is
// cut into dp slices of mbs, one per rank).
inline int64_t sampler_index(int64_t first_sample, int64_t k, int64_t i, int64_t micro_batch_size,
                             int64_t data_parallel_size, int64_t dp_rank) {
  return first_sample + k * micro_batch_size * data_parallel_size + dp_rank * micro_batch_size + i;
}

}  // namespace megatron::train
