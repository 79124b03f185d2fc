// normal_math_on_device (normal_math_check.h): core/normal_math.h's device functions over the
// 24-bit domain, copied back to the host.
#include "backend/cuda/normal_math_check.h"

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "core/normal_math.h"

namespace megatron::backend {
namespace {

__global__ void normal_math_kernel(int64_t n, double* log_u1, double* cos_u2, double* normal) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double u1 = 1.0 - static_cast<double>(i) * (1.0 / 16777216.0);
    const double u2 = static_cast<double>(i) * (1.0 / 16777216.0);
    log_u1[i] = normal_math::log_positive(u1);
    cos_u2[i] = normal_math::cos_two_pi(u2);
    normal[i] = normal_math::box_muller(u1, u2);
  }
}

}  // namespace

NormalMathValues normal_math_on_device(int device, int64_t n) {
  MT_CHECK(n >= 0 && n <= (int64_t{1} << 24)) << "normal_math_on_device: n = " << n;
  MT_CUDA_CHECK(cudaSetDevice(device));
  NormalMathValues v;
  v.log_u1.resize(static_cast<size_t>(n));
  v.cos_u2.resize(static_cast<size_t>(n));
  v.normal.resize(static_cast<size_t>(n));
  if (n == 0) return v;
  double* d = nullptr;
  const size_t bytes = static_cast<size_t>(n) * sizeof(double);
  MT_CUDA_CHECK(cudaMalloc(&d, 3 * bytes));
  normal_math_kernel<<<1024, 256>>>(n, d, d + n, d + 2 * n);
  cudaError_t st = cudaGetLastError();
  if (st == cudaSuccess) st = cudaMemcpy(v.log_u1.data(), d, bytes, cudaMemcpyDeviceToHost);
  if (st == cudaSuccess) st = cudaMemcpy(v.cos_u2.data(), d + n, bytes, cudaMemcpyDeviceToHost);
  if (st == cudaSuccess) st = cudaMemcpy(v.normal.data(), d + 2 * n, bytes, cudaMemcpyDeviceToHost);
  cudaFree(d);
  MT_CUDA_CHECK(st);
  return v;
}

}  // namespace megatron::backend
