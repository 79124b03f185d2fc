// CUDA backend: softmax cross-entropy over logits[n, V], the same function as
// backend/cpu/cpu_loss.cpp (Megatron's vocab-parallel cross-entropy on one rank):
//   lse = m + log sum_v exp(l_v - m), loss = lse - l_label, dl_v = (exp(l_v - lse) - [v == label]) dloss.
// Forward: one block per row, one pass over the row. Each thread keeps an online (max, sum of
// exp(l - max)) pair over its strided elements, rescaling the sum when its max grows; the
// pairs are then merged in a fixed butterfly order, so the result is bit-identical run to
// run. All in fp32 (the CPU sums in double; the difference is a few fp32 ulps of lse).
// Backward: one block per row, elementwise; dlogits may alias logits (each element is read
// and then written by the same thread).
// Rows are read 4 elements at a time, one 16-byte (fp32) or 8-byte (16-bit) load when the
// rows are aligned to that (V % 4 == 0, e.g. the padded vocabulary 50304).
#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"

namespace megatron::backend {
namespace cuda {
namespace {

// ---- kernels --------------------------------------------------------------------------------

constexpr int kForwardThreads = 512;
constexpr int kBackwardThreads = 256;

// Pointer to element `offset` of p.
__device__ __forceinline__ const void* element_ptr(const void* p, DType dt, int64_t offset) {
  return static_cast<const char*>(p) + offset * (dt == DType::kF32 ? 4 : 2);
}
__device__ __forceinline__ void* element_ptr(void* p, DType dt, int64_t offset) {
  return static_cast<char*>(p) + offset * (dt == DType::kF32 ? 4 : 2);
}

// The online softmax state (max m, sum s of exp(l - m)) after adding value x.
__device__ __forceinline__ void online_add(float& m, float& s, float x) {
  if (x > m) {
    s = s * expf(m - x) + 1.0f;  // m = -inf at the start: s = 0 * 0 + 1
    m = x;
  } else if (m != -INFINITY) {  // else x is -inf too: exp(x - m) = 0
    s += expf(x - m);
  }
}

// Merges two states. Symmetric in its arguments (the same two products, added), so the
// butterfly below leaves the same bits in every lane.
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  if (mm == -INFINITY) return;  // both empty
  s = __fadd_rn(__fmul_rn(s, expf(m - mm)), __fmul_rn(s2, expf(m2 - mm)));  // no FMA: keeps the symmetry
  m = mm;
}

// One block per row: lse[row] and losses[row] = lse - logits[row, label]. A label outside
// [0, V) gives a NaN loss rather than an out-of-bounds read.
__global__ void cross_entropy_forward_kernel(const void* logits, DType ldt, const int32_t* labels, int64_t vocab,
                                             bool vec, float* losses, float* lse) {
  __shared__ float buf_m[32], buf_s[32];
  const int64_t row = blockIdx.x;
  const void* lrow = element_ptr(logits, ldt, row * vocab);
  float m = -INFINITY, s = 0.0f;
  for (int64_t i = 4 * static_cast<int64_t>(threadIdx.x); i < vocab; i += 4 * static_cast<int64_t>(blockDim.x)) {
    float v[4];
    load4(lrow, ldt, i, vocab, vec, v);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (i + k < vocab) online_add(m, s, v[k]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xFFFFFFFFu, m, o), s2 = __shfl_xor_sync(0xFFFFFFFFu, s, o);
    online_merge(m, s, m2, s2);
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) {
    buf_m[warp] = m;
    buf_s[warp] = s;
  }
  __syncthreads();
  if (warp != 0) return;
  const bool has = lane < static_cast<int>(blockDim.x >> 5);
  m = has ? buf_m[lane] : -INFINITY;
  s = has ? buf_s[lane] : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xFFFFFFFFu, m, o), s2 = __shfl_xor_sync(0xFFFFFFFFu, s, o);
    online_merge(m, s, m2, s2);
  }
  if (lane == 0) {
    const float row_lse = m + logf(s);
    const int32_t t = labels[row];
    lse[row] = row_lse;
    losses[row] = t >= 0 && t < vocab ? row_lse - load_f(lrow, ldt, t) : __int_as_float(0x7FC00000);
  }
}

// One block per row: dlogits[row, v] = (exp(logits[row, v] - lse[row]) - [v == label]) * dlosses[row].
__global__ void cross_entropy_backward_kernel(const void* logits, DType ldt, const int32_t* labels, const float* lse,
                                              const float* dlosses, void* dlogits, DType ddt, int64_t vocab,
                                              bool vec) {
  const int64_t row = blockIdx.x;
  const void* lrow = element_ptr(logits, ldt, row * vocab);
  void* drow = element_ptr(dlogits, ddt, row * vocab);
  const float row_lse = lse[row], g = dlosses[row];
  const int64_t t = labels[row];
  for (int64_t i = 4 * static_cast<int64_t>(threadIdx.x); i < vocab; i += 4 * static_cast<int64_t>(blockDim.x)) {
    float v[4];
    load4(lrow, ldt, i, vocab, vec, v);
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = (expf(v[k] - row_lse) - (i + k == t ? 1.0f : 0.0f)) * g;
    store4(drow, ddt, i, vocab, vec, v);
  }
}

