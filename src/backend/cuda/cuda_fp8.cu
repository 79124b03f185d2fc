// CUDA backend: FP8 quantization (Backend::fp8_quantize). The current (tensorwise) scaling needs
// the tensor's max |x| before the first code is written, so it takes two passes: the amax (a
// max is order-independent, so the unsigned atomicMax of non-negative floats' bits is
// deterministic), then one tiled pass that casts with the hardware's saturating conversion
// (cvt.rn.satfinite) and writes the row-major and/or transposed codes (TE's cast_transpose).
// The delayed scaling knows its scale, so its cast pass records the amax itself (atomicMax
// into the history slot): one read of x. Block (0, 0) writes scale and scale_inv.
// Two cast kernels: 16-byte loads over 64 x 64 tiles with 8-byte code stores where the shape
// allows it (rows and columns multiples of 8, aligned buffers: every layer GEMM operand), and
// an element-wise one for the rest. Both give the same codes. Both apply the source's prologue
// (GELU, or the GELU gradient from the pre-activation) to each element as it is loaded, and
// with a bias gradient asked for, sum their tile's columns into per-block partials that one
// more small kernel adds up in a fixed order (deterministic). The FP8 GEMM is in cuda_gemm.cu.
#include <cuda_fp8.h>

#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "core/fp8.h"

namespace megatron::backend {

using namespace cuda;

namespace {

constexpr int kAmaxThreads = 256;
constexpr int kAmaxMaxBlocks = 2048;  // grid-stride beyond: fewer atomics, same bandwidth
constexpr int kTile = 32;             // the element-wise cast's tile: kTile x kTile elements
constexpr int kTileRows = 8;          // its threads per block: kTile x kTileRows
constexpr int kVecTile = 64;          // the vectorized cast's tile: kVecTile x kVecTile elements
constexpr int kVecThreads = 256;      // its threads: 8 column groups of 8 x 32 rows
constexpr int kCodes = 8;             // codes per thread and vector (one 8-byte store)

// The block's max of per-thread maxima `a` (non-negative), atomically maxed into *out's bits.
__device__ __forceinline__ void block_amax_to(float a, unsigned* out) {
  for (int off = 16; off > 0; off /= 2) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, off));
  __shared__ float warp_max[32];
  const int warp = static_cast<int>((threadIdx.y * blockDim.x + threadIdx.x) / 32);
  const int warps = static_cast<int>(blockDim.x * blockDim.y / 32);
  if ((threadIdx.y * blockDim.x + threadIdx.x) % 32 == 0) warp_max[warp] = a;
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    for (int w = 1; w < warps; ++w) a = fmaxf(a, warp_max[w]);
    if (a > 0.0f) atomicMax(out, __float_as_uint(a));  // non-negative floats order as their bits
  }
}

// The source's v from x's element e and the pre-activation's element p (kGeluGrad): the CPU
// backend's fp32 formulas (cpu_util.h). The branch is the same for every thread.
struct Prologue {
  Fp8Prologue op;
  bool tanh;
};

__device__ __forceinline__ float source_value(const Prologue& pro, float e, float p) {
  if (pro.op == Fp8Prologue::kGelu) return pro.tanh ? gelu<true>(e) : gelu<false>(e);
  if (pro.op == Fp8Prologue::kGeluGrad) return e * (pro.tanh ? gelu_grad<true>(p) : gelu_grad<false>(p));
  return e;
}

// kVecWidth<T> elements of v at x + i (and aux + i), one 16-byte load each.
template <class T>
__device__ __forceinline__ void load_source_vec(const T* x, const T* aux, int64_t i, const Prologue& pro,
                                                float (&v)[kVecWidth<T>]) {
  load_vec<T>(x + i, v);
  if (pro.op == Fp8Prologue::kIdentity) return;
  float p[kVecWidth<T>] = {};
  if (pro.op == Fp8Prologue::kGeluGrad) load_vec<T>(aux + i, p);
#pragma unroll
  for (int k = 0; k < kVecWidth<T>; ++k) v[k] = source_value(pro, v[k], p[k]);
}

