// CUDA backend: causal self-attention over Megatron's fused QKV layout (ops.h,
// AttentionParams), flash-attention style, and attention over a KV cache (generation).
//
// Reference: backend/cpu/cpu_attention.cpp (the same function of the inputs) and
// Dao, "FlashAttention-2" (tiling, online softmax, lse saved, two-pass backward).
// attention_forward/backward first offer the case to cuDNN's fused attention
// (cudnn_attention.cpp, MEGATRON_ATTENTION_IMPL); the kernels here run what it does not take
// (dropout, fp32, ...) and everything under MEGATRON_ATTENTION_IMPL=own.
//
// Two paths: bf16/fp16 tensors with head_dim 64 or 128 (the training case) run the tensor-core
// kernels of namespace tc below (mma.sync, fp32 accumulation and softmax, the same Philox
// mask); every other case (fp32, other head dims, the KV cache) runs the fp32 SIMT kernels:
// Design of the SIMT path (fp32 math from shared memory, no tensor cores):
//  - One block of 256 threads = a 16 x 16 thread grid (ty = tid / 16, tx = tid % 16) per
//    (row tile, batch * head). Score tiles S[R x C] are held 16 per thread as rows ty + 16r,
//    columns tx + 16c; a row's 16 holders are one half-warp, so row max / sum are xor shuffles
//    over offsets 8..1 (every lane ends with the same bits, so the online-softmax state agrees).
//    Output tiles [R x DMAX] are held as rows ty + 16r, columns tx*4 + 64c + (0..3).
//  - q/k/v/dO tiles live in shared memory as fp32 rows of DMAX (64 or 128; head_dim <= DMAX is
//    zero-padded) plus 4 floats of padding: 16-byte reads of 8 different rows by a quarter warp
//    then hit 8 different bank groups.
//  - Forward: per query tile, stream key tiles 0 .. diagonal with running max m and sum l per
//    row (fp32); tiles entirely above the diagonal are never visited; dropout multiplies the
//    probabilities (after l is summed) with the CPU's Philox element index; out = O / l,
//    lse = m + log l.
//  - Backward, deterministic (no atomics), no scratch memory: one kernel per key tile
//    accumulates dK, dV over the query tiles from the diagonal down (S^T and dP^T computed
//    directly with keys as rows), a second kernel per query tile accumulates dQ over the key
//    tiles up to the diagonal. Both recompute P from q, k and lse, the dropout mask from
//    (seed, stream), and D_i = dO_i . out_i (= sum_j P_ij dP_ij, the CPU's form) per query
//    tile with the same code, so the two kernels agree bit for bit on P, dS and D.
//  - KV cache: the new k/v rows are appended by a copy kernel, then the forward kernel runs
//    with queries from qkv (absolute positions past .. past+t-1) and keys/values read from the
//    fp32 caches; with the same key tiling as attention_forward, a cached row reproduces the
//    training forward's row.
// Expected speed: fp32 FMA from shared memory, roughly 10-20 TFLOP/s on an H100 (the causal
// forward of s=2048, 16 heads of 128 is ~17 GFLOP: ~1-2 ms), 10-30x slower than a tensor-core
// (wgmma) flash attention in bf16; memory traffic is O(s * d) per (batch, head) as in
// flash attention.
// Longer than 800 lines because the forward, backward and KV-cache kernels share one set of
// templated tile helpers (the anonymous namespace below) that no other file uses.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/attention_impl.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cudnn_attention.h"
#include "backend/qkv_layout.h"

namespace megatron::backend {

using namespace cuda;

namespace {

constexpr int kThreads = 256;  // a 16 x 16 thread grid
constexpr float kNegInf = -INFINITY;

// Row `row` of (batch bi, query head hd) of a head-split matrix whose heads come in groups of
// `group` query heads (query groups, ops.h): element c at
//   base + bi * batch_stride + (hd / group) * head_stride + (hd % group) * slot_stride
//        + row * row_stride + c.
// Queries: group n, slot_stride d; keys and values (shared by a group's queries): slot_stride
// 0; out/dout and the fp32 KV caches: group 1 (one head per query head) or the group's cache.
struct HeadMatrix {
  const void* ptr = nullptr;
  DType dtype = DType::kF32;
  int64_t base = 0;
  int64_t row_stride = 0, batch_stride = 0, head_stride = 0;
  int64_t group = 1, slot_stride = 0;

  __device__ int64_t at(int64_t bi, int64_t hd, int64_t row) const {
    return base + bi * batch_stride + (hd / group) * head_stride + (hd % group) * slot_stride + row * row_stride;
  }
};

struct OutMatrix {
  void* ptr = nullptr;
  DType dtype = DType::kF32;
  int64_t base = 0;
  int64_t row_stride = 0, batch_stride = 0, head_stride = 0;
  int64_t group = 1, slot_stride = 0;

  __device__ int64_t at(int64_t bi, int64_t hd, int64_t row) const {
    return base + bi * batch_stride + (hd / group) * head_stride + (hd % group) * slot_stride + row * row_stride;
  }
};

// q, k or v (part 0, 1, 2) of a query head in qkv[s, b, G * (n + 2) * d] (qkv_layout.h; for
// G = heads the [q, k, v] per head layout); out/dout of [s, b, heads * d].
HeadMatrix qkv_part(const Tensor& qkv, int64_t b, const QkvLayout& L, int part) {
  const int64_t n = L.per_group(), d = L.head_dim, w = L.width();
  const int64_t base = part == 0 ? 0 : (n + part - 1) * d;
  return HeadMatrix{qkv.data(), qkv.dtype(), base, b * w, w, L.group_width(), n, part == 0 ? d : 0};
}
HeadMatrix head_rows(const Tensor& t, int64_t b, int64_t heads, int64_t d) {
  return HeadMatrix{t.data(), t.dtype(), 0, b * heads * d, heads * d, d};
}

struct ForwardArgs {
  HeadMatrix q, k, v;
  OutMatrix out;
  float* lse = nullptr;  // [b * heads, nq] or null
  int64_t nq = 0;        // query rows
  int64_t nk = 0;        // key rows
  int64_t q_pos0 = 0;    // absolute position of query row 0 (keys j <= q_pos0 + row are visible)
  int heads = 0, d = 0;
  int groups = 0, per_group = 1;  // G key/value heads of heads / G query heads each
  float scale = 0.0f;
  float dropout_p = 0.0f;  // index ((dropout_bh(bh) * nq + row) * nk + key); only with nq == nk, q_pos0 == 0
  uint64_t seed = 0, stream = 0;
  const uint64_t* stream_add = nullptr;      // DropoutParams::stream_add (device memory) or null
  int dropout_heads = 0, dropout_head0 = 0;  // ops.h AttentionParams (global heads of the index)
  // [b, nq] first visible key per query (AttentionParams::key_start; only with nq == nk,
  // q_pos0 == 0) or null: keys key_start[bi, row] <= j are visible, non-decreasing per row.
  const int32_t* key_start = nullptr;
};

struct BackwardArgs {
  HeadMatrix q, k, v, dout, out;
  OutMatrix dq, dk, dv;
  const float* lse = nullptr;  // [b * heads, s]
  // Tensor-core path only: [b * heads, s] fp32 scratch written by attention_bwd_prep_tc_kernel
  // (lse2 = lse * log2(e), delta = dO . out per row); unused by the SIMT kernels.
  const float* lse2 = nullptr;
  const float* delta = nullptr;
  int64_t s = 0;
  int heads = 0, d = 0;
  // G key/value heads of heads / G query heads each: the dK/dV kernels run one block per
  // (key tile, batch * G) and sum over the group's query heads in head order.
  int groups = 0, per_group = 1;
  float scale = 0.0f;
  float dropout_p = 0.0f;
  uint64_t seed = 0, stream = 0;
  const uint64_t* stream_add = nullptr;      // DropoutParams::stream_add (device memory) or null
  int dropout_heads = 0, dropout_head0 = 0;  // ops.h AttentionParams (global heads of the index)
  const int32_t* key_start = nullptr;        // [b, s] as in ForwardArgs, or null
};

// The Philox stream of the masks: `stream`, plus the value at stream_add when set (ops.h).
template <class Args>
__device__ __forceinline__ uint64_t dropout_stream(const Args& a) {
  return a.stream_add != nullptr ? a.stream + *a.stream_add : a.stream;
}

// The (batch, head) pair of the dropout index for the local pair bh = bi * heads + hd: the
// global head dropout_head0 + hd of dropout_heads (tensor parallelism; ops.h).
template <class Args>
__device__ __forceinline__ int64_t dropout_bh(const Args& a, int64_t bh) {
  return (bh / a.heads) * a.dropout_heads + a.dropout_head0 + bh % a.heads;
}

// ---- tile helpers ------------------------------------------------------------------------

// Rows [row0, row0 + ROWS) of matrix m (batch bi, head hd) into dst[ROWS][LD] as fp32; rows
// >= nrows and columns >= d are zero.
template <int ROWS, int DMAX, int LD>
__device__ __forceinline__ void load_tile(float* dst, const HeadMatrix& m, int64_t bi, int64_t hd, int64_t row0,
                                          int64_t nrows, int d) {
  for (int idx = threadIdx.x; idx < ROWS * DMAX; idx += kThreads) {
    const int r = idx / DMAX, c = idx % DMAX;
    const int64_t row = row0 + r;
    float v = 0.0f;
    if (row < nrows && c < d) v = load_f(m.ptr, m.dtype, m.at(bi, hd, row) + c);
    dst[r * LD + c] = v;
  }
}

// acc[r][c] = sum_k A[ty + 16r][k] * B[tx + 16c][k], k < K, in 16-byte steps (fixed order).
template <int RR, int CC, int K, int LDA, int LDB>
__device__ __forceinline__ void tile_dot(const float* __restrict__ A, const float* __restrict__ B, int ty, int tx,
                                         float (&acc)[RR][CC]) {
#pragma unroll
  for (int r = 0; r < RR; ++r)
#pragma unroll
    for (int c = 0; c < CC; ++c) acc[r][c] = 0.0f;
#pragma unroll 2
  for (int k = 0; k < K; k += 4) {
    float4 a[RR], b[CC];
#pragma unroll
    for (int r = 0; r < RR; ++r) a[r] = *reinterpret_cast<const float4*>(A + (ty + 16 * r) * LDA + k);
#pragma unroll
    for (int c = 0; c < CC; ++c) b[c] = *reinterpret_cast<const float4*>(B + (tx + 16 * c) * LDB + k);
#pragma unroll
    for (int r = 0; r < RR; ++r)
#pragma unroll
      for (int c = 0; c < CC; ++c) {
        float t = acc[r][c];
        t = fmaf(a[r].x, b[c].x, t);
        t = fmaf(a[r].y, b[c].y, t);
        t = fmaf(a[r].z, b[c].z, t);
        t = fmaf(a[r].w, b[c].w, t);
        acc[r][c] = t;
      }
  }
}

// acc[r][c][e] += sum_j P[ty + 16r][j] * V[j][tx*4 + 64c + e], j < J (fixed order).
template <int RR, int NC, int J, int LDP, int LDV>
__device__ __forceinline__ void tile_accum(const float* __restrict__ P, const float* __restrict__ V, int ty, int tx,
                                           float (&acc)[RR][NC][4]) {
#pragma unroll 2
  for (int j = 0; j < J; j += 4) {
    float4 p[RR];
#pragma unroll
    for (int r = 0; r < RR; ++r) p[r] = *reinterpret_cast<const float4*>(P + (ty + 16 * r) * LDP + j);
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      float4 v[NC];
#pragma unroll
      for (int c = 0; c < NC; ++c) v[c] = *reinterpret_cast<const float4*>(V + (j + jj) * LDV + tx * 4 + 64 * c);
#pragma unroll
      for (int r = 0; r < RR; ++r) {
        const float pj = jj == 0 ? p[r].x : jj == 1 ? p[r].y : jj == 2 ? p[r].z : p[r].w;
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          acc[r][c][0] = fmaf(pj, v[c].x, acc[r][c][0]);
          acc[r][c][1] = fmaf(pj, v[c].y, acc[r][c][1]);
          acc[r][c][2] = fmaf(pj, v[c].z, acc[r][c][2]);
          acc[r][c][3] = fmaf(pj, v[c].w, acc[r][c][3]);
        }
      }
    }
  }
}

