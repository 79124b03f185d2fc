// Device helpers shared by the CUDA backend's .cu files: typed element access for the three
// float dtypes (runtime-dtype scalar access, and compile-time-typed 16-byte vectors for the
// memory-bound kernels), and Philox4x32-10 identical to core/rng.cpp (so dropout masks match
// the CPU backend bit for bit).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace megatron::backend::cuda {

// Element i of a float tensor of dtype dt, as fp32.
__device__ __forceinline__ float load_f(const void* p, DType dt, int64_t i) {
  switch (dt) {
    case DType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::kF16:
      return __half2float(static_cast<const __half*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

// Stores v into element i, rounded to nearest even for 16-bit dtypes.
__device__ __forceinline__ void store_f(void* p, DType dt, int64_t i, float v) {
  switch (dt) {
    case DType::kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      break;
    case DType::kF16:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
      break;
  }
}

// v rounded to dtype dt (nearest even) and back to fp32: what store_f then load_f give.
__device__ __forceinline__ float round_to(float v, DType dt) {
  switch (dt) {
    case DType::kBF16:
      return __bfloat162float(__float2bfloat16_rn(v));
    case DType::kF16:
      return __half2float(__float2half_rn(v));
    default:
      return v;
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
  const uint4 out = philox4x32_10(make_uint4(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                             static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)),
                                  make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)));
  const uint32_t word = (index & 3) == 0 ? out.x : (index & 3) == 1 ? out.y : (index & 3) == 2 ? out.z : out.w;
  return static_cast<float>(word >> 8) * (1.0f / 16777216.0f);
}

// The dropout multiplier of element `index`: 0, or 1/(1-p) when kept (p == 0: always 1).
__device__ __forceinline__ float dropout_multiplier(uint64_t seed, uint64_t stream, uint64_t index, float p) {
  if (p == 0.0f) return 1.0f;
  return philox_uniform(seed, stream, index) >= p ? 1.0f / (1.0f - p) : 0.0f;
}

// Dropout multipliers of the elements with global indices [g, g + 4) (g = DropoutParams
// offset + the local index): word g % 4 of Philox block g / 4 (core/rng.h philox_uniform),
// kept iff uniform >= p. g a multiple of 4 (offset 0, or any sequence-parallel shard of a
// tensor whose rows hold a multiple of 4 elements): one block; else two.
__device__ __forceinline__ uint4 dropout_block(uint64_t seed, uint64_t stream, uint64_t block) {
  return philox4x32_10(make_uint4(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                  static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)),
                       make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)));
}
__device__ __forceinline__ void dropout4(uint64_t seed, uint64_t stream, uint64_t g, float p, float (&m)[4]) {
  if (p == 0.0f) {
#pragma unroll
    for (int k = 0; k < 4; ++k) m[k] = 1.0f;
    return;
  }
  const uint4 w = dropout_block(seed, stream, g >> 2);
  const uint32_t first = static_cast<uint32_t>(g & 3);
  const uint4 w2 = first != 0 ? dropout_block(seed, stream, (g >> 2) + 1) : make_uint4(0u, 0u, 0u, 0u);
  // Word j of the 8 (w, then w2), by selects: an array indexed with `first` would live in local
  // memory (ptxas: a 32-byte stack frame in every dropout kernel).
  auto word = [&](uint32_t j) {
    return j == 0   ? w.x
           : j == 1 ? w.y
           : j == 2 ? w.z
           : j == 3 ? w.w
           : j == 4 ? w2.x
           : j == 5 ? w2.y
           : j == 6 ? w2.z
                    : w2.w;
  };
  const float scale = 1.0f / (1.0f - p);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    m[k] = static_cast<float>(word(first + k) >> 8) * (1.0f / 16777216.0f) >= p ? scale : 0.0f;
  }
}
// dropout4 for g a multiple of 4 (one block, no indexing into a local array), p > 0.
__device__ __forceinline__ void dropout4_aligned(uint64_t seed, uint64_t stream, uint64_t g, float p, float (&m)[4]) {
  const uint4 w = dropout_block(seed, stream, g >> 2);
  const float scale = 1.0f / (1.0f - p);
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) m[k] = static_cast<float>(words[k] >> 8) * (1.0f / 16777216.0f) >= p ? scale : 0.0f;
}

// Megatron's bias_gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and the erf form.
constexpr float kSqrt2OverPi = 0.7978845608f;
constexpr float kGeluCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

template <bool kTanh>
__device__ __forceinline__ float gelu(float x) {
  if (kTanh) return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
  return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
}

// d gelu / dx, exact for each form (see cpu_util.h).
template <bool kTanh>
__device__ __forceinline__ float gelu_grad(float x) {
  if (kTanh) {
    const float t = tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  }
  return 0.5f * (1.0f + erff(x * kInvSqrt2)) + x * expf(-0.5f * x * x) * kInvSqrt2Pi;
}

// ---- compile-time-typed access: one dtype dispatch per launch, 16-byte vectors ---------------
// T is float, __nv_bfloat16 or __half; arithmetic is fp32, stores round to nearest even (the
// same conversions as load_f/store_f).

// Bytes of the backend's persistent reduction scratch (CudaBackend::scratch(); allocated once
// in cuda_backend.cu): kernels whose intermediates fit use it instead of a stream allocation.
constexpr size_t kBackendScratchBytes = size_t{8} << 20;

