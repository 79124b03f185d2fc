// The AdamW arithmetic shared by adamw_update (cuda_backend.cu) and adamw_update_segments
// (cuda_optimizer.cu): the CPU's expression order with every operation rounded on its own
// (explicit _rn intrinsics: nvcc would otherwise contract a*b + c into an FMA, which the CPU
// does not do), so both are bit-identical to the CPU backend.
#pragma once

#include <cmath>
#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/ops.h"

namespace megatron::backend::cuda {

struct AdamWScalars {
  float gu, gs, lr, b1, b2, omb1, omb2, bc1, bc2, eps, wd;
};

// Host side exactly as the CPU backend (apex): bias corrections in double, rounded once.
inline AdamWScalars adamw_scalars(const AdamWStep& s) {
  AdamWScalars a{};
  a.gu = s.grad_unscale;
  a.gs = s.grad_scale;
  a.lr = s.lr;
  a.b1 = s.beta1;
  a.b2 = s.beta2;
  a.omb1 = 1.0f - s.beta1;
  a.omb2 = 1.0f - s.beta2;
  a.bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.step)));
  a.bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.step)));
  a.eps = s.eps;
  a.wd = s.weight_decay;
  return a;
}

// Element i of a gradient of type G (float, __nv_bfloat16 or __half), widened exactly.
template <class G>
__device__ __forceinline__ float grad_at(const G* __restrict__ g, int64_t i) {
  if constexpr (std::is_same_v<G, float>) {
    return g[i];
  } else {
    return to_f32<G>(g[i]);
  }
}

// Element i: updates m[i] and v[i] and returns the new parameter (the caller stores it), with
// weight decay wd (the step's, or 0 for this parameter).
template <class G>
__device__ __forceinline__ float adamw_element(const float* __restrict__ p, const G* __restrict__ g,
                                               float* __restrict__ m, float* __restrict__ v, int64_t i,
                                               const AdamWScalars& a, float wd) {
  const float gi = __fmul_rn(__fmul_rn(grad_at(g, i), a.gu), a.gs);
  const float pi = p[i];
  const float mi = __fadd_rn(__fmul_rn(a.b1, m[i]), __fmul_rn(a.omb1, gi));
  const float vi = __fadd_rn(__fmul_rn(a.b2, v[i]), __fmul_rn(__fmul_rn(a.omb2, gi), gi));
  const float denom = __fadd_rn(__fsqrt_rn(__fdiv_rn(vi, a.bc2)), a.eps);
  const float update = __fadd_rn(__fdiv_rn(__fdiv_rn(mi, a.bc1), denom), __fmul_rn(wd, pi));
  m[i] = mi;
  v[i] = vi;
  return __fsub_rn(pi, __fmul_rn(a.lr, update));
}

}  // namespace megatron::backend::cuda