// Max / sum over the 16 lanes of a half-warp (all 16 get the same bits).
__device__ __forceinline__ float half_warp_max(float v) {
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
__device__ __forceinline__ float half_warp_sum(float v) {
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Stores rows ty + 16r (< nrows), columns tx*4 + 64c + e (< d) of acc * mul into m.
template <int RR, int NC>
__device__ __forceinline__ void store_rows(const OutMatrix& m, int64_t bi, int64_t hd, int64_t row0, int64_t nrows,
                                           int d, int ty, int tx, const float (&acc)[RR][NC][4],
                                           const float (&mul)[RR]) {
#pragma unroll
  for (int r = 0; r < RR; ++r) {
    const int64_t row = row0 + ty + 16 * r;
    if (row >= nrows) continue;
    const int64_t off = m.at(bi, hd, row);
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = tx * 4 + 64 * c + e;
        if (col < d) store_f(m.ptr, m.dtype, off + col, acc[r][c][e] * mul[r]);
      }
  }
}

template <int DMAX, int BQ, int BK>
constexpr size_t forward_smem_bytes() {
  return sizeof(float) * (static_cast<size_t>(BQ + 2 * BK) * (DMAX + 4) + static_cast<size_t>(BQ) * (BK + 4));
}

// ---- forward -----------------------------------------------------------------------------

// Grid (ceil(nq / BQ), b * heads). Shared: Q[BQ][DMAX+4], K[BK][DMAX+4], V[BK][DMAX+4],
// P[BQ][BK+4].
template <int DMAX, int BQ, int BK>
__global__ void __launch_bounds__(kThreads, 2) attention_forward_kernel(const ForwardArgs a) {
  constexpr int LD = DMAX + 4, LDP = BK + 4, RR = BQ / 16, CC = BK / 16, NC = DMAX / 64;
  extern __shared__ float4 smem4[];
  float* Qs = reinterpret_cast<float*>(smem4);
  float* Ks = Qs + BQ * LD;
  float* Vs = Ks + BK * LD;
  float* Ps = Vs + BK * LD;

  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t bh = blockIdx.y, bi = bh / a.heads, hd = bh % a.heads;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * BQ;

  load_tile<BQ, DMAX, LD>(Qs, a.q, bi, hd, r0, a.nq, a.d);

  float m[RR], l[RR], o[RR][NC][4];
#pragma unroll
  for (int r = 0; r < RR; ++r) {
    m[r] = kNegInf;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[r][c][e] = 0.0f;
  }

  const int64_t last_row = (r0 + BQ - 1 < a.nq - 1) ? r0 + BQ - 1 : a.nq - 1;
  const int64_t last_key = (a.q_pos0 + last_row < a.nk - 1) ? a.q_pos0 + last_row : a.nk - 1;
  const int64_t key_tiles = last_key / BK + 1;
  const bool dropout = a.dropout_p > 0.0f;
  // Documents (key_start): the tiles before the first row's document start are never visible.
  const int32_t* key_start = a.key_start != nullptr ? a.key_start + bi * a.nq : nullptr;
  const int64_t first_tile = key_start != nullptr ? key_start[r0] / BK : 0;

  for (int64_t kt = first_tile; kt < key_tiles; ++kt) {
    const int64_t k0 = kt * BK;
    __syncthreads();  // the previous tile's reads of K, V, P are done
    load_tile<BK, DMAX, LD>(Ks, a.k, bi, hd, k0, a.nk, a.d);
    load_tile<BK, DMAX, LD>(Vs, a.v, bi, hd, k0, a.nk, a.d);
    __syncthreads();

    float sc[RR][CC];
    tile_dot<RR, CC, DMAX, LD, LD>(Qs, Ks, ty, tx, sc);
#pragma unroll
    for (int r = 0; r < RR; ++r) {
      const int64_t row = r0 + ty + 16 * r;
      const int64_t qpos = a.q_pos0 + row;
      const int64_t lo = key_start != nullptr && row < a.nq ? key_start[row] : 0;
      float mx = kNegInf;
#pragma unroll
      for (int c = 0; c < CC; ++c) {
        const int64_t key = k0 + tx + 16 * c;
        const bool valid = row < a.nq && key < a.nk && key <= qpos && key >= lo;
        sc[r][c] = valid ? sc[r][c] * a.scale : kNegInf;
        mx = fmaxf(mx, sc[r][c]);
      }
      mx = half_warp_max(mx);
      const float m_new = fmaxf(m[r], mx);
      // m_new is -inf only for padding rows (no visible key yet): keep everything zero.
      const float alpha = m[r] == kNegInf ? 0.0f : expf(m[r] - m_new);
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < CC; ++c) {
        float pv = sc[r][c] == kNegInf ? 0.0f : expf(sc[r][c] - m_new);
        sum += pv;
        if (dropout && pv != 0.0f) {
          const int64_t key = k0 + tx + 16 * c;
          const uint64_t index = static_cast<uint64_t>((dropout_bh(a, bh) * a.nq + row) * a.nk + key);
          pv *= dropout_multiplier(a.seed, dropout_stream(a), index, a.dropout_p);
        }
        Ps[(ty + 16 * r) * LDP + tx + 16 * c] = pv;
      }
      sum = half_warp_sum(sum);
      l[r] = l[r] * alpha + sum;
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < NC; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[r][c][e] *= alpha;
    }
    __syncthreads();
    tile_accum<RR, NC, BK, LDP, LD>(Ps, Vs, ty, tx, o);
  }

  float inv[RR];
#pragma unroll
  for (int r = 0; r < RR; ++r) {
    inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    const int64_t row = r0 + ty + 16 * r;
    if (a.lse != nullptr && tx == 0 && row < a.nq) a.lse[bh * a.nq + row] = m[r] + logf(l[r]);
  }
  store_rows<RR, NC>(a.out, bi, hd, r0, a.nq, a.d, ty, tx, o, inv);
}

template <int DMAX, int BQ, int BK>
void launch_forward(const ForwardArgs& a, int64_t batch_heads, cudaStream_t stream) {
  constexpr size_t smem = forward_smem_bytes<DMAX, BQ, BK>();
  auto kernel = attention_forward_kernel<DMAX, BQ, BK>;
  MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((a.nq + BQ - 1) / BQ), static_cast<unsigned>(batch_heads));
  kernel<<<grid, kThreads, smem, stream>>>(a);
  MT_CUDA_LAUNCH_CHECK();
}

// Head dims up to 64 use 64-wide tiles; up to 128, 128 (with smaller key tiles to keep two
// blocks per SM).
void run_forward(const ForwardArgs& a, int64_t batch_heads, cudaStream_t stream) {
  if (a.nq == 0 || batch_heads == 0) return;
  if (a.d <= 64) {
    launch_forward<64, 64, 64>(a, batch_heads, stream);
  } else {
    launch_forward<128, 64, 32>(a, batch_heads, stream);
  }
}

// ---- backward ----------------------------------------------------------------------------

