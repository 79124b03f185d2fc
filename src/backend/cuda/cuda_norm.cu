// CUDA backend: layernorm and the token + position embeddings, the same functions as
// backend/cpu/cpu_norm.cpp (Megatron's fused layer norm and LanguageModelEmbedding).
//
// LayerNorm forward, warp path (the default, layernorm_paths.h; x, out, gamma, beta of one dtype T,
// h <= 768 W: GPT sizes up to 6144 in 16-bit): one warp per row, up to 24 chunks of W per lane,
// warp-only row sums (layernorm_forward_warp_kernel). Otherwise the paths below.
// LayerNorm, fast path (x, out / dy, x, dx of one dtype T, h <= 12288 for 16-bit, <= 8192 for
// fp32): the row lives in registers. A row is cut into chunks of W = 16 bytes (8 bf16/fp16 or
// 4 fp32 elements, one 16-byte load or store when the rows are 16-byte aligned, else the same
// chunks element by element); `wpr` warps (1, 2, 4, 8 or 16: the fewest for which each thread
// holds <= 3 chunks, 4 for fp32) share a row, thread t taking chunks t, t + 32 wpr, ...
// Blocks of 8 warps hold 8 / wpr rows at a time (one row of 16 warps for wpr = 16).
// Row sums (fixed order): each thread adds its elements in chunk order, then xor butterflies
// within each warp, then the warps' sums in warp order (row_sum2).
//   forward: one pass reading x and writing out; mean, then the biased variance of x - mean
//   from the registers; rstd = 1 / sqrt(var + eps); mean and rstd saved as fp32.
//   backward, one fused kernel then a reduce (dy and x read once):
//   1. block b owns rows [b R, b R + R), R = (rows per row group) * (row groups per block),
//      about n / 256 rows (CudaBackend::layernorm_backward_blocks(), 256 unless
//      MEGATRON_LN_BACKWARD_BLOCKS says otherwise; fewer for few or very wide rows,
//      ln_backward_parts; not derived from the device, so the order depends only on n, h,
//      the dtype and that count). Per row: xhat = (x - mean) rstd, g = dy gamma, the row sums of g and
//      g xhat, then dx = rstd (g - mean(g) - xhat mean(g xhat)) written where dy was read by
//      the same thread (dx may alias dy). Each thread adds dy xhat and dy of its columns over
//      its rows in row order; the block's row groups are combined by a fixed tree ((p0 + p4)
//      + (p2 + p6)) + ((p1 + p5) + (p3 + p7)) into partial[b][column];
//   2. reduce: block (32 columns, 16 lanes); lane y adds chunks y, y + 16, ... in order, the
//      16 lane sums are added in lane order, and the total is added into dgamma / dbeta (+=).
// LayerNorm, generic path (mixed activation dtypes, longer rows): forward one block per row,
// the row in shared memory when it fits; backward (dx may alias dy, so dy is read for the
// parameter gradients before dx is written):
//   1. partials: block (column tile of 32, chunk of kRowsPerChunk rows) sums dy * xhat and dy
//      over its rows, in a fixed order, into partial[chunk][column];
//   2. the reduce above;
//   3. dx: one block per row, dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma.
// Backward with dx_write = kAccumulate (ops.h: the residual add fused in): both paths read dx
// where they would write it and store dx + round(LayerNorm dx), the sum rounded once more.
// No float atomics anywhere: every sum has a fixed shape for given (n, h, dtypes), so results
// are bit-identical run to run, on any GPU (the fast path's aligned and element-by-element
// variants also give the same bits). The partial sums live in the backend's persistent
// scratch when they fit (8 MiB: 2 * 256 * h floats for h <= 4096), else in a stream-ordered
// allocation.
// RMSNorm (ops.h: `mean` undefined, no beta / dbeta): every kernel above takes a compile-time
// kRms (false: the LayerNorm code unchanged) that drops the mean (m = 0: xhat = x rstd, rstd =
// 1 / sqrt(mean(x^2) + eps), one row sum in the forward), beta, the mean(g) term of dx and the
// dbeta partials (the tree and the partial sums hold one column sum fewer); the same fixed
// orders, so RMSNorm is as deterministic as LayerNorm.
// Embedding backward: the rows of dout are grouped by token with a radix sort of the unique
// keys token * N + row (N = s b rows), so each token's rows come out in row order; one block
// per run of equal tokens then adds them into dwte in that order, the CPU's order exactly.
// dwpe: each position adds its b rows in order. Intermediates (partial sums, sort keys)
// live in stream-ordered allocations (cudaMallocAsync), so no op here synchronizes.
// Longer than 800 lines because LayerNorm, RMSNorm and the embeddings share the row-reduction
// templates and the path choice (layernorm_paths.h) defined here and used nowhere else.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/layernorm_paths.h"
#include "core/error.h"

namespace megatron::backend {

namespace {
// cudaOccupancyMaxActiveBlocksPerMultiprocessor for (kernel, threads) on GPU `device`, asked
// once: the answer depends on the kernel's resources and the GPU's kind, never on the call,
// and asking costs microseconds of host time at every launch (the LayerNorm forward's grid).
int resident_blocks(const void* kernel, int threads, int device) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int>, int> known;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(kernel, threads, device);
  if (auto it = known.find(key); it != known.end()) return it->second;
  int resident = 0;
  MT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, threads, 0));
  known.emplace(key, resident);
  return resident;
}
}  // namespace
namespace cuda {
namespace {

// ---- kernels --------------------------------------------------------------------------------

// Rows per chunk of the layernorm parameter-gradient partial sums; fixed (not derived from
// the device) so that the summation order, and with it the bits, are the same on every GPU.
constexpr int kRowsPerChunk = 64;
constexpr int kTileCols = 32;
constexpr int kTileRows = 8;

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024), in a fixed order:
// xor butterflies within each warp, then across the warp sums. Every thread gets the same
// bits (each butterfly step adds the same two numbers in every lane). buf: 32 floats.
__device__ __forceinline__ float block_sum(float v, float* buf) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // buf may still be read by a previous call
  if (lane == 0) buf[warp] = v;
  __syncthreads();
  float t = lane < static_cast<int>(blockDim.x >> 5) ? buf[lane] : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xFFFFFFFFu, t, o);
  return t;
}

// ---- layernorm, row-in-registers fast path --------------------------------------------------
// Used when the activations (x, out / dy, x, dx) share one dtype T and a row fits in the
// registers of at most 16 warps. A row is split into chunks of W = 16 / sizeof(T) consecutive
// elements (8 for bf16/fp16, 4 for fp32); thread t of the row's `wpr` warps holds chunks t,
// t + 32 wpr, ..., at most kLnMaxChunks<T> of them, kept as raw 16-byte vectors. kVec: every
// row starts on a 16-byte boundary (aligned base, h a multiple of W), so a chunk is one
// 16-byte access; else the same chunks are read element by element (misaligned views,
// h % W != 0), with the same arithmetic in the same order, so both give the same bits.

// Chunks per thread and row at most: 3 for 16-bit (24 elements, 12 registers raw), 4 for fp32
// (16 elements), so that the backward's row, gamma and two column accumulators fit in 128
// registers without spills.
template <class T>
constexpr int kLnMaxChunks = sizeof(T) == 2 ? 3 : 4;
// The backward with a third column sum (layernorm_backward_colsum) holds K more accumulators:
// at 3 chunks (16-bit) or 4 (fp32) it spilled (ptxas: 296-740 bytes per thread). Splitting such
// rows over twice the warps instead cost more than it saved (2.7B, h = 2560 at 8 warps of 2
// chunks: 6.19 -> 7.83 ms per step for the LayerNorm backwards, against ~1.3 ms of bias
// gradients), so those widths (124M's 768, 2.7B's 2560) run the plain kernel and bias_grad.
template <class T>
constexpr int kLnColsumMaxChunks = sizeof(T) == 2 ? 2 : 3;
constexpr int kLnMaxWarpsPerRow = 16;

// Synchronises the `wpr` warps of this thread's row group only: named barrier 1 + group
// (barrier 0 is __syncthreads'; blocks of at most 16 warps and wpr >= 2 have at most 8 groups).
// Row groups then never wait for each other between rows, so one group's loads overlap another's
// reductions.
__device__ __forceinline__ void row_group_sync(int group, int wpr) {
  asm volatile("bar.sync %0, %1;" ::"r"(group + 1), "r"(wpr * 32) : "memory");
}

// Sum of v over the `wpr` warps of this thread's row, the same bits in every thread: xor
// butterflies within each warp, then (wpr > 1) the warps' sums added in warp order. Called
// by every thread of the row group the same number of times (it synchronises the group, or
// the whole block without group_sync).
// red: one float2 per warp of the block; v.x and v.y are two independent sums.
__device__ __forceinline__ float2 row_sum2(float2 v, float2* red, int wpr, int warp, int wig, bool group_sync) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    v.x += __shfl_xor_sync(0xFFFFFFFFu, v.x, o);
    v.y += __shfl_xor_sync(0xFFFFFFFFu, v.y, o);
  }
  if (wpr == 1) return v;
  // red[warp] may still be read by this group's previous call; only this group reads it.
  if (group_sync) {
    row_group_sync(warp / wpr, wpr);
  } else {
    __syncthreads();
  }
  if ((threadIdx.x & 31) == 0) red[warp] = v;
  if (group_sync) {
    row_group_sync(warp / wpr, wpr);
  } else {
    __syncthreads();
  }
  const float2* r = red + (warp - wig);
  float2 t = r[0];
  for (int w = 1; w < wpr; ++w) {
    t.x += r[w].x;
    t.y += r[w].y;
  }
  return t;
}

