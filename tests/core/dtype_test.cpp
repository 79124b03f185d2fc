// 16-bit float conversions: fp16 against numpy's float16 (Debian's python3), bf16 against
// hand-checked ties and an independent nearest-even search in double.
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include "support/paths.h"

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

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kF32), 4);
  EXPECT_EQ(dtype_size(DType::kBF16), 2);
  EXPECT_EQ(dtype_size(DType::kF16), 2);
  EXPECT_EQ(dtype_size(DType::kI32), 4);
  EXPECT_EQ(dtype_size(DType::kI64), 8);
  EXPECT_EQ(dtype_name(DType::kBF16), "bf16");
  EXPECT_TRUE(is_float(DType::kF16));
  EXPECT_FALSE(is_float(DType::kI32));
}

TEST(Bf16, HandCheckedRounding) {
  struct Case {
    uint32_t in;
    uint16_t out;
  };
  const Case cases[] = {
      {0x3f800000u, 0x3f80u},  // 1.0 exact
      {0x3f808000u, 0x3f80u},  // tie, kept bit even: stays
      {0x3f818000u, 0x3f82u},  // tie, kept bit odd: rounds up to even
      {0x3f808001u, 0x3f81u},  // just above the tie: up
      {0x3f807fffu, 0x3f80u},  // just below the tie: down
      {0xbf818000u, 0xbf82u},  // negative tie
      {0x3fff8000u, 0x4000u},  // tie carrying into the exponent
      {0x7f7fffffu, 0x7f80u},  // largest float rounds to +inf
      {0xff7fffffu, 0xff80u},  // and to -inf
      {0x7f800000u, 0x7f80u},  // +inf
      {0xff800000u, 0xff80u},  // -inf
      {0x00000000u, 0x0000u},  // +0
      {0x80000000u, 0x8000u},  // -0
      {0x00008000u, 0x0000u},  // subnormal tie to even (0)
      {0x00018000u, 0x0002u},  // subnormal tie to even (2)
      {0x7fc00000u, 0x7fc0u},  // quiet NaN
  };
  for (const Case& c : cases) EXPECT_EQ(float_to_bf16(from_bits(c.in)), c.out) << std::hex << c.in;
  // A signalling NaN whose payload sits in the low bits must stay a NaN (not become inf).
  const uint16_t snan = float_to_bf16(from_bits(0x7f800001u));
  EXPECT_TRUE(std::isnan(bf16_to_float(snan))) << std::hex << snan;
  EXPECT_EQ(bits(bf16_to_float(0x3f82u)), 0x3f820000u);
}

TEST(Bf16, NearestEvenAgainstIndependentSearch) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 200000; ++i) {
    const float x = from_bits(rng());
    if (!std::isfinite(x)) continue;
    const uint16_t got = float_to_bf16(x);
    // Candidates: truncation and the next value away from zero; pick the nearer in double,
    // the even one on a tie.
    const uint16_t lo = static_cast<uint16_t>(bits(x) >> 16), hi = static_cast<uint16_t>(lo + 1);
    const double dlo = std::abs(static_cast<double>(x) - bf16_to_float(lo));
    const double hv = bf16_to_float(hi);
    const double dhi = std::isinf(hv) ? std::abs(static_cast<double>(x) - std::ldexp(1.0, 128) * (x < 0 ? -1 : 1))
                                      : std::abs(static_cast<double>(x) - hv);
    const uint16_t want = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
    ASSERT_EQ(got, want) << std::hex << bits(x);
  }
}

TEST(Fp16, RoundTripsEveryHalfExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float x = fp16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(x)) {
      EXPECT_EQ(h & 0x7c00u, 0x7c00u);
      EXPECT_NE(h & 0x3ffu, 0u);
      continue;
    }
    ASSERT_EQ(float_to_fp16(x), h) << std::hex << h;
  }
  EXPECT_EQ(fp16_to_float(0x0001u), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_float(0x7bffu), 65504.0f);
  EXPECT_EQ(fp16_to_float(0x3c00u), 1.0f);
}