// D_s[r] = dO_r . out_r for rows row0 + r (0 for r >= nrows), dO read from dOs[ROWS][LD]:
// 4 consecutive lanes per row in a fixed order whatever ROWS is, so both backward kernels get
// the same bits (deterministic).
template <int ROWS, int LD>
__device__ __forceinline__ void rowdot_tile(float* D_s, const float* dOs, const HeadMatrix& out, int64_t bi, int64_t hd,
                                            int64_t row0, int64_t nrows, int d) {
  constexpr int kPerRow = 4, kRowsPerPass = kThreads / kPerRow;
  const int part = threadIdx.x % kPerRow;
  for (int r0 = 0; r0 < ROWS; r0 += kRowsPerPass) {  // uniform trip count: every lane shuffles
    const int r = r0 + threadIdx.x / kPerRow;
    const int64_t row = row0 + r;
    float sum = 0.0f;
    if (r < ROWS && row < nrows) {
      const int64_t off = out.at(bi, hd, row);
      for (int c = part; c < d; c += kPerRow) sum = fmaf(dOs[r * LD + c], load_f(out.ptr, out.dtype, off + c), sum);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    if (part == 0 && r < ROWS) D_s[r] = sum;
  }
}

template <int DMAX, int BK, int BQ>
constexpr size_t dkdv_smem_bytes() {
  return sizeof(float) * (static_cast<size_t>(2 * BK + 2 * BQ) * (DMAX + 4) + 2 * static_cast<size_t>(BK) * (BQ + 4) +
                          2 * static_cast<size_t>(BQ));
}

// dK, dV of one key tile: grid (ceil(s / BK), b * G). Keys are the rows of every tile
// here (S^T = K Q^T, dP^T = V dO^T), so dV += (P M)^T dO and dK += dS^T Q read P^T row-wise;
// the query tiles of the group's query heads are visited head after head (query groups).
// Shared: K, V [BK][DMAX+4], Q, dO [BQ][DMAX+4], PT, dST [BK][BQ+4], lse, D [BQ].
template <int DMAX, int BK, int BQ>
__global__ void __launch_bounds__(kThreads, 2) attention_dkdv_kernel(const BackwardArgs a) {
  constexpr int LD = DMAX + 4, LDT = BQ + 4, RR = BK / 16, CC = BQ / 16, NC = DMAX / 64;
  extern __shared__ float4 smem4[];
  float* Ks = reinterpret_cast<float*>(smem4);
  float* Vs = Ks + BK * LD;
  float* Qs = Vs + BK * LD;
  float* dOs = Qs + BQ * LD;
  float* PT = dOs + BQ * LD;
  float* dST = PT + BK * LDT;
  float* lse_s = dST + BK * LDT;
  float* D_s = lse_s + BQ;

  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t bg = blockIdx.y, bi = bg / a.groups, hd0 = (bg % a.groups) * a.per_group;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * BK;
  const bool dropout = a.dropout_p > 0.0f;

  load_tile<BK, DMAX, LD>(Ks, a.k, bi, hd0, k0, a.s, a.d);
  load_tile<BK, DMAX, LD>(Vs, a.v, bi, hd0, k0, a.s, a.d);

  float dk[RR][NC][4], dv[RR][NC][4];
#pragma unroll
  for (int r = 0; r < RR; ++r)
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[r][c][e] = dv[r][c][e] = 0.0f;

  const int64_t q_tiles = (a.s + BQ - 1) / BQ;
  // The group's query heads in order, each over its query tiles from the diagonal down.
  for (int64_t step = 0; step < a.per_group * (q_tiles - k0 / BQ); ++step) {
    const int64_t hd = hd0 + step / (q_tiles - k0 / BQ), qt = k0 / BQ + step % (q_tiles - k0 / BQ);
    const int64_t bh = bi * a.heads + hd;  // the query head's (batch, head)
    const int64_t q0 = qt * BQ;
    __syncthreads();  // the previous tile's reads of Q, dO, PT, dST are done
    load_tile<BQ, DMAX, LD>(Qs, a.q, bi, hd, q0, a.s, a.d);
    load_tile<BQ, DMAX, LD>(dOs, a.dout, bi, hd, q0, a.s, a.d);
    for (int i = threadIdx.x; i < BQ; i += kThreads) lse_s[i] = q0 + i < a.s ? a.lse[bh * a.s + q0 + i] : 0.0f;
    __syncthreads();
    rowdot_tile<BQ, LD>(D_s, dOs, a.out, bi, hd, q0, a.s, a.d);
    __syncthreads();

    float st[RR][CC], dpt[RR][CC];
    tile_dot<RR, CC, DMAX, LD, LD>(Ks, Qs, ty, tx, st);
    tile_dot<RR, CC, DMAX, LD, LD>(Vs, dOs, ty, tx, dpt);
#pragma unroll
    for (int r = 0; r < RR; ++r) {
      const int64_t key = k0 + ty + 16 * r;
#pragma unroll
      for (int c = 0; c < CC; ++c) {
        const int ci = tx + 16 * c;
        const int64_t qi = q0 + ci;
        const bool valid = qi < a.s && key <= qi && (a.key_start == nullptr || key >= a.key_start[bi * a.s + qi]);
        const float p = valid ? expf(st[r][c] * a.scale - lse_s[ci]) : 0.0f;
        float mult = 1.0f;
        if (dropout && valid) {
          const uint64_t index = static_cast<uint64_t>((dropout_bh(a, bh) * a.s + qi) * a.s + key);
          mult = dropout_multiplier(a.seed, dropout_stream(a), index, a.dropout_p);
        }
        PT[(ty + 16 * r) * LDT + ci] = p * mult;
        dST[(ty + 16 * r) * LDT + ci] = p * (dpt[r][c] * mult - D_s[ci]);
      }
    }
    __syncthreads();
    tile_accum<RR, NC, BQ, LDT, LD>(PT, dOs, ty, tx, dv);
    tile_accum<RR, NC, BQ, LDT, LD>(dST, Qs, ty, tx, dk);
  }

  float one[RR], scale[RR];
#pragma unroll
  for (int r = 0; r < RR; ++r) {
    one[r] = 1.0f;
    scale[r] = a.scale;
  }
  store_rows<RR, NC>(a.dk, bi, hd0, k0, a.s, a.d, ty, tx, dk, scale);
  store_rows<RR, NC>(a.dv, bi, hd0, k0, a.s, a.d, ty, tx, dv, one);
}

template <int DMAX, int BQ, int BK>
constexpr size_t dq_smem_bytes() {
  return sizeof(float) * (static_cast<size_t>(2 * BQ + 2 * BK) * (DMAX + 4) + static_cast<size_t>(BQ) * (BK + 4) +
                          2 * static_cast<size_t>(BQ));
}

// dQ of one query tile: grid (ceil(s / BQ), b * heads); key tiles 0 .. diagonal in order.
// Shared: Q, dO [BQ][DMAX+4], K, V [BK][DMAX+4], dS [BQ][BK+4], lse, D [BQ].
template <int DMAX, int BQ, int BK>
__global__ void __launch_bounds__(kThreads, 2) attention_dq_kernel(const BackwardArgs a) {
  constexpr int LD = DMAX + 4, LDS = BK + 4, RR = BQ / 16, CC = BK / 16, NC = DMAX / 64;
  extern __shared__ float4 smem4[];
  float* Qs = reinterpret_cast<float*>(smem4);
  float* dOs = Qs + BQ * LD;
  float* Ks = dOs + BQ * LD;
  float* Vs = Ks + BK * LD;
  float* dSs = Vs + BK * LD;
  float* lse_s = dSs + BQ * LDS;
  float* D_s = lse_s + BQ;

  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t bh = blockIdx.y, bi = bh / a.heads, hd = bh % a.heads;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * BQ;
  const bool dropout = a.dropout_p > 0.0f;

  load_tile<BQ, DMAX, LD>(Qs, a.q, bi, hd, q0, a.s, a.d);
  load_tile<BQ, DMAX, LD>(dOs, a.dout, bi, hd, q0, a.s, a.d);
  for (int i = threadIdx.x; i < BQ; i += kThreads) lse_s[i] = q0 + i < a.s ? a.lse[bh * a.s + q0 + i] : 0.0f;
  __syncthreads();
  rowdot_tile<BQ, LD>(D_s, dOs, a.out, bi, hd, q0, a.s, a.d);

  float dq[RR][NC][4];
#pragma unroll
  for (int r = 0; r < RR; ++r)
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) dq[r][c][e] = 0.0f;

  const int64_t last_row = (q0 + BQ - 1 < a.s - 1) ? q0 + BQ - 1 : a.s - 1;
  const int64_t key_tiles = last_row / BK + 1;
  const int32_t* key_start = a.key_start != nullptr ? a.key_start + bi * a.s : nullptr;
  for (int64_t kt = key_start != nullptr ? key_start[q0] / BK : 0; kt < key_tiles; ++kt) {
    const int64_t k0 = kt * BK;
    __syncthreads();  // the previous tile's reads of K, V, dS are done
    load_tile<BK, DMAX, LD>(Ks, a.k, bi, hd, k0, a.s, a.d);
    load_tile<BK, DMAX, LD>(Vs, a.v, bi, hd, k0, a.s, a.d);
    __syncthreads();

    float sc[RR][CC], dp[RR][CC];
    tile_dot<RR, CC, DMAX, LD, LD>(Qs, Ks, ty, tx, sc);
    tile_dot<RR, CC, DMAX, LD, LD>(dOs, Vs, ty, tx, dp);
#pragma unroll
    for (int r = 0; r < RR; ++r) {
      const int ri = ty + 16 * r;
      const int64_t qi = q0 + ri;
      const int64_t lo = key_start != nullptr && qi < a.s ? key_start[qi] : 0;
#pragma unroll
      for (int c = 0; c < CC; ++c) {
        const int64_t key = k0 + tx + 16 * c;
        const bool valid = qi < a.s && key <= qi && key >= lo;
        const float p = valid ? expf(sc[r][c] * a.scale - lse_s[ri]) : 0.0f;
        float mult = 1.0f;
        if (dropout && valid) {
          const uint64_t index = static_cast<uint64_t>((dropout_bh(a, bh) * a.s + qi) * a.s + key);
          mult = dropout_multiplier(a.seed, dropout_stream(a), index, a.dropout_p);
        }
        dSs[ri * LDS + tx + 16 * c] = p * (dp[r][c] * mult - D_s[ri]);
      }
    }
    __syncthreads();
    tile_accum<RR, NC, BK, LDS, LD>(dSs, Ks, ty, tx, dq);
  }

  float scale[RR];
#pragma unroll
  for (int r = 0; r < RR; ++r) scale[r] = a.scale;
  store_rows<RR, NC>(a.dq, bi, hd, q0, a.s, a.d, ty, tx, dq, scale);
}

// batch_groups = b * G.
template <int DMAX, int BK, int BQ>
void launch_dkdv(const BackwardArgs& a, int64_t batch_groups, cudaStream_t stream) {
  constexpr size_t smem = dkdv_smem_bytes<DMAX, BK, BQ>();
  auto kernel = attention_dkdv_kernel<DMAX, BK, BQ>;
  MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((a.s + BK - 1) / BK), static_cast<unsigned>(batch_groups));
  kernel<<<grid, kThreads, smem, stream>>>(a);
  MT_CUDA_LAUNCH_CHECK();
}

template <int DMAX, int BQ, int BK>
void launch_dq(const BackwardArgs& a, int64_t batch_heads, cudaStream_t stream) {
  constexpr size_t smem = dq_smem_bytes<DMAX, BQ, BK>();
  auto kernel = attention_dq_kernel<DMAX, BQ, BK>;
  MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((a.s + BQ - 1) / BQ), static_cast<unsigned>(batch_heads));
  kernel<<<grid, kThreads, smem, stream>>>(a);
  MT_CUDA_LAUNCH_CHECK();
}

// ---- documents on cuDNN -----------------------------------------------------------------

// One row (bi, i) of the attention bias of documents (cudnn_attention.h): 0 for keys j >=
// key_start[bi, i], `masked` before.
__global__ void document_bias_kernel(const int32_t* key_start, int64_t s, DType dtype, void* bias, float masked) {
  const int64_t row = blockIdx.x;  // bi * s + i
  const int64_t lo = key_start[row];
  for (int64_t j = threadIdx.x; j < s; j += blockDim.x) store_f(bias, dtype, row * s + j, j >= lo ? 0.0f : masked);
}

// ---- query groups on cuDNN ---------------------------------------------------------------

// Copies 16-byte chunks between the query columns of a qkv row (n queries per group of
// (n + 2) * d columns) and a packed [rows, heads, d] buffer: to_packed, qkv -> packed, else
// back. d % 8 == 0 elements of 2 bytes, both 16-byte aligned.
__global__ void query_columns_kernel(const uint4* from, uint4* to, int64_t rows, int heads, int per_group, int d,
                                     bool to_packed) {
  const int chunks = d / 8;  // 16-byte chunks per head
  const int64_t n = rows * heads * chunks;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = idx % chunks, rest = idx / chunks;
    const int64_t hd = rest % heads, row = rest / heads;
    const int64_t groups = heads / per_group;
    const int64_t col = (hd / per_group) * (per_group + 2) * d + (hd % per_group) * d;  // qkv_layout.h q_col
    const int64_t fused = (row * groups * (per_group + 2) * d + col) / 8 + c;
    const int64_t packed = idx;
    if (to_packed)
      to[packed] = from[fused];
    else
      to[fused] = from[packed];
  }
}

// ---- KV cache ----------------------------------------------------------------------------

// k_cache/v_cache[bi, g, past + r, c] = k/v of group g in qkv[r, bi, :] (k, v are indexed by
// query head: group g's first query head is g * per_group).
__global__ void kv_cache_append_kernel(HeadMatrix k, HeadMatrix v, float* k_cache, float* v_cache, int64_t t, int64_t b,
                                       int groups, int per_group, int d, int64_t max_seq, int64_t past) {
  const int64_t n = t * b * groups * d;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = idx % d, rest = idx / d;
    const int64_t g = rest % groups, bi = (rest / groups) % b, r = rest / (groups * b);
    const int64_t dst = ((bi * groups + g) * max_seq + past + r) * d + c;
    k_cache[dst] = load_f(k.ptr, k.dtype, k.at(bi, g * per_group, r) + c);
    v_cache[dst] = load_f(v.ptr, v.dtype, v.at(bi, g * per_group, r) + c);
  }
}

