// Num-microbatches calculator and --train-samples -> iterations (Megatron C23
// microbatches.py, training.py update_train_iters).
#include "train/microbatches.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace megatron::train {
namespace {

void expect_error_naming(const std::function<void()>& f, const std::string& flag) {
  try {
    f();
    ADD_FAILURE() << "expected an error naming " << flag;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
  }
}

TEST(MicroBatches, Constant) {
  NumMicroBatchesCalculator c(512, 4, 8);  // 512 / (4*8)
  EXPECT_EQ(c.num_microbatches(), 16);
  c.update(1'000'000);
  EXPECT_EQ(c.num_microbatches(), 16);
  EXPECT_EQ(c.current_global_batch_size(), 512);
  EXPECT_EQ(c.describe(), "setting number of micro-batches to constant 16");
  EXPECT_EQ(NumMicroBatchesCalculator(8, 8, 1).num_microbatches(), 1);
}

TEST(MicroBatches, ConstantNotDivisible) {
  // 100 % (8*2) = 4
  expect_error_naming([] { NumMicroBatchesCalculator(100, 8, 2); }, "--global-batch-size");
  expect_error_naming([] { NumMicroBatchesCalculator(100, 8, 2); }, "--micro-batch-size");
  expect_error_naming([] { NumMicroBatchesCalculator(4, 8, 1); }, "--global-batch-size");
  expect_error_naming([] { NumMicroBatchesCalculator(8, 0, 1); }, "--micro-batch-size");
}

// BigScience's ramp: --rampup-batch-size 16 16 5_000_000 --global-batch-size 1024, with
// mbs*dp = 2*8 = 16. Increments: (1024-16)/16 = 63, each 5e6/63 = 79365.0794 samples.
TEST(MicroBatches, BigScienceRamp) {
  NumMicroBatchesCalculator c(1024, 2, 8, RampupBatchSize{16, 16, 5'000'000});
  EXPECT_EQ(c.current_global_batch_size(), 16);  // starts at consumed = 0
  EXPECT_EQ(c.num_microbatches(), 1);
  struct Point {
    int64_t consumed, gbs;
  };
  const Point points[] = {
      {0, 16},            // int(0 / 79365.08) = 0
      {79'365, 16},       // 79365 / 79365.0794 = 0.999999 -> 0
      {79'366, 32},       // 1.0000116 -> 1: 16 + 16
      {158'730, 32},      // 1.999998 -> 1
      {158'731, 48},      // 2.0000106 -> 2
      {2'500'000, 512},   // 31.5 -> 31: 16 + 31*16
      {5'000'000, 1024},  // 63.0 -> 63: 16 + 63*16 (consumed == ramp is still "in" the ramp)
      {5'000'001, 1024},  // past the ramp: G
      {90'000'000, 1024},
  };
  for (const Point& p : points) {
    c.update(p.consumed);
    EXPECT_EQ(c.current_global_batch_size(), p.gbs) << "consumed " << p.consumed;
    EXPECT_EQ(c.num_microbatches(), p.gbs / 16) << "consumed " << p.consumed;
    EXPECT_EQ(c.global_batch_size_at(p.consumed), p.gbs);
  }
  EXPECT_EQ(c.describe(),
            "will use batch size rampup starting from global batch size 16 to global batch size "
            "1024 with batch size increments 16 over 5000000 samples.");
}

TEST(MicroBatches, RampUsesPythonFloatDivision) {
  // --rampup-batch-size 2 2 9, G = 16: 7 increments of 9/7 = 1.2857142857142858 samples.
  // At consumed = 9 (still inside the ramp, 9 <= 9), 9 / 1.2857142857142858 is
  // 6.999999999999999 in double, so Megatron truncates to 6: gbs = 2 + 6*2 = 14, not 16.
  NumMicroBatchesCalculator c(16, 1, 2, RampupBatchSize{2, 2, 9});
  EXPECT_EQ(c.global_batch_size_at(8), 14);  // 8 / 1.2857 = 6.22 -> 6
  EXPECT_EQ(c.global_batch_size_at(9), 14);
  EXPECT_EQ(c.global_batch_size_at(10), 16);  // past the ramp
  c.update(9);
  EXPECT_EQ(c.num_microbatches(), 7);  // 14 / 2
}

// The counts the run can reach, which the activation sets are sized for (train/config.cpp
// pipeline_stage): the final count, then each ramp size's while at most the bound.
TEST(MicroBatches, ReachableCountsFollowTheRamp) {
  EXPECT_EQ(NumMicroBatchesCalculator(512, 4, 8).reachable_num_microbatches(1000), std::vector<int64_t>{16});
  // --rampup-batch-size 16 16 5000000, G = 1024, mbs 2, dp 8: 1, 2, ..., 63 micro-batches, then 64.
  const NumMicroBatchesCalculator ramp(1024, 2, 8, RampupBatchSize{16, 16, 5'000'000});
  EXPECT_EQ(ramp.final_num_microbatches(), 64);
  EXPECT_EQ(ramp.num_microbatches(), 1) << "the ramp's start before any update";
  EXPECT_EQ(ramp.reachable_num_microbatches(3), (std::vector<int64_t>{64, 1, 2, 3}));
  const std::vector<int64_t> all = ramp.reachable_num_microbatches(1000);
  ASSERT_EQ(all.size(), 64u);
  for (int64_t k = 1; k < 64; ++k) EXPECT_EQ(all[static_cast<size_t>(k)], k);
  EXPECT_EQ(ramp.reachable_num_microbatches(0), std::vector<int64_t>{64}) << "the final count always";
}

TEST(MicroBatches, TrainItersSmallRampByHand) {
  // --rampup-batch-size 2 2 10, G = 6, mbs*dp = 2: 2 increments of 10/2 = 5.0 samples.
  // Ramp loop (while consumed <= 10: consumed += gbs(consumed)):
  //   c=0: int(0/5)=0 -> 2, c=2   | c=2: 0 -> 2, c=4 | c=4: 0 -> 2, c=6
  //   c=6: int(1.2)=1 -> 4, c=10  | c=10: int(2.0)=2 -> 6, c=16   => 5 iterations, 16 samples
  // Then (train_samples - 16) // 6.
  NumMicroBatchesCalculator c(6, 1, 2, RampupBatchSize{2, 2, 10});
  EXPECT_EQ(train_iters_from_samples(c, 100), 19);  // 5 + 84 // 6 = 5 + 14
  EXPECT_EQ(train_iters_from_samples(c, 16), 5);    // 5 + 0
  EXPECT_EQ(train_iters_from_samples(c, 21), 5);    // 5 + 5 // 6
  EXPECT_EQ(train_iters_from_samples(c, 22), 6);    // 5 + 6 // 6
  EXPECT_EQ(train_iters_from_samples(c, 10), 4);    // 5 + (-6) // 6 = 5 - 1 (Python floor)
  EXPECT_EQ(train_iters_from_samples(c, 11), 4);    // 5 + (-5) // 6 = 5 - 1
  // The calculator's own state is untouched.
  EXPECT_EQ(c.current_global_batch_size(), 2);
}

TEST(MicroBatches, TrainItersBigScienceRamp) {
  NumMicroBatchesCalculator c(1024, 2, 8, RampupBatchSize{16, 16, 5'000'000});
  // Megatron's update_train_iters loop, run in Python: the ramp phase takes 23456
  // iterations and consumes 5,000,528 samples; then (146,484,375 - 5,000,528) // 1024 =
  // 138,167 more: 161,623 in all.
  EXPECT_EQ(train_iters_from_samples(c, 146'484'375), 161'623);
  EXPECT_EQ(train_iters_from_samples(c, 5'000'528), 23'456);
}

TEST(MicroBatches, TrainItersWithoutRamp) {
  NumMicroBatchesCalculator c(64, 4, 2);
  EXPECT_EQ(train_iters_from_samples(c, 1000), 15);  // 1000 // 64
}

TEST(MicroBatches, BadRampIsAnError) {
  const auto make = [](int64_t g, int64_t mbs, int64_t dp, RampupBatchSize r) {
    return [=] { NumMicroBatchesCalculator(g, mbs, dp, r); };
  };
  expect_error_naming(make(1024, 2, 8, {2048, 16, 1000}), "--rampup-batch-size");  // start > G
  expect_error_naming(make(1024, 2, 8, {1024, 16, 1000}), "--rampup-batch-size");  // start == G
  expect_error_naming(make(1024, 2, 8, {16, 32, 1000}), "--rampup-batch-size");    // 1008 % 32
  expect_error_naming(make(1024, 2, 8, {8, 8, 1000}), "--rampup-batch-size");      // 8 % 16
  expect_error_naming(make(1024, 2, 8, {16, 16, 0}), "--rampup-batch-size");
  expect_error_naming(make(1024, 2, 8, {0, 16, 1000}), "--rampup-batch-size");
  expect_error_naming(make(1024, 2, 8, {16, 0, 1000}), "--rampup-batch-size");
  const std::vector<int64_t> two = {16, 16};
  expect_error_naming([&] { rampup_from_flag(two); }, "--rampup-batch-size");
  const std::vector<int64_t> three = {16, 32, 5'000'000};
  const RampupBatchSize r = rampup_from_flag(three);
  EXPECT_EQ(r.start_batch_size, 16);
  EXPECT_EQ(r.batch_size_increment, 32);
  EXPECT_EQ(r.ramp_samples, 5'000'000);
}

// Megatron's update_train_iters loop as written, one iteration at a time.
int64_t train_iters_one_by_one(const NumMicroBatchesCalculator& c, int64_t train_samples) {
  int64_t iterations = 0, consumed = 0;
  while (consumed <= c.rampup()->ramp_samples) {
    consumed += c.global_batch_size_at(consumed);
    ++iterations;
  }
  const int64_t rest = train_samples - consumed, g = c.global_batch_size();
  return iterations + (rest >= 0 ? rest / g : -((-rest + g - 1) / g));
}

// Counting a batch size's iterations at once gives Megatron's loop exactly, float rounding of
// the increments included.
TEST(MicroBatches, TrainItersMatchMegatronsLoop) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t unit = 1 + rng() % 4, start = unit * (1 + rng() % 5), incr = unit * (1 + rng() % 4);
    const int64_t g = start + incr * (1 + rng() % 9), ramp = 1 + rng() % 700;
    const NumMicroBatchesCalculator c(g, unit, 1, RampupBatchSize{start, incr, ramp});
    const int64_t samples = 1 + rng() % 2000;
    ASSERT_EQ(train_iters_from_samples(c, samples), train_iters_one_by_one(c, samples))
        << "G " << g << " ramp " << start << " " << incr << " " << ramp << " samples " << samples;
  }
}

// A ramp over 2^52 samples once counted its 2^51 iterations one by one; now per batch size. In a
// child with a time limit, so that a regression fails instead of hanging.
TEST(MicroBatches, TrainItersOfAHugeRampAreQuick) {
  auto bounded = [] {
    ::alarm(20);
    // One increment of 2^52 samples (exact in doubles): batch 2 for consumed < 2^52, 2^51
    // iterations; batch 4 at consumed = 2^52, one more; then (2^53 - 2^52 - 4) // 4.
    const NumMicroBatchesCalculator c(4, 1, 1, RampupBatchSize{2, 2, int64_t{1} << 52});
    const int64_t iters = train_iters_from_samples(c, int64_t{1} << 53);
    ::_exit(iters == (int64_t{1} << 51) + 1 + ((int64_t{1} << 50) - 1) ? 0 : 1);
  };
  EXPECT_EXIT(bounded(), ::testing::ExitedWithCode(0), "");
}

// Bounds: at most kMaxMicroBatches micro-batches per iteration (the schedules' tables hold one
// entry per micro-batch), and the samples at the ramp's end must fit in int64.
TEST(MicroBatches, CountsBeyondTheLimitsAreErrors) {
  EXPECT_EQ(NumMicroBatchesCalculator(kMaxMicroBatches * 4, 2, 2).num_microbatches(), kMaxMicroBatches);
  expect_error_naming([] { NumMicroBatchesCalculator(kMaxMicroBatches * 4 + 4, 2, 2); }, "[--global-batch-size]");
  expect_error_naming([] { NumMicroBatchesCalculator(int64_t{1} << 62, 1, 1); }, "at most 1048576 are supported");
  expect_error_naming(
      [] {
        NumMicroBatchesCalculator(4, 1, 1, RampupBatchSize{2, 2, std::numeric_limits<int64_t>::max() - 3});
      },
      "[--rampup-batch-size] ramp-up samples 9223372036854775804 plus --global-batch-size 4 do not fit in 64 bits");
  NumMicroBatchesCalculator(4, 1, 1, RampupBatchSize{2, 2, std::numeric_limits<int64_t>::max() - 4});
}

}  // namespace
}  // namespace megatron::train

namespace megatron::train {
namespace {

// docs/megatron-formats.md, "Data order across data-parallel ranks": with mbs 2 and dp 3, a batch
// of 6 consecutive indices is cut into 3 slices of 2: micro-batch k of rank r holds start + 6k + 2r
// + {0, 1}.
TEST(MicroBatches, SamplerSliceOfEachDataParallelRank) {
  EXPECT_EQ(sampler_index(100, 0, 0, 2, 3, 0), 100);
  EXPECT_EQ(sampler_index(100, 0, 1, 2, 3, 0), 101);
  EXPECT_EQ(sampler_index(100, 0, 0, 2, 3, 1), 102);
  EXPECT_EQ(sampler_index(100, 0, 1, 2, 3, 2), 105);
  EXPECT_EQ(sampler_index(100, 1, 0, 2, 3, 0), 106);
  EXPECT_EQ(sampler_index(100, 2, 1, 2, 3, 1), 100 + 12 + 2 + 1);
  // The ranks' micro-batches cover the global batch exactly once.
  std::vector<int> seen(24, 0);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t k = 0; k < 4; ++k)
      for (int64_t i = 0; i < 2; ++i) ++seen[static_cast<size_t>(sampler_index(0, k, i, 2, 3, r))];
  for (int s : seen) EXPECT_EQ(s, 1);
}

using Step = StepBatchSizeSchedule::Step;

// Megatron-Core _parse_schedule: tokens // seq_length, suffixes, commas, sorting (by hand:
// 16K = 16000 tokens // 1024 = 15 samples, 1M // 1024 = 976).
TEST(StepBatchSizeSchedule, ParsesLikeMegatronCore) {
  StepBatchSizeSchedule s = parse_step_batch_size_schedule("0:8 16K:32 1M:64", 1024);
  EXPECT_EQ(s.steps, (std::vector<Step>{{0, 8}, {15, 32}, {976, 64}}));
  EXPECT_EQ(s.text, "0:8 16K:32 1M:64");
  s = parse_step_batch_size_schedule(" 1000:16, 0:4 ,2.5k:1K ", std::nullopt);  // samples; sorted
  EXPECT_EQ(s.steps, (std::vector<Step>{{0, 4}, {1000, 16}, {2500, 1000}}));
  s = parse_step_batch_size_schedule("0:768 250B:1536 500B:3072 750B:6144", 4096);
  EXPECT_EQ(s.steps, (std::vector<Step>{{0, 768}, {61035156, 1536}, {122070312, 3072}, {183105468, 6144}}));
  s = parse_step_batch_size_schedule("0:2 1.5T:4", std::nullopt);
  EXPECT_EQ(s.steps[1].threshold, 1500000000000);
}

TEST(StepBatchSizeSchedule, BadSchedulesNameTheFlag) {
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"0:8 x", "invalid schedule entry \"x\""},
           {"2048:8", "the first schedule entry must have threshold 0, got 2 samples"},  // 2048 tokens
           {"0:8 1000:16", "strictly increasing, got 0 before 0"},  // 1000 tokens // 1024 = 0 samples
           {"0:0", "batch size must be positive, got 0"},
           {"0:abc", "'abc' is not a number"},
           {"0:0x10", "'0x10' is not a number"},
           {"", "at least one entry"},
           {"0:8 inf:16", "does not fit"}}) {
    try {
      parse_step_batch_size_schedule(text, 1024);
      ADD_FAILURE() << text;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[--step-batch-size-schedule]", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << text << ": " << e.what();
    }
  }
}

// Samples (0, 8), (15, 32), (976, 64) with mbs 1, dp 8: micro-batches 1, 4, 8.
TEST(StepBatchSizeSchedule, TheBatchFollowsTheConsumedSamples) {
  NumMicroBatchesCalculator c(parse_step_batch_size_schedule("0:8 16K:32 1M:64", 1024), 1, 8);
  EXPECT_EQ(c.global_batch_size(), 64);  // the last step's
  EXPECT_EQ(c.current_global_batch_size(), 8);
  EXPECT_EQ(c.num_microbatches(), 1);
  for (const auto& [consumed, gbs] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 8}, {14, 8}, {15, 32}, {975, 32}, {976, 64}, {1000000, 64}}) {
    c.update(consumed);
    EXPECT_EQ(c.current_global_batch_size(), gbs) << consumed;
    EXPECT_EQ(c.global_batch_size_at(consumed), gbs) << consumed;
    EXPECT_EQ(c.num_microbatches(), gbs / 8) << consumed;
  }
  EXPECT_EQ(c.final_num_microbatches(), 8);
  EXPECT_EQ(c.reachable_num_microbatches(100), (std::vector<int64_t>{8, 4, 1}));
  EXPECT_EQ(c.reachable_num_microbatches(4), (std::vector<int64_t>{8, 4, 1}));  // the last always
  EXPECT_EQ(c.describe(),
            "> initializing step batch size schedule\n"
            "  raw schedule string: \"0:8 16K:32 1M:64\"\n"
            "  seq_length: 1024 (thresholds interpreted as tokens)\n"
            "  micro_batch_size: 1\n"
            "  data_parallel_size: 8\n"
            "step batch size schedule (3 steps):\n"
            "  >= 0 tokens (0 samples) -> batch_size=8, num_microbatches=1\n"
            "  >= 15,360 tokens (15 samples) -> batch_size=32, num_microbatches=4\n"
            "  >= 999,424 tokens (976 samples) -> batch_size=64, num_microbatches=8");
}