template <class T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with T the device type of float dtype d.
template <class F>
void dispatch_float_type(DType d, F&& f) {
  switch (d) {
    case DType::kF32:
      f(TypeTag<float>{});
      return;
    case DType::kBF16:
      f(TypeTag<__nv_bfloat16>{});
      return;
    case DType::kF16:
      f(TypeTag<__half>{});
      return;
    default:
      MT_CHECK(false) << "not a float dtype: " << dtype_name(d);
  }
}

// Elements in one 16-byte vector: 4 fp32, 8 bf16/fp16.
template <class T>
constexpr int kVecWidth = static_cast<int>(16 / sizeof(T));

template <class T>
__device__ __forceinline__ float to_f32(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return __half2float(v);
  }
}

template <class T>
__device__ __forceinline__ T from_f32(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return __float2half_rn(v);
  }
}

// The two 16-bit values packed in a 32-bit word (low half first) as fp32, and back (RNE).
template <class T>
__device__ __forceinline__ void unpack2(uint32_t w, float& lo, float& hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xFFFF0000u);
  } else {
    lo = __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xFFFFu)));
    hi = __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
  }
}
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
           (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
  } else {
    return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(lo))) |
           (static_cast<uint32_t>(__half_as_ushort(__float2half_rn(hi))) << 16);
  }
}

// The kVecWidth<T> elements of a raw 16-byte vector (T's bits, element 0 in the low bits of
// q.x) as fp32. Kernels that keep a row in registers keep it raw: half the registers for
// 16-bit types, converted again where it is used.
template <class T>
__device__ __forceinline__ void unpack_vec(const uint4& q, float (&v)[kVecWidth<T>]) {
  if constexpr (std::is_same_v<T, float>) {
    v[0] = __uint_as_float(q.x);
    v[1] = __uint_as_float(q.y);
    v[2] = __uint_as_float(q.z);
    v[3] = __uint_as_float(q.w);
  } else {
    unpack2<T>(q.x, v[0], v[1]);
    unpack2<T>(q.y, v[2], v[3]);
    unpack2<T>(q.z, v[4], v[5]);
    unpack2<T>(q.w, v[6], v[7]);
  }
}

// One 16-byte load of kVecWidth<T> elements at p (16-byte aligned) as fp32.
template <class T>
__device__ __forceinline__ void load_vec(const T* p, float (&v)[kVecWidth<T>]) {
  unpack_vec<T>(*reinterpret_cast<const uint4*>(p), v);
}

// Elements [i, i + kVecWidth<T>) of p as a raw vector: one 16-byte load when kVec (p + i
// aligned, i + width <= n), else element by element, those at or past n as zero bits.
template <class T, bool kVec>
__device__ __forceinline__ uint4 load_raw(const T* p, int64_t i, int64_t n) {
  if constexpr (kVec) {
    return *reinterpret_cast<const uint4*>(p + i);
  } else {
    uint32_t w[4];
    if constexpr (std::is_same_v<T, float>) {
      const uint32_t* u = reinterpret_cast<const uint32_t*>(p);
#pragma unroll
      for (int e = 0; e < 4; ++e) w[e] = i + e < n ? u[i + e] : 0u;
    } else {
      const uint16_t* u = reinterpret_cast<const uint16_t*>(p);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint32_t lo = i + 2 * e < n ? u[i + 2 * e] : 0u;
        const uint32_t hi = i + 2 * e + 1 < n ? u[i + 2 * e + 1] : 0u;
        w[e] = lo | (hi << 16);
      }
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// One 16-byte store of kVecWidth<T> elements at p (16-byte aligned), rounded to T.
template <class T>
__device__ __forceinline__ void store_vec(T* p, const float (&v)[kVecWidth<T>]) {
  uint4 q;
  if constexpr (std::is_same_v<T, float>) {
    q = make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
  } else {
    q = make_uint4(pack2<T>(v[0], v[1]), pack2<T>(v[2], v[3]), pack2<T>(v[4], v[5]), pack2<T>(v[6], v[7]));
  }
  *reinterpret_cast<uint4*>(p) = q;
}

// Elements [i, i + kVecWidth<T>) of p as fp32: one vector load when kVec (the caller guarantees
// alignment and i + width <= n), else element by element, those at or past n read as 0.
template <class T, bool kVec>
__device__ __forceinline__ void load_chunk(const T* p, int64_t i, int64_t n, float (&v)[kVecWidth<T>]) {
  if constexpr (kVec) {
    load_vec<T>(p + i, v);
  } else {
#pragma unroll
    for (int e = 0; e < kVecWidth<T>; ++e) v[e] = i + e < n ? to_f32<T>(p[i + e]) : 0.0f;
  }
}

// Stores elements [i, min(i + kVecWidth<T>, n)) of p, rounded to T (see load_chunk).
template <class T, bool kVec>
__device__ __forceinline__ void store_chunk(T* p, int64_t i, int64_t n, const float (&v)[kVecWidth<T>]) {
  if constexpr (kVec) {
    store_vec<T>(p + i, v);
  } else {
#pragma unroll
    for (int e = 0; e < kVecWidth<T>; ++e)
      if (i + e < n) p[i + e] = from_f32<T>(v[e]);
  }
}

// True when p is aligned to a 16-byte vector.
inline bool vec_aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Grid size for a grid-stride loop over n elements.
inline unsigned grid_for(int64_t n, int threads = 256) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1) : 65535 * 8);
}

}  // namespace megatron::backend::cuda
