// CUDA backend: softmax cross-entropy over logits[n, V], the same function as
// backend/cpu/cpu_loss.cpp (Megatron's vocab-parallel cross-entropy on one rank):
//   lse = m + log sum_v exp(l_v - m), loss = lse - l_label, dl_v = (exp(l_v - lse) - [v == label]) dloss.
// Forward: one block of 512 threads per row, one pass over the row, templated on the logits'
// dtype. The row is read in 16-byte chunks (8 bf16/fp16 or 4 fp32 elements; one vector load
// when the rows are 16-byte aligned, V % 8 or 4 == 0, e.g. the padded vocabulary 50304; else
// element by element, same order); thread t takes chunks t, t + 512, ... in order. Each
// thread keeps an online (max, sum of exp(l - max)) pair: per chunk, the chunk's max, one
// rescale of the sum when the max grows, then the chunk's exp(l - max) in element order; the
// pairs are then merged in a fixed butterfly order (warps, then the warps' results), so the
// result is bit-identical run to run. All in fp32 (the CPU sums in double; the difference is
// a few fp32 ulps of lse).
// Backward: one block of 256 threads per row, elementwise, the same chunks (dlogits of the
// logits' dtype; another dtype takes a generic 4-element kernel); dlogits may alias logits
// (each element is read and then written by the same thread).
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

// Merges two states. Symmetric in its arguments (the same two products, added), so the
// butterfly below leaves the same bits in every lane.
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  if (mm == -INFINITY) return;  // both empty
  s = __fadd_rn(__fmul_rn(s, expf(m - mm)), __fmul_rn(s2, expf(m2 - mm)));  // no FMA: keeps the symmetry
  m = mm;
}

// The generic backward (dlogits of another dtype than the logits): one block per row,
// dlogits[row, v] = (exp(logits[row, v] - lse[row]) - [v == label]) * dlosses[row].
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

// ---- typed fast path ---------------------------------------------------------------------------
// Logits (and dlogits) of one dtype T, templated: a row is read in chunks of W = 16 bytes (8
// bf16/fp16 or 4 fp32 elements), thread t taking chunks t, t + blockDim, ... in that order,
// two chunks loaded before either is used. kVec: every row starts on a 16-byte boundary (an
// aligned base and V % W == 0, e.g. the padded vocabulary 50304), so a chunk is one 16-byte
// access; else the same chunks element by element (the same order, so the same bits).

// Adds chunk v (elements past `valid` ignored) to the online state (m, s): the chunk's max
// first, one rescale of s when it grows, then exp(l - m) of each element in order.
template <int W>
__device__ __forceinline__ void online_add_chunk(float& m, float& s, const float (&v)[W], int valid) {
  float cm = -INFINITY;
#pragma unroll
  for (int e = 0; e < W; ++e)
    if (e < valid) cm = fmaxf(cm, v[e]);
  if (cm > m) {
    s = s * expf(m - cm);  // m = -inf at the start: s = 0 * 0
    m = cm;
  }
  if (m == -INFINITY) return;  // every element so far is -inf: exp(l - m) = 0
#pragma unroll
  for (int e = 0; e < W; ++e)
    if (e < valid) s += expf(v[e] - m);
}

// The butterfly of the generic kernel: the per-thread states merged in a fixed order; lane 0
// of warp 0 gets the row's (m, s).
__device__ __forceinline__ void block_merge(float& m, float& s, float* buf_m, float* buf_s, bool& is_first) {
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
  is_first = false;
  if (warp != 0) return;
  const bool has = lane < static_cast<int>(blockDim.x >> 5);
  m = has ? buf_m[lane] : -INFINITY;
  s = has ? buf_s[lane] : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xFFFFFFFFu, m, o), s2 = __shfl_xor_sync(0xFFFFFFFFu, s, o);
    online_merge(m, s, m2, s2);
  }
  is_first = lane == 0;
}

// Elements of chunk c inside the row (W, or fewer in the last chunk).
template <int W>
__device__ __forceinline__ int chunk_valid(int64_t c, int64_t vocab) {
  const int64_t left = vocab - c * W;
  return left < W ? static_cast<int>(left) : W;
}

template <class T, bool kVec>
__global__ void __launch_bounds__(kForwardThreads)
    cross_entropy_forward_typed_kernel(const T* logits, const int32_t* labels, int64_t vocab, float* losses,
                                       float* lse) {
  constexpr int W = kVecWidth<T>;
  __shared__ float buf_m[32], buf_s[32];
  const int64_t row = blockIdx.x;
  const T* lrow = logits + row * vocab;
  const int64_t chunks = (vocab + W - 1) / W;
  const int64_t step = blockDim.x;
  float m = -INFINITY, s = 0.0f;
  int64_t c = threadIdx.x;
  for (; c + step < chunks; c += 2 * step) {
    float a[W], b[W];
    load_chunk<T, kVec>(lrow, c * W, vocab, a);
    load_chunk<T, kVec>(lrow, (c + step) * W, vocab, b);
    online_add_chunk<W>(m, s, a, chunk_valid<W>(c, vocab));
    online_add_chunk<W>(m, s, b, chunk_valid<W>(c + step, vocab));
  }
  if (c < chunks) {
    float a[W];
    load_chunk<T, kVec>(lrow, c * W, vocab, a);
    online_add_chunk<W>(m, s, a, chunk_valid<W>(c, vocab));
  }
  bool first = false;
  block_merge(m, s, buf_m, buf_s, first);
  if (first) {
    const float row_lse = m + logf(s);
    const int32_t t = labels[row];
    lse[row] = row_lse;
    losses[row] = t >= 0 && t < vocab ? row_lse - to_f32<T>(lrow[t]) : __int_as_float(0x7FC00000);
  }
}

