// CUDA backend: softmax cross-entropy over logits[n, V], the same function as
// backend/cpu/cpu_loss.cpp (Megatron's vocab-parallel cross-entropy on one rank):
//   lse = m + log sum_v exp(l_v - m), loss = lse - l_label, dl_v = (exp(l_v - lse) - [v == label]) dloss.
// Forward: one block of 512 threads per row, templated on the logits' dtype; the row max, then
// the sum of exp(l - max), each in a fixed order (see "typed fast path"), so results are
// bit-identical run to run. All in fp32 with the hardware exp2 (the CPU sums in double with
// libm's exp; the difference is a few fp32 ulps of lse). The row is staged in shared memory
// between the passes when it fits (100 KB for 16-bit logits at V = 50304).
// Backward: one block of 256 threads per row, elementwise, the same chunks (dlogits of the
// logits' dtype; another dtype takes a generic 4-element kernel); dlogits may alias logits
// (each element is read and then written by the same thread).
// Fused (the loss head in training): the forward's passes, then the backward's, in one kernel.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"

namespace megatron::backend {
namespace cuda {
namespace {

// ---- kernels --------------------------------------------------------------------------------

constexpr int kForwardThreads = 512;
constexpr int kBackwardThreads = 256;
// Rows up to this size are staged in shared memory: two blocks per SM (228 KB).
constexpr int64_t kStageBytes = 112 * 1024;

// exp(l - c) for a row max or lse c (l <= c but for rounding), as 2^((l - c) log2 e) with the
// hardware exp2 (ex2.approx: ~2 ulp): 3 instructions where expf takes ~8, and the loss kernels
// do two exponentials per logit. Relative error <= 1.2e-7 |l - c| + 2.4e-7 (the product's
// rounding, then ex2.approx's 2 ulp): < 1e-6 where exp(l - c) > 4e-3, and the larger relative
// errors of smaller terms are tiny in absolute terms (tests/backend/cuda/cuda_loss_test.cpp). An empty row (c = -inf:
// every logit -inf) gives 0 for every term rather than 2^NaN.
__device__ __forceinline__ float exp_shifted(float l, float c) {
  const float z = __fmul_rn(__fsub_rn(l, c == -INFINITY ? 0.0f : c), 1.4426950408889634f);
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(z));
  return y;
}

// Pointer to element `offset` of p.
__device__ __forceinline__ const void* element_ptr(const void* p, DType dt, int64_t offset) {
  return static_cast<const char*>(p) + offset * (dt == DType::kF32 ? 4 : 2);
}
__device__ __forceinline__ void* element_ptr(void* p, DType dt, int64_t offset) {
  return static_cast<char*>(p) + offset * (dt == DType::kF32 ? 4 : 2);
}

// d(loss)/d(logit) of one element: (exp(l - lse) - [it is the label]) * dloss.
__device__ __forceinline__ float logit_grad(float l, float lse, bool is_label, float g) {
  return (exp_shifted(l, lse) - (is_label ? 1.0f : 0.0f)) * g;
}

// The generic backward (dlogits of another dtype than the logits): one block per row,
// dlogits[row, v] = (exp(logits[row, v] - lse[row]) - [v == label]) * dlosses[row].
__global__ void cross_entropy_backward_kernel(const void* logits, DType ldt, const int32_t* labels, const float* lse,
                                              const float* dlosses, void* dlogits, DType ddt, int64_t vocab, bool vec) {
  const int64_t row = blockIdx.x;
  const void* lrow = element_ptr(logits, ldt, row * vocab);
  void* drow = element_ptr(dlogits, ddt, row * vocab);
  const float row_lse = lse[row], g = dlosses[row];
  const int64_t t = labels[row];
  for (int64_t i = 4 * static_cast<int64_t>(threadIdx.x); i < vocab; i += 4 * static_cast<int64_t>(blockDim.x)) {
    float v[4];
    load4(lrow, ldt, i, vocab, vec, v);
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = logit_grad(v[k], row_lse, i + k == t, g);
    store4(drow, ddt, i, vocab, vec, v);
  }
}

// ---- typed fast path ---------------------------------------------------------------------------
// Logits (and dlogits) of one dtype T, templated: a row is read in chunks of W = 16 bytes (8
// bf16/fp16 or 4 fp32 elements), thread t taking chunks t, t + blockDim, ... in that order. kVec:
// every row starts on a 16-byte boundary (an aligned base and V % W == 0, e.g. the padded
// vocabulary 50304), so a chunk is one 16-byte access; else the same chunks element by element
// (the same order, so the same bits; elements past V read as 0 and are skipped).
// The row sums, in three passes: (1) the row max m, (2) sum_v exp(l_v - m), each thread adding
// its elements in chunk order, (3, backward) the gradient. A pass reads chunks c and c + blockDim
// before using either. Block results: xor butterflies within each warp (fmaxf, or additions,
// which commute, so every lane gets the same bits), then every warp reads the warps' results
// in warp order and butterflies them again. Fixed shapes: bit-identical run to run.

// Elements of chunk c inside the row (W, or fewer in the last chunk).
template <int W>
__device__ __forceinline__ int chunk_valid(int64_t c, int64_t vocab) {
  const int64_t left = vocab - c * W;
  return left < W ? static_cast<int>(left) : W;
}

template <bool kMax>
__device__ __forceinline__ float warp_reduce(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xFFFFFFFFu, v, o);
    v = kMax ? fmaxf(v, u) : v + u;
  }
  return v;
}