// Block: `groups` row groups of `wpr` warps; group g handles rows base + g for base = blockIdx.x
// * groups, + gridDim.x * groups, ... Two passes over the row in registers: mean, then the
// biased variance of x - mean; rstd = 1 / sqrt(var + eps). kRms: one pass, the mean of x^2
// (mean and beta null, nothing stored to mean).
template <class T, int K, bool kVec, bool kRms = false>
__global__ void __launch_bounds__(512)
    layernorm_forward_rows_kernel(const T* x, const void* gamma, DType gdt, const void* beta, DType bdt, T* out,
                                  float* mean, float* rstd, int64_t n, int64_t h, int wpr, float eps, bool group_sync) {
  constexpr int W = kVecWidth<T>;
  __shared__ float2 red[kLnMaxWarpsPerRow * 2];
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int groups = static_cast<int>(blockDim.x >> 5) / wpr;
  const int group = warp / wpr, wig = warp % wpr;
  const int tpr = 32 * wpr, t = wig * 32 + lane;
  float gv[K][W], bv[K][W];
#pragma unroll
  for (int k = 0; k < K; ++k) {
#pragma unroll
    for (int e = 0; e < W; ++e) {
      const int64_t col = static_cast<int64_t>(t + k * tpr) * W + e;
      gv[k][e] = col < h ? load_f(gamma, gdt, col) : 0.0f;
      if constexpr (!kRms) bv[k][e] = col < h ? load_f(beta, bdt, col) : 0.0f;
    }
  }
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * groups; base < n;
       base += static_cast<int64_t>(gridDim.x) * groups) {
    const int64_t row = base + group;
    const bool active = row < n;
    const T* xr = x + row * h;
    uint4 raw[K];  // the row's chunks of this thread, as loaded
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c0 = static_cast<int64_t>(t + k * tpr) * W;
      raw[k] = active && c0 < h ? load_raw<T, kVec>(xr, c0, h) : make_uint4(0u, 0u, 0u, 0u);
    }
    float m = 0.0f;  // stays 0 for RMSNorm
    if constexpr (!kRms) {
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int64_t c0 = static_cast<int64_t>(t + k * tpr) * W;
        float v[W];
        unpack_vec<T>(raw[k], v);
#pragma unroll
        for (int e = 0; e < W; ++e)
          if (active && c0 + e < h) sum += v[e];
      }
      m = row_sum2(make_float2(sum, 0.0f), red, wpr, warp, wig, group_sync).x / static_cast<float>(h);
    }
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c0 = static_cast<int64_t>(t + k * tpr) * W;
      float v[W];
      unpack_vec<T>(raw[k], v);
#pragma unroll
      for (int e = 0; e < W; ++e) {
        if (active && c0 + e < h) {
          const float d = kRms ? v[e] : v[e] - m;
          sq += d * d;
        }
      }
    }
    const float var =
        row_sum2(make_float2(sq, 0.0f), red + kLnMaxWarpsPerRow, wpr, warp, wig, group_sync).x / static_cast<float>(h);
    const float s = 1.0f / sqrtf(var + eps);
    if (active) {
      T* orow = out + row * h;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int64_t c0 = static_cast<int64_t>(t + k * tpr) * W;
        if (c0 < h) {
          float v[W], o[W];
          unpack_vec<T>(raw[k], v);
#pragma unroll
          for (int e = 0; e < W; ++e) {
            if constexpr (kRms) {
              o[e] = v[e] * s * gv[k][e];
            } else {
              o[e] = (v[e] - m) * s * gv[k][e] + bv[k][e];
            }
          }
          store_chunk<T, kVec>(orow, c0, h, o);
        }
      }
      if (t == 0) {
        if constexpr (!kRms) mean[row] = m;
        rstd[row] = s;
      }
    }
  }
}

// Forward, one warp per row (h <= 32 * kLnWarpMaxChunks * W elements, gamma and beta of the
// activations' dtype; kVec as in the row-group kernel, the same bits either way): each lane holds chunks lane, lane +
// 32, ... (up to 24 independent 16-byte loads in flight per thread) and the row sums are warp butterflies only. The
// row-group kernel above splits such rows over several warps joined by block-wide reductions and ran at a third of HBM
// bandwidth at GPT sizes (8192 rows of 2048: ~60 us for 67 MB). gamma and beta are re-read per row (L1 hits) instead of
// being held in registers. 12 chunks (48 registers of raw row) take 2.7B's h = 2560 (10 chunks), which the row-group
// kernel ran at ~40% of HBM bandwidth (4.64 ms per step, 65 calls). 24 chunks (96 registers)
// take the 13B's h = 5120 (20 chunks): the row-group kernel ran 2048 x 5120 at 1.25 TB/s of the
// H200's 4.8 (bench/results/2026-11-28.md, "what the DP step and the h = 5120 layers spend"). kRms:
// RMSNorm, one row sum (of x^2), beta and mean null.
constexpr int kLnWarpMaxChunks = 24;

// Calls f(std::integral_constant<int, k>{}) for 1 <= k <= kLnWarpMaxChunks.
template <int K = 1, class F>
void dispatch_warp_chunks(int64_t k, F&& f) {
  if (k == K) {
    f(std::integral_constant<int, K>{});
  } else if constexpr (K < kLnWarpMaxChunks) {
    dispatch_warp_chunks<K + 1>(k, f);
  }
}
template <class T, int K, bool kVec, bool kRms = false>
__global__ void __launch_bounds__(256)
    layernorm_forward_warp_kernel(const T* x, const T* gamma, const T* beta, T* out, float* mean, float* rstd,
                                  int64_t n, int64_t h, float eps) {
  constexpr int W = kVecWidth<T>;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); row < n; row += warps) {
    const T* xr = x + row * h;
    uint4 raw[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c0 = static_cast<int64_t>(lane + 32 * k) * W;
      raw[k] = c0 < h ? load_raw<T, kVec>(xr, c0, h) : make_uint4(0u, 0u, 0u, 0u);
    }
    float m = 0.0f;  // stays 0 for RMSNorm
    if constexpr (!kRms) {
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        float v[W];
        unpack_vec<T>(raw[k], v);  // elements past h were loaded as zeros: they add nothing
#pragma unroll
        for (int e = 0; e < W; ++e) sum += v[e];
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
      m = sum / static_cast<float>(h);
    }
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c0 = static_cast<int64_t>(lane + 32 * k) * W;
      float v[W];
      unpack_vec<T>(raw[k], v);
#pragma unroll
      for (int e = 0; e < W; ++e) {
        if (c0 + e < h) {
          const float d = kRms ? v[e] : v[e] - m;
          sq += d * d;
        }
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xFFFFFFFFu, sq, o);
    const float s = 1.0f / sqrtf(sq / static_cast<float>(h) + eps);
    T* orow = out + row * h;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c0 = static_cast<int64_t>(lane + 32 * k) * W;
      if (c0 >= h) continue;
      float v[W], g[W], o[W];
      unpack_vec<T>(raw[k], v);
      unpack_vec<T>(load_raw<T, kVec>(gamma, c0, h), g);
      if constexpr (kRms) {
#pragma unroll
        for (int e = 0; e < W; ++e) o[e] = v[e] * s * g[e];
      } else {
        float b[W];
        unpack_vec<T>(load_raw<T, kVec>(beta, c0, h), b);
#pragma unroll
        for (int e = 0; e < W; ++e) o[e] = (v[e] - m) * s * g[e] + b[e];
      }
      store_chunk<T, kVec>(orow, c0, h, o);
    }
    if (lane == 0) {
      if constexpr (!kRms) mean[row] = m;
      rstd[row] = s;
    }
  }
}

// The gamma values of chunk c0 (W elements, 0 past h) as fp32: one 16-byte load when gamma has
// the activations' dtype and kVec, else element by element.
template <class T, bool kVec>
__device__ __forceinline__ void gamma_chunk(const void* gamma, DType gdt, int64_t c0, int64_t h,
                                            float (&g)[kVecWidth<T>]) {
  constexpr int W = kVecWidth<T>;
  constexpr DType kT = std::is_same_v<T, float>           ? DType::kF32
                       : std::is_same_v<T, __nv_bfloat16> ? DType::kBF16
                                                          : DType::kF16;
  if (kVec && gdt == kT) {
    if (c0 < h) {
      unpack_vec<T>(load_raw<T, true>(static_cast<const T*>(gamma), c0, h), g);
    } else {
#pragma unroll
      for (int e = 0; e < W; ++e) g[e] = 0.0f;
    }
  } else {
#pragma unroll
    for (int e = 0; e < W; ++e) g[e] = c0 + e < h ? load_f(gamma, gdt, c0 + e) : 0.0f;
  }
}

