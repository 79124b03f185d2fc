#include "core/dtype.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp8.h"

namespace megatron {

int64_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return 1;
  }
  MT_CHECK(false) << "bad dtype";
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "fp32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "fp16";
    case DType::kI32:
      return "int32";
    case DType::kI64:
      return "int64";
    case DType::kF8E4M3:
      return "fp8_e4m3";
    case DType::kF8E5M2:
      return "fp8_e5m2";
  }
  return "?";
}

namespace {
uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
}  // namespace

uint16_t float_to_bf16(float x) {
  const uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate.
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float bf16_to_float(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

uint16_t float_to_fp16(float x) {
  const uint32_t u = bits_of(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf (and inf itself)
  if (a >= 0x38800000u) {                       // normal fp16 (>= 2^-14)
    // Rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits, RNE.
    const uint32_t r = a - (112u << 23);
    return sign | static_cast<uint16_t>((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
  }
  // Subnormal fp16 (or zero): value = m * 2^-24 with m = round_even(x * 2^24).
  const float scaled = float_of(a) * 16777216.0f;               // exact: a power-of-two scaling
  return sign | static_cast<uint16_t>(std::nearbyint(scaled));  // default rounding: nearest even
}

float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(man) * (1.0f / 16777216.0f);  // m * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return float_of(sign | 0x7f800000u | (man << 13));
  return float_of(sign | ((exp + 112u) << 23) | (man << 13));
}

float round_to(DType dtype, float x) {
  switch (dtype) {
    case DType::kBF16:
      return bf16_to_float(float_to_bf16(x));
    case DType::kF16:
      return fp16_to_float(float_to_fp16(x));
    case DType::kF8E4M3:
      return round_to_fp8(x, Fp8Format::kE4M3);
    case DType::kF8E5M2:
      return round_to_fp8(x, Fp8Format::kE5M2);
    default:
      return x;
  }
}

}  // namespace megatron
