// The micro-batch count of parallel/micro_batches.h: Megatron's global / (micro * dp), with a
// batch that does not divide a bug of the caller (the flags are validated before).
#include "parallel/micro_batches.h"

#include <gtest/gtest.h>

namespace megatron::parallel {
namespace {

TEST(MicroBatches, GlobalOverMicroTimesDataParallel) {
  EXPECT_EQ(num_micro_batches(512, 4, 8), 16);
  EXPECT_EQ(num_micro_batches(1536, 1, 8), 192);  // GPT-3 175B's batch over 8 replicas
  EXPECT_EQ(num_micro_batches(6, 2, 3), 1);
  EXPECT_EQ(num_micro_batches(int64_t{1} << 40, 1 << 10, 1 << 10), int64_t{1} << 20);
}

TEST(MicroBatchesDeathTest, ABatchThatDoesNotDivideIsABug) {
  EXPECT_DEATH(num_micro_batches(100, 8, 2), "global batch 100, micro-batch 8, data-parallel size 2");
  EXPECT_DEATH(num_micro_batches(4, 8, 1), "global batch 4");
  EXPECT_DEATH(num_micro_batches(8, 0, 1), "micro-batch 0");
}

}  // namespace
}  // namespace megatron::parallel