// Fused backward. Block b owns rows [b R, b R + R), R = groups * rows_per_group; group g takes
// rows b R + g, b R + g + groups, ... in that order. Per row (row in registers, dy and x read
// once): xhat = (x - mean) rstd, g = dy gamma; the row sums of g and g xhat (row_sum2) give
// dx = rstd (g - mean(g) - xhat mean(g xhat)), written at the positions it read dy from (so dx
// may alias dy). Each thread also accumulates, for its columns and in row order, dy xhat and
// dy; at the end the groups' sums are combined by a fixed tree (group j += group j + half, half
// = groups / 2, ..., 1) and group 0 writes partial_g/partial_b[b][column].
// add_dx (dx not aliasing dy): dx holds the residual gradient and gets dx + round_T(LayerNorm
// dx), rounded: the bits of the unfused layernorm_backward then add (ops.h).
// kColsum: a third column sum, of dx as stored, through the same tree into partial_o
// (layernorm_backward_colsum); dx, dgamma and dbeta are the same bits either way.
// kDropout (with kColsum; layernorm_backward_dropout_colsum): dz = dropout_backward(dx as
// stored) is written too (element row * h + c of the mask is drop.offset + row * h + c, as the
// elementwise kernels draw it) and the third sum is dz's as stored instead of dx's.
// kRms (RMSNorm; mean and partial_b null): xhat = x rstd, dx = rstd (g - xhat mean(g xhat)), no
// dy column sums (no dbeta): S is one fewer.
// Dynamic shared memory: (groups / 2) * S * K * W * 32 wpr floats for the tree, S = 2 or 3 sums
// (1 or 2 for kRms).
struct LnDropout {
  void* dz = nullptr;
  uint64_t seed = 0, stream = 0, offset = 0;
  float p = 0.0f;
  bool aligned = false;                  // offset and h multiples of 4: one Philox block per group
  const uint64_t* stream_add = nullptr;  // DropoutParams::stream_add (device memory) or null
};
template <class T, int K, bool kVec, bool kColsum, bool kDropout = false, bool kRms = false>
__global__ void __launch_bounds__(512)
    layernorm_backward_rows_kernel(const T* dy, const T* x, const void* gamma, DType gdt, const float* mean,
                                   const float* rstd, T* dx, bool add_dx, int64_t n, int64_t h, int wpr,
                                   int rows_per_group, float* partial_g, float* partial_b, float* partial_o,
                                   bool group_sync, LnDropout drop) {
  constexpr int W = kVecWidth<T>;
  extern __shared__ float tree[];
  __shared__ float2 red[kLnMaxWarpsPerRow];
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int groups = static_cast<int>(blockDim.x >> 5) / wpr;
  const int group = warp / wpr, wig = warp % wpr;
  const int tpr = 32 * wpr, t = wig * 32 + lane;
  // gamma: held in registers up to 16 values per thread (16-bit K <= 2, any fp32 K), re-read
  // per row (gamma_chunk, L1 hits) beyond: measured in bf16 at 1.3B (K = 2) 3.53 ms per step
  // held vs 3.68 re-read, at 124M and 2.7B (K = 3) 1.30 / 6.65 ms held vs 1.20 / 6.18
  // re-read. The same values either way.
  if constexpr (kDropout) {
    if (drop.stream_add != nullptr) drop.stream += *drop.stream_add;
  }
  constexpr bool kHoldGamma = K * W <= 16;
  constexpr int KO = kColsum ? K : 1;
  float gh[kHoldGamma ? K : 1][W], ag[K][W], ab[K][W], ao[KO][W];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if constexpr (kHoldGamma) gamma_chunk<T, kVec>(gamma, gdt, static_cast<int64_t>(t + k * tpr) * W, h, gh[k]);
#pragma unroll
    for (int e = 0; e < W; ++e) {
      ag[k][e] = 0.0f;
      ab[k][e] = 0.0f;
      if constexpr (kColsum) ao[k][e] = 0.0f;
    }
  }
  auto gamma_of = [&](int k, int64_t c0, float(&g)[W]) {
    if constexpr (kHoldGamma) {
#pragma unroll
      for (int e = 0; e < W; ++e) g[e] = gh[k][e];
    } else {
      gamma_chunk<T, kVec>(gamma, gdt, c0, h, g);
    }
  };
  const int64_t first = static_cast<int64_t>(blockIdx.x) * groups * rows_per_group;
  for (int i = 0; i < rows_per_group; ++i) {
    const int64_t row = first + static_cast<int64_t>(i) * groups + group;
    const bool active = row < n;
    const float m = !kRms && active ? mean[row] : 0.0f, s = active ? rstd[row] : 0.0f;
    // The row's chunks of dy, x and (add_dx) the residual gradient of this thread, as loaded:
    // all three issued before the row sums, so that the residual's read is not a second
    // memory round trip after them. (Loading the next row here as well, one row ahead, gained
    // nothing: 1.3B 3.71 vs 3.68 ms per step with gamma re-read.)
    uint4 rdy[K], rx[K], rres[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c0 = static_cast<int64_t>(t + k * tpr) * W;
      const bool load = active && c0 < h;
      rdy[k] = load ? load_raw<T, kVec>(dy + row * h, c0, h) : make_uint4(0u, 0u, 0u, 0u);
      rx[k] = load ? load_raw<T, kVec>(x + row * h, c0, h) : make_uint4(0u, 0u, 0u, 0u);
      rres[k] = load && add_dx ? load_raw<T, kVec>(dx + row * h, c0, h) : make_uint4(0u, 0u, 0u, 0u);
    }
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c0 = static_cast<int64_t>(t + k * tpr) * W;
      float d[W], xv[W], gv[W];
      unpack_vec<T>(rdy[k], d);
      unpack_vec<T>(rx[k], xv);
      gamma_of(k, c0, gv);
#pragma unroll
      for (int e = 0; e < W; ++e) {
        if (active && c0 + e < h) {
          const float xhat = kRms ? xv[e] * s : (xv[e] - m) * s;
          ag[k][e] += d[e] * xhat;
          if constexpr (!kRms) ab[k][e] += d[e];
          const float g = d[e] * gv[e];
          if constexpr (!kRms) sum_g += g;
          sum_gx += g * xhat;
        }
      }
    }
    const float2 tot = row_sum2(make_float2(sum_g, sum_gx), red, wpr, warp, wig, group_sync);
    const float mean_g = tot.x / static_cast<float>(h),
                mean_gx = tot.y / static_cast<float>(h);  // mean_g unused for kRms
    if (active) {
      T* dxr = dx + row * h;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int64_t c0 = static_cast<int64_t>(t + k * tpr) * W;
        if (c0 < h) {
          // xhat and g again from the raw row: the same operations, so the same values.
          float d[W], xv[W], gv[W], o[W];
          unpack_vec<T>(rdy[k], d);
          unpack_vec<T>(rx[k], xv);
          gamma_of(k, c0, gv);
#pragma unroll
          for (int e = 0; e < W; ++e) {
            if constexpr (kRms) {
              const float xhat = xv[e] * s;
              o[e] = s * (d[e] * gv[e] - xhat * mean_gx);
            } else {
              const float xhat = (xv[e] - m) * s;
              const float g = d[e] * gv[e];
              o[e] = s * (g - mean_g - xhat * mean_gx);
            }
          }
          if (add_dx) {
            float r[W];
            unpack_vec<T>(rres[k], r);
#pragma unroll
            for (int e = 0; e < W; ++e) o[e] = __fadd_rn(r[e], to_f32<T>(from_f32<T>(o[e])));
          }
          if constexpr (kDropout) {
            // dz = dx as stored times the mask multiplier, rounded when stored; summed as stored.
            float mk[W], z[W];
#pragma unroll
            for (int q = 0; q < W; q += 4) {
              float m4[4];
              const uint64_t g = drop.offset + static_cast<uint64_t>(row * h + c0 + q);
              if (drop.aligned) {
                dropout4_aligned(drop.seed, drop.stream, g, drop.p, m4);
              } else {
                dropout4(drop.seed, drop.stream, g, drop.p, m4);
              }
#pragma unroll
              for (int e = 0; e < 4; ++e) mk[q + e] = m4[e];
            }
#pragma unroll
            for (int e = 0; e < W; ++e) {
              z[e] = to_f32<T>(from_f32<T>(o[e])) * mk[e];
              if (c0 + e < h) ao[k][e] += to_f32<T>(from_f32<T>(z[e]));
            }
            store_chunk<T, kVec>(static_cast<T*>(drop.dz) + row * h, c0, h, z);
          } else if constexpr (kColsum) {
#pragma unroll
            for (int e = 0; e < W; ++e) {
              if (c0 + e < h) ao[k][e] += to_f32<T>(from_f32<T>(o[e]));  // as stored below
            }
          }
          store_chunk<T, kVec>(dxr, c0, h, o);
        }
      }
    }
  }
  // The groups' column sums, combined by a fixed tree: dy xhat at slot 0, dy at E (not kRms),
  // the third sum after them (at kO).
  constexpr int E = K * W;
  constexpr int S = (kColsum ? 3 : 2) - (kRms ? 1 : 0);
  constexpr int kO = kRms ? E : 2 * E;
  for (int half = groups / 2; half >= 1; half /= 2) {
    __syncthreads();
    if (group >= half && group < 2 * half) {
      float* slot = tree + static_cast<size_t>(group - half) * S * E * tpr;
#pragma unroll
      for (int k = 0; k < K; ++k) {
#pragma unroll
        for (int e = 0; e < W; ++e) {
          slot[(k * W + e) * tpr + t] = ag[k][e];
          if constexpr (!kRms) slot[(E + k * W + e) * tpr + t] = ab[k][e];
          if constexpr (kColsum) slot[(kO + k * W + e) * tpr + t] = ao[k][e];
        }
      }
    }
    __syncthreads();
    if (group < half) {
      const float* slot = tree + static_cast<size_t>(group) * S * E * tpr;
#pragma unroll
      for (int k = 0; k < K; ++k) {
#pragma unroll
        for (int e = 0; e < W; ++e) {
          ag[k][e] += slot[(k * W + e) * tpr + t];
          if constexpr (!kRms) ab[k][e] += slot[(E + k * W + e) * tpr + t];
          if constexpr (kColsum) ao[k][e] += slot[(kO + k * W + e) * tpr + t];
        }
      }
    }
  }
  if (group == 0) {
    float* pg = partial_g + static_cast<int64_t>(blockIdx.x) * h;
    float* pb = kRms ? nullptr : partial_b + static_cast<int64_t>(blockIdx.x) * h;
    float* po = kColsum ? partial_o + static_cast<int64_t>(blockIdx.x) * h : nullptr;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c0 = static_cast<int64_t>(t + k * tpr) * W;
#pragma unroll
      for (int e = 0; e < W; ++e) {
        if (c0 + e < h) {
          pg[c0 + e] = ag[k][e];
          if constexpr (!kRms) pb[c0 + e] = ab[k][e];
          if constexpr (kColsum) po[c0 + e] = ao[k][e];
        }
      }
    }
  }
}