// ---- tensor-core path (bf16 / fp16 inputs, head_dim 64 or 128) ---------------------------
//
// FlashAttention-2's algorithm on mma.sync.m16n8k16 (bf16/fp16 operands, fp32 accumulators):
//  - 128 threads = 4 warps per block; each warp owns 16 rows of the block's 64-row tile (query
//    rows in the forward and dQ kernels, key rows in the dK/dV kernel), so softmax statistics
//    never leave a warp: a row's values sit in the 4 lanes of a quad (lane / 4 = row in the
//    8-row half, lane % 4 = column pair), reduced by xor shuffles over offsets 1 and 2.
//  - Tiles are copied global -> shared by cp.async (16 bytes per thread, rows past the end
//    zero-filled) as [rows][d + 8] elements: the 16-byte row padding makes the 8 row addresses
//    of every ldmatrix land in 8 different bank groups. Operands reach the tensor cores by
//    ldmatrix (.trans for the B operand read from a row-major [key][d] tile).
//  - Score accumulators (fp32, C layout of m16n8) are turned in registers into the A operand
//    of the next product (P V, P^T dO, dS K, dS^T Q): two adjacent n8 tiles form one k16 slice.
//  - Softmax in fp32 in the log2 domain (exp2f of scores * scale * log2 e); P (after the
//    dropout mask, with the CPU's Philox index) is rounded to bf16/fp16 only as an mma operand;
//    lse is saved in fp32 (natural log).
namespace tc {

constexpr int kTcThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronous; valid == false writes 16 zero bytes (reads nothing).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
// 4 bytes global -> shared, asynchronous; valid == false writes 4 zero bytes (reads nothing).
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a (16x16, row) * b (16x8, col), fp32 accumulators.
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded (RNE) to a packed pair, lo in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t v);
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t v) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
}
template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t v) {
  return __half22float2(*reinterpret_cast<const __half2*>(&v));
}

// Dropout multipliers of the elements index and index + 1 (the same Philox draws as
// dropout_multiplier: one Philox block serves both unless index % 4 == 3).
__device__ __forceinline__ uint4 philox_block(uint64_t seed, uint64_t stream, uint64_t block) {
  return philox4x32_10(make_uint4(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                  static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)),
                       make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)));
}
__device__ __forceinline__ uint32_t philox_word(const uint4& o, uint32_t w) {
  return w == 0 ? o.x : w == 1 ? o.y : w == 2 ? o.z : o.w;
}
__device__ __forceinline__ float keep_mult(uint32_t word, float p, float inv_keep) {
  return static_cast<float>(word >> 8) * (1.0f / 16777216.0f) >= p ? inv_keep : 0.0f;
}
__device__ __forceinline__ void dropout_pair(uint64_t seed, uint64_t stream, uint64_t index, float p, float inv_keep,
                                             float& m0, float& m1) {
  const uint4 o = philox_block(seed, stream, index >> 2);
  const uint32_t w = static_cast<uint32_t>(index & 3);
  m0 = keep_mult(philox_word(o, w), p, inv_keep);
  const uint32_t w1 = w == 3 ? philox_block(seed, stream, (index >> 2) + 1).x : philox_word(o, w + 1);
  m1 = keep_mult(w1, p, inv_keep);
}
__device__ __forceinline__ float dropout_one(uint64_t seed, uint64_t stream, uint64_t index, float p, float inv_keep) {
  const uint4 o = philox_block(seed, stream, index >> 2);
  return keep_mult(philox_word(o, static_cast<uint32_t>(index & 3)), p, inv_keep);
}

// Rows [row0, row0 + ROWS) of a head matrix (element 0 of row 0 at base, rows row_stride apart)
// into dst[ROWS][D + 8] by cp.async; rows >= nrows are zero. The caller commits.
template <typename T, int ROWS, int D>
__device__ __forceinline__ void load_tile_async(T* dst, const T* base, int64_t row_stride, int64_t row0,
                                                int64_t nrows) {
  constexpr int kChunks = D / 8, LD = D + 8;
  for (int idx = threadIdx.x; idx < ROWS * kChunks; idx += kTcThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    const int64_t row = row0 + r;
    const bool ok = row < nrows;
    cp_async16(dst + r * LD + c * 8, base + (ok ? row * row_stride : 0) + c * 8, ok);
  }
}

template <typename T>
__device__ __forceinline__ const T* head_base(const HeadMatrix& m, int64_t bi, int64_t hd) {
  return static_cast<const T*>(m.ptr) + m.at(bi, hd, 0);
}
template <typename T>
__device__ __forceinline__ T* head_base(const OutMatrix& m, int64_t bi, int64_t hd) {
  return static_cast<T*>(m.ptr) + m.at(bi, hd, 0);
}

// ldmatrix lane addresses inside a [rows][LD] tile:
//  A operand (16 x 16 at row r0, col c0): matrices (rows 0-7, c0), (8-15, c0), (0-7, c0+8), (8-15, c0+8).
__device__ __forceinline__ int a_row(int lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }
__device__ __forceinline__ int a_col(int lane) { return (lane >> 4) * 8; }
//  B operand of two n8 tiles from a row-major [n][k] tile (no .trans): matrices (n 0-7, k0),
//  (n 0-7, k0+8), (n 8-15, k0), (n 8-15, k0+8) -> {b0, b1} of tile n0 and of tile n0 + 8.
__device__ __forceinline__ int bn_row(int lane) { return (lane & 7) + (lane >> 4) * 8; }
__device__ __forceinline__ int bn_col(int lane) { return ((lane >> 3) & 1) * 8; }
//  B operand of two n8 tiles from a row-major [k][n] tile (.trans): matrices (k 0-7, n0),
//  (k 8-15, n0), (k 0-7, n0+8), (k 8-15, n0+8): the same lane layout as the A operand.

template <int D>
constexpr size_t fwd_tc_smem_bytes() {
  return sizeof(uint16_t) * static_cast<size_t>(64 + 4 * 64) * (D + 8);
}

// Forward: grid (ceil(nq / 64), b * heads), query tiles in reverse order (the longest first).
// Shared: Q[64][D+8], K[2][64][D+8], V[2][64][D+8] (K/V double-buffered: tile kt+1 is copied
// while tile kt is used). Per warp: Q fragments (D/16 x 4 regs), S[8 n8 tiles][4], O[D/8][4].
// kDoc: a.key_start is set (documents; ops.h); key tiles before the first row's document start
// are skipped. A template parameter so that the causal-only kernel is compiled as before.
template <typename T, int D, bool kDoc>
__global__ void __launch_bounds__(kTcThreads, 2) attention_forward_tc_kernel(const ForwardArgs a) {
  constexpr int BQ = 64, BK = 64, LD = D + 8, KD = D / 16, NS = BK / 8, ND = D / 8;
  extern __shared__ float4 smem4[];
  T* Qs = reinterpret_cast<T*>(smem4);
  T* Ks = Qs + BQ * LD;
  T* Vs = Ks + 2 * BK * LD;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int64_t bh = blockIdx.y, bi = bh / a.heads, hd = bh % a.heads;
  const int64_t r0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * BQ;
  const T* qb = head_base<T>(a.q, bi, hd);
  const T* kb = head_base<T>(a.k, bi, hd);
  const T* vb = head_base<T>(a.v, bi, hd);

  const int64_t last_row = (r0 + BQ - 1 < a.nq - 1) ? r0 + BQ - 1 : a.nq - 1;
  const int64_t last_key = (a.q_pos0 + last_row < a.nk - 1) ? a.q_pos0 + last_row : a.nk - 1;
  const int64_t key_tiles = last_key / BK + 1;
  const bool dropout = a.dropout_p > 0.0f;
  const float inv_keep = dropout ? 1.0f / (1.0f - a.dropout_p) : 1.0f;
  const float scale2 = a.scale * kLog2e;
  const int32_t* key_start = kDoc ? a.key_start + bi * a.nq : nullptr;
  const int64_t kt0 = kDoc ? key_start[r0] / BK : 0;
  // Rows of this thread: rr[0] = warp*16 + g, rr[1] = rr[0] + 8; their first visible keys.
  const int64_t row_a = r0 + warp * 16 + g;
  int64_t lo[2] = {0, 0};
  if constexpr (kDoc) {
    for (int h = 0; h < 2; ++h) lo[h] = row_a + h * 8 < a.nq ? key_start[row_a + h * 8] : 0;
  }
  const int64_t lo_last = kDoc ? key_start[last_row] : 0;  // the largest in this query tile

  load_tile_async<T, BQ, D>(Qs, qb, a.q.row_stride, r0, a.nq);
  load_tile_async<T, BK, D>(Ks, kb, a.k.row_stride, kt0 * BK, a.nk);
  load_tile_async<T, BK, D>(Vs, vb, a.v.row_stride, kt0 * BK, a.nk);
  cp_async_commit();

  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  float o[ND][4];
#pragma unroll
  for (int j = 0; j < ND; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  uint32_t qf[KD][4];

  for (int64_t kt = kt0; kt < key_tiles; ++kt) {
    const int64_t k0 = kt * BK;
    const int buf = static_cast<int>((kt - kt0) & 1);
    if (kt + 1 < key_tiles) {
      load_tile_async<T, BK, D>(Ks + (buf ^ 1) * BK * LD, kb, a.k.row_stride, k0 + BK, a.nk);
      load_tile_async<T, BK, D>(Vs + (buf ^ 1) * BK * LD, vb, a.v.row_stride, k0 + BK, a.nk);
    }
    cp_async_commit();
    cp_async_wait<1>();  // everything but the prefetch just issued has landed
    __syncthreads();
    const T* Kt = Ks + buf * BK * LD;
    const T* Vt = Vs + buf * BK * LD;
    if (kt == kt0) {
#pragma unroll
      for (int kk = 0; kk < KD; ++kk)
        ldsm_x4(qf[kk], smem_addr(Qs + (warp * 16 + a_row(lane)) * LD + kk * 16 + a_col(lane)));
    }

    // S = Q K^T (16 x 64 per warp).
    float sc[NS][4];
#pragma unroll
    for (int j = 0; j < NS; ++j) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KD; ++kk)
#pragma unroll
      for (int np = 0; np < NS / 2; ++np) {
        uint32_t b[4];
        ldsm_x4(b, smem_addr(Kt + (np * 16 + bn_row(lane)) * LD + kk * 16 + bn_col(lane)));
        mma16816<T>(sc[2 * np], qf[kk], b[0], b[1]);
        mma16816<T>(sc[2 * np + 1], qf[kk], b[2], b[3]);
      }

    // Mask (only tiles that reach past the diagonal or the last key, or start before the last
    // row's document), scale to log2 units.
    const bool need_mask = k0 + BK - 1 > a.q_pos0 + r0 || k0 + BK > a.nk || (kDoc && k0 < lo_last);
#pragma unroll
    for (int j = 0; j < NS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = sc[j][e] * scale2;
        if (need_mask) {
          const int64_t key = k0 + j * 8 + 2 * t4 + (e & 1);
          const int64_t qpos = a.q_pos0 + row_a + (e >> 1) * 8;
          if (key > qpos || key >= a.nk || (kDoc && key < lo[e >> 1])) v = kNegInf;
        }
        sc[j][e] = v;
      }

      // Online softmax per row (the 4 lanes of a quad share a row).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = kNegInf;
#pragma unroll
      for (int j = 0; j < NS; ++j) mx = fmaxf(mx, fmaxf(sc[j][2 * h], sc[j][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[h], mx);
      const float m_use = m_new == kNegInf ? 0.0f : m_new;  // no visible key yet: all zero
      const float alpha = exp2f(m[h] - m_use);              // m[h] == -inf -> 0
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < NS; ++j) {
        const float p0 = exp2f(sc[j][2 * h] - m_use), p1 = exp2f(sc[j][2 * h + 1] - m_use);
        sum += p0 + p1;
        sc[j][2 * h] = p0;
        sc[j][2 * h + 1] = p1;
      }
      l[h] = l[h] * alpha + sum;
      m[h] = m_new;
#pragma unroll
      for (int j = 0; j < ND; ++j) {
        o[j][2 * h] *= alpha;
        o[j][2 * h + 1] *= alpha;
      }
      if (dropout) {
        const int64_t row = row_a + h * 8;
#pragma unroll
        for (int j = 0; j < NS; ++j) {
          const int64_t key = k0 + j * 8 + 2 * t4;
          if (sc[j][2 * h] == 0.0f && sc[j][2 * h + 1] == 0.0f) continue;  // masked: no draw needed
          float m0, m1;
          dropout_pair(a.seed, dropout_stream(a), static_cast<uint64_t>((dropout_bh(a, bh) * a.nq + row) * a.nk + key),
                       a.dropout_p, inv_keep, m0, m1);
          sc[j][2 * h] *= m0;
          sc[j][2 * h + 1] *= m1;
        }
      }
    }

    // O += P V: P from the score registers (two n8 tiles = one k16 slice of keys).
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      uint32_t pf[4];
      pf[0] = pack2<T>(sc[2 * kk][0], sc[2 * kk][1]);
      pf[1] = pack2<T>(sc[2 * kk][2], sc[2 * kk][3]);
      pf[2] = pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
      pf[3] = pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
      for (int np = 0; np < ND / 2; ++np) {
        uint32_t b[4];
        ldsm_x4_t(b, smem_addr(Vt + (kk * 16 + a_row(lane)) * LD + np * 16 + a_col(lane)));
        mma16816<T>(o[2 * np], pf, b[0], b[1]);
        mma16816<T>(o[2 * np + 1], pf, b[2], b[3]);
      }
    }
    __syncthreads();  // K/V buffer `buf` is refilled by the next iteration's prefetch
  }

  T* ob = head_base<T>(a.out, bi, hd);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float lt = l[h];
    lt += __shfl_xor_sync(0xffffffffu, lt, 1);
    lt += __shfl_xor_sync(0xffffffffu, lt, 2);
    const int64_t row = row_a + h * 8;
    if (row >= a.nq) continue;
    const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
    if (a.lse != nullptr && t4 == 0) a.lse[bh * a.nq + row] = m[h] * kLn2 + logf(lt);
    T* orow = ob + row * a.out.row_stride;
