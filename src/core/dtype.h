// Element types and the 16-bit float conversions every backend agrees on (the 8-bit ones are
// core/fp8.h).
// Rounding is IEEE round-to-nearest-even everywhere (what CUDA's __float2bfloat16_rn and
// __float2half_rn do), so CPU-emulated bf16/fp16 storage matches the GPU bit for bit.
#pragma once

#include <cstdint>
#include <string_view>

namespace megatron {

// kF8E4M3 / kF8E5M2: FP8 storage (core/fp8.h), one byte per element. They are not is_float():
// only the FP8 ops (quantize, FP8 GEMMs) read or write them, and copy() moves them between
// tensors of the same dtype (host <-> device included).
enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kI64, kF8E4M3, kF8E5M2 };

int64_t dtype_size(DType dtype);           // bytes per element
std::string_view dtype_name(DType dtype);  // "fp32", "bf16", "fp16", "int32", "int64", "fp8_e4m3", "fp8_e5m2"
inline bool is_float(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }
inline bool is_fp8(DType d) { return d == DType::kF8E4M3 || d == DType::kF8E5M2; }

// bf16: the top 16 bits of an fp32, rounded to nearest even; NaN stays a (quiet) NaN.
uint16_t float_to_bf16(float x);
float bf16_to_float(uint16_t h);
// IEEE binary16: overflow rounds to +-inf, tiny values to subnormals or +-0 (RNE throughout).
uint16_t float_to_fp16(float x);
float fp16_to_float(uint16_t h);

// Rounds x to the precision of dtype and back (identity for fp32): what storing in that
// dtype does to a value (FP8: RNE with saturation, core/fp8.h).
float round_to(DType dtype, float x);

}  // namespace megatron
