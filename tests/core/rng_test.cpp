// Philox4x32-10 against Random123's known-answer vectors, and the uniform/normal/dropout
// helpers.
#include "core/rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/normal_math.h"

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

// cos(2 pi u) in long double, the angle reduced exactly as core/normal_math.h does (u = k/4 + r,
// both exact): at u = 1/4 and 3/4 the value is exactly 0, which cos(2 pi u) of a rounded 2 pi
// would miss by ~1e-20.
long double cos_two_pi_reference(long double u) {
  const long double k = std::floor(4.0L * u + 0.5L), r = u - k / 4.0L;
  const long double x = 6.283185307179586476925286766559L * r;
  switch (static_cast<int>(k) & 3) {
    case 0:
      return std::cos(x);
    case 1:
      return -std::sin(x);
    case 2:
      return -std::cos(x);
    default:
      return std::sin(x);
  }
}

// |got - exact| in units of the last place of exact as a T (the distance to the next T above
// |exact|; at exact 0 the smallest subnormal, so only an exact zero passes).
template <class T>
double ulps(long double got, long double exact) {
  const T e = static_cast<T>(std::fabs(exact));
  const T ulp = std::nextafter(e, std::numeric_limits<T>::infinity()) - e;
  return static_cast<double>(std::fabs(got - exact) / ulp);
}

// philox_normal against Box-Muller in long double (libm's logl/sinl/cosl, independent of
// core/normal_math.h's series) on the same two uniforms: within one float rounding (half an
// ulp of the result) plus the long double reference's own error. Over 2^20 normals of each of
// 20 seeds (the exact zeros of cos at u2 = 1/4, 3/4 come up in some), with the moments of
// N(0, 1) and the tails it must reach.
TEST(Philox, NormalIsBoxMullerOfTheStreamsUniformsToHalfAnUlp) {
  const int64_t per_seed = 1 << 16;
  double sum = 0.0, sum_sq = 0.0, worst_ulps = 0.0;
  float lo = 0.0f, hi = 0.0f;
  int64_t n = 0;
  for (uint64_t seed = 1230; seed < 1250; ++seed) {
    const uint64_t stream = seed % 2 == 0 ? 0 : 1ull << 40;
    for (int64_t i = 0; i < per_seed; ++i, ++n) {
      const uint64_t idx = static_cast<uint64_t>(i) * 7919;
      const float z = philox_normal(seed, stream, idx);
      const long double u1 = 1.0L - static_cast<long double>(philox_uniform(seed, stream, 2 * idx));
      const long double u2 = philox_uniform(seed, stream, 2 * idx + 1);
      const long double exact = std::sqrt(-2.0L * std::log(u1)) * cos_two_pi_reference(u2);
      worst_ulps = std::max(worst_ulps, ulps<float>(z, exact));
      sum += z;
      sum_sq += static_cast<double>(z) * z;
      lo = std::min(lo, z);
      hi = std::max(hi, z);
    }
  }
  EXPECT_LE(worst_ulps, 0.5 + 1e-6) << "a normal is not the float nearest to Box-Muller's value";
  EXPECT_NEAR(sum / n, 0.0, 5.0 / std::sqrt(static_cast<double>(n)));  // 5 standard errors
  EXPECT_NEAR(sum_sq / n, 1.0, 5.0 * std::sqrt(2.0 / static_cast<double>(n)));
  EXPECT_LT(lo, -4.0f);  // P(|z| > 4) = 6.3e-5: ~83 of 2^20 on either side expected
  EXPECT_GT(hi, 4.0f);
}

// The double functions behind it (the host entry points: the GPU's bits, tested in
// tests/backend/cuda/cuda_backend_test.cpp), over a stride of the 2^24 values each uniform
// takes plus both ends: ln within 3 double ulps of logl, cos(2 pi u) within 3 of the exactly
// reduced long double (measured worst against binary128: 2.09 and 2.22).
TEST(Philox, NormalMathIsWithinThreeDoubleUlps) {
  double worst_log = 0.0, worst_cos = 0.0;
  auto check = [&](int64_t i) {
    const double u1 = 1.0 - static_cast<double>(i) * (1.0 / 16777216.0);
    const double u2 = static_cast<double>(i) * (1.0 / 16777216.0);
    worst_log =
        std::max(worst_log, ulps<double>(normal_math::log_positive_host(u1), std::log(static_cast<long double>(u1))));
    worst_cos = std::max(worst_cos, ulps<double>(normal_math::cos_two_pi_host(u2), cos_two_pi_reference(u2)));
  };
  for (int64_t i = 0; i < (int64_t{1} << 24); i += 61) check(i);
  for (int64_t i : {int64_t{1}, int64_t{1} << 22, int64_t{3} << 22, (int64_t{1} << 24) - 1}) check(i);
  EXPECT_LE(worst_log, 3.0);
  EXPECT_LE(worst_cos, 3.0);
  EXPECT_EQ(normal_math::log_positive_host(1.0), 0.0);
  EXPECT_EQ(normal_math::cos_two_pi_host(0.25), 0.0);  // -0.0
  EXPECT_EQ(normal_math::cos_two_pi_host(0.5), -1.0);
}

// The two words of one Philox block: normal 2j uses words 0 and 1 of block j, normal 2j + 1
// words 2 and 3 (u1 = 1 - uniform; u1 = 1 gives +-0).
TEST(Philox, NormalTakesItsTwoWordsOfBlockIndexOverTwo) {
  const uint64_t seed = 99, stream = 5;
  for (uint64_t idx : {0ull, 1ull, 2ull, 3ull, 1000001ull, (1ull << 33) + 4}) {
    const float u1 = 1.0f - philox_uniform(seed, stream, 2 * idx);
    const float u2 = philox_uniform(seed, stream, 2 * idx + 1);
    const double expect = std::sqrt(-2.0 * std::log(static_cast<double>(u1))) * std::cos(6.283185307179586 * u2);
    EXPECT_NEAR(philox_normal(seed, stream, idx), expect, 1e-6 * std::max(1.0, std::fabs(expect))) << idx;
  }
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
