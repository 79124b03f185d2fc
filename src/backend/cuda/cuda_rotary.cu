// CUDA backend: rotary position embeddings in place on the q and k columns of the fused qkv
// buffer (ops.h RotaryParams, qkv_layout.h), in one pass over them.
//
// One block per qkv row (position si, batch bi): its threads first compute the row's angles
// a_i = (p * position_scale) * inv_freq[i] and sincosf (the accurate one: no fast math) into
// shared memory, once for all of the row's G * (heads/G + 1) rotated vectors; then each thread
// takes (vector, chunk) pairs: W consecutive pairs (x1[i..i+W), x2[i..i+W)) of one vector by two
// 16-byte loads and stores (W = 8 for bf16/fp16, 4 for fp32) when half = rot_dim / 2 and
// head_dim are multiples of W and the buffer is 16-byte aligned, else one pair at a time.
// Forward (x1 c - x2 s, x2 c + x1 s); backward the same with s negated (the inverse rotation).
// fp32 arithmetic, one rounding to the tensor's dtype. The CPU reference (cpu_rotary.cpp) uses
// glibc's cosf/sinf: the two agree to an ulp or so of the angle's cos/sin.
// Memory traffic: the q and k columns read and written once ((heads + G) * rot_dim elements
// per row); v and the unrotated dims are never touched.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/qkv_layout.h"

namespace megatron::backend {

using namespace cuda;

namespace {

constexpr int kRotaryThreads = 128;
constexpr int kMaxHalf = 256;  // rot_dim <= 512

struct RotaryArgs {
  const float* inv_freq = nullptr;     // [half]
  const int32_t* positions = nullptr;  // [b, s] or null
  int64_t s = 0, b = 0;
  int64_t width = 0, group_width = 0;  // qkv row and group widths (columns)
  int vectors_per_group = 0;           // heads / G + 1 (queries, then the key)
  int groups = 0, head_dim = 0, half = 0;
  int64_t position_offset = 0;
  float position_scale = 1.0f;
  float sign = 1.0f;  // +1 forward, -1 backward
};

// W = pairs per step (kVec: one 16-byte vector of x1 and one of x2).
template <class T, bool kVec>
__global__ void __launch_bounds__(kRotaryThreads) rotary_kernel(T* x, const RotaryArgs a) {
  __shared__ float cs[2][kMaxHalf];
  const int64_t row = blockIdx.x;  // si * b + bi
  const int64_t si = row / a.b, bi = row % a.b;
  const int64_t position = a.positions != nullptr ? a.positions[bi * a.s + si] : si + a.position_offset;
  const float scaled = static_cast<float>(position) * a.position_scale;
  for (int i = threadIdx.x; i < a.half; i += blockDim.x) {
    float sn, c;
    sincosf(scaled * a.inv_freq[i], &sn, &c);
    cs[0][i] = c;
    cs[1][i] = a.sign * sn;
  }
  __syncthreads();

  constexpr int W = kVec ? kVecWidth<T> : 1;
  const int chunks = a.half / W;
  const int work = a.groups * a.vectors_per_group * chunks;
  T* xrow = x + row * a.width;
  for (int idx = threadIdx.x; idx < work; idx += blockDim.x) {
    const int vec = idx / chunks, i0 = (idx % chunks) * W;
    const int g = vec / a.vectors_per_group, slot = vec % a.vectors_per_group;
    T* v = xrow + g * a.group_width + static_cast<int64_t>(slot) * a.head_dim;
    if constexpr (kVec) {
      float x1[W], x2[W], y1[W], y2[W];
      load_vec<T>(v + i0, x1);
      load_vec<T>(v + a.half + i0, x2);
#pragma unroll
      for (int e = 0; e < W; ++e) {
        const float c = cs[0][i0 + e], sn = cs[1][i0 + e];
        y1[e] = x1[e] * c - x2[e] * sn;
        y2[e] = x2[e] * c + x1[e] * sn;
      }
      store_vec<T>(v + i0, y1);
      store_vec<T>(v + a.half + i0, y2);
    } else {
      const float x1 = to_f32<T>(v[i0]), x2 = to_f32<T>(v[a.half + i0]);
      const float c = cs[0][i0], sn = cs[1][i0];
      v[i0] = from_f32<T>(x1 * c - x2 * sn);
      v[a.half + i0] = from_f32<T>(x2 * c + x1 * sn);
    }
  }
}

void run_rotary(Tensor& x, const RotaryParams& p, float sign, const char* what, cudaStream_t stream) {
  const QkvLayout L(p.heads, p.groups(), p.head_dim);
  const int64_t r = p.rot_dim;
  MT_CHECK(r > 0 && r % 2 == 0 && r <= p.head_dim && r / 2 <= kMaxHalf)
      << what << " rot_dim " << r << " of head_dim " << p.head_dim << " (even, <= head_dim, <= " << 2 * kMaxHalf << ")";
  MT_CHECK(x.defined() && x.device() == Device::kCUDA && is_float(x.dtype()) && x.ndim() == 3 && x.dim(2) == L.width())
      << what << " " << x.describe() << " for " << p.heads << " heads in " << L.groups << " groups of " << p.head_dim
      << " (a CUDA float tensor)";
  MT_CHECK(p.inv_freq.defined() && p.inv_freq.device() == Device::kCUDA && p.inv_freq.dtype() == DType::kF32 &&
           p.inv_freq.numel() == r / 2)
      << "rotary inv_freq " << p.inv_freq.describe() << ": a CUDA fp32 [" << r / 2 << "] expected";
  const int64_t s = x.dim(0), b = x.dim(1);
  RotaryArgs a;
  if (p.positions.defined()) {
    // Their values are the caller's (ops.h): checking them would wait for the device.
    MT_CHECK(p.positions.device() == Device::kCUDA && p.positions.dtype() == DType::kI32 && p.positions.ndim() == 2 &&
             p.positions.dim(0) == b && p.positions.dim(1) == s)
        << "rotary positions " << p.positions.describe() << ", expected a CUDA int32 [" << b << ", " << s << "]";
    a.positions = static_cast<const int32_t*>(p.positions.data());
  }
  if (s * b == 0) return;
  MT_CHECK(s * b <= int64_t{0x7fffffff}) << what << " rows " << s * b;
  a.inv_freq = static_cast<const float*>(p.inv_freq.data());
  a.s = s;
  a.b = b;
  a.width = L.width();
  a.group_width = L.group_width();
  a.vectors_per_group = static_cast<int>(L.per_group() + 1);
  a.groups = static_cast<int>(L.groups);
  a.head_dim = static_cast<int>(p.head_dim);
  a.half = static_cast<int>(r / 2);
  a.position_offset = p.position_offset;
  a.position_scale = p.position_scale;
  a.sign = sign;
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int W = kVecWidth<T>;
    T* data = static_cast<T*>(x.data());
    const dim3 grid(static_cast<unsigned>(s * b));
    if (a.half % W == 0 && a.head_dim % W == 0 && vec_aligned(data)) {
      rotary_kernel<T, true><<<grid, kRotaryThreads, 0, stream>>>(data, a);
    } else {
      rotary_kernel<T, false><<<grid, kRotaryThreads, 0, stream>>>(data, a);
    }
  });
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void CudaBackend::rotary_forward(Tensor& qkv, const RotaryParams& params) {
  run_rotary(qkv, params, 1.0f, "rotary qkv", stream());
}

void CudaBackend::rotary_backward(Tensor& dqkv, const RotaryParams& params) {
  run_rotary(dqkv, params, -1.0f, "rotary dqkv", stream());
}

}  // namespace megatron::backend
