// FP8 encode and decode as Hopper's tensor cores and Transformer Engine's casts define them
// (the OCP 8-bit floating point formats, NVIDIA's __nv_fp8_e4m3 / __nv_fp8_e5m2):
//
//   E4M3: 1 sign, 4 exponent (bias 7), 3 mantissa bits. No infinities; S.1111.111 is NaN (one
//         pattern per sign), so the largest finite value is S.1111.110 = 448. Subnormals
//         m * 2^-9 (m = 1..7); smallest normal 2^-6.
//   E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE-like: S.11111.00 is infinity,
//         S.11111.xx (xx != 0) NaN, largest finite S.11110.11 = 57344. Subnormals m * 2^-16.
//
// Encoding (what TE's cast kernels and cvt.rn.satfinite do): round to nearest, ties to even
// mantissa, through the subnormal range; a value whose magnitude exceeds the largest finite
// value (infinity included) saturates to +-max; NaN becomes the canonical NaN 0x7f (its sign
// dropped, as the hardware conversion does); the sign of zero is kept.
//
// Everything here is inline and MT_HOST_DEVICE, so host and device code compute the same bits
// (the CPU backend's emulation and the CUDA backend's reference are these functions).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#if defined(__CUDACC__)
#define MT_FP8_HD __host__ __device__
#else
#define MT_FP8_HD
#endif

namespace megatron {

enum class Fp8Format : uint8_t { kE4M3, kE5M2 };

std::string_view fp8_format_name(Fp8Format f);  // "e4m3", "e5m2"

namespace fp8_detail {

MT_FP8_HD inline uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}
MT_FP8_HD inline float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}
MT_FP8_HD inline float nearest_even(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return __builtin_rintf(x);  // the default rounding mode: nearest, ties to even
#endif
}

// The format's layout: mantissa bits M, exponent bias B, code of the largest finite magnitude.
struct Layout {
  int mantissa_bits;
  int bias;
  uint32_t max_code;
};
MT_FP8_HD constexpr Layout layout(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? Layout{3, 7, 0x7eu} : Layout{2, 15, 0x7bu};
}

}  // namespace fp8_detail

// Largest finite value: 448 (E4M3), 57344 (E5M2).
MT_FP8_HD constexpr float fp8_max(Fp8Format f) { return f == Fp8Format::kE4M3 ? 448.0f : 57344.0f; }

MT_FP8_HD inline uint8_t float_to_fp8(float x, Fp8Format f) {
  using namespace fp8_detail;
  const Layout L = layout(f);
  const uint32_t u = bits_of(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fu;  // NaN
  const int shift = 23 - L.mantissa_bits;
  uint32_t code;
  if (a >= static_cast<uint32_t>(127 + 1 - L.bias) << 23) {  // normal in FP8 (>= 2^(1-B))
    // Rebias the exponent (127 -> B) and round the 23-bit mantissa to M bits, RNE; a carry
    // out of the mantissa increments the exponent, as it should. Infinity lands far above max.
    const uint32_t r = a - (static_cast<uint32_t>(127 - L.bias) << 23);
    code = (r + ((1u << (shift - 1)) - 1u) + ((r >> shift) & 1u)) >> shift;
  } else {
    // Subnormal (or zero): value = m * 2^(1-B-M), m = round_even(|x| * 2^(B-1+M)); the scaling
    // is a power of two, so exact. m may round up to 2^M, the smallest normal's code.
    const float scaled = float_of(a) * float_of(static_cast<uint32_t>(127 + L.bias - 1 + L.mantissa_bits) << 23);
    code = static_cast<uint32_t>(nearest_even(scaled));
  }
  if (code > L.max_code) code = L.max_code;  // saturate
  return static_cast<uint8_t>(sign | code);
}

MT_FP8_HD inline float fp8_to_float(uint8_t c, Fp8Format f) {
  using namespace fp8_detail;
  const Layout L = layout(f);
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const int exp_bits = 7 - L.mantissa_bits;
  const uint32_t exp = (c >> L.mantissa_bits) & ((1u << exp_bits) - 1u);
  const uint32_t man = c & ((1u << L.mantissa_bits) - 1u);
  if (f == Fp8Format::kE4M3 && (c & 0x7fu) == 0x7fu) return float_of(sign | 0x7fc00000u);
  if (f == Fp8Format::kE5M2 && exp == 31u) return float_of(sign | (man == 0 ? 0x7f800000u : 0x7fc00000u));
  if (exp == 0) {  // m * 2^(1-B-M)
    const float v = static_cast<float>(man) * float_of(static_cast<uint32_t>(127 + 1 - L.bias - L.mantissa_bits) << 23);
    return float_of(sign | bits_of(v));
  }
  return float_of(sign | ((exp + static_cast<uint32_t>(127 - L.bias)) << 23) | (man << (23 - L.mantissa_bits)));
}

// The tensorwise (current-scaling) scale of a tensor whose max |x| is amax: Transformer
// Engine's compute_scale_from_amax with its defaults (epsilon 0, no power-of-two rounding,
// FLT_MAX for a quotient that overflows): 1 when amax is 0, infinite or NaN; else
// fp8_max / amax (one fp32 division), FLT_MAX if that overflows. No margin.
MT_FP8_HD inline float fp8_current_scale(float amax, float max_value) {
  constexpr float kFloatMax = 3.40282347e38f;
  if (!(amax > 0.0f) || amax > kFloatMax) return 1.0f;  // 0, NaN (fails the comparison), inf
  const float scale = max_value / amax;
  return scale > kFloatMax ? kFloatMax : scale;
}

// x rounded to the format and back: what storing it in FP8 does to a value.
MT_FP8_HD inline float round_to_fp8(float x, Fp8Format f) { return fp8_to_float(float_to_fp8(x, f), f); }

}  // namespace megatron
