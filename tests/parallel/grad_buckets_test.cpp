// The bucket layout math without tensors (parallel/grad_buckets.h); tests/parallel/grad_buffer_test
// covers the same rules through the ParameterSet wrapper and the collectives.
#include <gtest/gtest.h>

#include <vector>

#include "parallel/grad_buckets.h"

namespace megatron::parallel {
namespace {

std::vector<std::pair<int64_t, int64_t>> pairs(const std::vector<Range>& r) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const Range& x : r) out.emplace_back(x.start, x.end);
  return out;
}

TEST(GradBuckets, CutFromTheEndAtSizeAndAtStarts) {
  // Parameters of 10, 5, 16, 4, 8 elements.
  const std::vector<int64_t> offsets{0, 10, 15, 31, 35};
  EXPECT_EQ(pairs(grad_buckets(offsets, 43, 0, {})), (std::vector<std::pair<int64_t, int64_t>>{{0, 43}}));
  EXPECT_EQ(pairs(grad_buckets(offsets, 43, 10, {})),
            (std::vector<std::pair<int64_t, int64_t>>{{31, 43}, {15, 31}, {0, 15}}));
  // A start closes the bucket before it even under the size: parameter 3 begins one.
  EXPECT_EQ(pairs(grad_buckets(offsets, 43, 0, std::vector<int64_t>{3})),
            (std::vector<std::pair<int64_t, int64_t>>{{31, 43}, {0, 31}}));
}

// The receive buffer covers the largest bucket outside the last kCopyEngineTailBuckets (those
// keep the SMs), rounded up to dp equal pieces.
TEST(GradBuckets, CopyEngineReceiveBufferSkipsTheTail) {
  static_assert(kCopyEngineTailBuckets == 2);
  const std::vector<Range> four{{36, 43}, {20, 36}, {15, 20}, {0, 15}};
  EXPECT_EQ(copy_engine_receive_elements(four, 3), 18);  // [20, 36): 16 -> 3 x 6
  EXPECT_EQ(copy_engine_receive_elements(four, 2), 16);
  const std::vector<Range> two{{20, 43}, {0, 20}};
  EXPECT_EQ(copy_engine_receive_elements(two, 4), 0) << "only the tail: nothing on the copy engines";
  EXPECT_EQ(copy_engine_receive_elements({{0, 43}}, 4), 0);
}

TEST(GradBuckets, MegatronsOverlapBucketSize) {
  EXPECT_EQ(overlap_bucket_elements(1), 40'000'000);
  EXPECT_EQ(overlap_bucket_elements(40), 40'000'000);
  EXPECT_EQ(overlap_bucket_elements(64), 64'000'000);
  EXPECT_EQ(shard_counts(10, 3), (std::vector<int64_t>{4, 4, 2}));
}

}  // namespace
}  // namespace megatron::parallel
