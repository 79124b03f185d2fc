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