// Megatron-Core checks divisibility only for the batch reached (consistency_check at update).
TEST(StepBatchSizeSchedule, OnlyTheBatchReachedMustDivide) {
  NumMicroBatchesCalculator c(parse_step_batch_size_schedule("0:4 100:16", std::nullopt), 1, 8);
  expect_error_naming([&] { c.update(0); }, "[--step-batch-size-schedule] current global batch size (4)");
  c.update(100);
  EXPECT_EQ(c.num_microbatches(), 2);
  EXPECT_EQ(c.reachable_num_microbatches(10), (std::vector<int64_t>{2}));
}

// Samples (0, 4), (10, 8), (30, 16), 50 train samples, by hand: starts at 0, 4, 8 (batch 4),
// 12, 20, 28 (batch 8), 36 (batch 16, to 52 >= 50): 7 iterations, 52 samples.
TEST(StepBatchSizeSchedule, TrainItersCountThePartialLastBatch) {
  const NumMicroBatchesCalculator c(parse_step_batch_size_schedule("0:4 10:8 30:16", std::nullopt), 4, 1);
  EXPECT_EQ(train_iters_from_samples(c, 50), 7);
  EXPECT_EQ(samples_of_iterations(c, 7), 52);
  EXPECT_EQ(samples_of_iterations(c, 3), 12);
  EXPECT_EQ(samples_of_iterations(c, 0), 0);
  EXPECT_EQ(train_iters_from_samples(c, 1), 1);
  EXPECT_EQ(train_iters_from_samples(c, 12), 3);
  EXPECT_EQ(train_iters_from_samples(c, 13), 4);
  // Megatron-Core's loop, against every train_samples up to 400.
  for (int64_t n = 1; n <= 400; ++n) {
    int64_t iterations = 0, consumed = 0;
    while (consumed < n) {
      consumed += c.global_batch_size_at(consumed);
      ++iterations;
    }
    ASSERT_EQ(train_iters_from_samples(c, n), iterations) << n;
    ASSERT_EQ(samples_of_iterations(c, iterations), consumed) << n;
  }
}

}  // namespace
}  // namespace megatron::train