// The block's max or sum of v, returned to every thread. buf: 32 floats of shared memory used
// by this call only (a later call needs another buffer or a __syncthreads first).
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* buf) {
  v = warp_reduce<kMax>(v);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) buf[warp] = v;
  __syncthreads();
  const float identity = kMax ? -INFINITY : 0.0f;
  return warp_reduce<kMax>(lane < static_cast<int>(blockDim.x >> 5) ? buf[lane] : identity);
}

// The max of chunk v's valid elements folded into m.
template <int W>
__device__ __forceinline__ void chunk_max(float& m, const float (&v)[W], int valid) {
#pragma unroll
  for (int e = 0; e < W; ++e)
    if (e < valid) m = fmaxf(m, v[e]);
}
// exp(l - c) of chunk v's valid elements added to s in element order.
template <int W>
__device__ __forceinline__ void chunk_exp_sum(float& s, const float (&v)[W], int valid, float c) {
#pragma unroll
  for (int e = 0; e < W; ++e)
    if (e < valid) s += exp_shifted(v[e], c);
}
// The gradient of chunk c in place of its logits.
template <int W>
__device__ __forceinline__ void chunk_grad(float (&v)[W], int64_t c, int64_t t, float lse, float g) {
#pragma unroll
  for (int e = 0; e < W; ++e) v[e] = logit_grad(v[e], lse, c * W + e == t, g);
}

// Chunk c of the row: from shared memory when staged, else from the logits.
template <class T, bool kVec, bool kStage>
__device__ __forceinline__ uint4 row_chunk(const T* lrow, const uint4* staged, int64_t c, int64_t vocab) {
  if constexpr (kStage) {
    return staged[c];
  } else {
    return load_raw<T, kVec>(lrow, c * kVecWidth<T>, vocab);
  }
}