#pragma unroll
    for (int j = 0; j < ND; ++j)
      *reinterpret_cast<uint32_t*>(orow + j * 8 + 2 * t4) = pack2<T>(o[j][2 * h] * inv, o[j][2 * h + 1] * inv);
  }
}

template <typename T, int D, bool kDoc>
void launch_forward_tc(const ForwardArgs& a, int64_t batch_heads, cudaStream_t stream) {
  constexpr size_t smem = fwd_tc_smem_bytes<D>();
  auto kernel = attention_forward_tc_kernel<T, D, kDoc>;
  MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((a.nq + 63) / 64), static_cast<unsigned>(batch_heads));
  kernel<<<grid, kTcThreads, smem, stream>>>(a);
  MT_CUDA_LAUNCH_CHECK();
}

// ---- Backward (tensor cores) -------------------------------------------------------------
// Changes for speed (results unchanged bit for bit: same P, dS, D, dropout mask, fixed order):
//  - D = rowsum(dO o out) and lse * log2(e) are computed once per row by a small prologue kernel
//    into [b * heads, s] fp32 stream-ordered scratch (cudaMallocAsync / cudaFreeAsync). Before,
//    every dK/dV block recomputed D for each query tile it walked (~s/128 tiles on average),
//    reading `out` from global with plain loads between two __syncthreads (a full memory
//    latency plus a barrier per tile, no overlap), and loaded lse synchronously per tile.
//    Now lse2/D of the next query tile are prefetched by cp.async with Q/dO (double-buffered)
//    and the per-tile barrier count drops from 3 to 2.
//  - dQ (head_dim 64) compiled for 3 blocks per SM: 205 -> 168 registers, no spills, 12 warps
//    per SM instead of 8 (smem 3 x 54 KiB fits).
//  - dK/dV mask tests in 32-bit tile-relative form (64-bit indices only for dropout).
// Expected: the dK/dV kernel (~2/3 of the backward) loses its serialized `out` read per tile:
// ~15-25% off it; dQ gains from occupancy ~10-20%; together roughly 1.26 -> ~1.0 ms/layer at
// GPT-2 124M (s=1024, b=16). The prologue reads dO and out once (~2 x 25 MB: ~20 us).
//
// Backward prologue: per row of (batch, head) bh, lse2 = lse * log2(e) and delta = dO . out
// (fp32), written once into [b * heads, s] scratch and read by both backward kernels (before,
// each dK/dV block recomputed D of every query tile it visited from global `out`). 4 lanes per
// row in the fixed order of the former rowdot_tc (part p: columns p*8 + 32i, 8 at a time, then
// xor 1, xor 2), so D keeps its bits. grid (ceil(s / 32), b * heads), kTcThreads threads.
template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads)
    attention_bwd_prep_tc_kernel(const BackwardArgs a, float* lse2, float* delta) {
  const int64_t bh = blockIdx.y, bi = bh / a.heads, hd = bh % a.heads;
  const int part = threadIdx.x % 4;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kTcThreads / 4) + threadIdx.x / 4;
  const bool ok = row < a.s;
  float sum = 0.0f;
  if (ok) {
    const T* orow = head_base<T>(a.out, bi, hd) + row * a.out.row_stride;
    const T* drow = head_base<T>(a.dout, bi, hd) + row * a.dout.row_stride;
#pragma unroll
    for (int c = part * 8; c < D; c += 32) {
      const uint4 x = *reinterpret_cast<const uint4*>(drow + c);
      const uint4 y = *reinterpret_cast<const uint4*>(orow + c);
      const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 u = unpack2<T>(xs[i]), v = unpack2<T>(ys[i]);
        sum = fmaf(u.x, v.x, sum);
        sum = fmaf(u.y, v.y, sum);
      }
    }
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  if (ok && part == 0) {
    delta[bh * a.s + row] = sum;
    lse2[bh * a.s + row] = a.lse[bh * a.s + row] * kLog2e;
  }
}

// Blocks per SM the dQ kernel is compiled for (register cap 65536 / (128 * n)): 3 for
// head_dim 64 (168 registers, no spills: 12 warps per SM instead of 8), 2 otherwise. The dK/dV
// kernel stays at 2 (at 3 it spills 88 bytes per thread for head_dim 64).
template <int D>
constexpr int kDqMinBlocks = D == 64 ? 3 : 2;

template <int D, int BQ, bool kDoc>
constexpr size_t dkdv_tc_smem_bytes() {
  return sizeof(uint16_t) * static_cast<size_t>(2 * 64 + 4 * BQ) * (D + 8) + sizeof(float) * (kDoc ? 6 : 4) * BQ;
}

