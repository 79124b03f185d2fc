// CUDA backend: the multi-tensor AdamW step (adamw_update_segments) — one launch over the whole
// flat fp32 parameter buffer instead of one per parameter, writing the 16-bit model weights in
// the same pass (the separate fp32 -> bf16 copy would read the fp32 weights again).
//
// Grid: block k owns the element tile [k * kTile, (k + 1) * kTile) of the flat buffer; thread 0
// finds the first segment that ends inside or after the tile (binary search over the S rows of
// the device segment table), then the block walks the segments overlapping its tile. Each
// element's arithmetic is cuda_adamw.cuh's, shared with adamw_update: bit-identical to it and
// to the CPU.
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_adamw.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"

namespace megatron::backend {

using namespace cuda;

namespace {

constexpr int kThreads = 256;
constexpr int64_t kTile = 16 * 1024;  // elements per block: 64 per thread

// ModelT: void (no model copy), float, __nv_bfloat16 or __half.
template <typename ModelT>
__device__ __forceinline__ void store_model(ModelT* out, int64_t i, float v) {
  if constexpr (std::is_same_v<ModelT, float>) {
    out[i] = v;
  } else if constexpr (std::is_same_v<ModelT, __nv_bfloat16>) {
    out[i] = __float2bfloat16_rn(v);
  } else if constexpr (std::is_same_v<ModelT, __half>) {
    out[i] = __float2half_rn(v);
  }
}

// Elements [i, i + 4) of the model copy, rounded as store_model: one 8-byte (16-bit copies) or
// 16-byte (fp32) store when `vec` (the copy's base aligned to 4 of its elements, i a multiple
// of 4), else element by element.
template <typename ModelT>
__device__ __forceinline__ void store_model4(ModelT* out, int64_t i, const float* v, bool vec) {
  if constexpr (std::is_same_v<ModelT, float>) {
    if (vec) {
      *reinterpret_cast<float4*>(out + i) = make_float4(v[0], v[1], v[2], v[3]);
      return;
    }
  } else if constexpr (!std::is_same_v<ModelT, void>) {
    if (vec) {
      *reinterpret_cast<uint2*>(out + i) = make_uint2(pack2<ModelT>(v[0], v[1]), pack2<ModelT>(v[2], v[3]));
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) store_model(out, i + j, v[j]);
}

// G: the gradient's element type (fp32, or a 16-bit gradient buffer's).
template <typename ModelT, typename G>
__global__ void adamw_segments_kernel(float* __restrict__ p, const G* __restrict__ g, float* __restrict__ m,
                                      float* __restrict__ v, const int64_t* __restrict__ seg, int64_t num_segments,
                                      int64_t n, AdamWScalars a, ModelT* __restrict__ model, bool vectorized,
                                      bool model_vec) {
  __shared__ int64_t first;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t t1 = t0 + kTile < n ? t0 + kTile : n;
  if (threadIdx.x == 0) {
    // The first segment whose end is past t0 (segments are sorted and disjoint).
    int64_t lo = 0, hi = num_segments;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (seg[3 * mid] + seg[3 * mid + 1] <= t0) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    first = lo;
  }
  __syncthreads();
  for (int64_t k = first; k < num_segments && seg[3 * k] < t1; ++k) {
    const int64_t off = seg[3 * k], end = off + seg[3 * k + 1];
    const float wd = seg[3 * k + 2] != 0 ? a.wd : 0.0f;
    const int64_t lo = off > t0 ? off : t0, hi = end < t1 ? end : t1;
    auto one = [&](int64_t i) {
      const float pn = adamw_element(p, g, m, v, i, a, wd);
      p[i] = pn;
      if constexpr (!std::is_same_v<ModelT, void>) store_model(model, i, pn);
    };
    if (!vectorized) {
      for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) one(i);
      continue;
    }
    // 16-byte accesses over the 4-aligned middle [lo4, hi4) (the pointers are 16-byte aligned,
    // so element 4j starts a float4); the ragged ends one element at a time. The arithmetic per
    // element is the same adamw_element: vectorising changes only how memory is read.
    const int64_t lo4 = (lo + 3) & ~int64_t{3}, hi4 = hi & ~int64_t{3};
    if (lo4 >= hi4) {
      for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) one(i);
      continue;
    }
    if (threadIdx.x < lo4 - lo) one(lo + threadIdx.x);
    if (threadIdx.x < hi - hi4) one(hi4 + threadIdx.x);
    for (int64_t i = lo4 + 4 * static_cast<int64_t>(threadIdx.x); i < hi4; i += 4 * static_cast<int64_t>(blockDim.x)) {
      float4 pv = *reinterpret_cast<const float4*>(p + i);
      float ge[4];
      if constexpr (std::is_same_v<G, float>) {
        const float4 gv = *reinterpret_cast<const float4*>(g + i);
        ge[0] = gv.x, ge[1] = gv.y, ge[2] = gv.z, ge[3] = gv.w;
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) ge[j] = to_f32<G>(g[i + j]);  // widened exactly
      }
      float4 mv = *reinterpret_cast<const float4*>(m + i);
      float4 vv = *reinterpret_cast<const float4*>(v + i);
      float* pe = &pv.x;
      float* me = &mv.x;
      float* ve = &vv.x;
#pragma unroll
      for (int j = 0; j < 4; ++j) pe[j] = adamw_element(pe, static_cast<const float*>(ge), me, ve, j, a, wd);
      *reinterpret_cast<float4*>(p + i) = pv;
      *reinterpret_cast<float4*>(m + i) = mv;
      *reinterpret_cast<float4*>(v + i) = vv;
      if constexpr (!std::is_same_v<ModelT, void>) store_model4(model, i, pe, model_vec);
    }
  }
}