// 16 bytes global -> shared without registers (cp.async; both 16-byte aligned), and the wait
// for all of this thread's copies (after it, the thread sees the data it copied).
__device__ __forceinline__ void copy_async_16(uint4* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void copy_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Passes 1 and 2 over a row: lse, from every thread's chunks. kStage: pass 1 copies the raw
// chunks into `staged` ([chunks] in shared memory) and pass 2 reads them there; else pass 2
// reads the row again (from L2 when it is still there). Each thread re-reads only chunks it
// staged itself, so no barrier is needed between the copy and its use.
template <class T, bool kVec, bool kStage>
__device__ __forceinline__ float row_lse(const T* lrow, uint4* staged, int64_t vocab, float* buf_max, float* buf_sum) {
  constexpr int W = kVecWidth<T>;
  const int64_t chunks = (vocab + W - 1) / W, step = blockDim.x;
  float m = -INFINITY;
  int64_t c = threadIdx.x;
  if constexpr (kStage && kVec) {
    // Every chunk of this thread in flight at once (~200 bytes per thread, the whole row per
    // block): one or two chunks per thread at a time left HBM half idle.
    for (; c < chunks; c += step) copy_async_16(&staged[c], lrow + c * W);
    copy_async_wait_all();
    for (c = threadIdx.x; c < chunks; c += step) {
      float a[W];
      unpack_vec<T>(staged[c], a);
      chunk_max<W>(m, a, W);
    }
  }
  for (; c + step < chunks; c += 2 * step) {
    const uint4 qa = load_raw<T, kVec>(lrow, c * W, vocab), qb = load_raw<T, kVec>(lrow, (c + step) * W, vocab);
    if constexpr (kStage) {
      staged[c] = qa;
      staged[c + step] = qb;
    }
    float a[W], b[W];
    unpack_vec<T>(qa, a);
    unpack_vec<T>(qb, b);
    chunk_max<W>(m, a, chunk_valid<W>(c, vocab));
    chunk_max<W>(m, b, chunk_valid<W>(c + step, vocab));
  }
  if (c < chunks) {
    const uint4 qa = load_raw<T, kVec>(lrow, c * W, vocab);
    if constexpr (kStage) staged[c] = qa;
    float a[W];
    unpack_vec<T>(qa, a);
    chunk_max<W>(m, a, chunk_valid<W>(c, vocab));
  }
  m = block_reduce<true>(m, buf_max);
  float s = 0.0f;
  for (c = threadIdx.x; c + step < chunks; c += 2 * step) {
    const uint4 qa = row_chunk<T, kVec, kStage>(lrow, staged, c, vocab);
    const uint4 qb = row_chunk<T, kVec, kStage>(lrow, staged, c + step, vocab);
    float a[W], b[W];
    unpack_vec<T>(qa, a);
    unpack_vec<T>(qb, b);
    chunk_exp_sum<W>(s, a, chunk_valid<W>(c, vocab), m);
    chunk_exp_sum<W>(s, b, chunk_valid<W>(c + step, vocab), m);
  }
  if (c < chunks) {
    float a[W];
    unpack_vec<T>(row_chunk<T, kVec, kStage>(lrow, staged, c, vocab), a);
    chunk_exp_sum<W>(s, a, chunk_valid<W>(c, vocab), m);
  }
  s = block_reduce<false>(s, buf_sum);
  return m + logf(s);  // an empty row: -inf + log(0) = -inf
}

// The loss of a row from its lse and the label's logit; a label outside [0, V) gives NaN.
__device__ __forceinline__ float row_loss(float lse, int64_t t, int64_t vocab, float label_logit) {
  return t >= 0 && t < vocab ? lse - label_logit : __int_as_float(0x7FC00000);
}

template <class T>
__device__ __forceinline__ float label_logit(const T* lrow, int64_t t, int64_t vocab) {
  return t >= 0 && t < vocab ? to_f32<T>(lrow[t]) : 0.0f;
}

template <class T, bool kVec, bool kStage>
__global__ void __launch_bounds__(kForwardThreads)
    cross_entropy_forward_typed_kernel(const T* logits, const int32_t* labels, int64_t vocab, float* losses,
                                       float* lse) {
  extern __shared__ uint4 staged[];  // [chunks] when kStage
  __shared__ float buf_max[32], buf_sum[32];
  const int64_t row = blockIdx.x;
  const T* lrow = logits + row * vocab;
  const float r = row_lse<T, kVec, kStage>(lrow, staged, vocab, buf_max, buf_sum);
  if (threadIdx.x == 0) {
    const int64_t t = labels[row];
    lse[row] = r;
    losses[row] = row_loss(r, t, vocab, label_logit(lrow, t, vocab));
  }
}

// dlogits[row, v] = (exp(logits[row, v] - lse[row]) - [v == label]) * dlosses[row]; each thread
// reads a chunk and then writes the same chunk, so dlogits may alias logits.
template <class T, bool kVec>
__global__ void __launch_bounds__(kBackwardThreads)
    cross_entropy_backward_typed_kernel(const T* logits, const int32_t* labels, const float* lse, const float* dlosses,
                                        T* dlogits, int64_t vocab) {
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
    chunk_grad<W>(a, c, t, row_lse, g);
    chunk_grad<W>(b, c + step, t, row_lse, g);
    store_chunk<T, kVec>(drow, c * W, vocab, a);
    store_chunk<T, kVec>(drow, (c + step) * W, vocab, b);
  }
  if (c < chunks) {
    float a[W];
    load_chunk<T, kVec>(lrow, c * W, vocab, a);
    chunk_grad<W>(a, c, t, row_lse, g);
    store_chunk<T, kVec>(drow, c * W, vocab, a);
  }
}