TEST(Fp16, MatchesNumpy) {
  if (!std::ifstream("/usr/bin/python3").good()) GTEST_SKIP() << "no /usr/bin/python3";
  // Edge cases first, then random floats: every pattern whose exponent lands in or near the
  // fp16 range, exact ties between neighbouring halves, and arbitrary bit patterns.
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           1.0f,
                           -1.0f,
                           65504.0f,
                           65519.0f,
                           65519.996f,
                           65520.0f,
                           -65520.0f,
                           65536.0f,
                           1e10f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::max(),
                           std::ldexp(1.0f, -24),
                           std::ldexp(1.0f, -25),
                           std::ldexp(3.0f, -25),
                           std::ldexp(1.0f, -26),
                           std::ldexp(1.0f, -14),
                           std::nextafter(std::ldexp(1.0f, -14), 0.0f),
                           std::ldexp(1023.5f, -24),
                           std::ldexp(1.0f, -149),
                           1.0f + std::ldexp(1.0f, -11),
                           1.0f + std::ldexp(3.0f, -11),
                           2048.0f + 1.0f,
                           2048.0f + 3.0f,
                           0.1f,
                           -0.1f,
                           1.0f / 3.0f};
  std::mt19937 rng(99);
  for (int i = 0; i < 50000; ++i) {
    // Exponents 100..145 cover fp16 subnormals (2^-24 = exp 103) through overflow (2^16 = 143).
    const uint32_t e = 100 + rng() % 46;
    xs.push_back(from_bits((rng() & 0x80000000u) | (e << 23) | (rng() & 0x7fffffu)));
    // A half value plus exactly half an ulp of it (a tie) or a hair around it.
    const uint16_t h = static_cast<uint16_t>(rng() % 0x7c00u);
    const float lo = fp16_to_float(h), hi = fp16_to_float(static_cast<uint16_t>(h + 1));
    const float mid = lo + (hi - lo) / 2;  // exact in fp32
    xs.push_back(mid);
    xs.push_back(std::nextafter(mid, 0.0f));
    xs.push_back(std::nextafter(mid, 1e30f));
    xs.push_back(from_bits(rng()));
  }
  xs.push_back(std::numeric_limits<float>::quiet_NaN());
  xs.push_back(-std::numeric_limits<float>::quiet_NaN());

  const std::string dir = test::scratch_dir("fp16_numpy");
  const std::string in = dir + "/in.f32", out = dir + "/out.u16";
  {
    std::ofstream f(in, std::ios::binary);
    f.write(reinterpret_cast<const char*>(xs.data()), static_cast<std::streamsize>(xs.size() * 4));
  }
  const std::string script = "import numpy as np; np.fromfile('" + in +
                             "', dtype='<f4').astype(np.float16).view('<u2')"
                             ".tofile('" +
                             out + "')";
  const auto r = test::run_command("/usr/bin/python3 -c \"" + script + "\"", true);
  ASSERT_EQ(r.status, 0) << r.output;
  std::vector<uint16_t> want(xs.size());
  std::ifstream f(out, std::ios::binary);
  f.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * 2));
  ASSERT_EQ(f.gcount(), static_cast<std::streamsize>(want.size() * 2));
  int misses = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const uint16_t got = float_to_fp16(xs[i]);
    if (std::isnan(xs[i])) {
      EXPECT_TRUE(std::isnan(fp16_to_float(got)));
      EXPECT_EQ(got & 0x8000u, want[i] & 0x8000u) << "NaN sign";
      continue;
    }
    if (got != want[i] && ++misses <= 10) {
      ADD_FAILURE() << std::hex << "x bits 0x" << bits(xs[i]) << " (" << std::dec << xs[i] << "): got 0x" << std::hex
                    << got << ", numpy 0x" << want[i];
    }
  }
  EXPECT_EQ(misses, 0) << "of " << xs.size();
}

TEST(RoundTo, IsStoreAndLoad) {
  EXPECT_EQ(round_to(DType::kF32, 0.1f), 0.1f);
  EXPECT_EQ(round_to(DType::kBF16, 0.1f), bf16_to_float(float_to_bf16(0.1f)));
  EXPECT_EQ(round_to(DType::kF16, 0.1f), fp16_to_float(float_to_fp16(0.1f)));
  EXPECT_NE(round_to(DType::kBF16, 0.1f), 0.1f);
  EXPECT_EQ(round_to(DType::kF16, 70000.0f), std::numeric_limits<float>::infinity());
}

}  // namespace
}  // namespace megatron