// ---- layernorm, generic path ---------------------------------------------------------------
// Mixed activation dtypes, or rows too long for the registers (h > 12288 for fp32 and 16-bit).

// Dynamic shared memory: 32 floats of reduction buffer, then (if cache_row) the row as fp32.
// kRms: RMSNorm, the second sum only (of x^2), beta and mean null.
template <bool kRms = false>
__global__ void layernorm_forward_kernel(const void* x, DType xdt, const void* gamma, DType gdt, const void* beta,
                                         DType bdt, void* out, DType odt, float* mean, float* rstd, int64_t h,
                                         float eps, bool cache_row) {
  extern __shared__ float smem[];
  float* buf = smem;
  float* row = smem + 32;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * h;
  float m = 0.0f;  // stays 0 for RMSNorm
  if constexpr (kRms) {
    if (cache_row) {
      for (int64_t j = threadIdx.x; j < h; j += blockDim.x) row[j] = load_f(x, xdt, base + j);
    }
  } else {
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
      const float v = load_f(x, xdt, base + j);
      if (cache_row) row[j] = v;
      sum += v;
    }
    m = block_sum(sum, buf) / static_cast<float>(h);
  }
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float v = cache_row ? row[j] : load_f(x, xdt, base + j);
    const float d = kRms ? v : v - m;
    sq += d * d;
  }
  const float var = block_sum(sq, buf) / static_cast<float>(h);
  const float s = 1.0f / sqrtf(var + eps);
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float v = cache_row ? row[j] : load_f(x, xdt, base + j);
    if constexpr (kRms) {
      store_f(out, odt, base + j, v * s * load_f(gamma, gdt, j));
    } else {
      store_f(out, odt, base + j, (v - m) * s * load_f(gamma, gdt, j) + load_f(beta, bdt, j));
    }
  }
  if (threadIdx.x == 0) {
    if constexpr (!kRms) mean[blockIdx.x] = m;
    rstd[blockIdx.x] = s;
  }
}

// Block (kTileCols, kTileRows) = column tile blockIdx.x, row chunk blockIdx.y. Thread (c, r)
// sums rows chunk * kRowsPerChunk + r, + kTileRows, ... of column c; then the kTileRows
// sums are added in order r = 0, 1, ... into partial_g/partial_b[chunk * h + column].
// kRms: xhat = x rstd, no partial_b (mean and partial_b null).
template <bool kRms = false>
__global__ void layernorm_param_partials_kernel(const void* dy, DType dydt, const void* x, DType xdt, const float* mean,
                                                const float* rstd, int64_t n, int64_t h, float* partial_g,
                                                float* partial_b) {
  __shared__ float sg[kTileRows][kTileCols + 1];
  __shared__ float sb[kTileRows][kTileCols + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTileCols + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kRowsPerChunk;
  const int64_t r1 = r0 + kRowsPerChunk < n ? r0 + kRowsPerChunk : n;
  float ag = 0.0f, ab = 0.0f;
  if (col < h) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows) {
      const float d = load_f(dy, dydt, r * h + col);
      if constexpr (kRms) {
        ag += d * load_f(x, xdt, r * h + col) * rstd[r];
      } else {
        ag += d * (load_f(x, xdt, r * h + col) - mean[r]) * rstd[r];
        ab += d;
      }
    }
  }
  sg[threadIdx.y][threadIdx.x] = ag;
  if constexpr (!kRms) sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && col < h) {
    float tg = 0.0f, tb = 0.0f;
#pragma unroll
    for (int r = 0; r < kTileRows; ++r) {
      tg += sg[r][threadIdx.x];
      if constexpr (!kRms) tb += sb[r][threadIdx.x];
    }
    partial_g[blockIdx.y * h + col] = tg;
    if constexpr (!kRms) partial_b[blockIdx.y * h + col] = tb;
  }
}

// dgamma[j] (+=) the sum over chunks of partial_g[chunk][j]; the same for dbeta (both paths);
// written over instead of added to when !accumulate (GradWrite::kOverwrite).
// Block (kReduceCols, kReduceLanes): lane y of column j adds chunks y, y + kReduceLanes, ...
// in order; then the lanes' sums are added in lane order.
constexpr int kReduceCols = 32;
constexpr int kReduceLanes = 16;
// ColSum: optional third partials (partial_o, into dcol with its own accumulate), the same order.
// kRms: no dbeta (partial_b and dbeta null).
struct ColSum {
  const float* partial = nullptr;
  void* out = nullptr;
  DType dtype = DType::kF32;
  bool accumulate = false;
};
template <bool kRms = false>
__global__ void layernorm_param_reduce_kernel(const float* partial_g, const float* partial_b, int64_t chunks, int64_t h,
                                              void* dgamma, DType dgdt, void* dbeta, DType dbdt, bool accumulate,
                                              ColSum col) {
  __shared__ float sg[kReduceLanes][kReduceCols + 1];
  __shared__ float sb[kReduceLanes][kReduceCols + 1];
  __shared__ float so[kReduceLanes][kReduceCols + 1];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kReduceCols + threadIdx.x;
  const bool third = col.partial != nullptr;
  float tg = 0.0f, tb = 0.0f, to = 0.0f;
  if (j < h) {
    for (int64_t c = threadIdx.y; c < chunks; c += kReduceLanes) {
      tg += partial_g[c * h + j];
      if constexpr (!kRms) tb += partial_b[c * h + j];
      if (third) to += col.partial[c * h + j];
    }
  }
  sg[threadIdx.y][threadIdx.x] = tg;
  if constexpr (!kRms) sb[threadIdx.y][threadIdx.x] = tb;
  so[threadIdx.y][threadIdx.x] = to;
  __syncthreads();
  if (threadIdx.y == 0 && j < h) {
    tg = sg[0][threadIdx.x];
    if constexpr (!kRms) tb = sb[0][threadIdx.x];
    to = so[0][threadIdx.x];
#pragma unroll
    for (int r = 1; r < kReduceLanes; ++r) {
      tg += sg[r][threadIdx.x];
      if constexpr (!kRms) tb += sb[r][threadIdx.x];
      to += so[r][threadIdx.x];
    }
    store_f(dgamma, dgdt, j, accumulate ? load_f(dgamma, dgdt, j) + tg : tg);
    if constexpr (!kRms) store_f(dbeta, dbdt, j, accumulate ? load_f(dbeta, dbdt, j) + tb : tb);
    if (third) store_f(col.out, col.dtype, j, col.accumulate ? load_f(col.out, col.dtype, j) + to : to);
  }
}