// ---- host helpers -----------------------------------------------------------------------------

void check_device(const Tensor& t, const char* what) {
  MT_CHECK(t.defined()) << what << " is undefined";
  MT_CHECK(t.device() == Device::kCUDA) << what << " " << t.describe() << " is not a CUDA tensor";
}

// Rows n and vocabulary V of the logits; checks labels[n] (int32) and the fp32 per-row tensor.
std::pair<int64_t, int64_t> check_loss(const Tensor& logits, const Tensor& labels, const Tensor& per_row,
                                       const char* what) {
  check_device(logits, "cross_entropy logits");
  MT_CHECK(is_float(logits.dtype())) << "cross_entropy logits " << logits.describe() << " is not a float tensor";
  const int64_t vocab = logits.dim(-1);
  MT_CHECK(vocab > 0 && logits.numel() % vocab == 0) << "cross_entropy logits " << logits.describe();
  const int64_t n = logits.numel() / vocab;
  check_device(labels, "cross_entropy labels");
  MT_CHECK(labels.dtype() == DType::kI32) << "cross_entropy labels " << labels.describe() << " must be int32";
  MT_CHECK(labels.numel() == n) << "cross_entropy labels " << labels.describe() << " for " << n << " rows";
  check_device(per_row, what);
  MT_CHECK(per_row.dtype() == DType::kF32) << "cross_entropy " << what << " " << per_row.describe()
                                           << " must be fp32";
  MT_CHECK(per_row.numel() == n) << "cross_entropy " << what << " " << per_row.describe() << " for " << n << " rows";
  MT_CHECK(n <= std::numeric_limits<int32_t>::max()) << "cross_entropy: " << n << " rows exceed the grid";
  return {n, vocab};
}

// Every row of t starts on a 4-element boundary (so 4-element groups are aligned vectors).
bool rows_aligned(const Tensor& t, int64_t vocab) {
  return vocab % 4 == 0 &&
         reinterpret_cast<uintptr_t>(t.data()) % static_cast<uintptr_t>(4 * dtype_size(t.dtype())) == 0;
}

}  // namespace
}  // namespace cuda

// ---- launchers ------------------------------------------------------------------------------

void CudaBackend::cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& losses, Tensor& lse) {
  const auto [n, vocab] = cuda::check_loss(logits, labels, losses, "losses");
  cuda::check_device(lse, "cross_entropy lse");
  MT_CHECK(lse.dtype() == DType::kF32 && lse.numel() == n) << "cross_entropy lse " << lse.describe();
  if (n == 0) return;
  cuda::cross_entropy_forward_kernel<<<static_cast<unsigned>(n), cuda::kForwardThreads, 0, stream()>>>(
      logits.data(), logits.dtype(), static_cast<const int32_t*>(labels.data()), vocab,
      cuda::rows_aligned(logits, vocab), static_cast<float*>(losses.data()), static_cast<float*>(lse.data()));
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& lse,
                                         const Tensor& dlosses, Tensor& dlogits) {
  const auto [n, vocab] = cuda::check_loss(logits, labels, lse, "lse");
  cuda::check_device(dlosses, "cross_entropy dlosses");
  MT_CHECK(dlosses.dtype() == DType::kF32 && dlosses.numel() == n)
      << "cross_entropy dlosses " << dlosses.describe();
  cuda::check_device(dlogits, "cross_entropy dlogits");
  MT_CHECK(is_float(dlogits.dtype()) && dlogits.numel() == logits.numel())
      << "cross_entropy dlogits " << dlogits.describe() << " for logits " << logits.describe();
  if (dlogits.data() == logits.data()) {
    MT_CHECK(dlogits.dtype() == logits.dtype())
        << "cross_entropy: in-place dlogits " << dlogits.describe() << " must have the logits' dtype";
  }
  if (n == 0) return;
  const bool vec = cuda::rows_aligned(logits, vocab) && cuda::rows_aligned(dlogits, vocab);
  cuda::cross_entropy_backward_kernel<<<static_cast<unsigned>(n), cuda::kBackwardThreads, 0, stream()>>>(
      logits.data(), logits.dtype(), static_cast<const int32_t*>(labels.data()),
      static_cast<const float*>(lse.data()), static_cast<const float*>(dlosses.data()), dlogits.data(),
      dlogits.dtype(), vocab, vec);
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace megatron::backend
