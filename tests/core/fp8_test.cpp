// FP8 E4M3 / E5M2: every code decoded against the format's definition written out in double,
// and encoding of many floats against a brute-force search over those decoded values (nearest
// by |x - v| in double, ties to the even code, saturation to +-max, NaN to 0x7f).
#include "core/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace megatron {
namespace {

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

struct Spec {
  Fp8Format f;
  int e, m, bias;
  bool ieee;  // all-ones exponent is inf/NaN (E5M2) rather than only S.1111.111 NaN (E4M3)
};
const Spec kSpecs[] = {{Fp8Format::kE4M3, 4, 3, 7, false}, {Fp8Format::kE5M2, 5, 2, 15, true}};

// The value of code c from the bit fields, in double: (-1)^s 2^(e-bias) (1 + m/2^M), subnormal
// (-1)^s 2^(1-bias) m/2^M; NaN / inf as the format says.
double reference_decode(const Spec& s, int c) {
  const int sign = c >> 7, exp = (c >> s.m) & ((1 << s.e) - 1), man = c & ((1 << s.m) - 1);
  const int all_ones = (1 << s.e) - 1;
  if (s.ieee && exp == all_ones) {
    return man == 0 ? (sign ? -INFINITY : INFINITY) : NAN;
  }
  if (!s.ieee && exp == all_ones && man == (1 << s.m) - 1) return NAN;
  const double frac = static_cast<double>(man) / (1 << s.m);
  const double v = exp == 0 ? std::ldexp(frac, 1 - s.bias) : std::ldexp(1.0 + frac, exp - s.bias);
  return sign ? -v : v;
}

TEST(Fp8, DecodeEveryCode) {
  for (const Spec& s : kSpecs) {
    int nans = 0;
    for (int c = 0; c < 256; ++c) {
      const double want = reference_decode(s, c);
      const float got = fp8_to_float(static_cast<uint8_t>(c), s.f);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << fp8_format_name(s.f) << " code " << c;
        ++nans;
        continue;
      }
      EXPECT_EQ(static_cast<double>(got), want) << fp8_format_name(s.f) << " code " << c;
      EXPECT_EQ(std::signbit(got), c >= 128) << fp8_format_name(s.f) << " code " << c;
    }
    EXPECT_EQ(nans, s.f == Fp8Format::kE4M3 ? 2 : 6);
  }
  EXPECT_EQ(fp8_to_float(0x7e, Fp8Format::kE4M3), 448.0f);
  EXPECT_EQ(fp8_to_float(0x7b, Fp8Format::kE5M2), 57344.0f);
  EXPECT_EQ(fp8_to_float(0x01, Fp8Format::kE4M3), 0x1p-9f);
  EXPECT_EQ(fp8_to_float(0x01, Fp8Format::kE5M2), 0x1p-16f);
  EXPECT_EQ(fp8_to_float(0x7c, Fp8Format::kE5M2), INFINITY);
  EXPECT_EQ(fp8_max(Fp8Format::kE4M3), 448.0f);
  EXPECT_EQ(fp8_max(Fp8Format::kE5M2), 57344.0f);
}