// One block per row. Each thread reads dy[j] in the first pass and writes dx[j] (only after
// the block-wide sums) at the same j, so dx may alias dy.
// add_dx as in layernorm_backward_rows_kernel. kRms: xhat = x rstd, no mean(g) (mean null).
template <bool kRms = false>
__global__ void layernorm_dx_kernel(const void* dy, DType dydt, const void* x, DType xdt, const void* gamma, DType gdt,
                                    const float* mean, const float* rstd, void* dx, DType dxdt, bool add_dx,
                                    int64_t h) {
  __shared__ float buf[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * h;
  const float m = kRms ? 0.0f : mean[blockIdx.x], s = rstd[blockIdx.x];
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float g = load_f(dy, dydt, base + j) * load_f(gamma, gdt, j);
    if constexpr (kRms) {
      sum_gx += g * (load_f(x, xdt, base + j) * s);
    } else {
      sum_g += g;
      sum_gx += g * ((load_f(x, xdt, base + j) - m) * s);
    }
  }
  const float mean_g = kRms ? 0.0f : block_sum(sum_g, buf) / static_cast<float>(h);
  const float mean_gx = block_sum(sum_gx, buf) / static_cast<float>(h);
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float xhat = kRms ? load_f(x, xdt, base + j) * s : (load_f(x, xdt, base + j) - m) * s;
    const float g = load_f(dy, dydt, base + j) * load_f(gamma, gdt, j);
    const float v = kRms ? s * (g - xhat * mean_gx) : s * (g - mean_g - xhat * mean_gx);
    store_f(dx, dxdt, base + j, add_dx ? __fadd_rn(load_f(dx, dxdt, base + j), round_to(v, dxdt)) : v);
  }
}

// out[row = si * b + bi] = wte[tokens[bi, si]] + wpe[positions[bi, si]] (positions null: si);
// a token outside [0, vocab) takes a zero word row (another vocab-parallel rank's id, ops.h);
// wpe null: no position term.
__global__ void embedding_forward_kernel(const int32_t* tokens, const int32_t* positions, const void* wte, DType tdt,
                                         const void* wpe, DType pdt, void* out, DType odt, int64_t b, int64_t s,
                                         int64_t vocab, int64_t h) {
  const int64_t row = blockIdx.x;
  const int64_t si = row / b, bi = row % b;
  const int32_t t = tokens[bi * s + si];
  const int64_t p = positions != nullptr ? positions[bi * s + si] : si;
  const bool valid = t >= 0 && t < vocab;
  for (int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; j < h;
       j += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    const float w = valid ? load_f(wte, tdt, t * h + j) : 0.0f;
    const float v = wpe != nullptr ? w + load_f(wpe, pdt, p * h + j) : w;
    store_f(out, odt, row * h + j, v);
  }
}

// keys[row] = id * rows + row for row = si * b + bi, id = ids[bi, si] (token or position ids;
// ids outside [0, n_ids) become `n_ids`, a bucket that is never written).
__global__ void embedding_keys_kernel(const int32_t* ids, int64_t b, int64_t s, int64_t n_ids,
                                      unsigned long long* keys) {
  const int64_t rows = b * s;
  for (int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t si = row / b, bi = row % b;
    const int32_t t = ids[bi * s + si];
    const int64_t bucket = t >= 0 && t < n_ids ? t : n_ids;
    keys[row] = static_cast<unsigned long long>(bucket * rows + row);
  }
}

// Block (i, column chunk): if sorted entry i starts a run of equal ids, adds the run's rows of
// dout (ascending row order) into dwte[id] for its columns (dwte: the word or position table).
__global__ void embedding_dwte_kernel(const unsigned long long* sorted, int64_t rows, int64_t vocab, const void* dout,
                                      DType ddt, void* dwte, DType wdt, int64_t h) {
  const int64_t i = blockIdx.x;
  const unsigned long long r = static_cast<unsigned long long>(rows);
  const unsigned long long token = sorted[i] / r;
  if (token >= static_cast<unsigned long long>(vocab)) return;
  if (i > 0 && sorted[i - 1] / r == token) return;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= h) return;
  const int64_t dst = static_cast<int64_t>(token) * h + j;
  float acc = load_f(dwte, wdt, dst);
  for (int64_t k = i; k < rows && sorted[k] / r == token; ++k) {
    acc += load_f(dout, ddt, static_cast<int64_t>(sorted[k] % r) * h + j);
  }
  store_f(dwte, wdt, dst, acc);
}

// dwpe[si] += dout[si, 0] + dout[si, 1] + ... (batch entries in order).
__global__ void embedding_dwpe_kernel(const void* dout, DType ddt, void* dwpe, DType pdt, int64_t b, int64_t h) {
  const int64_t si = blockIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= h) return;
  float acc = load_f(dwpe, pdt, si * h + j);
  for (int64_t bi = 0; bi < b; ++bi) acc += load_f(dout, ddt, (si * b + bi) * h + j);
  store_f(dwpe, pdt, si * h + j, acc);
}

// ---- host helpers -----------------------------------------------------------------------------

void check_device(const Tensor& t, const char* what) {
  MT_CHECK(t.defined()) << what << " is undefined";
  MT_CHECK(t.device() == Device::kCUDA) << what << " " << t.describe() << " is not a CUDA tensor";
}
void check_device_float(const Tensor& t, const char* what) {
  check_device(t, what);
  MT_CHECK(is_float(t.dtype())) << what << " " << t.describe() << " is not a float tensor";
}
void check_device_f32(const Tensor& t, const char* what) {
  check_device(t, what);
  MT_CHECK(t.dtype() == DType::kF32) << what << " " << t.describe() << " must be fp32";
}
void check_device_i32(const Tensor& t, const char* what) {
  check_device(t, what);
  MT_CHECK(t.dtype() == DType::kI32) << what << " " << t.describe() << " must be int32";
}
int64_t rows_of(const Tensor& t, int64_t cols, const char* what) {
  MT_CHECK(cols > 0 && t.numel() % cols == 0) << what << " " << t.describe() << " has no rows of " << cols;
  return t.numel() / cols;
}

// Threads for a block that walks a row of h elements: about 4 elements per thread, a whole
// number of warps, 32 to 512.
unsigned row_threads(int64_t h) {
  const int64_t warps = (h + 127) / 128;
  return static_cast<unsigned>(32 * (warps < 1 ? 1 : warps > 16 ? 16 : warps));
}

// Device memory for one op's intermediates, allocated and freed in stream order
// (cudaMallocAsync / cudaFreeAsync from the device's pool): unlike a tensor's cudaFree, this
// does not wait for the device, and the next op reuses the pool's memory.
class StreamBuffer {
 public:
  StreamBuffer(size_t bytes, cudaStream_t stream) : stream_(stream) {
    MT_CUDA_CHECK(cudaMallocAsync(&p_, bytes > 0 ? bytes : 1, stream));
  }
  ~StreamBuffer() {
    if (p_ != nullptr) cudaFreeAsync(p_, stream_);  // never throws from a destructor
  }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  cudaStream_t stream_;
};

// Most dynamic shared memory the layernorm forward asks for to keep a row (fp32) on chip.
constexpr size_t kMaxRowCacheBytes = 96 * 1024;

// The row-in-registers configuration for rows of h elements of T: the fewest warps per row
// (1, 2, 4, 8 or 16) whose threads hold the row in at most kLnMaxChunks<T> chunks each: K = 1,
// 2, 3 (or 4 for fp32) chunks per thread. Blocks of 8 warps (`groups` rows at a time), or one
// row of 16 warps. ok = false: the row does not fit (the generic path). Twice the fewest warps
// (half the chunks and column accumulators per thread, more blocks per SM) measured slower in
// the backward (H100, bench/results/2026-11-24.md, "attention dropout on cuDNN": 350M 3.29 ->
// 3.71 ms, 1.3B 3.75 -> 4.40 ms per step).
struct LnConfig {
  bool ok = false;
  int wpr = 0;
  int k = 0;
  int threads = 0;
  int groups = 0;
};

template <class T>
LnConfig ln_config(int64_t h) {
  constexpr int W = kVecWidth<T>;
  const int64_t chunks = (h + W - 1) / W;
  const int64_t kmax = kLnMaxChunks<T>;
  for (int wpr = 1; wpr <= kLnMaxWarpsPerRow; wpr *= 2) {
    const int64_t k = (chunks + 32 * wpr - 1) / (32 * wpr);
    if (k <= kmax) {
      LnConfig c;
      c.ok = true;
      c.wpr = wpr;
      c.k = static_cast<int>(k);
      c.threads = wpr <= 8 ? 256 : 32 * wpr;
      c.groups = c.threads / (32 * wpr);
      return c;
    }
  }
  return LnConfig{};
}

// Calls f(std::integral_constant<int, K>{}) for the K that ln_config<T> chose.
template <class T, class F>
void dispatch_chunks(int k, F&& f) {
  switch (k) {
    case 1:
      f(std::integral_constant<int, 1>{});
      return;
    case 2:
      f(std::integral_constant<int, 2>{});
      return;
    case 3:
      f(std::integral_constant<int, 3>{});
      return;
    default:
      break;
  }
  if constexpr (kLnMaxChunks<T> >= 4) {
    if (k == 4) return f(std::integral_constant<int, 4>{});
  }
  MT_CHECK(false) << "layernorm: no kernel for " << k << " chunks per thread";
}