// dlogits[row, v] = (exp(logits[row, v] - lse[row]) - [v == label]) * dlosses[row]; each thread
// reads a chunk and then writes the same chunk, so dlogits may alias logits.
template <class T, bool kVec>
__global__ void __launch_bounds__(kBackwardThreads)
    cross_entropy_backward_typed_kernel(const T* logits, const int32_t* labels, const float* lse,
                                        const float* dlosses, T* dlogits, int64_t vocab) {
  constexpr int W = kVecWidth<T>;
  const int64_t row = blockIdx.x;
  const T* lrow = logits + row * vocab;
  T* drow = dlogits + row * vocab;
  const float row_lse = lse[row], g = dlosses[row];
  const int64_t t = labels[row];
  const int64_t chunks = (vocab + W - 1) / W;
  const int64_t step = blockDim.x;
  int64_t c = threadIdx.x;
  for (; c + step < chunks; c += 2 * step) {
    float a[W], b[W];
    load_chunk<T, kVec>(lrow, c * W, vocab, a);
    load_chunk<T, kVec>(lrow, (c + step) * W, vocab, b);
#pragma unroll
    for (int e = 0; e < W; ++e) {
      a[e] = (expf(a[e] - row_lse) - (c * W + e == t ? 1.0f : 0.0f)) * g;
      b[e] = (expf(b[e] - row_lse) - ((c + step) * W + e == t ? 1.0f : 0.0f)) * g;
    }
    store_chunk<T, kVec>(drow, c * W, vocab, a);
    store_chunk<T, kVec>(drow, (c + step) * W, vocab, b);
  }
  if (c < chunks) {
    float a[W];
    load_chunk<T, kVec>(lrow, c * W, vocab, a);
#pragma unroll
    for (int e = 0; e < W; ++e) a[e] = (expf(a[e] - row_lse) - (c * W + e == t ? 1.0f : 0.0f)) * g;
    store_chunk<T, kVec>(drow, c * W, vocab, a);
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

// Every row of t starts on a 16-byte boundary (the typed kernels' vectors).
bool rows_vec_aligned(const Tensor& t, int64_t vocab) {
  return vocab % (16 / dtype_size(t.dtype())) == 0 && vec_aligned(t.data());
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
  const auto [rows, cols] = cuda::check_loss(logits, labels, losses, "losses");
  const int64_t n = rows, vocab = cols;  // (lambdas capture no structured bindings in C++17)
  cuda::check_device(lse, "cross_entropy lse");
  MT_CHECK(lse.dtype() == DType::kF32 && lse.numel() == n) << "cross_entropy lse " << lse.describe();
  if (n == 0) return;
  cuda::dispatch_float_type(logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto kernel = cuda::rows_vec_aligned(logits, vocab) ? cuda::cross_entropy_forward_typed_kernel<T, true>
                                                        : cuda::cross_entropy_forward_typed_kernel<T, false>;
    kernel<<<static_cast<unsigned>(n), cuda::kForwardThreads, 0, stream()>>>(
        static_cast<const T*>(logits.data()), static_cast<const int32_t*>(labels.data()), vocab,
        static_cast<float*>(losses.data()), static_cast<float*>(lse.data()));
  });
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& lse,
                                         const Tensor& dlosses, Tensor& dlogits) {
  const auto [rows, cols] = cuda::check_loss(logits, labels, lse, "lse");
  const int64_t n = rows, vocab = cols;
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
  if (dlogits.dtype() == logits.dtype()) {
    cuda::dispatch_float_type(logits.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const bool vec = cuda::rows_vec_aligned(logits, vocab) && cuda::rows_vec_aligned(dlogits, vocab);
      auto kernel = vec ? cuda::cross_entropy_backward_typed_kernel<T, true>
                        : cuda::cross_entropy_backward_typed_kernel<T, false>;
      kernel<<<static_cast<unsigned>(n), cuda::kBackwardThreads, 0, stream()>>>(
          static_cast<const T*>(logits.data()), static_cast<const int32_t*>(labels.data()),
          static_cast<const float*>(lse.data()), static_cast<const float*>(dlosses.data()),
          static_cast<T*>(dlogits.data()), vocab);
    });
    MT_CUDA_LAUNCH_CHECK();
    return;
  }
  const bool vec = cuda::rows_aligned(logits, vocab) && cuda::rows_aligned(dlogits, vocab);
  cuda::cross_entropy_backward_kernel<<<static_cast<unsigned>(n), cuda::kBackwardThreads, 0, stream()>>>(
      logits.data(), logits.dtype(), static_cast<const int32_t*>(labels.data()),
      static_cast<const float*>(lse.data()), static_cast<const float*>(dlosses.data()), dlogits.data(),
      dlogits.dtype(), vocab, vec);
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace megatron::backend
