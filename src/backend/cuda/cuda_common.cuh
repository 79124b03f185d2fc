// Device helpers shared by the CUDA backend's .cu files: typed element access for the three
// float dtypes, and Philox4x32-10 identical to core/rng.cpp (so dropout masks match the CPU
// backend bit for bit).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"

namespace megatron::backend::cuda {

// Element i of a float tensor of dtype dt, as fp32.
__device__ __forceinline__ float load_f(const void* p, DType dt, int64_t i) {
  switch (dt) {
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::kF16: return __half2float(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// Stores v into element i, rounded to nearest even for 16-bit dtypes.
__device__ __forceinline__ void store_f(void* p, DType dt, int64_t i, float v) {
  switch (dt) {
    case DType::kBF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    case DType::kF16: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

// Vectorised access in groups of 4 elements (the Philox block size), shared by the
// elementwise and loss kernels: raw 16-bit patterns <-> fp32 (RNE on the way back), then
// load4/store4.
__device__ __forceinline__ float bits16_to_float(uint32_t bits, DType dt) {
  if (dt == DType::kBF16) return __uint_as_float(bits << 16);
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}

__device__ __forceinline__ uint32_t float_to_bits16(float v, DType dt) {
  if (dt == DType::kBF16) return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  return __half_as_ushort(__float2half_rn(v));
}

// Elements [i, i + 4) of p as fp32 (elements past n read as 0). `vec`: p is aligned to 4
// elements, so a full group is one vector load.
__device__ __forceinline__ void load4(const void* p, DType dt, int64_t i, int64_t n, bool vec, float (&v)[4]) {
  if (vec && i + 4 <= n) {
    if (dt == DType::kF32) {
      const float4 q = *reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
      v[0] = q.x;
      v[1] = q.y;
      v[2] = q.z;
      v[3] = q.w;
    } else {
      const uint2 q = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(p) + i);
      v[0] = bits16_to_float(q.x & 0xFFFFu, dt);
      v[1] = bits16_to_float(q.x >> 16, dt);
      v[2] = bits16_to_float(q.y & 0xFFFFu, dt);
      v[3] = bits16_to_float(q.y >> 16, dt);
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) v[k] = i + k < n ? load_f(p, dt, i + k) : 0.0f;
}

// Stores elements [i, min(i + 4, n)) of p, rounded to dt.
__device__ __forceinline__ void store4(void* p, DType dt, int64_t i, int64_t n, bool vec, const float (&v)[4]) {
  if (vec && i + 4 <= n) {
    if (dt == DType::kF32) {
      *reinterpret_cast<float4*>(static_cast<float*>(p) + i) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
      const uint2 q = make_uint2(float_to_bits16(v[0], dt) | (float_to_bits16(v[1], dt) << 16),
                                 float_to_bits16(v[2], dt) | (float_to_bits16(v[3], dt) << 16));
      *reinterpret_cast<uint2*>(static_cast<uint16_t*>(p) + i) = q;
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < 4; ++k)
    if (i + k < n) store_f(p, dt, i + k, v[k]);
}

// Philox4x32-10 (core/rng.h): the same rounds, constants and word selection.
__device__ __forceinline__ uint4 philox4x32_10(uint4 c, uint2 k) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = __umulhi(kMul0, c.x), lo0 = kMul0 * c.x;
    const uint32_t hi1 = __umulhi(kMul1, c.z), lo1 = kMul1 * c.z;
    c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    k.x += kWeyl0;
    k.y += kWeyl1;
  }
  return c;
}

// philox_uniform(seed, stream, index) of core/rng.h.
__device__ __forceinline__ float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t block = index >> 2;
  const uint4 out = philox4x32_10(
      make_uint4(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), static_cast<uint32_t>(stream),
                 static_cast<uint32_t>(stream >> 32)),
      make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)));
  const uint32_t word = (index & 3) == 0 ? out.x : (index & 3) == 1 ? out.y : (index & 3) == 2 ? out.z : out.w;
  return static_cast<float>(word >> 8) * (1.0f / 16777216.0f);
}

// The dropout multiplier of element `index`: 0, or 1/(1-p) when kept (p == 0: always 1).
__device__ __forceinline__ float dropout_multiplier(uint64_t seed, uint64_t stream, uint64_t index, float p) {
  if (p == 0.0f) return 1.0f;
  return philox_uniform(seed, stream, index) >= p ? 1.0f / (1.0f - p) : 0.0f;
}

// Grid size for a grid-stride loop over n elements.
inline unsigned grid_for(int64_t n, int threads = 256) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1) : 65535 * 8);
}

}  // namespace megatron::backend::cuda