// Calls f(std::bool_constant<b>{}): a runtime flag (RMSNorm) as a kernel template argument.
template <class F>
void dispatch_bool(bool b, F&& f) {
  if (b) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

// How many parts (blocks) the fused backward cuts n rows of wpr warps into, from the backend's
// count `base` (256, or MEGATRON_LN_BACKWARD_BLOCKS): half of it for rows of 16 warps (h >
// 6144 in 16-bit: a block of 512 threads is one row, about one block per SM, and a second
// wave of blocks costs more than their smaller partial sums save), and at most n / 4, so
// that a block has several rows to overlap and the partial sums (2-3 x parts x h floats,
// read again by the reduce) stay small next to the rows. H200, layernorm_bench
// (bench/results/2026-11-28.md, "what the DP step and the h = 5120 layers spend"): 512 x 5120
// 40.0 -> 30.0 us, 256 x 12288 79.7 -> 42.5, 2048 x 12288 144.1 -> 112.9; 2048 x 5120 and
// 8192 x 2048 keep 256 (128 there: +8% and +28%).
// Derived from (n, h, dtype) only, never the device, so the summation order is the same on
// every GPU.
int64_t ln_backward_parts(int64_t n, int wpr, int64_t base) {
  const int64_t cap = wpr >= kLnMaxWarpsPerRow ? std::max<int64_t>(1, base / 2) : base;
  return std::max<int64_t>(1, std::min(cap, n / 4));
}

// Most blocks of the forward's grid-stride loop over row groups.
constexpr int64_t kLnForwardMaxBlocks = 16384;

// fp32 scratch for the parameter-gradient partial sums: the backend's persistent scratch when
// they fit, else a stream-ordered allocation held by `owner`.
float* partial_scratch(const CudaBackend& be, size_t floats, std::optional<StreamBuffer>& owner) {
  const size_t bytes = floats * sizeof(float);
  if (bytes <= kBackendScratchBytes) return static_cast<float*>(be.scratch());
  owner.emplace(bytes, be.stream());
  return owner->as<float>();
}

}  // namespace
}  // namespace cuda

void set_layernorm_warp_forward(Backend& backend, bool on) {
  as_cuda(backend, "set_layernorm_warp_forward").set_layernorm_warp_forward(on);
}

// ---- launchers ------------------------------------------------------------------------------

void CudaBackend::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& out,
                                    Tensor& mean, Tensor& rstd) {
  // RMSNorm when `mean` is undefined (ops.h): no beta, nothing stored to mean.
  const bool rms = !mean.defined();
  cuda::check_device_float(x, "layernorm x");
  cuda::check_device_float(gamma, "layernorm gamma");
  if (!rms) cuda::check_device_float(beta, "layernorm beta");
  cuda::check_device_float(out, "layernorm out");
  if (!rms) cuda::check_device_f32(mean, "layernorm mean");
  cuda::check_device_f32(rstd, "layernorm rstd");
  const int64_t h = x.dim(-1);
  const int64_t n = cuda::rows_of(x, h, "layernorm x");
  MT_CHECK(gamma.numel() == h && (rms ? !beta.defined() : beta.numel() == h))
      << (rms ? "rmsnorm" : "layernorm") << " gamma " << gamma.describe() << ", beta " << beta.describe() << " for x "
      << x.describe() << (rms ? " (RMSNorm has no beta)" : "");
  MT_CHECK(out.numel() == x.numel()) << "layernorm out " << out.describe() << " for x " << x.describe();
  MT_CHECK((rms || mean.numel() == n) && rstd.numel() == n)
      << "layernorm mean " << mean.describe() << ", rstd " << rstd.describe() << " for " << n << " rows";
  MT_CHECK(n <= std::numeric_limits<int32_t>::max()) << "layernorm: " << n << " rows exceed the grid";
  if (n == 0) return;
  const void* bp = rms ? nullptr : beta.data();
  const DType bdt = rms ? gamma.dtype() : beta.dtype();
  float* mp = rms ? nullptr : static_cast<float*>(mean.data());
  // One warp per row (x, out, gamma, beta of one dtype), when chosen (layernorm_paths.h).
  bool launched = false;
  if (layernorm_warp_forward_ && x.dtype() == out.dtype() && gamma.dtype() == x.dtype() && bdt == x.dtype()) {
    cuda::dispatch_float_type(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      constexpr int W = cuda::kVecWidth<T>;
      const int64_t k = ((h + W - 1) / W + 31) / 32;
      if (k > cuda::kLnWarpMaxChunks) return;
      // Past 12 chunks a warp's row is a long serial load-reduce-store: with few rows (under 1024,
      // about a block of 8 per SM) the row groups' many warps per row finish sooner (H200, 512 x
      // 5120, a TP4 + SP shard: 10.0 us against 10.8-11.3 one warp per row; 2048 x 5120: 33.5
      // against 20.0). A fixed count, not the device's SMs: which kernel runs sets the
      // summation order, and that stays the same on every GPU.
      if (k > 12 && n < 1024) return;
      const bool vec = h % W == 0 && cuda::vec_aligned(x.data()) && cuda::vec_aligned(out.data()) &&
                       cuda::vec_aligned(gamma.data()) && (rms || cuda::vec_aligned(bp));
      const int64_t blocks = std::min<int64_t>((n + 7) / 8, cuda::kLnForwardMaxBlocks);
      auto launch = [&](auto kc) {
        constexpr int K = decltype(kc)::value;
        cuda::dispatch_bool(rms, [&](auto rc) {
          constexpr bool R = decltype(rc)::value;
          auto kernel = vec ? cuda::layernorm_forward_warp_kernel<T, K, true, R>
                            : cuda::layernorm_forward_warp_kernel<T, K, false, R>;
          kernel<<<static_cast<unsigned>(blocks), 256, 0, stream()>>>(
              static_cast<const T*>(x.data()), static_cast<const T*>(gamma.data()), static_cast<const T*>(bp),
              static_cast<T*>(out.data()), mp, static_cast<float*>(rstd.data()), n, h, eps);
          MT_CUDA_LAUNCH_CHECK();
        });
      };
      cuda::dispatch_warp_chunks(k, launch);
      launched = true;
    });
  }
  if (launched) return;
  // Fast path: x and out of one dtype, the row in registers.
  if (x.dtype() == out.dtype()) {
    cuda::dispatch_float_type(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const cuda::LnConfig c = cuda::ln_config<T>(h);
      if (!c.ok) return;
      const bool vec = h % cuda::kVecWidth<T> == 0 && cuda::vec_aligned(x.data()) && cuda::vec_aligned(out.data());
      cuda::dispatch_chunks<T>(c.k, [&](auto kc) {
        constexpr int K = decltype(kc)::value;
        cuda::dispatch_bool(rms, [&](auto rc) {
          constexpr bool R = decltype(rc)::value;
          auto kernel = vec ? cuda::layernorm_forward_rows_kernel<T, K, true, R>
                            : cuda::layernorm_forward_rows_kernel<T, K, false, R>;
          // As many blocks as are resident at once, each looping over rows: gamma and beta are
          // loaded into registers once per block instead of once per row (a block per row ran
          // 2048 x 12288 at 1.15 TB/s). Each row is one group's alone, so the grid changes no bit.
          const int resident = resident_blocks(reinterpret_cast<const void*>(kernel), c.threads, device_index());
          const int64_t blocks = std::min<int64_t>({(n + c.groups - 1) / c.groups, cuda::kLnForwardMaxBlocks,
                                                    std::max<int64_t>(1, int64_t{resident} * sm_count())});
          kernel<<<static_cast<unsigned>(blocks), static_cast<unsigned>(c.threads), 0, stream()>>>(
              static_cast<const T*>(x.data()), gamma.data(), gamma.dtype(), bp, bdt, static_cast<T*>(out.data()), mp,
              static_cast<float*>(rstd.data()), n, h, c.wpr, eps, layernorm_group_sync_);
          MT_CUDA_LAUNCH_CHECK();
        });
      });
      launched = true;
    });
  }
  if (launched) return;
  const size_t row_bytes = (32 + static_cast<size_t>(h)) * sizeof(float);
  const bool cache_row = row_bytes <= cuda::kMaxRowCacheBytes;
  const size_t smem = cache_row ? row_bytes : 32 * sizeof(float);
  auto kernel = rms ? cuda::layernorm_forward_kernel<true> : cuda::layernorm_forward_kernel<false>;
  if (smem > 48 * 1024) {
    MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  kernel<<<static_cast<unsigned>(n), cuda::row_threads(h), smem, stream()>>>(
      x.data(), x.dtype(), gamma.data(), gamma.dtype(), bp, bdt, out.data(), out.dtype(), mp,
      static_cast<float*>(rstd.data()), h, eps, cache_row);
  MT_CUDA_LAUNCH_CHECK();
}