// ---- forward and backward in one kernel ------------------------------------------------------
// One block of kForwardThreads per row: the forward's passes (so lse is bit-identical to
// cross_entropy_forward's), then the backward's arithmetic on each chunk (so dlogits is
// bit-identical to cross_entropy_backward's). kStage: the row is staged in dynamic shared memory
// by the first pass, so the logits are read from HBM once (the unfused pair reads them three
// times); rows longer than kStageBytes are re-read (from L2 while they are there). The
// label's logit is read before the first barrier and every later global read is of a chunk the
// same thread writes afterwards, so dlogits may alias the logits.

template <class T, bool kVec, bool kStage>
__global__ void __launch_bounds__(kForwardThreads)
    cross_entropy_fused_typed_kernel(const T* logits, const int32_t* labels, const float* dlosses, int64_t vocab,
                                     float* losses, float* lse, T* dlogits) {
  constexpr int W = kVecWidth<T>;
  extern __shared__ uint4 staged[];  // [chunks] when kStage
  __shared__ float buf_max[32], buf_sum[32];
  const int64_t row = blockIdx.x;
  const T* lrow = logits + row * vocab;
  T* drow = dlogits + row * vocab;
  const int64_t t = labels[row];
  const float lab = threadIdx.x == 0 ? label_logit(lrow, t, vocab) : 0.0f;
  const float r = row_lse<T, kVec, kStage>(lrow, staged, vocab, buf_max, buf_sum);
  if (threadIdx.x == 0) {
    lse[row] = r;
    losses[row] = row_loss(r, t, vocab, lab);
  }
  const float g = dlosses[row];
  const int64_t chunks = (vocab + W - 1) / W, step = blockDim.x;
  for (int64_t c = threadIdx.x; c < chunks; c += step) {
    float a[W];
    unpack_vec<T>(row_chunk<T, kVec, kStage>(lrow, staged, c, vocab), a);
    chunk_grad<W>(a, c, t, r, g);
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
  MT_CHECK(per_row.dtype() == DType::kF32) << "cross_entropy " << what << " " << per_row.describe() << " must be fp32";
  MT_CHECK(per_row.numel() == n) << "cross_entropy " << what << " " << per_row.describe() << " for " << n << " rows";
  MT_CHECK(n <= std::numeric_limits<int32_t>::max()) << "cross_entropy: " << n << " rows exceed the grid";
  return {n, vocab};
}

// An fp32 per-row tensor [n] on the device (lse, dlosses); `what` names it in the error.
void check_row_values(const Tensor& t, int64_t n, const char* what) {
  check_device(t, what);
  MT_CHECK(t.dtype() == DType::kF32 && t.numel() == n) << what << " " << t.describe();
}

// dlogits: a float tensor of the logits' size on the device.
void check_dlogits(const Tensor& dlogits, const Tensor& logits) {
  check_device(dlogits, "cross_entropy dlogits");
  MT_CHECK(is_float(dlogits.dtype()) && dlogits.numel() == logits.numel())
      << "cross_entropy dlogits " << dlogits.describe() << " for logits " << logits.describe();
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

// Shared memory to stage a row of V elements of T (whole 16-byte chunks), or 0 when it is
// larger than kStageBytes (the kernels then re-read the row).
template <class T>
int64_t stage_bytes(int64_t vocab) {
  const int64_t bytes = (vocab + kVecWidth<T> - 1) / kVecWidth<T> * 16;
  return bytes <= kStageBytes ? bytes : 0;
}

// The kernel allowed kStageBytes of dynamic shared memory (above 48 KB a kernel must opt in; a
// host-side attribute, always the same value, so concurrent launches cannot race on it).
template <class Kernel>
void opt_in(Kernel kernel) {
  MT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kStageBytes)));
}