template <class T>
__device__ __forceinline__ float load_source(const T* x, const T* aux, int64_t i, const Prologue& pro) {
  const float p = pro.op == Fp8Prologue::kGeluGrad ? to_f32<T>(aux[i]) : 0.0f;
  return source_value(pro, to_f32<T>(x[i]), p);
}

// max |v| of n elements into *out (fmaxf skips NaN); 16-byte loads when `vec` (x, aux aligned).
template <class T>
__global__ void fp8_amax_kernel(const T* x, const T* aux, Prologue pro, int64_t n, bool vec, unsigned* out) {
  constexpr int W = kVecWidth<T>;
  float a = 0.0f;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t vectors = n / W;
    for (int64_t v = first; v < vectors; v += stride) {
      float e[W];
      load_source_vec<T>(x, aux, v * W, pro, e);
#pragma unroll
      for (int k = 0; k < W; ++k) a = fmaxf(a, fabsf(e[k]));
    }
    done = vectors * W;
  }
  for (int64_t i = done + first; i < n; i += stride) a = fmaxf(a, fabsf(load_source<T>(x, aux, i, pro)));
  block_amax_to(a, out);
}

__device__ __forceinline__ uint8_t to_fp8(float v, Fp8Format f) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, f == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2));
}

// Two codes, lo in the low byte (cvt.rn.satfinite.{e4m3,e5m2}x2.f32: the same rounding as to_fp8).
__device__ __forceinline__ uint32_t to_fp8x2(float lo, float hi, Fp8Format f) {
  return __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, f == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2);
}

// What every cast block shares: the scale it multiplies by (current: from the finished amax
// pass; delayed: the state's), and the scalars block (0, 0) writes.
struct CastScaling {
  const unsigned* amax_bits;  // current: the amax pass's result; delayed: unused
  float* scale;
  float* scale_inv;
  float* amax_slot;  // recorded amax (nullable)
  bool current;
  Fp8Format format;
};

__device__ __forceinline__ float cast_scale(const CastScaling& cs) {
  return cs.current ? fp8_current_scale(__uint_as_float(*cs.amax_bits), fp8_max(cs.format)) : *cs.scale;
}

// Block (0, 0)'s scalars. Only current writes scale, and then no block reads it: no race.
// The delayed amax is recorded by every block (block_amax_to), the current one here.
__device__ __forceinline__ void write_scalars(const CastScaling& cs, float sc) {
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
    if (cs.current) {
      *cs.scale = sc;
      if (cs.amax_slot) *cs.amax_slot = fmaxf(*cs.amax_slot, __uint_as_float(*cs.amax_bits));
    }
    *cs.scale_inv = __fdiv_rn(1.0f, sc);
  }
}