// dK, dV of one 64-key tile (warp w: keys 16w .. 16w+15 as the M rows): grid (ceil(s / 64),
// b * G), key tiles in reverse order (the first ones see the most query tiles). Query tiles
// of BQ rows from the diagonal down, Q/dO double-buffered; with query groups the walk goes
// through the tiles of each of the group's query heads in turn (one pipelined sequence, the
// dK/dV accumulators shared: the sum over the group's heads, in head order). Per query tile and warp:
// S^T = K Q^T and dP^T = V dO^T (16 x BQ), P^T, dS^T in registers, then dV += (P M)^T dO and
// dK += dS^T Q with P^T/dS^T as A operands and dO/Q read by ldmatrix.trans. Fixed order: no
// atomics. Shared: K, V [64][D+8], Q, dO [2][BQ][D+8], lse (log2 units), D [2][BQ] (all
// query-tile data double-buffered by cp.async; lse2 and D come from the prologue kernel).
// kDoc (documents, a.key_start set): the query rows' first visible keys ride along as int
// [2][BQ], and the walk ends at the first query tile whose rows all start after this key tile.
template <typename T, int D, int BQ, bool kDoc>
__global__ void __launch_bounds__(kTcThreads, 2) attention_dkdv_tc_kernel(const BackwardArgs a) {
  constexpr int BK = 64, LD = D + 8, KD = D / 16, NQ = BQ / 8, ND = D / 8;
  extern __shared__ float4 smem4[];
  T* Ks = reinterpret_cast<T*>(smem4);
  T* Vs = Ks + BK * LD;
  T* Qs = Vs + BK * LD;                                        // [2][BQ][LD]
  T* dOs = Qs + 2 * BQ * LD;                                   // [2][BQ][LD]
  float* lse_s = reinterpret_cast<float*>(dOs + 2 * BQ * LD);  // [2][BQ], log2 units
  float* D_s = lse_s + 2 * BQ;                                 // [2][BQ]
  int* lo_s = reinterpret_cast<int*>(D_s + 2 * BQ);            // [2][BQ], kDoc only

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int64_t bg = blockIdx.y, bi = bg / a.groups, hd0 = (bg % a.groups) * a.per_group;
  const int64_t k0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * BK;
  const T* kb = head_base<T>(a.k, bi, hd0);
  const T* vb = head_base<T>(a.v, bi, hd0);
  const bool dropout = a.dropout_p > 0.0f;
  const float inv_keep = dropout ? 1.0f / (1.0f - a.dropout_p) : 1.0f;
  const float scale2 = a.scale * kLog2e;
  const int32_t* key_start = kDoc ? a.key_start + bi * a.s : nullptr;
  // lse2 / delta (and key_start) of query rows [r0, r0 + BQ) of query head hd into buffer `b`
  // (0 past s), in the caller's group.
  auto load_rows = [&](int b, int64_t hd, int64_t r0) {
    const float* lse2b = a.lse2 + (bi * a.heads + hd) * a.s;
    const float* deltab = a.delta + (bi * a.heads + hd) * a.s;
    for (int i = threadIdx.x; i < (kDoc ? 3 : 2) * BQ; i += kTcThreads) {
      const int r = i % BQ;
      const bool ok = r0 + r < a.s;
      const int64_t src = ok ? r0 + r : 0;
      if (i < BQ)
        cp_async4(lse_s + b * BQ + r, lse2b + src, ok);
      else if (i < 2 * BQ)
        cp_async4(D_s + b * BQ + r, deltab + src, ok);
      else if constexpr (kDoc)
        cp_async4(lo_s + b * BQ + r, key_start + src, ok);
    }
  };

  const int64_t qt0 = k0 / BQ;
  int64_t q_tiles = (a.s + BQ - 1) / BQ;
  if constexpr (kDoc) {
    // Rows [0, q_end) are those with key_start <= the tile's last key (key_start does not
    // decrease): a binary search, the same in every thread. q_end > k0 as key_start[k0] <= k0.
    const int64_t last_key = k0 + BK - 1;
    int64_t lo_row = k0, hi_row = a.s;  // key_start[lo_row] <= last_key; answer in (lo_row, hi_row]
    while (hi_row - lo_row > 1) {
      const int64_t mid = (lo_row + hi_row) / 2;
      if (key_start[mid] <= last_key)
        lo_row = mid;
      else
        hi_row = mid;
    }
    q_tiles = (hi_row + BQ - 1) / BQ;
  }
  // Step it of the walk: query tile qt0 + it % per_head of query head hd0 + it / per_head.
  const int per_head = static_cast<int>(q_tiles - qt0), steps = per_head * a.per_group;
  load_tile_async<T, BK, D>(Ks, kb, a.k.row_stride, k0, a.s);
  load_tile_async<T, BK, D>(Vs, vb, a.v.row_stride, k0, a.s);
  load_tile_async<T, BQ, D>(Qs, head_base<T>(a.q, bi, hd0), a.q.row_stride, qt0 * BQ, a.s);
  load_tile_async<T, BQ, D>(dOs, head_base<T>(a.dout, bi, hd0), a.dout.row_stride, qt0 * BQ, a.s);
  load_rows(0, hd0, qt0 * BQ);
  cp_async_commit();

  const int64_t key_a = k0 + warp * 16 + g;  // this thread's keys: key_a, key_a + 8
  float dk[ND][4], dv[ND][4];
#pragma unroll
  for (int j = 0; j < ND; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[j][e] = dv[j][e] = 0.0f;

  for (int it = 0; it < steps; ++it) {
    const int64_t hd = hd0 + it / per_head, qt = qt0 + it % per_head;
    const int64_t bh = bi * a.heads + hd;  // the query head's (batch, head)
    const int64_t q0 = qt * BQ;
    const int buf = it & 1;
    if (it + 1 < steps) {
      const int64_t hd_next = hd0 + (it + 1) / per_head, q_next = (qt0 + (it + 1) % per_head) * BQ;
      load_tile_async<T, BQ, D>(Qs + (buf ^ 1) * BQ * LD, head_base<T>(a.q, bi, hd_next), a.q.row_stride, q_next, a.s);
      load_tile_async<T, BQ, D>(dOs + (buf ^ 1) * BQ * LD, head_base<T>(a.dout, bi, hd_next), a.dout.row_stride, q_next,
                                a.s);
      load_rows(buf ^ 1, hd_next, q_next);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const T* Qt = Qs + buf * BQ * LD;
    const T* dOt = dOs + buf * BQ * LD;
    const float* lse_t = lse_s + buf * BQ;
    const float* D_t = D_s + buf * BQ;
    const int* lo_t = lo_s + buf * BQ;

    float st[NQ][4], dpt[NQ][4];
#pragma unroll
    for (int j = 0; j < NQ; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[j][e] = dpt[j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
      uint32_t ka[4], va[4];
      ldsm_x4(ka, smem_addr(Ks + (warp * 16 + a_row(lane)) * LD + kk * 16 + a_col(lane)));
      ldsm_x4(va, smem_addr(Vs + (warp * 16 + a_row(lane)) * LD + kk * 16 + a_col(lane)));
#pragma unroll
      for (int np = 0; np < NQ / 2; ++np) {
        uint32_t b[4];
        ldsm_x4(b, smem_addr(Qt + (np * 16 + bn_row(lane)) * LD + kk * 16 + bn_col(lane)));
        mma16816<T>(st[2 * np], ka, b[0], b[1]);
        mma16816<T>(st[2 * np + 1], ka, b[2], b[3]);
        ldsm_x4(b, smem_addr(dOt + (np * 16 + bn_row(lane)) * LD + kk * 16 + bn_col(lane)));
        mma16816<T>(dpt[2 * np], va, b[0], b[1]);
        mma16816<T>(dpt[2 * np + 1], va, b[2], b[3]);
      }
    }

    // P^T (dropped) into st, dS^T into dpt. Masking only where a query precedes a key or past s.
    // 32-bit tile-relative tests (fewer registers than 64-bit row indices): query q0 + ci is
    // valid for key key_a + 8h iff ci < s - q0 and ci + (q0 - key_a) - 8h >= 0.
    // Documents: some query row of the tile starts after key k0 (its last row has the largest
    // start); key key_a + 8h is visible to query q0 + ci only if lo_t[ci] <= it.
    const int q_left = static_cast<int>(a.s - q0 < BQ ? a.s - q0 : BQ);
    const bool need_mask = q0 < k0 + BK - 1 || q0 + BQ > a.s || (kDoc && lo_t[q_left - 1] > k0);
    const int rel = static_cast<int>(q0 - key_a);
    const int key_i = static_cast<int>(key_a);
#pragma unroll
    for (int j = 0; j < NQ; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ci = j * 8 + 2 * t4 + (e & 1);
        const bool valid =
            !need_mask || (ci < q_left && ci + rel - (e >> 1) * 8 >= 0 && (!kDoc || lo_t[ci] <= key_i + (e >> 1) * 8));
        const float p = valid ? exp2f(st[j][e] * scale2 - lse_t[ci]) : 0.0f;
        float mult = 1.0f;
        if (dropout && valid) {
          const int64_t qi = q0 + ci, key = key_a + (e >> 1) * 8;
          mult = dropout_one(a.seed, dropout_stream(a),
                             static_cast<uint64_t>((dropout_bh(a, bh) * a.s + qi) * a.s + key), a.dropout_p, inv_keep);
        }
        st[j][e] = p * mult;
        dpt[j][e] = p * (dpt[j][e] * mult - D_t[ci]);
      }

      // dV += (P M)^T dO, dK += dS^T Q (queries are the k dimension).
#pragma unroll
    for (int kk = 0; kk < BQ / 16; ++kk) {
      uint32_t pa[4], sa[4];
      pa[0] = pack2<T>(st[2 * kk][0], st[2 * kk][1]);
      pa[1] = pack2<T>(st[2 * kk][2], st[2 * kk][3]);
      pa[2] = pack2<T>(st[2 * kk + 1][0], st[2 * kk + 1][1]);
      pa[3] = pack2<T>(st[2 * kk + 1][2], st[2 * kk + 1][3]);
      sa[0] = pack2<T>(dpt[2 * kk][0], dpt[2 * kk][1]);
      sa[1] = pack2<T>(dpt[2 * kk][2], dpt[2 * kk][3]);
      sa[2] = pack2<T>(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]);
      sa[3] = pack2<T>(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3]);
#pragma unroll
      for (int np = 0; np < ND / 2; ++np) {
        uint32_t b[4];
        ldsm_x4_t(b, smem_addr(dOt + (kk * 16 + a_row(lane)) * LD + np * 16 + a_col(lane)));
        mma16816<T>(dv[2 * np], pa, b[0], b[1]);
        mma16816<T>(dv[2 * np + 1], pa, b[2], b[3]);
        ldsm_x4_t(b, smem_addr(Qt + (kk * 16 + a_row(lane)) * LD + np * 16 + a_col(lane)));
        mma16816<T>(dk[2 * np], sa, b[0], b[1]);
        mma16816<T>(dk[2 * np + 1], sa, b[2], b[3]);
      }
    }
    __syncthreads();  // Q/dO/lse/D buffer `buf` is refilled by the next iteration's prefetch
  }

  T* dkb = head_base<T>(a.dk, bi, hd0);
  T* dvb = head_base<T>(a.dv, bi, hd0);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t key = key_a + h * 8;
    if (key >= a.s) continue;
    T* krow = dkb + key * a.dk.row_stride;
    T* vrow = dvb + key * a.dv.row_stride;
#pragma unroll
    for (int j = 0; j < ND; ++j) {
      *reinterpret_cast<uint32_t*>(krow + j * 8 + 2 * t4) =
          pack2<T>(dk[j][2 * h] * a.scale, dk[j][2 * h + 1] * a.scale);
      *reinterpret_cast<uint32_t*>(vrow + j * 8 + 2 * t4) = pack2<T>(dv[j][2 * h], dv[j][2 * h + 1]);
    }
  }
}

template <int D>
constexpr size_t dq_tc_smem_bytes() {
  return sizeof(uint16_t) * static_cast<size_t>(2 * 64 + 4 * 64) * (D + 8);
}

// dQ of one 64-query tile (warp w: rows 16w .. 16w+15): grid (ceil(s / 64), b * heads),
// reversed. Key tiles 0 .. diagonal in order, K/V double-buffered. Per key tile and warp:
// S = Q K^T, dP = dO V^T (16 x 64), dS = P (dP M - D) in registers, dQ += dS K (K by
// ldmatrix.trans). Shared: Q, dO [64][D+8], K, V [2][64][D+8]; lse2, D of its rows from the
// prologue kernel, in registers.
// kDoc (documents, a.key_start set): key tiles before the first row's document start are
// skipped and keys before each row's start masked; compiled for 2 blocks per SM (at 3, head_dim
// 64 spills ~200 bytes per thread).
template <typename T, int D, bool kDoc>
__global__ void __launch_bounds__(kTcThreads, kDoc ? 2 : kDqMinBlocks<D>) attention_dq_tc_kernel(const BackwardArgs a) {
  constexpr int BQ = 64, BK = 64, LD = D + 8, KD = D / 16, NS = BK / 8, ND = D / 8;
  extern __shared__ float4 smem4[];
  T* Qs = reinterpret_cast<T*>(smem4);
  T* dOs = Qs + BQ * LD;
  T* Ks = dOs + BQ * LD;     // [2][BK][LD]
  T* Vs = Ks + 2 * BK * LD;  // [2][BK][LD]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int64_t bh = blockIdx.y, bi = bh / a.heads, hd = bh % a.heads;
  const int64_t q0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * BQ;
  const T* qb = head_base<T>(a.q, bi, hd);
  const T* kb = head_base<T>(a.k, bi, hd);
  const T* vb = head_base<T>(a.v, bi, hd);
  const T* dob = head_base<T>(a.dout, bi, hd);
  const bool dropout = a.dropout_p > 0.0f;
  const float inv_keep = dropout ? 1.0f / (1.0f - a.dropout_p) : 1.0f;
  const float scale2 = a.scale * kLog2e;
  const int32_t* key_start = kDoc ? a.key_start + bi * a.s : nullptr;
  const int64_t kt0 = kDoc ? key_start[q0] / BK : 0;

  load_tile_async<T, BQ, D>(Qs, qb, a.q.row_stride, q0, a.s);
  load_tile_async<T, BQ, D>(dOs, dob, a.dout.row_stride, q0, a.s);
  load_tile_async<T, BK, D>(Ks, kb, a.k.row_stride, kt0 * BK, a.s);
  load_tile_async<T, BK, D>(Vs, vb, a.v.row_stride, kt0 * BK, a.s);
  cp_async_commit();

  const int64_t row_a = q0 + warp * 16 + g;  // this thread's rows: row_a, row_a + 8
  float lse2[2], Drow[2];                    // from the prologue kernel (the first loop iteration waits for Q/dO)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const bool ok = row_a + h * 8 < a.s;
    lse2[h] = ok ? a.lse2[bh * a.s + row_a + h * 8] : 0.0f;
    Drow[h] = ok ? a.delta[bh * a.s + row_a + h * 8] : 0.0f;
  }

  float dq[ND][4];
