// CUDA backend: causal self-attention over Megatron's fused QKV layout (ops.h,
// AttentionParams), flash-attention style, and attention over a KV cache (generation).
//
// Reference: backend/cpu/cpu_attention.cpp (the same function of the inputs) and
// Dao, "FlashAttention-2" (tiling, online softmax, lse saved, two-pass backward).
//
// Design (first version: fp32 SIMT math from shared memory, no tensor cores):
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
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"

namespace megatron::backend {

using namespace cuda;

namespace {

constexpr int kThreads = 256;  // a 16 x 16 thread grid
constexpr float kNegInf = -INFINITY;

// Row `row` of (batch bi, head hd) of a head-split matrix: element c at
// base + bi * batch_stride + hd * head_stride + row * row_stride + c.
struct HeadMatrix {
  const void* ptr = nullptr;
  DType dtype = DType::kF32;
  int64_t base = 0;
  int64_t row_stride = 0, batch_stride = 0, head_stride = 0;

  __device__ int64_t at(int64_t bi, int64_t hd, int64_t row) const {
    return base + bi * batch_stride + hd * head_stride + row * row_stride;
  }
};

struct OutMatrix {
  void* ptr = nullptr;
  DType dtype = DType::kF32;
  int64_t base = 0;
  int64_t row_stride = 0, batch_stride = 0, head_stride = 0;

  __device__ int64_t at(int64_t bi, int64_t hd, int64_t row) const {
    return base + bi * batch_stride + hd * head_stride + row * row_stride;
  }
};

// q, k or v (part 0, 1, 2) of qkv[s, b, heads * 3d]; out/dout of [s, b, heads * d].
HeadMatrix qkv_part(const Tensor& qkv, int64_t b, int64_t heads, int64_t d, int part) {
  return HeadMatrix{qkv.data(), qkv.dtype(), part * d, b * heads * 3 * d, heads * 3 * d, 3 * d};
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
  float scale = 0.0f;
  float dropout_p = 0.0f;  // index ((bh * nq + row) * nk + key); only with nq == nk, q_pos0 == 0
  uint64_t seed = 0, stream = 0;
};

struct BackwardArgs {
  HeadMatrix q, k, v, dout, out;
  OutMatrix dq, dk, dv;
  const float* lse = nullptr;  // [b * heads, s]
  int64_t s = 0;
  int heads = 0, d = 0;
  float scale = 0.0f;
  float dropout_p = 0.0f;
  uint64_t seed = 0, stream = 0;
};

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

