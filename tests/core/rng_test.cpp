// Philox4x32-10 against Random123's known-answer vectors, and the uniform/dropout helpers.
#include "core/rng.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace megatron {
namespace {

TEST(Philox, Random123KnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (PhiloxBlock{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (PhiloxBlock{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (PhiloxBlock{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, UniformIsTheDocumentedWordOfTheBlock) {
  // Element index = 4 * block + word; counter = (block lo, block hi, stream lo, stream hi).
  const uint64_t seed = 0x0123456789abcdefull, stream = 0xfedcba9876543210ull;
  const uint64_t index = (uint64_t{5} << 32 | 7) * 4 + 2;
  const PhiloxBlock out = philox4x32_10({7, 5, 0x76543210u, 0xfedcba98u}, {0x89abcdefu, 0x01234567u});
  EXPECT_EQ(philox_uniform(seed, stream, index), static_cast<float>(out[2] >> 8) / 16777216.0f);
}

TEST(Philox, UniformRangeAndMoments) {
  const int64_t n = 1 << 20;
  double sum = 0.0, sum_sq = 0.0;
  float lo = 1.0f, hi = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float u = philox_uniform(42, 3, static_cast<uint64_t>(i));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
    sum_sq += static_cast<double>(u) * u;
  }
  // Mean 1/2 with standard error sqrt(1/12 / n) = 2.8e-4: allow 5 sigma. Variance 1/12.
  EXPECT_NEAR(sum / n, 0.5, 5 * 2.8e-4);
  EXPECT_NEAR(sum_sq / n - (sum / n) * (sum / n), 1.0 / 12.0, 1e-3);
  EXPECT_LT(lo, 1e-5f);
  EXPECT_GT(hi, 1.0f - 1e-5f);
}

TEST(Philox, StreamsAndSeedsDiffer) {
  int same_stream = 0, same_seed = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    same_stream += philox_uniform(1, 2, i) == philox_uniform(1, 3, i);
    same_seed += philox_uniform(1, 2, i) == philox_uniform(2, 2, i);
  }
  // 24-bit values: a coincidence has probability 6e-8 per element.
  EXPECT_LE(same_stream, 1);
  EXPECT_LE(same_seed, 1);
}

TEST(Dropout, KeepFractionAndThreshold) {
  for (float p : {0.1f, 0.5f, 0.9f}) {
    const int64_t n = 200000;
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = dropout_keep(7, 11, static_cast<uint64_t>(i), p);
      ASSERT_EQ(keep, philox_uniform(7, 11, static_cast<uint64_t>(i)) >= p);
      kept += keep;
    }
    // Binomial standard deviation sqrt(n p (1 - p)) <= 224: allow 5 sigma.
    EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p, 5 * 224.0 / n) << "p = " << p;
  }
  // p = 0 keeps everything.
  for (uint64_t i = 0; i < 1000; ++i) EXPECT_TRUE(dropout_keep(1, 1, i, 0.0f));
}

}  // namespace
}  // namespace megatron