// Tiles [blockIdx.y * tiles, + tiles) of kTile rows (one when no bias gradient is summed);
// partial (nullable): this block's column sums of v, partial[blockIdx.y * cols + c].
template <class T>
__global__ void fp8_cast_kernel(const T* x, const T* aux, Prologue pro, int64_t rows, int64_t cols, int tiles,
                                uint8_t* q, uint8_t* qt, float* partial, CastScaling cs) {
  __shared__ uint8_t tile[kTile][kTile + 1];
  const float sc = cast_scale(cs);
  const int64_t c0 = int64_t{blockIdx.x} * kTile;
  float a = 0.0f, colsum = 0.0f;
  for (int t = 0; t < tiles; ++t) {
    const int64_t r0 = (int64_t{blockIdx.y} * tiles + t) * kTile;
    if (r0 >= rows) break;
    if (t > 0 && qt) __syncthreads();  // the last tile's transposed stores have read `tile`
    for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
      const int64_t r = r0 + i, c = c0 + threadIdx.x;
      if (r < rows && c < cols) {
        const float v = load_source<T>(x, aux, r * cols + c, pro);
        a = fmaxf(a, fabsf(v));
        colsum += v;
        const uint8_t code = to_fp8(__fmul_rn(v, sc), cs.format);
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
  }
  if (partial) {
    __shared__ float sums[kTileRows][kTile];
    sums[threadIdx.y][threadIdx.x] = colsum;
    __syncthreads();
    const int64_t c = c0 + threadIdx.x;
    if (threadIdx.y == 0 && c < cols) {
      float total = 0.0f;
      for (int y = 0; y < kTileRows; ++y) total += sums[y][threadIdx.x];
      partial[int64_t{blockIdx.y} * cols + c] = total;
    }
  }
  if (!cs.current && cs.amax_slot) block_amax_to(a, reinterpret_cast<unsigned*>(cs.amax_slot));
  write_scalars(cs, sc);
}

// The vectorized cast: rows % 8 == 0, cols % 8 == 0, x (and aux) 16-byte and q / qt 8-byte
// aligned. Thread (g, y) = (threadIdx.x % 8, threadIdx.x / 8) converts rows y and y + 32 of
// each tile, columns [8 g, 8 g + 8), with one or two 16-byte loads and one 8-byte store each;
// the transposed tile is written from shared memory as 8-byte runs of 8 rows. Tiles and
// partial as fp8_cast_kernel's (kVecTile rows per tile).
template <class T>
__global__ void __launch_bounds__(kVecThreads)
    fp8_cast_vec_kernel(const T* x, const T* aux, Prologue pro, int64_t rows, int64_t cols, int tiles, uint8_t* q,
                        uint8_t* qt, float* partial, CastScaling cs) {
  constexpr int W = kVecWidth<T>;  // elements per 16-byte load: 8 (16-bit) or 4 (fp32)
  __shared__ __align__(8) uint8_t tile[kVecTile][kVecTile + kCodes];
  const float sc = cast_scale(cs);
  const int64_t c0 = int64_t{blockIdx.x} * kVecTile;
  const int g = static_cast<int>(threadIdx.x % 8), y = static_cast<int>(threadIdx.x / 8);
  float a = 0.0f;
  float colsum[kCodes] = {};
  for (int t = 0; t < tiles; ++t) {
    const int64_t r0 = (int64_t{blockIdx.y} * tiles + t) * kVecTile;
    if (r0 >= rows) break;
    if (t > 0 && qt) __syncthreads();  // the last tile's transposed stores have read `tile`
#pragma unroll
    for (int pass = 0; pass < 2; ++pass) {
      const int i = y + 32 * pass;
      const int64_t r = r0 + i, c = c0 + kCodes * g;
      if (r >= rows || c >= cols) continue;
      float v[kCodes];
#pragma unroll
      for (int part = 0; part < kCodes / W; ++part) {
        float e[W];
        load_source_vec<T>(x, aux, r * cols + c + part * W, pro, e);
#pragma unroll
        for (int k = 0; k < W; ++k) v[part * W + k] = e[k];
      }
      uint32_t word[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t w = 0;
#pragma unroll
        for (int k = 0; k < 4; k += 2) {
          const float lo = v[4 * h + k], hi = v[4 * h + k + 1];
          a = fmaxf(a, fmaxf(fabsf(lo), fabsf(hi)));
          w |= to_fp8x2(__fmul_rn(lo, sc), __fmul_rn(hi, sc), cs.format) << (8 * k);
        }
        word[h] = w;
      }
#pragma unroll
      for (int k = 0; k < kCodes; ++k) colsum[k] += v[k];
      const uint2 codes = make_uint2(word[0], word[1]);
      if (q) *reinterpret_cast<uint2*>(q + r * cols + c) = codes;
      if (qt) *reinterpret_cast<uint2*>(&tile[i][kCodes * g]) = codes;
    }
    if (qt) {
      __syncthreads();
      // Thread (rg, j) = (threadIdx.x % 8, threadIdx.x / 8) writes tile column j (and j + 32),
      // rows [8 rg, 8 rg + 8): qt row c0 + j, 8 consecutive codes.
#pragma unroll
      for (int pass = 0; pass < 2; ++pass) {
        const int j = y + 32 * pass, rg = g;
        const int64_t c = c0 + j, r = r0 + kCodes * rg;
        if (c >= cols || r >= rows) continue;
        uint32_t word[2] = {0, 0};
#pragma unroll
        for (int k = 0; k < kCodes; ++k) word[k / 4] |= uint32_t{tile[kCodes * rg + k][j]} << (8 * (k % 4));
        *reinterpret_cast<uint2*>(qt + c * rows + r) = make_uint2(word[0], word[1]);
      }
    }
  }
  if (partial) {
    __shared__ float sums[32][kVecTile + 1];
#pragma unroll
    for (int k = 0; k < kCodes; ++k) sums[y][kCodes * g + k] = colsum[k];
    __syncthreads();
    const int64_t c = c0 + threadIdx.x;
    if (threadIdx.x < kVecTile && c < cols) {
      float total = 0.0f;
      for (int r = 0; r < 32; ++r) total += sums[r][threadIdx.x];
      partial[int64_t{blockIdx.y} * cols + c] = total;
    }
  }
  if (!cs.current && cs.amax_slot) block_amax_to(a, reinterpret_cast<unsigned*>(cs.amax_slot));
  write_scalars(cs, sc);
}

// dbias[c] (+=) the sum of partial[j * cols + c] over j = 0..splits-1 in order, rounded once.
__global__ void fp8_dbias_combine_kernel(const float* partial, int64_t splits, int64_t cols, void* dbias, DType dt,
                                         bool accumulate) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < cols; c += int64_t{gridDim.x} * blockDim.x) {
    float total = 0.0f;
    for (int64_t j = 0; j < splits; ++j) total += partial[j * cols + c];
    store_f(dbias, dt, c, accumulate ? __fadd_rn(load_f(dbias, dt, c), total) : total);
  }
}

