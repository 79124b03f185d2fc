// CUDA backend: FP8 quantization (Backend::fp8_quantize). Two kernels: the tensor's max |x|
// (a max is order-independent, so the unsigned atomicMax of non-negative floats' bits is
// deterministic), then one tiled pass that casts with the hardware's saturating conversion
// (cvt.rn.satfinite, __nv_cvt_float_to_fp8) and writes the row-major and/or transposed codes
// (TE's cast_transpose), block (0, 0) also writing scale, scale_inv and the recorded amax.
// The FP8 GEMM is in cuda_gemm.cu.
#include <cuda_fp8.h>

#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "core/fp8.h"

namespace megatron::backend {

using namespace cuda;

namespace {

constexpr int kAmaxThreads = 256;
constexpr int kTile = 32;     // the cast's tile: kTile x kTile elements
constexpr int kTileRows = 8;  // threads per block: kTile x kTileRows

__global__ void fp8_amax_kernel(const void* x, DType xd, int64_t n, unsigned* out) {
  float a = 0.0f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    a = fmaxf(a, fabsf(load_f(x, xd, i)));  // fmaxf skips NaN
  }
  for (int off = 16; off > 0; off /= 2) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, off));
  __shared__ float warp_max[kAmaxThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = a;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kAmaxThreads / 32; ++w) a = fmaxf(a, warp_max[w]);
    atomicMax(out, __float_as_uint(a));  // non-negative floats order as their bits
  }
}

__device__ __forceinline__ uint8_t to_fp8(float v, Fp8Format f) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, f == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2));
}

__global__ void fp8_cast_kernel(const void* x, DType xd, int64_t rows, int64_t cols, uint8_t* q, uint8_t* qt,
                                const unsigned* amax_bits, float* scale, float* scale_inv, float* amax_slot,
                                bool current, Fp8Format f) {
  __shared__ uint8_t tile[kTile][kTile + 1];
  const float a = __uint_as_float(*amax_bits);
  const float sc = current ? fp8_current_scale(a, fp8_max(f)) : *scale;
  const int64_t r0 = int64_t{blockIdx.y} * kTile, c0 = int64_t{blockIdx.x} * kTile;
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) {
      const uint8_t code = to_fp8(__fmul_rn(load_f(x, xd, r * cols + c), sc), f);
      if (q) q[r * cols + c] = code;
      tile[i][threadIdx.x] = code;
    }
  }
  if (qt) {
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
      const int64_t c = c0 + i, r = r0 + threadIdx.x;
      if (c < cols && r < rows) qt[c * rows + r] = tile[threadIdx.x][i];
    }
  }
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
    // Only written when current, and then no block reads it: no race with the reads above.
    if (current) *scale = sc;
    *scale_inv = __fdiv_rn(1.0f, sc);
    if (amax_slot) *amax_slot = fmaxf(*amax_slot, a);
  }
}

float* scalar_ptr(const Tensor& t, const char* what) {
  MT_CHECK(t.defined() && t.device() == Device::kCUDA && t.dtype() == DType::kF32 && t.numel() == 1)
      << what << " must be an fp32 [1] CUDA tensor, not " << (t.defined() ? t.describe() : "undefined");
  return static_cast<float*>(t.data());
}

}  // namespace

void CudaBackend::fp8_quantize(const Tensor& x, Tensor& q, Tensor& qt, const Fp8Quantization& s) {
  MT_CHECK(x.defined() && x.device() == Device::kCUDA && is_float(x.dtype()) && x.ndim() >= 1)
      << "fp8_quantize input " << (x.defined() ? x.describe() : "undefined");
  MT_CHECK(q.defined() || qt.defined()) << "fp8_quantize without an output";
  const int64_t n = x.numel(), cols = n == 0 ? 0 : x.dim(-1), rows = cols == 0 ? 0 : n / cols;
  const DType qd = s.format == Fp8Format::kE4M3 ? DType::kF8E4M3 : DType::kF8E5M2;
  for (const Tensor* t : {&q, &qt}) {
    if (!t->defined()) continue;
    MT_CHECK(t->device() == Device::kCUDA && t->dtype() == qd && t->numel() == n)
        << "fp8_quantize output " << t->describe() << " for " << x.describe() << " as " << dtype_name(qd);
  }
  MT_CHECK(!qt.defined() || (qt.ndim() >= 1 && (n == 0 || qt.dim(-1) == rows)))
      << "fp8_quantize transposed output " << qt.describe() << " for " << x.describe();
  float* scale = scalar_ptr(s.scale, "fp8_quantize scale");
  float* scale_inv = scalar_ptr(s.scale_inv, "fp8_quantize scale_inv");
  float* amax_slot = s.amax.defined() ? scalar_ptr(s.amax, "fp8_quantize amax") : nullptr;
  auto* amax_bits = static_cast<unsigned*>(scratch());
  MT_CUDA_CHECK(cudaMemsetAsync(amax_bits, 0, sizeof(unsigned), stream()));
  if (n > 0) {
    fp8_amax_kernel<<<grid_for(n, kAmaxThreads), kAmaxThreads, 0, stream()>>>(x.data(), x.dtype(), n, amax_bits);
    MT_CUDA_LAUNCH_CHECK();
  }
  const dim3 grid(static_cast<unsigned>(std::max<int64_t>(1, (cols + kTile - 1) / kTile)),
                  static_cast<unsigned>(std::max<int64_t>(1, (rows + kTile - 1) / kTile)));
  MT_CHECK(grid.y <= 65535u) << "fp8_quantize of " << rows << " rows";
  fp8_cast_kernel<<<grid, dim3(kTile, kTileRows), 0, stream()>>>(
      x.data(), x.dtype(), rows, cols, q.defined() ? static_cast<uint8_t*>(q.data()) : nullptr,
      qt.defined() ? static_cast<uint8_t*>(qt.data()) : nullptr, amax_bits, scale, scale_inv, amax_slot, s.current,
      s.format);
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace megatron::backend