namespace {

// layernorm_backward; with `colsum`, the fast path also takes dx's column sums in its kernel
// (kColsum) where a thread holds at most kLnColsumMaxChunks chunks, and returns true. false:
// the caller sums dx itself (wider rows, the generic path, or no colsum). dx, dgamma and dbeta
// are the same bits either way. With `dropout` (and colsum, dz): the kernel also writes dz =
// dropout_backward(dx) and the column sums are dz's (kDropout); false: the caller does both.
// RMSNorm when `mean` is undefined (dbeta undefined too): the kernels' kRms.
bool layernorm_backward_launch(CudaBackend& be, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                               const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                               GradWrite write, GradWrite dx_write, Tensor* colsum, GradWrite colsum_write,
                               const DropoutParams* dropout = nullptr, Tensor* dz = nullptr) {
  cuda::check_device_float(dy, "layernorm dy");
  cuda::check_device_float(x, "layernorm x");
  cuda::check_device_float(gamma, "layernorm gamma");
  cuda::check_device_float(dx, "layernorm dx");
  const bool rms = !mean.defined();
  cuda::check_device_float(dgamma, "layernorm dgamma");
  if (!rms) cuda::check_device_float(dbeta, "layernorm dbeta");
  if (!rms) cuda::check_device_f32(mean, "layernorm mean");
  cuda::check_device_f32(rstd, "layernorm rstd");
  const int64_t h = x.dim(-1);
  const int64_t n = cuda::rows_of(x, h, "layernorm x");
  MT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel())
      << "layernorm dy " << dy.describe() << ", dx " << dx.describe() << " for x " << x.describe();
  MT_CHECK(gamma.numel() == h && dgamma.numel() == h && (rms ? !dbeta.defined() : dbeta.numel() == h))
      << (rms ? "rmsnorm" : "layernorm") << " gamma " << gamma.describe() << ", dgamma " << dgamma.describe()
      << ", dbeta " << dbeta.describe() << (rms ? " (RMSNorm has no beta)" : "");
  if (colsum) {
    cuda::check_device_float(*colsum, "layernorm dx_colsum");
    MT_CHECK_EQ(colsum->numel(), h) << "layernorm dx_colsum " << colsum->describe() << " for x " << x.describe();
  }
  if (dropout) {
    MT_CHECK(dropout->p >= 0.0f && dropout->p < 1.0f) << "dropout probability " << dropout->p << " is not in [0, 1)";
    MT_CHECK(colsum && dz) << "layernorm backward with dropout needs dz and its column sums";
    cuda::check_device_float(*dz, "layernorm dz");
    MT_CHECK(dz->numel() == x.numel() && dz->dtype() == dx.dtype() && !overlaps(*dz, dx) && !overlaps(*dz, dy))
        << "layernorm dz " << dz->describe() << " for dx " << dx.describe()
        << " (same shape and dtype, its own memory)";
  }
  MT_CHECK((rms || mean.numel() == n) && rstd.numel() == n) << "layernorm mean/rstd for " << n << " rows";
  MT_CHECK(n <= std::numeric_limits<int32_t>::max()) << "layernorm: " << n << " rows exceed the grid";
  const bool add_dx = dx_write == GradWrite::kAccumulate;
  MT_CHECK(!add_dx || !overlaps(dx, dy)) << "layernorm backward adding into dx: dx " << dx.describe()
                                         << " must not alias dy";
  const bool accumulate = write == GradWrite::kAccumulate;
  if (n == 0) {
    if (!accumulate) {
      be.fill(dgamma, 0.0f);
      if (!rms) be.fill(dbeta, 0.0f);
    }
    return false;  // bias_grad of no rows: zeros when overwriting
  }
  const float* mp = rms ? nullptr : static_cast<const float*>(mean.data());
  const float* rp = static_cast<const float*>(rstd.data());
  void* dbp = rms ? nullptr : dbeta.data();
  const DType dbdt = rms ? dgamma.dtype() : dbeta.dtype();
  auto reduce_kernel = rms ? cuda::layernorm_param_reduce_kernel<true> : cuda::layernorm_param_reduce_kernel<false>;
  const unsigned reduce_blocks = static_cast<unsigned>((h + cuda::kReduceCols - 1) / cuda::kReduceCols);
  const dim3 reduce_block(cuda::kReduceCols, cuda::kReduceLanes);

  // Fast path: dy, x and dx of one dtype, the row in registers; dx and the parameter-gradient
  // partials in one pass, then the fixed-order reduce.
  bool launched = false;
  Tensor* in_kernel = nullptr;  // colsum, when the kernel takes the sums
  if (dy.dtype() == x.dtype() && dx.dtype() == x.dtype()) {
    cuda::dispatch_float_type(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      constexpr int W = cuda::kVecWidth<T>;
      const cuda::LnConfig c = cuda::ln_config<T>(h);
      if (!c.ok) return;
      if (c.k <= cuda::kLnColsumMaxChunks<T>) in_kernel = colsum;
      const bool vec = h % W == 0 && cuda::vec_aligned(dy.data()) && cuda::vec_aligned(x.data()) &&
                       cuda::vec_aligned(dx.data()) && (!dropout || cuda::vec_aligned(dz->data()));
      // Rows per block: about n / parts, a whole number of rows per group (ln_backward_parts).
      const int64_t parts = cuda::ln_backward_parts(n, c.wpr, be.layernorm_backward_blocks());
      const int64_t target = (n + parts - 1) / parts;
      const int64_t rows_per_group = (target + c.groups - 1) / c.groups;
      const int64_t rows_per_block = rows_per_group * c.groups;
      const int64_t blocks = (n + rows_per_block - 1) / rows_per_block;
      // Column sums per block: dy xhat, dy (not RMSNorm), then dx's or dz's (in_kernel).
      const int sums = (in_kernel ? 3 : 2) - (rms ? 1 : 0);
      std::optional<cuda::StreamBuffer> owner;
      float* pg = cuda::partial_scratch(be, static_cast<size_t>(sums * blocks * h), owner);
      float* pb = rms ? nullptr : pg + blocks * h;
      float* po = in_kernel ? pg + (sums - 1) * blocks * h : nullptr;
      cuda::dispatch_chunks<T>(c.k, [&](auto kc) {
        constexpr int K = decltype(kc)::value;
        const size_t smem = static_cast<size_t>(c.groups / 2) * sums * K * W * 32 * c.wpr * sizeof(float);
        cuda::dispatch_bool(rms, [&](auto rc) {
          constexpr bool R = decltype(rc)::value;
          auto kernel = vec ? cuda::layernorm_backward_rows_kernel<T, K, true, false, false, R>
                            : cuda::layernorm_backward_rows_kernel<T, K, false, false, false, R>;
          cuda::LnDropout drop;
          if constexpr (K <= cuda::kLnColsumMaxChunks<T>) {
            if (in_kernel && dropout) {
              kernel = vec ? cuda::layernorm_backward_rows_kernel<T, K, true, true, true, R>
                           : cuda::layernorm_backward_rows_kernel<T, K, false, true, true, R>;
              drop = {dz->data(),         dropout->seed, dropout->stream,
                      dropout->offset,    dropout->p,    dropout->offset % 4 == 0 && h % 4 == 0 && dropout->p > 0.0f,
                      dropout->stream_add};
            } else if (in_kernel) {
              kernel = vec ? cuda::layernorm_backward_rows_kernel<T, K, true, true, false, R>
                           : cuda::layernorm_backward_rows_kernel<T, K, false, true, false, R>;
            }
          }
          kernel<<<static_cast<unsigned>(blocks), static_cast<unsigned>(c.threads), smem, be.stream()>>>(
              static_cast<const T*>(dy.data()), static_cast<const T*>(x.data()), gamma.data(), gamma.dtype(), mp, rp,
              static_cast<T*>(dx.data()), add_dx, n, h, c.wpr, static_cast<int>(rows_per_group), pg, pb, po,
              be.layernorm_group_sync(), drop);
          MT_CUDA_LAUNCH_CHECK();
        });
      });
      cuda::ColSum col;
      if (in_kernel) col = {po, in_kernel->data(), in_kernel->dtype(), colsum_write == GradWrite::kAccumulate};
      reduce_kernel<<<reduce_blocks, reduce_block, 0, be.stream()>>>(pg, pb, blocks, h, dgamma.data(), dgamma.dtype(),
                                                                     dbp, dbdt, accumulate, col);
      MT_CUDA_LAUNCH_CHECK();
      launched = true;
    });
  }
  if (launched) return in_kernel != nullptr;

  // Generic path. 1 and 2: dgamma, dbeta (before dx, which may alias dy).
  const int64_t chunks = (n + cuda::kRowsPerChunk - 1) / cuda::kRowsPerChunk;
  const int64_t col_tiles = (h + cuda::kTileCols - 1) / cuda::kTileCols;
  MT_CHECK(chunks <= 65535) << "layernorm backward: " << n << " rows exceed the partial-sum grid";
  std::optional<cuda::StreamBuffer> owner;
  float* pg = cuda::partial_scratch(be, (rms ? 1 : 2) * static_cast<size_t>(chunks * h), owner);
  float* pb = rms ? nullptr : pg + chunks * h;
  auto partials_kernel =
      rms ? cuda::layernorm_param_partials_kernel<true> : cuda::layernorm_param_partials_kernel<false>;
  partials_kernel<<<dim3(static_cast<unsigned>(col_tiles), static_cast<unsigned>(chunks)),
                    dim3(cuda::kTileCols, cuda::kTileRows), 0, be.stream()>>>(dy.data(), dy.dtype(), x.data(),
                                                                              x.dtype(), mp, rp, n, h, pg, pb);
  MT_CUDA_LAUNCH_CHECK();
  reduce_kernel<<<reduce_blocks, reduce_block, 0, be.stream()>>>(pg, pb, chunks, h, dgamma.data(), dgamma.dtype(), dbp,
                                                                 dbdt, accumulate, cuda::ColSum{});
  MT_CUDA_LAUNCH_CHECK();

  // 3: dx.
  auto dx_kernel = rms ? cuda::layernorm_dx_kernel<true> : cuda::layernorm_dx_kernel<false>;
  dx_kernel<<<static_cast<unsigned>(n), cuda::row_threads(h), 0, be.stream()>>>(
      dy.data(), dy.dtype(), x.data(), x.dtype(), gamma.data(), gamma.dtype(), mp, rp, dx.data(), dx.dtype(), add_dx,
      h);
  MT_CUDA_LAUNCH_CHECK();
  return false;
}

}  // namespace