bool aligned_to(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

float* scalar_ptr(const Tensor& t, const char* what) {
  MT_CHECK(t.defined() && t.device() == Device::kCUDA && t.dtype() == DType::kF32 && t.numel() == 1)
      << what << " must be an fp32 [1] CUDA tensor, not " << (t.defined() ? t.describe() : "undefined");
  return static_cast<float*>(t.data());
}

}  // namespace

void CudaBackend::fp8_cast(const Fp8Source& src, Tensor& q, Tensor& qt, const Fp8Quantization& s, Tensor& dbias,
                           GradWrite write) {
  const Tensor& x = src.x;
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
  const bool grad_prologue = src.prologue == Fp8Prologue::kGeluGrad;
  if (grad_prologue) {
    MT_CHECK(src.aux.defined() && src.aux.device() == Device::kCUDA && src.aux.dtype() == x.dtype() &&
             src.aux.numel() == n)
        << "fp8_quantize gelu pre-activation " << (src.aux.defined() ? src.aux.describe() : "undefined") << " for "
        << x.describe();
  }
  if (dbias.defined()) {
    MT_CHECK(dbias.device() == Device::kCUDA && is_float(dbias.dtype()) && dbias.numel() == cols)
        << "fp8_quantize dbias " << dbias.describe() << " for " << x.describe();
  }
  float* scale = scalar_ptr(s.scale, "fp8_quantize scale");
  float* scale_inv = scalar_ptr(s.scale_inv, "fp8_quantize scale_inv");
  float* amax_slot = s.amax.defined() ? scalar_ptr(s.amax, "fp8_quantize amax") : nullptr;
  // Delayed: the amax is recorded by the cast (atomicMax on the slot's bits needs it >= 0,
  // which the history's zeros and maxima are). Scratch: the amax's word, then the partials.
  auto* amax_bits = static_cast<unsigned*>(scratch());
  constexpr size_t kPartialOffset = 256;  // bytes
  float* partials = reinterpret_cast<float*>(static_cast<char*>(scratch()) + kPartialOffset);
  const int64_t partial_capacity = static_cast<int64_t>((kBackendScratchBytes - kPartialOffset) / sizeof(float));
  const CastScaling cs{amax_bits, scale, scale_inv, amax_slot, s.current, s.format};
  const Prologue pro{src.prologue, src.gelu == Gelu::kTanh};
  uint8_t* qp = q.defined() ? static_cast<uint8_t*>(q.data()) : nullptr;
  uint8_t* qtp = qt.defined() ? static_cast<uint8_t*>(qt.data()) : nullptr;
  const bool aux_vec = !grad_prologue || vec_aligned(src.aux.data());
  const bool vec_shape = rows % kCodes == 0 && cols % kCodes == 0 && vec_aligned(x.data()) && aux_vec &&
                         (!qp || aligned_to(qp, kCodes)) && (!qtp || aligned_to(qtp, kCodes));
  const bool accumulate = write == GradWrite::kAccumulate;
  if (dbias.defined() && rows == 0 && !accumulate) fill(dbias, 0.0f);
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data());
    const T* auxp = grad_prologue ? static_cast<const T*>(src.aux.data()) : nullptr;
    if (s.current) {
      MT_CUDA_CHECK(cudaMemsetAsync(amax_bits, 0, sizeof(unsigned), stream()));
      if (n > 0) {
        const unsigned blocks =
            std::min<unsigned>(grid_for((n + kVecWidth<T> - 1) / kVecWidth<T>, kAmaxThreads), kAmaxMaxBlocks);
        fp8_amax_kernel<T>
            <<<blocks, kAmaxThreads, 0, stream()>>>(xp, auxp, pro, n, vec_aligned(xp) && aux_vec, amax_bits);
        MT_CUDA_LAUNCH_CHECK();
      }
    }
    const int64_t tile = vec_shape ? kVecTile : kTile;
    const int64_t row_tiles = std::max<int64_t>(1, (rows + tile - 1) / tile);
    // With a bias gradient, each block row sums `tiles` tiles so that the partials fit.
    int64_t tiles = 1;
    const bool sum_columns = dbias.defined() && rows > 0;
    if (sum_columns) {
      MT_CHECK(cols <= partial_capacity) << "fp8_quantize dbias of " << cols << " columns";
      const int64_t max_splits = std::min<int64_t>(partial_capacity / cols, 65535);
      tiles = (row_tiles + max_splits - 1) / max_splits;
    }
    const int64_t splits = (row_tiles + tiles - 1) / tiles;
    const dim3 grid(static_cast<unsigned>(std::max<int64_t>(1, (cols + tile - 1) / tile)),
                    static_cast<unsigned>(splits));
    MT_CHECK(grid.y <= 65535u) << "fp8_quantize of " << rows << " rows";
    float* partial = sum_columns ? partials : nullptr;
    if (vec_shape) {
      fp8_cast_vec_kernel<T><<<grid, kVecThreads, 0, stream()>>>(xp, auxp, pro, rows, cols, static_cast<int>(tiles), qp,
                                                                 qtp, partial, cs);
    } else {
      fp8_cast_kernel<T><<<grid, dim3(kTile, kTileRows), 0, stream()>>>(xp, auxp, pro, rows, cols,
                                                                        static_cast<int>(tiles), qp, qtp, partial, cs);
    }
    MT_CUDA_LAUNCH_CHECK();
    if (partial) {
      fp8_dbias_combine_kernel<<<grid_for(cols, 256), 256, 0, stream()>>>(partial, splits, cols, dbias.data(),
                                                                          dbias.dtype(), accumulate);
      MT_CUDA_LAUNCH_CHECK();
    }
  });
}

}  // namespace megatron::backend