// The code for x by search: the finite code nearest to x (in double, exact for these values),
// a tie going to the code with an even mantissa (its lowest bit clear), magnitudes above max
// saturating, NaN to 0x7f.
uint8_t reference_encode(const Spec& s, float x) {
  if (std::isnan(x)) return 0x7f;
  const double max = reference_decode(s, s.f == Fp8Format::kE4M3 ? 0x7e : 0x7b);
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= max) return static_cast<uint8_t>(sign | (s.f == Fp8Format::kE4M3 ? 0x7e : 0x7b));
  int best = -1;
  double best_d = 0;
  for (int c = 0; c < 128; ++c) {
    const double v = reference_decode(s, c);
    if (!std::isfinite(v)) continue;
    const double d = std::fabs(a - v);
    if (best < 0 || d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return static_cast<uint8_t>(sign | best);
}

TEST(Fp8, EncodeMatchesNearestEvenSearch) {
  std::mt19937 rng(7);
  for (const Spec& s : kSpecs) {
    std::vector<float> xs;
    // Every code's value, the midpoints between neighbours (ties) and the floats just around
    // them, past max, and far outside the range.
    for (int c = 0; c < 128; ++c) {
      const double v = reference_decode(s, c), w = reference_decode(s, c + 1);
      if (!std::isfinite(v)) continue;
      xs.push_back(static_cast<float>(v));
      if (std::isfinite(w) && c + 1 < 128) {
        const float mid = static_cast<float>((v + w) / 2);  // exact in fp32
        xs.push_back(mid);
        xs.push_back(std::nextafter(mid, 0.0f));
        xs.push_back(std::nextafter(mid, INFINITY));
      }
    }
    const float max = fp8_max(s.f);
    for (float x : {max * 1.0625f, max * 1.5f, std::nextafter(max, INFINITY), 1e30f, 3.4e38f, INFINITY, 0.0f, 1e-30f,
                    1e-45f, std::numeric_limits<float>::denorm_min()}) {
      xs.push_back(x);
    }
    // Random floats across the range (log-uniform magnitude) and random bit patterns.
    std::uniform_real_distribution<double> lg(-25.0, 18.0);
    for (int i = 0; i < 20000; ++i) xs.push_back(static_cast<float>(std::exp2(lg(rng))));
    std::uniform_int_distribution<uint32_t> any;
    for (int i = 0; i < 20000; ++i) xs.push_back(from_bits(any(rng)));
    const size_t n = xs.size();
    for (size_t i = 0; i < n; ++i) xs.push_back(-xs[i]);
    for (float x : xs) {
      const uint8_t want = reference_encode(s, x);
      const uint8_t got = float_to_fp8(x, s.f);
      ASSERT_EQ(got, want) << fp8_format_name(s.f) << " x=" << x << " (bits 0x" << std::hex << bits(x) << ")";
    }
  }
}

TEST(Fp8, SpecialValues) {
  EXPECT_EQ(float_to_fp8(NAN, Fp8Format::kE4M3), 0x7f);
  EXPECT_EQ(float_to_fp8(-NAN, Fp8Format::kE5M2), 0x7f);
  EXPECT_EQ(float_to_fp8(INFINITY, Fp8Format::kE4M3), 0x7e);   // saturates
  EXPECT_EQ(float_to_fp8(-INFINITY, Fp8Format::kE5M2), 0xfb);  // saturates
  EXPECT_EQ(float_to_fp8(464.0f, Fp8Format::kE4M3), 0x7e);     // tie 448/480 would be odd: saturated
  EXPECT_EQ(float_to_fp8(-0.0f, Fp8Format::kE4M3), 0x80);      // signed zero kept
  EXPECT_EQ(float_to_fp8(0x1p-10f, Fp8Format::kE4M3), 0x00);   // half the smallest subnormal: tie to 0
  EXPECT_EQ(float_to_fp8(0x1.8p-9f, Fp8Format::kE4M3), 0x02);  // 1.5 ulp: tie to even (2)
  EXPECT_EQ(float_to_fp8(0x1.ep-7f, Fp8Format::kE4M3), 0x08);  // subnormal rounds up to 2^-6
  EXPECT_EQ(float_to_fp8(1.0625f, Fp8Format::kE4M3), 0x38);    // 1 + 1/16: tie to 1.0
  EXPECT_EQ(float_to_fp8(1.1875f, Fp8Format::kE4M3), 0x3a);    // 1 + 3/16: tie to 1.25
  EXPECT_EQ(float_to_fp8(1.125f, Fp8Format::kE5M2), 0x3c);     // 1 + 1/8: tie to 1.0
  EXPECT_EQ(round_to(DType::kF8E4M3, 0.3f), 0.3125f);
  EXPECT_EQ(round_to(DType::kF8E5M2, 0.3f), 0.3125f);
  EXPECT_EQ(round_to(DType::kF8E5M2, 0.4f), 0.375f);
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1);
  EXPECT_FALSE(is_float(DType::kF8E5M2));
  EXPECT_TRUE(is_fp8(DType::kF8E5M2));
}

}  // namespace
}  // namespace megatron