#pragma unroll
  for (int j = 0; j < ND; ++j) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;

  const int64_t last_row = (q0 + BQ - 1 < a.s - 1) ? q0 + BQ - 1 : a.s - 1;
  const int64_t key_tiles = last_row / BK + 1;
  int lo[2] = {0, 0};  // kDoc: this thread's rows' first visible keys
  if constexpr (kDoc) {
    for (int h = 0; h < 2; ++h) lo[h] = row_a + h * 8 < a.s ? key_start[row_a + h * 8] : 0;
  }
  const int64_t lo_last = kDoc ? key_start[last_row] : 0;
  for (int64_t kt = kt0; kt < key_tiles; ++kt) {
    const int64_t k0 = kt * BK;
    const int buf = static_cast<int>((kt - kt0) & 1);
    if (kt + 1 < key_tiles) {
      load_tile_async<T, BK, D>(Ks + (buf ^ 1) * BK * LD, kb, a.k.row_stride, k0 + BK, a.s);
      load_tile_async<T, BK, D>(Vs + (buf ^ 1) * BK * LD, vb, a.v.row_stride, k0 + BK, a.s);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const T* Kt = Ks + buf * BK * LD;
    const T* Vt = Vs + buf * BK * LD;

    float sc[NS][4], dp[NS][4];
#pragma unroll
    for (int j = 0; j < NS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[j][e] = dp[j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
      uint32_t qa[4], oa[4];
      ldsm_x4(qa, smem_addr(Qs + (warp * 16 + a_row(lane)) * LD + kk * 16 + a_col(lane)));
      ldsm_x4(oa, smem_addr(dOs + (warp * 16 + a_row(lane)) * LD + kk * 16 + a_col(lane)));
#pragma unroll
      for (int np = 0; np < NS / 2; ++np) {
        uint32_t b[4];
        ldsm_x4(b, smem_addr(Kt + (np * 16 + bn_row(lane)) * LD + kk * 16 + bn_col(lane)));
        mma16816<T>(sc[2 * np], qa, b[0], b[1]);
        mma16816<T>(sc[2 * np + 1], qa, b[2], b[3]);
        ldsm_x4(b, smem_addr(Vt + (np * 16 + bn_row(lane)) * LD + kk * 16 + bn_col(lane)));
        mma16816<T>(dp[2 * np], oa, b[0], b[1]);
        mma16816<T>(dp[2 * np + 1], oa, b[2], b[3]);
      }
    }

    // dS = P (dP M - D) into dp.
    const bool need_mask = k0 + BK - 1 > q0 || k0 + BK > a.s || (kDoc && k0 < lo_last);
#pragma unroll
    for (int j = 0; j < NS; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t qi = row_a + h * 8, key = k0 + j * 8 + 2 * t4;
        const bool v0 = !need_mask || (qi < a.s && key <= qi && (!kDoc || key >= lo[h]));
        const bool v1 = !need_mask || (qi < a.s && key + 1 <= qi && key + 1 < a.s && (!kDoc || key + 1 >= lo[h]));
        const float p0 = v0 ? exp2f(sc[j][2 * h] * scale2 - lse2[h]) : 0.0f;
        const float p1 = v1 ? exp2f(sc[j][2 * h + 1] * scale2 - lse2[h]) : 0.0f;
        float m0 = 1.0f, m1 = 1.0f;
        if (dropout && (v0 || v1))
          dropout_pair(a.seed, dropout_stream(a), static_cast<uint64_t>((dropout_bh(a, bh) * a.s + qi) * a.s + key),
                       a.dropout_p, inv_keep, m0, m1);
        dp[j][2 * h] = p0 * (dp[j][2 * h] * m0 - Drow[h]);
        dp[j][2 * h + 1] = p1 * (dp[j][2 * h + 1] * m1 - Drow[h]);
      }

      // dQ += dS K (keys are the k dimension).
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      uint32_t sa[4];
      sa[0] = pack2<T>(dp[2 * kk][0], dp[2 * kk][1]);
      sa[1] = pack2<T>(dp[2 * kk][2], dp[2 * kk][3]);
      sa[2] = pack2<T>(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
      sa[3] = pack2<T>(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
#pragma unroll
      for (int np = 0; np < ND / 2; ++np) {
        uint32_t b[4];
        ldsm_x4_t(b, smem_addr(Kt + (kk * 16 + a_row(lane)) * LD + np * 16 + a_col(lane)));
        mma16816<T>(dq[2 * np], sa, b[0], b[1]);
        mma16816<T>(dq[2 * np + 1], sa, b[2], b[3]);
      }
    }
    __syncthreads();  // K/V buffer `buf` is refilled by the next iteration's prefetch
  }

  T* dqb = head_base<T>(a.dq, bi, hd);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = row_a + h * 8;
    if (row >= a.s) continue;
    T* qrow = dqb + row * a.dq.row_stride;
#pragma unroll
    for (int j = 0; j < ND; ++j)
      *reinterpret_cast<uint32_t*>(qrow + j * 8 + 2 * t4) =
          pack2<T>(dq[j][2 * h] * a.scale, dq[j][2 * h + 1] * a.scale);
  }
}

template <typename T, int D, bool kDoc>
void launch_backward_tc(const BackwardArgs& args, int64_t batch_heads, cudaStream_t stream) {
  if (args.s == 0 || batch_heads == 0) return;
  constexpr int BQ = D == 64 ? 64 : 32;  // dK/dV query tile: 2 x 16 x D fp32 accumulators per warp
  // Scratch [2][b * heads][s] fp32 (lse2, delta), stream-ordered: freed after the dQ kernel.
  const size_t rows = static_cast<size_t>(batch_heads) * static_cast<size_t>(args.s);
  struct Scratch {  // freed in stream order, also when a launch check throws
    float* p = nullptr;
    cudaStream_t st;
    ~Scratch() {
      if (p != nullptr) cudaFreeAsync(p, st);
    }
  } buf{nullptr, stream};
  MT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&buf.p), 2 * rows * sizeof(float), stream));
  float* scratch = buf.p;
  BackwardArgs a = args;
  a.lse2 = scratch;
  a.delta = scratch + rows;
  const dim3 grid0(static_cast<unsigned>((a.s + kTcThreads / 4 - 1) / (kTcThreads / 4)),
                   static_cast<unsigned>(batch_heads));
  attention_bwd_prep_tc_kernel<T, D><<<grid0, kTcThreads, 0, stream>>>(a, scratch, scratch + rows);
  MT_CUDA_LAUNCH_CHECK();
  constexpr size_t smem1 = dkdv_tc_smem_bytes<D, BQ, kDoc>();
  auto k1 = attention_dkdv_tc_kernel<T, D, BQ, kDoc>;
  MT_CUDA_CHECK(cudaFuncSetAttribute(k1, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem1)));
  const int64_t batch_groups = batch_heads / a.per_group;
  const dim3 grid1(static_cast<unsigned>((a.s + 63) / 64), static_cast<unsigned>(batch_groups));
  k1<<<grid1, kTcThreads, smem1, stream>>>(a);
  MT_CUDA_LAUNCH_CHECK();
  const dim3 grid(static_cast<unsigned>((a.s + 63) / 64), static_cast<unsigned>(batch_heads));
  constexpr size_t smem2 = dq_tc_smem_bytes<D>();
  auto k2 = attention_dq_tc_kernel<T, D, kDoc>;
  MT_CUDA_CHECK(cudaFuncSetAttribute(k2, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem2)));
  k2<<<grid, kTcThreads, smem2, stream>>>(a);
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace tc

// The tensor-core path takes bf16/fp16 tensors of one dtype, head_dim 64, 80 (GPT-3 2.7B:
// 2560 / 32) or 128, and 16-byte
// aligned data (every row of a head then starts 16-byte aligned).
bool tc_eligible(int64_t d, std::initializer_list<const Tensor*> ts) {
  if (d != 64 && d != 80 && d != 128) return false;
  const DType dt = (*ts.begin())->dtype();
  if (dt != DType::kBF16 && dt != DType::kF16) return false;
  for (const Tensor* t : ts)
    if (t->dtype() != dt || reinterpret_cast<uintptr_t>(t->data()) % 16 != 0) return false;
  return true;
}

// The tensor-core kernels: one instantiation per (dtype, head_dim 64 / 80 / 128, documents or
// not); f.run<T, D, kDoc>() launches the one a call needs.
template <typename T, int D, class Launch>
void dispatch_tc_documents(bool documents, const Launch& f) {
  if (documents)
    f.template run<T, D, true>();
  else
    f.template run<T, D, false>();
}
template <typename T, class Launch>
void dispatch_tc_head_dim(int d, bool documents, const Launch& f) {
  if (d == 64)
    dispatch_tc_documents<T, 64>(documents, f);
  else if (d == 80)
    dispatch_tc_documents<T, 80>(documents, f);
  else
    dispatch_tc_documents<T, 128>(documents, f);
}
template <class Launch>
void dispatch_tc(DType dt, int d, bool documents, const Launch& f) {
  if (dt == DType::kBF16)
    dispatch_tc_head_dim<__nv_bfloat16>(d, documents, f);
  else
    dispatch_tc_head_dim<__half>(d, documents, f);
}

struct BackwardLaunch {
  const BackwardArgs& a;
  int64_t batch_heads;
  cudaStream_t stream;
  template <typename T, int D, bool kDoc>
  void run() const {
    tc::launch_backward_tc<T, D, kDoc>(a, batch_heads, stream);
  }
};
struct ForwardLaunch {
  const ForwardArgs& a;
  int64_t batch_heads;
  cudaStream_t stream;
  template <typename T, int D, bool kDoc>
  void run() const {
    tc::launch_forward_tc<T, D, kDoc>(a, batch_heads, stream);
  }
};

void run_backward_tc(const BackwardArgs& a, int64_t batch_heads, DType dt, cudaStream_t stream) {
  dispatch_tc(dt, a.d, a.key_start != nullptr, BackwardLaunch{a, batch_heads, stream});
}

void run_forward_tc(const ForwardArgs& a, int64_t batch_heads, DType dt, cudaStream_t stream) {
  if (a.nq == 0 || batch_heads == 0) return;
  dispatch_tc(dt, a.d, a.key_start != nullptr, ForwardLaunch{a, batch_heads, stream});
}

struct Dims {
  int64_t s, b, heads, d;
  const int32_t* key_start = nullptr;  // device [b, s] (AttentionParams::key_start) or null
  QkvLayout layout;
};

// Past kOwnAttentionMaxHeadDim only cuDNN runs attention (cudnn_attention.cpp); called where
// our kernels are about to run.
void require_own_head_dim(int64_t d) {
  if (d > kOwnAttentionMaxHeadDim) {
    throw_error("[--hidden-size / --num-attention-heads] our CUDA attention kernels take head_dim <= ",
                kOwnAttentionMaxHeadDim, ", got ", d, " (cuDNN's fused attention runs up to 256 in bf16/fp16)");
  }
}

Dims check_attention(const Tensor& qkv, const Tensor& lse, const AttentionParams& p) {
  MT_CHECK(p.heads > 0 && p.head_dim > 0) << "attention heads " << p.heads << ", head_dim " << p.head_dim;
  MT_CHECK(p.softmax_scale > 0.0f) << "attention softmax_scale " << p.softmax_scale << " (unset?)";
  MT_CHECK(p.dropout.p >= 0.0f && p.dropout.p < 1.0f) << "attention dropout " << p.dropout.p;
  const QkvLayout layout(p.heads, p.groups(), p.head_dim);
  MT_CHECK(qkv.ndim() == 3 && qkv.dim(2) == layout.width())
      << "attention qkv " << qkv.describe() << " for " << p.heads << " heads in " << layout.groups
      << " query groups of " << p.head_dim;
  MT_CHECK(is_float(qkv.dtype())) << "attention qkv " << qkv.describe();
  Dims dims{qkv.dim(0), qkv.dim(1), p.heads, p.head_dim, nullptr, layout};
  if (p.key_start.defined()) {
    // Its values (non-decreasing, each row's within [0, i]) are the caller's contract (ops.h):
    // checking them would wait for the device.
    const Tensor& ks = p.key_start;
    MT_CHECK(ks.device() == Device::kCUDA && ks.dtype() == DType::kI32 && ks.ndim() == 2 && ks.dim(0) == dims.b &&
             ks.dim(1) == dims.s)
        << "attention key_start " << ks.describe() << ", expected a CUDA int32 [" << dims.b << ", " << dims.s << "]";
    dims.key_start = static_cast<const int32_t*>(p.key_start.data());
  }
  MT_CHECK(lse.dtype() == DType::kF32 && lse.numel() == dims.b * dims.heads * dims.s)
      << "attention lse " << lse.describe() << ", expected fp32[" << dims.b << ", " << dims.heads << ", " << dims.s
      << "]";
  MT_CHECK(dims.b * dims.heads <= 65535) << "attention b * heads " << dims.b * dims.heads << " > 65535";
  return dims;
}