void check_f32_device(const Tensor& t, const char* what) {
  MT_CHECK(t.defined() && t.device() == Device::kCUDA && t.dtype() == DType::kF32)
      << "adamw_update_segments " << what << " " << (t.defined() ? t.describe() : "undefined")
      << " must be a CUDA fp32 tensor";
}

}  // namespace

void CudaBackend::adamw_update_segments(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                                        const Tensor& segments, const AdamWStep& s, Tensor& model_copy) {
  check_f32_device(param, "param");
  MT_CHECK(grad.defined() && grad.device() == Device::kCUDA && is_float(grad.dtype()))
      << "adamw_update_segments grad " << (grad.defined() ? grad.describe() : "undefined")
      << " must be a CUDA float tensor";
  check_f32_device(exp_avg, "exp_avg");
  check_f32_device(exp_avg_sq, "exp_avg_sq");
  MT_CHECK(segments.defined() && segments.device() == Device::kCUDA && segments.dtype() == DType::kI64 &&
           segments.ndim() == 2 && segments.dim(1) == 3)
      << "adamw_update_segments segments must be a CUDA int64 [S, 3] tensor";
  const int64_t n = param.numel();
  MT_CHECK(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n &&
           (!model_copy.defined() || model_copy.numel() == n))
      << "adamw_update_segments sizes";
  if (model_copy.defined()) {
    MT_CHECK(model_copy.device() == Device::kCUDA && is_float(model_copy.dtype()))
        << "adamw_update_segments model copy " << model_copy.describe();
  }
  MT_CHECK(s.step >= 1) << "adamw_update_segments step " << s.step;
  if (n == 0 || segments.dim(0) == 0) return;
  const AdamWScalars a = adamw_scalars(s);
  const int64_t blocks = (n + kTile - 1) / kTile;
  MT_CHECK(blocks <= 0x7FFFFFFF) << "adamw_update_segments: " << n << " elements";
  auto* p = static_cast<float*>(param.data());
  auto* m = static_cast<float*>(exp_avg.data());
  auto* v = static_cast<float*>(exp_avg_sq.data());
  const auto* seg = static_cast<const int64_t*>(segments.data());
  const int64_t S = segments.dim(0);
  const dim3 grid(static_cast<unsigned>(blocks));
  auto aligned16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  // A 16-bit gradient is read element by element on the vector path too (no alignment needed).
  const bool vec =
      aligned16(p) && (grad.dtype() != DType::kF32 || aligned16(grad.data())) && aligned16(m) && aligned16(v);
  // The distributed optimizer's shards start on any multiple of 4 elements: a 16-bit copy may
  // be only 8-byte aligned, and then still takes the 8-byte stores.
  const bool model_vec =
      model_copy.defined() &&
      reinterpret_cast<uintptr_t>(model_copy.data()) % static_cast<uintptr_t>(4 * dtype_size(model_copy.dtype())) == 0;
  dispatch_float_type(grad.dtype(), [&](auto tag) {
    using G = typename decltype(tag)::type;
    const auto* g = static_cast<const G*>(grad.data());
    if (!model_copy.defined()) {
      adamw_segments_kernel<void, G><<<grid, kThreads, 0, stream_>>>(p, g, m, v, seg, S, n, a, nullptr, vec, false);
    } else if (model_copy.dtype() == DType::kBF16) {
      adamw_segments_kernel<__nv_bfloat16, G><<<grid, kThreads, 0, stream_>>>(
          p, g, m, v, seg, S, n, a, static_cast<__nv_bfloat16*>(model_copy.data()), vec, model_vec);
    } else if (model_copy.dtype() == DType::kF16) {
      adamw_segments_kernel<__half, G><<<grid, kThreads, 0, stream_>>>(
          p, g, m, v, seg, S, n, a, static_cast<__half*>(model_copy.data()), vec, model_vec);
    } else {
      adamw_segments_kernel<float, G><<<grid, kThreads, 0, stream_>>>(
          p, g, m, v, seg, S, n, a, static_cast<float*>(model_copy.data()), vec, model_vec);
    }
  });
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace megatron::backend