void CudaBackend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                     const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta, GradWrite write,
                                     GradWrite dx_write) {
  layernorm_backward_launch(*this, dy, x, gamma, mean, rstd, dx, dgamma, dbeta, write, dx_write, nullptr,
                            GradWrite::kOverwrite);
}

void CudaBackend::layernorm_backward_colsum(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                            const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                                            Tensor& dx_colsum, GradWrite write, GradWrite dx_write,
                                            GradWrite colsum_write) {
  if (!layernorm_backward_launch(*this, dy, x, gamma, mean, rstd, dx, dgamma, dbeta, write, dx_write, &dx_colsum,
                                 colsum_write)) {
    bias_grad(dx, dx_colsum, colsum_write);
  }
}

void CudaBackend::layernorm_backward_dropout_colsum(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                                    const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dgamma,
                                                    Tensor& dbeta, Tensor& dz, Tensor& dz_colsum,
                                                    const DropoutParams& dropout, GradWrite write, GradWrite dx_write,
                                                    GradWrite colsum_write) {
  if (!layernorm_backward_launch(*this, dy, x, gamma, mean, rstd, dx, dgamma, dbeta, write, dx_write, &dz_colsum,
                                 colsum_write, &dropout, &dz)) {
    dropout_backward(dx, dz, dropout);
    bias_grad(dz, dz_colsum, colsum_write);
  }
}

namespace {

// Position ids of the embedding (ops.h): null for 0..s-1; else a device int32 [b, s].
const int32_t* device_positions(const Tensor& positions, int64_t b, int64_t s, int64_t P) {
  if (!positions.defined()) {
    MT_CHECK(s <= P) << "sequence length " << s << " exceeds the position table's " << P << " rows";
    return nullptr;
  }
  cuda::check_device_i32(positions, "embedding positions");
  MT_CHECK(positions.ndim() == 2 && positions.dim(0) == b && positions.dim(1) == s)
      << "embedding positions " << positions.describe() << ", expected [" << b << ", " << s << "]";
  return static_cast<const int32_t*>(positions.data());
}

// dst[id] += dout rows with that id (ids[b, s], rows in ascending (s, b) order per id: the CPU
// backend's order), by sorting the keys id * rows + row (unique, so any sort gives one order).
void scatter_add_rows(const int32_t* ids, int64_t b, int64_t s, int64_t n_ids, const Tensor& dout, Tensor& dst,
                      cudaStream_t stream) {
  const int64_t rows = s * b, h = dst.dim(1);
  const unsigned threads = 256;
  const unsigned col_blocks = static_cast<unsigned>((h + threads - 1) / threads);
  const unsigned long long max_key =
      static_cast<unsigned long long>(n_ids + 1) * static_cast<unsigned long long>(rows) - 1;
  int end_bit = 1;
  while (end_bit < 64 && (max_key >> end_bit) != 0) ++end_bit;
  cuda::StreamBuffer keys(2 * static_cast<size_t>(rows) * sizeof(unsigned long long), stream);
  auto* keys_in = keys.as<unsigned long long>();
  auto* keys_out = keys_in + rows;
  cuda::embedding_keys_kernel<<<cuda::grid_for(rows), 256, 0, stream>>>(ids, b, s, n_ids, keys_in);
  MT_CUDA_LAUNCH_CHECK();
  size_t temp_bytes = 0;
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, keys_in, keys_out, static_cast<int>(rows), 0,
                                               end_bit, stream));
  cuda::StreamBuffer temp(temp_bytes, stream);
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(temp.as<void>(), temp_bytes, keys_in, keys_out, static_cast<int>(rows),
                                               0, end_bit, stream));
  cuda::embedding_dwte_kernel<<<dim3(static_cast<unsigned>(rows), col_blocks), threads, 0, stream>>>(
      keys_out, rows, n_ids, dout.data(), dout.dtype(), dst.data(), dst.dtype(), h);
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void CudaBackend::embedding_forward(const Tensor& tokens, const Tensor& positions, const Tensor& wte, const Tensor& wpe,
                                    Tensor& out) {
  cuda::check_device_i32(tokens, "embedding tokens");
  cuda::check_device_float(wte, "embedding wte");
  if (wpe.defined()) cuda::check_device_float(wpe, "embedding wpe");
  cuda::check_device_float(out, "embedding out");
  MT_CHECK(tokens.ndim() == 2) << "embedding tokens " << tokens.describe() << " must be [b, s]";
  MT_CHECK(wte.ndim() == 2 && (!wpe.defined() || (wpe.ndim() == 2 && wte.dim(1) == wpe.dim(1))))
      << "embedding tables wte " << wte.describe() << ", wpe " << wpe.describe();
  const int64_t b = tokens.dim(0), s = tokens.dim(1), vocab = wte.dim(0), h = wte.dim(1);
  const int32_t* pos = wpe.defined() ? device_positions(positions, b, s, wpe.dim(0)) : nullptr;
  MT_CHECK(out.numel() == s * b * h) << "embedding out " << out.describe() << ", expected [" << s << ", " << b << ", "
                                     << h << "]";
  if (s * b == 0 || h == 0) return;
  const unsigned threads = 256;
  const int64_t col_blocks = (h + threads - 1) / threads;
  cuda::embedding_forward_kernel<<<dim3(static_cast<unsigned>(s * b), static_cast<unsigned>(col_blocks)), threads, 0,
                                   stream()>>>(
      static_cast<const int32_t*>(tokens.data()), pos, wte.data(), wte.dtype(), wpe.defined() ? wpe.data() : nullptr,
      wpe.defined() ? wpe.dtype() : wte.dtype(), out.data(), out.dtype(), b, s, vocab, h);
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::embedding_backward(const Tensor& tokens, const Tensor& positions, const Tensor& dout, Tensor& dwte,
                                     Tensor& dwpe) {
  cuda::check_device_i32(tokens, "embedding tokens");
  cuda::check_device_float(dout, "embedding dout");
  cuda::check_device_float(dwte, "embedding dwte");
  const bool with_positions = dwpe.defined();  // undefined: no position table
  if (with_positions) cuda::check_device_float(dwpe, "embedding dwpe");
  MT_CHECK(tokens.ndim() == 2) << "embedding tokens " << tokens.describe() << " must be [b, s]";
  MT_CHECK(dwte.ndim() == 2 && (!with_positions || (dwpe.ndim() == 2 && dwte.dim(1) == dwpe.dim(1))))
      << "embedding grads dwte " << dwte.describe() << ", dwpe " << dwpe.describe();
  const int64_t b = tokens.dim(0), s = tokens.dim(1), vocab = dwte.dim(0), h = dwte.dim(1);
  const int32_t* pos = with_positions ? device_positions(positions, b, s, dwpe.dim(0)) : nullptr;
  MT_CHECK(dout.numel() == s * b * h) << "embedding dout " << dout.describe();
  const int64_t rows = s * b;
  if (rows == 0 || h == 0) return;
  MT_CHECK(rows <= std::numeric_limits<int32_t>::max()) << "embedding: " << rows << " rows exceed the grid";
  scatter_add_rows(static_cast<const int32_t*>(tokens.data()), b, s, vocab, dout, dwte, stream());
  if (!with_positions) return;
  if (pos != nullptr) {
    scatter_add_rows(pos, b, s, dwpe.dim(0), dout, dwpe, stream());
    return;
  }
  const unsigned threads = 256;
  const unsigned col_blocks = static_cast<unsigned>((h + threads - 1) / threads);
  cuda::embedding_dwpe_kernel<<<dim3(static_cast<unsigned>(s), col_blocks), threads, 0, stream()>>>(
      dout.data(), dout.dtype(), dwpe.data(), dwpe.dtype(), b, h);
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace megatron::backend