// Picks the variant make(kVec, kStage) (std::bool_constant arguments) of a row kernel over
// 16-bit or fp32 logits of V = vocab: kStage when the row fits in shared memory (opted in), kVec
// when `vec`; then launch(kernel, dynamic shared memory bytes).
template <class T, class Make, class Launch>
void launch_row_kernel(int64_t vocab, bool vec, Make make, Launch launch) {
  const int64_t smem = stage_bytes<T>(vocab);
  auto go = [&](auto kvec, auto kstage) {
    auto kernel = make(kvec, kstage);
    if constexpr (decltype(kstage)::value) opt_in(kernel);
    launch(kernel, decltype(kstage)::value ? smem : 0);
  };
  if (smem > 0) {
    vec ? go(std::true_type{}, std::true_type{}) : go(std::false_type{}, std::true_type{});
  } else {
    vec ? go(std::true_type{}, std::false_type{}) : go(std::false_type{}, std::false_type{});
  }
}

}  // namespace
}  // namespace cuda

// ---- launchers ------------------------------------------------------------------------------

void CudaBackend::cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& losses, Tensor& lse) {
  const auto [rows, cols] = cuda::check_loss(logits, labels, losses, "losses");
  const int64_t n = rows, vocab = cols;  // (lambdas capture no structured bindings in C++17)
  cuda::check_row_values(lse, n, "cross_entropy lse");
  if (n == 0) return;
  cuda::dispatch_float_type(logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::launch_row_kernel<T>(
        vocab, cuda::rows_vec_aligned(logits, vocab),
        [](auto kvec, auto kstage) {
          return cuda::cross_entropy_forward_typed_kernel<T, decltype(kvec)::value, decltype(kstage)::value>;
        },
        [&](auto kernel, int64_t smem) {
          kernel<<<static_cast<unsigned>(n), cuda::kForwardThreads, smem, stream()>>>(
              static_cast<const T*>(logits.data()), static_cast<const int32_t*>(labels.data()), vocab,
              static_cast<float*>(losses.data()), static_cast<float*>(lse.data()));
        });
  });
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& lse,
                                         const Tensor& dlosses, Tensor& dlogits) {
  const auto [rows, cols] = cuda::check_loss(logits, labels, lse, "lse");
  const int64_t n = rows, vocab = cols;
  cuda::check_row_values(dlosses, n, "cross_entropy dlosses");
  cuda::check_dlogits(dlogits, logits);
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
      logits.data(), logits.dtype(), static_cast<const int32_t*>(labels.data()), static_cast<const float*>(lse.data()),
      static_cast<const float*>(dlosses.data()), dlogits.data(), dlogits.dtype(), vocab, vec);
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::cross_entropy_fused(const Tensor& logits, const Tensor& labels, const Tensor& dlosses, Tensor& losses,
                                      Tensor& lse, Tensor& dlogits) {
  const auto [rows, cols] = cuda::check_loss(logits, labels, losses, "losses");
  const int64_t n = rows, vocab = cols;
  cuda::check_row_values(lse, n, "cross_entropy lse");
  cuda::check_row_values(dlosses, n, "cross_entropy dlosses");
  cuda::check_dlogits(dlogits, logits);
  if (dlogits.dtype() != logits.dtype()) {  // the generic backward converts; no one-pass kernel
    cross_entropy_forward(logits, labels, losses, lse);
    cross_entropy_backward(logits, labels, lse, dlosses, dlogits);
    return;
  }
  if (n == 0) return;
  cuda::dispatch_float_type(logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::launch_row_kernel<T>(
        vocab, cuda::rows_vec_aligned(logits, vocab) && cuda::rows_vec_aligned(dlogits, vocab),
        [](auto kvec, auto kstage) {
          return cuda::cross_entropy_fused_typed_kernel<T, decltype(kvec)::value, decltype(kstage)::value>;
        },
        [&](auto kernel, int64_t smem) {
          kernel<<<static_cast<unsigned>(n), cuda::kForwardThreads, smem, stream()>>>(
              static_cast<const T*>(logits.data()), static_cast<const int32_t*>(labels.data()),
              static_cast<const float*>(dlosses.data()), vocab, static_cast<float*>(losses.data()),
              static_cast<float*>(lse.data()), static_cast<T*>(dlogits.data()));
        });
  });
  MT_CUDA_LAUNCH_CHECK();
}