  for (int64_t kt = 0; kt < key_tiles; ++kt) {
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
      float mx = kNegInf;
#pragma unroll
      for (int c = 0; c < CC; ++c) {
        const int64_t key = k0 + tx + 16 * c;
        const bool valid = row < a.nq && key < a.nk && key <= qpos;
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
          const uint64_t index = static_cast<uint64_t>((bh * a.nq + row) * a.nk + key);
          pv *= dropout_multiplier(a.seed, a.stream, index, a.dropout_p);
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
__device__ __forceinline__ void rowdot_tile(float* D_s, const float* dOs, const HeadMatrix& out, int64_t bi,
                                            int64_t hd, int64_t row0, int64_t nrows, int d) {
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

// dK, dV of one key tile: grid (ceil(s / BK), b * heads). Keys are the rows of every tile
// here (S^T = K Q^T, dP^T = V dO^T), so dV += (P M)^T dO and dK += dS^T Q read P^T row-wise.
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
  const int64_t bh = blockIdx.y, bi = bh / a.heads, hd = bh % a.heads;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * BK;
  const bool dropout = a.dropout_p > 0.0f;

  load_tile<BK, DMAX, LD>(Ks, a.k, bi, hd, k0, a.s, a.d);
  load_tile<BK, DMAX, LD>(Vs, a.v, bi, hd, k0, a.s, a.d);

  float dk[RR][NC][4], dv[RR][NC][4];
#pragma unroll
  for (int r = 0; r < RR; ++r)
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[r][c][e] = dv[r][c][e] = 0.0f;

  const int64_t q_tiles = (a.s + BQ - 1) / BQ;
  for (int64_t qt = k0 / BQ; qt < q_tiles; ++qt) {
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
        const bool valid = qi < a.s && key <= qi;
        const float p = valid ? expf(st[r][c] * a.scale - lse_s[ci]) : 0.0f;
        float mult = 1.0f;
        if (dropout && valid) {
          const uint64_t index = static_cast<uint64_t>((bh * a.s + qi) * a.s + key);
          mult = dropout_multiplier(a.seed, a.stream, index, a.dropout_p);
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
  store_rows<RR, NC>(a.dk, bi, hd, k0, a.s, a.d, ty, tx, dk, scale);
  store_rows<RR, NC>(a.dv, bi, hd, k0, a.s, a.d, ty, tx, dv, one);
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
  for (int64_t kt = 0; kt < key_tiles; ++kt) {
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
#pragma unroll
      for (int c = 0; c < CC; ++c) {
        const int64_t key = k0 + tx + 16 * c;
        const bool valid = qi < a.s && key <= qi;
        const float p = valid ? expf(sc[r][c] * a.scale - lse_s[ri]) : 0.0f;
        float mult = 1.0f;
        if (dropout && valid) {
          const uint64_t index = static_cast<uint64_t>((bh * a.s + qi) * a.s + key);
          mult = dropout_multiplier(a.seed, a.stream, index, a.dropout_p);
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

template <int DMAX, int BK, int BQ>
void launch_dkdv(const BackwardArgs& a, int64_t batch_heads, cudaStream_t stream) {
  constexpr size_t smem = dkdv_smem_bytes<DMAX, BK, BQ>();
  auto kernel = attention_dkdv_kernel<DMAX, BK, BQ>;
  MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((a.s + BK - 1) / BK), static_cast<unsigned>(batch_heads));
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

// ---- KV cache ----------------------------------------------------------------------------

// k_cache/v_cache[bi, hd, past + r, c] = k/v of qkv[r, bi, hd*3d + {d, 2d} + c].
__global__ void kv_cache_append_kernel(HeadMatrix k, HeadMatrix v, float* k_cache, float* v_cache, int64_t t,
                                       int64_t b, int heads, int d, int64_t max_seq, int64_t past) {
  const int64_t n = t * b * heads * d;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = idx % d, rest = idx / d;
    const int64_t hd = rest % heads, bi = (rest / heads) % b, r = rest / (heads * b);
    const int64_t dst = ((bi * heads + hd) * max_seq + past + r) * d + c;
    k_cache[dst] = load_f(k.ptr, k.dtype, k.at(bi, hd, r) + c);
    v_cache[dst] = load_f(v.ptr, v.dtype, v.at(bi, hd, r) + c);
  }
}

struct Dims {
  int64_t s, b, heads, d;
};

Dims check_attention(const Tensor& qkv, const Tensor& lse, const AttentionParams& p) {
  MT_CHECK(p.heads > 0 && p.head_dim > 0) << "attention heads " << p.heads << ", head_dim " << p.head_dim;
  MT_CHECK(p.head_dim <= 128) << "CUDA attention supports head_dim <= 128, got " << p.head_dim;
  MT_CHECK(p.softmax_scale > 0.0f) << "attention softmax_scale " << p.softmax_scale << " (unset?)";
  MT_CHECK(p.dropout.p >= 0.0f && p.dropout.p < 1.0f) << "attention dropout " << p.dropout.p;
  MT_CHECK(qkv.ndim() == 3 && qkv.dim(2) == p.heads * 3 * p.head_dim)
      << "attention qkv " << qkv.describe() << " for " << p.heads << " heads of " << p.head_dim;
  MT_CHECK(is_float(qkv.dtype())) << "attention qkv " << qkv.describe();
  const Dims dims{qkv.dim(0), qkv.dim(1), p.heads, p.head_dim};
  MT_CHECK(lse.dtype() == DType::kF32 && lse.numel() == dims.b * dims.heads * dims.s)
      << "attention lse " << lse.describe() << ", expected fp32[" << dims.b << ", " << dims.heads << ", " << dims.s
      << "]";
  MT_CHECK(dims.b * dims.heads <= 65535) << "attention b * heads " << dims.b * dims.heads << " > 65535";
  return dims;
}

OutMatrix out_part(Tensor& t, int64_t base, int64_t row_stride, int64_t batch_stride, int64_t head_stride) {
  return OutMatrix{t.data(), t.dtype(), base, row_stride, batch_stride, head_stride};
}

}  // namespace

void CudaBackend::attention_forward(const Tensor& qkv, Tensor& out, Tensor& lse, const AttentionParams& params) {
  const auto [s, b, heads, d] = check_attention(qkv, lse, params);
  MT_CHECK(out.numel() == s * b * heads * d && is_float(out.dtype())) << "attention out " << out.describe();
  ForwardArgs a;
  a.q = qkv_part(qkv, b, heads, d, 0);
  a.k = qkv_part(qkv, b, heads, d, 1);
  a.v = qkv_part(qkv, b, heads, d, 2);
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
  run_forward(a, b * heads, stream());
}

void CudaBackend::attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                     Tensor& dqkv, const AttentionParams& params) {
  const auto [s, b, heads, d] = check_attention(qkv, lse, params);
  MT_CHECK(dout.numel() == s * b * heads * d && is_float(dout.dtype())) << "attention dout " << dout.describe();
  MT_CHECK(out.numel() == s * b * heads * d && is_float(out.dtype())) << "attention out " << out.describe();
  MT_CHECK(dqkv.numel() == qkv.numel() && is_float(dqkv.dtype()))
      << "attention dqkv " << dqkv.describe() << " for qkv " << qkv.describe();
  if (s == 0 || b == 0) return;

  BackwardArgs a;
  a.q = qkv_part(qkv, b, heads, d, 0);
  a.k = qkv_part(qkv, b, heads, d, 1);
  a.v = qkv_part(qkv, b, heads, d, 2);
  a.dout = head_rows(dout, b, heads, d);
  a.out = head_rows(out, b, heads, d);
  const int64_t row = b * heads * 3 * d;
  a.dq = out_part(dqkv, 0, row, heads * 3 * d, 3 * d);
  a.dk = out_part(dqkv, d, row, heads * 3 * d, 3 * d);
  a.dv = out_part(dqkv, 2 * d, row, heads * 3 * d, 3 * d);
  a.lse = static_cast<const float*>(lse.data());
  a.s = s;
  a.heads = static_cast<int>(heads);
  a.d = static_cast<int>(d);
  a.scale = params.softmax_scale;
  a.dropout_p = params.dropout.p;
  a.seed = params.dropout.seed;
  a.stream = params.dropout.stream;
  if (d <= 64) {
    launch_dkdv<64, 64, 64>(a, b * heads, stream());
    launch_dq<64, 64, 64>(a, b * heads, stream());
  } else {
    launch_dkdv<128, 32, 32>(a, b * heads, stream());
    launch_dq<128, 64, 32>(a, b * heads, stream());
  }
}

void CudaBackend::attention_kv_cache(const Tensor& qkv, Tensor& k_cache, Tensor& v_cache, int64_t past, Tensor& out,
                                     const AttentionParams& params) {
  const int64_t heads = params.heads, d = params.head_dim;
  MT_CHECK(heads > 0 && d > 0 && d <= 128) << "attention_kv_cache heads " << heads << ", head_dim " << d
                                           << " (CUDA: head_dim <= 128)";
  MT_CHECK(params.softmax_scale > 0.0f) << "attention softmax_scale unset";
  MT_CHECK(qkv.ndim() == 3 && qkv.dim(2) == heads * 3 * d && is_float(qkv.dtype()))
      << "attention_kv_cache qkv " << qkv.describe();
  const int64_t t = qkv.dim(0), b = qkv.dim(1);
  MT_CHECK(k_cache.dtype() == DType::kF32 && v_cache.dtype() == DType::kF32)
      << "attention caches " << k_cache.describe() << " / " << v_cache.describe() << " must be fp32";
  MT_CHECK(k_cache.ndim() == 4 && k_cache.dim(0) == b && k_cache.dim(1) == heads && k_cache.dim(3) == d &&
           v_cache.shape() == k_cache.shape())
      << "attention caches " << k_cache.describe() << " / " << v_cache.describe();
  const int64_t max_seq = k_cache.dim(2);
  MT_CHECK(past >= 0 && past + t <= max_seq) << "attention_kv_cache past " << past << " + " << t << " > " << max_seq;
  MT_CHECK(out.numel() == t * b * heads * d && is_float(out.dtype())) << "attention_kv_cache out " << out.describe();
  MT_CHECK(b * heads <= 65535) << "attention_kv_cache b * heads " << b * heads << " > 65535";
  if (t == 0 || b == 0) return;

  const HeadMatrix k_new = qkv_part(qkv, b, heads, d, 1), v_new = qkv_part(qkv, b, heads, d, 2);
  kv_cache_append_kernel<<<grid_for(t * b * heads * d), 256, 0, stream()>>>(
      k_new, v_new, static_cast<float*>(k_cache.data()), static_cast<float*>(v_cache.data()), t, b, static_cast<int>(heads),
      static_cast<int>(d), max_seq, past);
  MT_CUDA_LAUNCH_CHECK();

  ForwardArgs a;
  a.q = qkv_part(qkv, b, heads, d, 0);
  const HeadMatrix cache{nullptr, DType::kF32, 0, d, heads * max_seq * d, max_seq * d};
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