OutMatrix out_part(Tensor& t, int64_t base, int64_t row_stride, int64_t batch_stride, int64_t head_stride) {
  return OutMatrix{t.data(), t.dtype(), base, row_stride, batch_stride, head_stride};
}
// dq, dk or dv (part 0, 1, 2) in dqkv: qkv_part's addressing (dk/dv of a group written once).
OutMatrix dqkv_part(Tensor& dqkv, int64_t b, const QkvLayout& L, int part) {
  const int64_t n = L.per_group(), d = L.head_dim, w = L.width();
  const int64_t base = part == 0 ? 0 : (n + part - 1) * d;
  return OutMatrix{dqkv.data(), dqkv.dtype(), base, b * w, w, L.group_width(), n, part == 0 ? d : 0};
}

}  // namespace

void write_document_bias(const int32_t* key_start, int64_t b, int64_t s, DType dtype, void* bias, cudaStream_t stream) {
  MT_CHECK(dtype == DType::kBF16 || dtype == DType::kF16) << "document bias of " << dtype_name(dtype);
  if (b * s == 0) return;
  // The lowest finite value: masked scores stay finite (no -inf - -inf in the softmax).
  const float masked = dtype == DType::kBF16 ? -3.3895314e38f : -65504.0f;
  document_bias_kernel<<<static_cast<unsigned>(b * s), 256, 0, stream>>>(key_start, s, dtype, bias, masked);
  MT_CUDA_LAUNCH_CHECK();
}

void gather_queries(const void* qkv, int64_t s, int64_t b, int64_t heads, int64_t groups, int64_t d, DType dtype,
                    void* q, cudaStream_t stream) {
  MT_CHECK(dtype_size(dtype) == 2 && d % 8 == 0 && heads % groups == 0)
      << "gather_queries of " << dtype_name(dtype) << " head_dim " << d << ", " << heads << " heads in " << groups;
  const int64_t n = s * b * heads * (d / 8);
  if (n == 0) return;
  query_columns_kernel<<<grid_for(n), 256, 0, stream>>>(static_cast<const uint4*>(qkv), static_cast<uint4*>(q), s * b,
                                                        static_cast<int>(heads), static_cast<int>(heads / groups),
                                                        static_cast<int>(d), true);
  MT_CUDA_LAUNCH_CHECK();
}

void scatter_query_grads(const void* dq, int64_t s, int64_t b, int64_t heads, int64_t groups, int64_t d, DType dtype,
                         void* dqkv, cudaStream_t stream) {
  MT_CHECK(dtype_size(dtype) == 2 && d % 8 == 0 && heads % groups == 0)
      << "scatter_query_grads of " << dtype_name(dtype) << " head_dim " << d << ", " << heads << " heads in " << groups;
  const int64_t n = s * b * heads * (d / 8);
  if (n == 0) return;
  query_columns_kernel<<<grid_for(n), 256, 0, stream>>>(static_cast<const uint4*>(dq), static_cast<uint4*>(dqkv), s * b,
                                                        static_cast<int>(heads), static_cast<int>(heads / groups),
                                                        static_cast<int>(d), false);
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::attention_forward(const Tensor& qkv, Tensor& out, Tensor& lse, const AttentionParams& params) {
  const auto [s, b, heads, d, key_start, L] = check_attention(qkv, lse, params);
  MT_CHECK(out.numel() == s * b * heads * d && is_float(out.dtype())) << "attention out " << out.describe();
  if (cudnn_attention_forward(qkv, out, lse, params)) return;  // cudnn_attention.cpp decides per case
  require_own_head_dim(d);
  ForwardArgs a;
  a.q = qkv_part(qkv, b, L, 0);
  a.k = qkv_part(qkv, b, L, 1);
  a.v = qkv_part(qkv, b, L, 2);
  a.groups = static_cast<int>(L.groups);
  a.per_group = static_cast<int>(L.per_group());
  a.out = out_part(out, 0, b * heads * d, heads * d, d);
  a.lse = static_cast<float*>(lse.data());  // device pointer (data_as<> is host-only)
  a.nq = s;
  a.nk = s;
  a.q_pos0 = 0;
  a.heads = static_cast<int>(heads);
  a.d = static_cast<int>(d);
  a.scale = params.softmax_scale;
  a.dropout_p = params.dropout.p;
  a.seed = params.dropout.seed;
  a.stream = params.dropout.stream;
  a.stream_add = params.dropout.stream_add;
  a.dropout_heads = static_cast<int>(params.dropout_total_heads());
  a.dropout_head0 = static_cast<int>(params.dropout_head0);
  a.key_start = key_start;
  if (tc_eligible(d, {&qkv, &out})) {
    run_forward_tc(a, b * heads, qkv.dtype(), stream());
  } else {
    run_forward(a, b * heads, stream());
  }
}

void CudaBackend::attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                     Tensor& dqkv, const AttentionParams& params) {
  const auto [s, b, heads, d, key_start, L] = check_attention(qkv, lse, params);
  MT_CHECK(dout.numel() == s * b * heads * d && is_float(dout.dtype())) << "attention dout " << dout.describe();
  MT_CHECK(out.numel() == s * b * heads * d && is_float(out.dtype())) << "attention out " << out.describe();
  MT_CHECK(dqkv.numel() == qkv.numel() && is_float(dqkv.dtype()))
      << "attention dqkv " << dqkv.describe() << " for qkv " << qkv.describe();
  if (s == 0 || b == 0) return;
  if (cudnn_attention_backward(dout, qkv, out, lse, dqkv, params)) return;
  require_own_head_dim(d);

  BackwardArgs a;
  a.q = qkv_part(qkv, b, L, 0);
  a.k = qkv_part(qkv, b, L, 1);
  a.v = qkv_part(qkv, b, L, 2);
  a.dout = head_rows(dout, b, heads, d);
  a.out = head_rows(out, b, heads, d);
  a.dq = dqkv_part(dqkv, b, L, 0);
  a.dk = dqkv_part(dqkv, b, L, 1);
  a.dv = dqkv_part(dqkv, b, L, 2);
  a.groups = static_cast<int>(L.groups);
  a.per_group = static_cast<int>(L.per_group());
  a.lse = static_cast<const float*>(lse.data());
  a.s = s;
  a.heads = static_cast<int>(heads);
  a.d = static_cast<int>(d);
  a.scale = params.softmax_scale;
  a.dropout_p = params.dropout.p;
  a.seed = params.dropout.seed;
  a.stream = params.dropout.stream;
  a.stream_add = params.dropout.stream_add;
  a.dropout_heads = static_cast<int>(params.dropout_total_heads());
  a.dropout_head0 = static_cast<int>(params.dropout_head0);
  a.key_start = key_start;
  if (tc_eligible(d, {&qkv, &dout, &out, &dqkv})) {
    run_backward_tc(a, b * heads, qkv.dtype(), stream());
  } else if (d <= 64) {
    launch_dkdv<64, 64, 64>(a, b * L.groups, stream());
    launch_dq<64, 64, 64>(a, b * heads, stream());
  } else {
    launch_dkdv<128, 32, 32>(a, b * L.groups, stream());
    launch_dq<128, 64, 32>(a, b * heads, stream());
  }
}

void CudaBackend::attention_kv_cache(const Tensor& qkv, Tensor& k_cache, Tensor& v_cache, int64_t past, Tensor& out,
                                     const AttentionParams& params) {
  const int64_t heads = params.heads, d = params.head_dim;
  MT_CHECK(heads > 0 && d > 0 && d <= 128)
      << "attention_kv_cache heads " << heads << ", head_dim " << d << " (CUDA: head_dim <= 128)";
  const QkvLayout L(heads, params.groups(), d);
  const int64_t groups = L.groups;
  MT_CHECK(params.softmax_scale > 0.0f) << "attention softmax_scale unset";
  MT_CHECK(qkv.ndim() == 3 && qkv.dim(2) == L.width() && is_float(qkv.dtype()))
      << "attention_kv_cache qkv " << qkv.describe();
  const int64_t t = qkv.dim(0), b = qkv.dim(1);
  MT_CHECK(k_cache.dtype() == DType::kF32 && v_cache.dtype() == DType::kF32)
      << "attention caches " << k_cache.describe() << " / " << v_cache.describe() << " must be fp32";
  MT_CHECK(k_cache.ndim() == 4 && k_cache.dim(0) == b && k_cache.dim(1) == groups && k_cache.dim(3) == d &&
           v_cache.shape() == k_cache.shape())
      << "attention caches " << k_cache.describe() << " / " << v_cache.describe() << ", expected [" << b << ", "
      << groups << ", max_seq, " << d << "]";
  const int64_t max_seq = k_cache.dim(2);
  MT_CHECK(past >= 0 && past + t <= max_seq) << "attention_kv_cache past " << past << " + " << t << " > " << max_seq;
  MT_CHECK(out.numel() == t * b * heads * d && is_float(out.dtype())) << "attention_kv_cache out " << out.describe();
  MT_CHECK(b * heads <= 65535) << "attention_kv_cache b * heads " << b * heads << " > 65535";
  if (t == 0 || b == 0) return;

  const HeadMatrix k_new = qkv_part(qkv, b, L, 1), v_new = qkv_part(qkv, b, L, 2);
  kv_cache_append_kernel<<<grid_for(t * b * groups * d), 256, 0, stream()>>>(
      k_new, v_new, static_cast<float*>(k_cache.data()), static_cast<float*>(v_cache.data()), t, b,
      static_cast<int>(groups), static_cast<int>(L.per_group()), static_cast<int>(d), max_seq, past);
  MT_CUDA_LAUNCH_CHECK();

  ForwardArgs a;
  a.q = qkv_part(qkv, b, L, 0);
  // [b, G, max_seq, d], read by query head (its group's cache).
  const HeadMatrix cache{nullptr, DType::kF32, 0, d, groups * max_seq * d, max_seq * d, L.per_group(), 0};
  a.k = cache;
  a.k.ptr = k_cache.data();
  a.v = cache;
  a.v.ptr = v_cache.data();
  a.out = out_part(out, 0, b * heads * d, heads * d, d);
  a.lse = nullptr;
  a.nq = t;
  a.nk = past + t;
  a.q_pos0 = past;
  a.heads = static_cast<int>(heads);
  a.d = static_cast<int>(d);
  a.scale = params.softmax_scale;
  a.dropout_p = 0.0f;
  run_forward(a, b * heads, stream());
}

}  // namespace megatron::backend