// ---- the vocab-parallel cross-entropy's per-row steps (ops.h) -------------------------------
// Double arithmetic from the fp32 inputs, rounded once, as the CPU reference: CUDA's double
// exp and log are within an ulp of double, far below the fp32 rounding that follows.

namespace cuda {
namespace {

__global__ void vocab_parallel_ce_terms_kernel(const float* __restrict__ max_lse, const int32_t* __restrict__ labels,
                                               float* __restrict__ lse, float* __restrict__ losses, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double li = lse[i], mi = max_lse[i];
    losses[i] = labels[i] >= 0 ? __double2float_rn(li - static_cast<double>(losses[i])) : 0.0f;
    lse[i] = isinf(mi) && mi < 0 ? (li == mi ? 1.0f : 0.0f) : __double2float_rn(exp(li - mi));
  }
}

__global__ void vocab_parallel_ce_finish_kernel(const float* __restrict__ max_lse, float* __restrict__ lse,
                                                float* __restrict__ losses, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double total = static_cast<double>(max_lse[i]) + log(static_cast<double>(lse[i]));
    lse[i] = __double2float_rn(total);
    losses[i] = __double2float_rn(total - static_cast<double>(losses[i]));
  }
}

// n of the per-row tensors max_lse, lse and losses (fp32 [n] on the device, checked).
int64_t check_vocab_parallel_rows(const Tensor& max_lse, const Tensor& lse, const Tensor& losses, const char* op) {
  const int64_t n = max_lse.numel();
  check_row_values(max_lse, n, op);
  check_row_values(lse, n, op);
  check_row_values(losses, n, op);
  return n;
}

}  // namespace
}  // namespace cuda

void CudaBackend::vocab_parallel_ce_terms(const Tensor& max_lse, const Tensor& labels, Tensor& lse, Tensor& losses) {
  const int64_t n = cuda::check_vocab_parallel_rows(max_lse, lse, losses, "vocab_parallel_ce_terms");
  cuda::check_device(labels, "vocab_parallel_ce_terms labels");
  MT_CHECK(labels.dtype() == DType::kI32 && labels.numel() == n)
      << "vocab_parallel_ce_terms labels " << labels.describe() << " for " << n << " rows";
  if (n == 0) return;
  cuda::vocab_parallel_ce_terms_kernel<<<cuda::grid_for(n), 256, 0, stream()>>>(
      static_cast<const float*>(max_lse.data()), static_cast<const int32_t*>(labels.data()),
      static_cast<float*>(lse.data()), static_cast<float*>(losses.data()), n);
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::vocab_parallel_ce_finish(const Tensor& max_lse, Tensor& lse, Tensor& losses) {
  const int64_t n = cuda::check_vocab_parallel_rows(max_lse, lse, losses, "vocab_parallel_ce_finish");
  if (n == 0) return;
  cuda::vocab_parallel_ce_finish_kernel<<<cuda::grid_for(n), 256, 0, stream()>>>(
      static_cast<const float*>(max_lse.data()), static_cast<float*>(lse.data()), static_cast<float*>(losses.data()),
      n);
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace megatron::backend
