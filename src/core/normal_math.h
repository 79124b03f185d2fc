// Box-Muller in double precision from basic IEEE operations only, so that the host and the GPU
// compute the same bits: parameters initialised on the GPU are the CPU reference's, element for
// element (core/rng.h philox_normal; Backend::init_normal).
//
// Why not std::log / std::cos: libm's logf/cosf and CUDA's differ in the last bit for some
// arguments, so a GPU initialisation through them would not reproduce the CPU's. Here every
// step is one correctly rounded +, -, *, / or sqrt (the same on any IEEE machine), never fused
// into an FMA: device code uses the _rn intrinsics (nvcc does not contract them); host code
// calls the *_host entry points below, compiled once in core/normal_math.cpp with
// -ffp-contract=off (src/CMakeLists.txt; GCC ignores `#pragma STDC FP_CONTRACT`), never the
// inline functions, which any other host file could contract into FMAs (a -march with FMA
// changes ~4% of the doubles). Accuracy: ln within ~2 double ulps, cos within ~2.2 (both
// series are truncated far below an ulp), so the float normal is the correctly rounded value of
// the exact formula except within ~1e-15 relative of a rounding boundary (tests/core/
// rng_test.cpp; tests/backend/cuda/cuda_backend_test.cpp compares the device's doubles with
// the host's over the whole 24-bit domain, bit for bit).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif

namespace megatron::normal_math {

MT_HOST_DEVICE inline double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
MT_HOST_DEVICE inline double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
MT_HOST_DEVICE inline double sub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
MT_HOST_DEVICE inline double div(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
MT_HOST_DEVICE inline double root(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return __builtin_sqrt(a);
#endif
}
MT_HOST_DEVICE inline uint64_t bits_of(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(x));
#else
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}
MT_HOST_DEVICE inline double from_bits(uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(b));
#else
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}

// ln(x) for normal x > 0 (here x in [2^-24, 1]): x = m 2^e with m in [sqrt(1/2), sqrt(2)],
// ln m = 2 atanh(t), t = (m - 1) / (m + 1), |t| <= 0.1716; the odd series through t^23 leaves
// a relative error below 1e-19.
MT_HOST_DEVICE inline double log_positive(double x) {
  const uint64_t b = bits_of(x);
  int64_t e = static_cast<int64_t>((b >> 52) & 0x7ff) - 1023;
  double m = from_bits((b & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);  // [1, 2)
  if (m > 1.4142135623730951) {
    m = mul(m, 0.5);  // exact
    e += 1;
  }
  const double t = div(sub(m, 1.0), add(m, 1.0));  // m - 1 is exact (Sterbenz)
  const double t2 = mul(t, t);
  constexpr double kInverseOdd[] = {1.0 / 23.0, 1.0 / 21.0, 1.0 / 19.0, 1.0 / 17.0, 1.0 / 15.0, 1.0 / 13.0,
                                    1.0 / 11.0, 1.0 / 9.0,  1.0 / 7.0,  1.0 / 5.0,  1.0 / 3.0,  1.0};
  double p = kInverseOdd[0];
  for (int i = 1; i < 12; ++i) p = add(mul(p, t2), kInverseOdd[i]);
  constexpr double kLn2 = 0.6931471805599453;
  return add(mul(static_cast<double>(e), kLn2), mul(2.0, mul(t, p)));
}

// cos(2 pi u) for u in [0, 1) with at most 26 significant bits (a 24-bit uniform): u = k/4 + r
// with k = round(4u) and |r| <= 1/8 (both exact), x = 2 pi r in [-pi/4, pi/4], then
// cos(x + k pi/2) from the Taylor series of cos x (through x^20) or sin x (through x^21).
MT_HOST_DEVICE inline double cos_two_pi(double u) {
  const double k4 = add(mul(u, 4.0), 0.5);                     // exact
  const int64_t k = static_cast<int64_t>(k4);                  // floor (k4 >= 0.5)
  const double r = sub(u, mul(static_cast<double>(k), 0.25));  // exact
  constexpr double kTwoPi = 6.283185307179586;
  const double x = mul(r, kTwoPi), x2 = mul(x, x);
  constexpr double kCos[] = {1.0 / 2432902008176640000.0,
                             -1.0 / 6402373705728000.0,
                             1.0 / 20922789888000.0,
                             -1.0 / 87178291200.0,
                             1.0 / 479001600.0,
                             -1.0 / 3628800.0,
                             1.0 / 40320.0,
                             -1.0 / 720.0,
                             1.0 / 24.0,
                             -1.0 / 2.0,
                             1.0};
  constexpr double kSin[] = {1.0 / 51090942171709440000.0,
                             -1.0 / 121645100408832000.0,
                             1.0 / 355687428096000.0,
                             -1.0 / 1307674368000.0,
                             1.0 / 6227020800.0,
                             -1.0 / 39916800.0,
                             1.0 / 362880.0,
                             -1.0 / 5040.0,
                             1.0 / 120.0,
                             -1.0 / 6.0,
                             1.0};
  double c = kCos[0], s = kSin[0];
  for (int i = 1; i < 11; ++i) {
    c = add(mul(c, x2), kCos[i]);
    s = add(mul(s, x2), kSin[i]);
  }
  s = mul(s, x);
  switch (k & 3) {
    case 0:
      return c;
    case 1:
      return -s;
    case 2:
      return -c;
    default:
      return s;
  }
}

// The standard normal of Box-Muller from two uniforms: u1 in (0, 1], u2 in [0, 1), each a
// multiple of 2^-24; sqrt(-2 ln u1) cos(2 pi u2), rounded once to float by the caller.
MT_HOST_DEVICE inline double box_muller(double u1, double u2) {
  return mul(root(mul(-2.0, log_positive(u1))), cos_two_pi(u2));
}

// The normal of two Philox words (core/rng.h philox_normal): u1 = 1 - (first >> 8) 2^-24 in
// (0, 1], u2 = (second >> 8) 2^-24 in [0, 1) (both exact), Box-Muller rounded once to float.
MT_HOST_DEVICE inline float normal_from_words(uint32_t first, uint32_t second) {
  const double u1 = 1.0 - static_cast<double>(first >> 8) * (1.0 / 16777216.0);
  const double u2 = static_cast<double>(second >> 8) * (1.0 / 16777216.0);
#if defined(__CUDA_ARCH__)
  return __double2float_rn(box_muller(u1, u2));
#else
  return static_cast<float>(box_muller(u1, u2));
#endif
}

// Host entry points (core/normal_math.cpp, compiled with -ffp-contract=off): the functions
// above as the host computes them.
double log_positive_host(double x);
double cos_two_pi_host(double u);
double box_muller_host(double u1, double u2);
float normal_from_words_host(uint32_t first, uint32_t second);

}  // namespace megatron::normal_math
