#include "backend/cuda/piece_sum.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace megatron::backend {
namespace {

constexpr int kThreads = 256;

// Four elements per thread where rows and pointers allow 16-byte loads.
__global__ void sum_pieces_vec4(const float4* __restrict__ in, float4* __restrict__ out, int pieces, int64_t stride4,
                                int64_t n4, float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n4; i += int64_t{gridDim.x} * blockDim.x) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int q = 0; q < pieces; ++q) {
      const float4 v = in[q * stride4 + i];
      acc.x = __fadd_rn(acc.x, __fmul_rn(scale, v.x));
      acc.y = __fadd_rn(acc.y, __fmul_rn(scale, v.y));
      acc.z = __fadd_rn(acc.z, __fmul_rn(scale, v.z));
      acc.w = __fadd_rn(acc.w, __fmul_rn(scale, v.w));
    }
    out[i] = acc;
  }
}

__global__ void sum_pieces_scalar(const float* __restrict__ in, float* __restrict__ out, int pieces, int64_t stride,
                                  int64_t n, float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float acc = 0.f;
    for (int q = 0; q < pieces; ++q) acc = __fadd_rn(acc, __fmul_rn(scale, in[q * stride + i]));
    out[i] = acc;
  }
}

unsigned blocks_for(int64_t work) {
  // A few waves over a large GPU; the grid-stride loops take the rest.
  return static_cast<unsigned>(std::clamp<int64_t>((work + kThreads - 1) / kThreads, 1, 132 * 8));
}

}  // namespace

void sum_pieces_f32(const float* in, float* out, int64_t pieces, int64_t stride, int64_t n, float scale,
                    cudaStream_t stream) {
  MT_CHECK(pieces >= 1 && n >= 0 && n <= stride)
      << "sum_pieces_f32(pieces " << pieces << ", stride " << stride << ", n " << n << ")";
  if (n == 0) return;
  const bool aligned = reinterpret_cast<uintptr_t>(in) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (aligned && stride % 4 == 0 && n % 4 == 0) {
    sum_pieces_vec4<<<blocks_for(n / 4), kThreads, 0, stream>>>(reinterpret_cast<const float4*>(in),
                                                                reinterpret_cast<float4*>(out),
                                                                static_cast<int>(pieces), stride / 4, n / 4, scale);
  } else {
    sum_pieces_scalar<<<blocks_for(n), kThreads, 0, stream>>>(in, out, static_cast<int>(pieces), stride, n, scale);
  }
  MT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace megatron::backend
