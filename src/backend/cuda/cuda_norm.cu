// CUDA backend: layernorm and the token + position embeddings, the same functions as
// backend/cpu/cpu_norm.cpp (Megatron's fused layer norm and LanguageModelEmbedding).
//
// LayerNorm forward: one block per row; fp32 statistics in two passes over the row (mean,
// then the biased variance of x - mean), the row kept in shared memory between the passes
// when it fits; rstd = 1 / sqrt(var + eps); mean and rstd saved as fp32.
// LayerNorm backward, three kernels in this order (dx may alias dy, so dy is read for the
// parameter gradients before dx is written):
//   1. partials: block (column tile of 32, chunk of kRowsPerChunk rows) sums dy * xhat and dy
//      over its rows, in a fixed order, into partial[chunk][column];
//   2. reduce: one thread per column adds the chunks in order, then adds the total into
//      dgamma / dbeta ("+=");
//   3. dx: one block per row, dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma.
// No float atomics anywhere: every sum has a fixed shape for given (n, h), so results are
// bit-identical run to run, on any GPU.
// Embedding backward: the rows of dout are grouped by token with a radix sort of the unique
// keys token * N + row (N = s b rows), so each token's rows come out in row order; one block
// per run of equal tokens then adds them into dwte in that order, the CPU's order exactly.
// dwpe: each position adds its b rows in order. Intermediates (partial sums, sort keys)
// live in stream-ordered allocations (cudaMallocAsync), so no op here synchronizes.
#include <cub/device/device_radix_sort.cuh>

#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"

namespace megatron::backend {
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

// Dynamic shared memory: 32 floats of reduction buffer, then (if cache_row) the row as fp32.
__global__ void layernorm_forward_kernel(const void* x, DType xdt, const void* gamma, DType gdt, const void* beta,
                                         DType bdt, void* out, DType odt, float* mean, float* rstd, int64_t h,
                                         float eps, bool cache_row) {
  extern __shared__ float smem[];
  float* buf = smem;
  float* row = smem + 32;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * h;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float v = load_f(x, xdt, base + j);
    if (cache_row) row[j] = v;
    sum += v;
  }
  const float m = block_sum(sum, buf) / static_cast<float>(h);
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float d = (cache_row ? row[j] : load_f(x, xdt, base + j)) - m;
    sq += d * d;
  }
  const float var = block_sum(sq, buf) / static_cast<float>(h);
  const float s = 1.0f / sqrtf(var + eps);
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float v = cache_row ? row[j] : load_f(x, xdt, base + j);
    store_f(out, odt, base + j, (v - m) * s * load_f(gamma, gdt, j) + load_f(beta, bdt, j));
  }
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = m;
    rstd[blockIdx.x] = s;
  }
}

// Block (kTileCols, kTileRows) = column tile blockIdx.x, row chunk blockIdx.y. Thread (c, r)
// sums rows chunk * kRowsPerChunk + r, + kTileRows, ... of column c; then the kTileRows
// sums are added in order r = 0, 1, ... into partial_g/partial_b[chunk * h + column].
__global__ void layernorm_param_partials_kernel(const void* dy, DType dydt, const void* x, DType xdt,
                                                const float* mean, const float* rstd, int64_t n, int64_t h,
                                                float* partial_g, float* partial_b) {
  __shared__ float sg[kTileRows][kTileCols + 1];
  __shared__ float sb[kTileRows][kTileCols + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTileCols + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kRowsPerChunk;
  const int64_t r1 = r0 + kRowsPerChunk < n ? r0 + kRowsPerChunk : n;
  float ag = 0.0f, ab = 0.0f;
  if (col < h) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows) {
      const float d = load_f(dy, dydt, r * h + col);
      ag += d * (load_f(x, xdt, r * h + col) - mean[r]) * rstd[r];
      ab += d;
    }
  }
  sg[threadIdx.y][threadIdx.x] = ag;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && col < h) {
    float tg = 0.0f, tb = 0.0f;
#pragma unroll
    for (int r = 0; r < kTileRows; ++r) {
      tg += sg[r][threadIdx.x];
      tb += sb[r][threadIdx.x];
    }
    partial_g[blockIdx.y * h + col] = tg;
    partial_b[blockIdx.y * h + col] = tb;
  }
}

// dgamma[j] += sum over chunks (in order) of partial_g[chunk][j]; the same for dbeta.
__global__ void layernorm_param_reduce_kernel(const float* partial_g, const float* partial_b, int64_t chunks,
                                              int64_t h, void* dgamma, DType dgdt, void* dbeta, DType dbdt) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= h) return;
  float tg = 0.0f, tb = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) {
    tg += partial_g[c * h + j];
    tb += partial_b[c * h + j];
  }
  store_f(dgamma, dgdt, j, load_f(dgamma, dgdt, j) + tg);
  store_f(dbeta, dbdt, j, load_f(dbeta, dbdt, j) + tb);
}

// One block per row. Each thread reads dy[j] in the first pass and writes dx[j] (only after
// the block-wide sums) at the same j, so dx may alias dy.
__global__ void layernorm_dx_kernel(const void* dy, DType dydt, const void* x, DType xdt, const void* gamma,
                                    DType gdt, const float* mean, const float* rstd, void* dx, DType dxdt,
                                    int64_t h) {
  __shared__ float buf[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * h;
  const float m = mean[blockIdx.x], s = rstd[blockIdx.x];
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float g = load_f(dy, dydt, base + j) * load_f(gamma, gdt, j);
    sum_g += g;
    sum_gx += g * ((load_f(x, xdt, base + j) - m) * s);
  }
  const float mean_g = block_sum(sum_g, buf) / static_cast<float>(h);
  const float mean_gx = block_sum(sum_gx, buf) / static_cast<float>(h);
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float xhat = (load_f(x, xdt, base + j) - m) * s;
    const float g = load_f(dy, dydt, base + j) * load_f(gamma, gdt, j);
    store_f(dx, dxdt, base + j, s * (g - mean_g - xhat * mean_gx));
  }
}

// out[row = si * b + bi] = wte[tokens[bi, si]] + wpe[si]; a token outside [0, vocab) gives a
// NaN row (visible in the loss) instead of an out-of-bounds read.
__global__ void embedding_forward_kernel(const int32_t* tokens, const void* wte, DType tdt, const void* wpe,
                                         DType pdt, void* out, DType odt, int64_t b, int64_t s, int64_t vocab,
                                         int64_t h) {
  const int64_t row = blockIdx.x;
  const int64_t si = row / b, bi = row % b;
  const int32_t t = tokens[bi * s + si];
  const bool valid = t >= 0 && t < vocab;
  for (int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; j < h;
       j += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    const float v = valid ? load_f(wte, tdt, t * h + j) + load_f(wpe, pdt, si * h + j) : __int_as_float(0x7FC00000);
    store_f(out, odt, row * h + j, v);
  }
}

// keys[row] = token * rows + row for row = si * b + bi (tokens outside [0, vocab) become
// `vocab`, a bucket that is never written).
__global__ void embedding_keys_kernel(const int32_t* tokens, int64_t b, int64_t s, int64_t vocab,
                                      unsigned long long* keys) {
  const int64_t rows = b * s;
  for (int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t si = row / b, bi = row % b;
    const int32_t t = tokens[bi * s + si];
    const int64_t bucket = t >= 0 && t < vocab ? t : vocab;
    keys[row] = static_cast<unsigned long long>(bucket * rows + row);
  }
}

// Block (i, column chunk): if sorted entry i starts a run of equal tokens, adds the run's
// rows of dout (ascending row order) into dwte[token] for its columns.
__global__ void embedding_dwte_kernel(const unsigned long long* sorted, int64_t rows, int64_t vocab,
                                      const void* dout, DType ddt, void* dwte, DType wdt, int64_t h) {
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

}  // namespace
}  // namespace cuda

// ---- launchers ------------------------------------------------------------------------------

void CudaBackend::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& out,
                                    Tensor& mean, Tensor& rstd) {
  cuda::check_device_float(x, "layernorm x");
  cuda::check_device_float(gamma, "layernorm gamma");
  cuda::check_device_float(beta, "layernorm beta");
  cuda::check_device_float(out, "layernorm out");
  cuda::check_device_f32(mean, "layernorm mean");
  cuda::check_device_f32(rstd, "layernorm rstd");
  const int64_t h = x.dim(-1);
  const int64_t n = cuda::rows_of(x, h, "layernorm x");
  MT_CHECK(gamma.numel() == h && beta.numel() == h)
      << "layernorm gamma " << gamma.describe() << ", beta " << beta.describe() << " for x " << x.describe();
  MT_CHECK(out.numel() == x.numel()) << "layernorm out " << out.describe() << " for x " << x.describe();
  MT_CHECK(mean.numel() == n && rstd.numel() == n)
      << "layernorm mean " << mean.describe() << ", rstd " << rstd.describe() << " for " << n << " rows";
  MT_CHECK(n <= std::numeric_limits<int32_t>::max()) << "layernorm: " << n << " rows exceed the grid";
  if (n == 0) return;
  const size_t row_bytes = (32 + static_cast<size_t>(h)) * sizeof(float);
  const bool cache_row = row_bytes <= cuda::kMaxRowCacheBytes;
  const size_t smem = cache_row ? row_bytes : 32 * sizeof(float);
  if (smem > 48 * 1024) {
    MT_CUDA_CHECK(cudaFuncSetAttribute(cuda::layernorm_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  }
  cuda::layernorm_forward_kernel<<<static_cast<unsigned>(n), cuda::row_threads(h), smem, stream()>>>(
      x.data(), x.dtype(), gamma.data(), gamma.dtype(), beta.data(), beta.dtype(), out.data(), out.dtype(),
      static_cast<float*>(mean.data()), static_cast<float*>(rstd.data()), h, eps, cache_row);
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                     const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  cuda::check_device_float(dy, "layernorm dy");
  cuda::check_device_float(x, "layernorm x");
  cuda::check_device_float(gamma, "layernorm gamma");
  cuda::check_device_float(dx, "layernorm dx");
  cuda::check_device_float(dgamma, "layernorm dgamma");
  cuda::check_device_float(dbeta, "layernorm dbeta");
  cuda::check_device_f32(mean, "layernorm mean");
  cuda::check_device_f32(rstd, "layernorm rstd");
  const int64_t h = x.dim(-1);
  const int64_t n = cuda::rows_of(x, h, "layernorm x");
  MT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel())
      << "layernorm dy " << dy.describe() << ", dx " << dx.describe() << " for x " << x.describe();
  MT_CHECK(gamma.numel() == h && dgamma.numel() == h && dbeta.numel() == h)
      << "layernorm gamma " << gamma.describe() << ", dgamma " << dgamma.describe() << ", dbeta "
      << dbeta.describe();
  MT_CHECK(mean.numel() == n && rstd.numel() == n) << "layernorm mean/rstd for " << n << " rows";
  MT_CHECK(n <= std::numeric_limits<int32_t>::max()) << "layernorm: " << n << " rows exceed the grid";
  if (n == 0) return;
  const float* mp = static_cast<const float*>(mean.data());
  const float* rp = static_cast<const float*>(rstd.data());

  // 1 and 2: dgamma, dbeta (before dx, which may alias dy).
  const int64_t chunks = (n + cuda::kRowsPerChunk - 1) / cuda::kRowsPerChunk;
  const int64_t col_tiles = (h + cuda::kTileCols - 1) / cuda::kTileCols;
  MT_CHECK(chunks <= 65535) << "layernorm backward: " << n << " rows exceed the partial-sum grid";
  cuda::StreamBuffer partial(2 * static_cast<size_t>(chunks * h) * sizeof(float), stream());
  float* pg = partial.as<float>();
  float* pb = pg + chunks * h;
  cuda::layernorm_param_partials_kernel<<<dim3(static_cast<unsigned>(col_tiles), static_cast<unsigned>(chunks)),
                                          dim3(cuda::kTileCols, cuda::kTileRows), 0, stream()>>>(
      dy.data(), dy.dtype(), x.data(), x.dtype(), mp, rp, n, h, pg, pb);
  MT_CUDA_LAUNCH_CHECK();
  cuda::layernorm_param_reduce_kernel<<<static_cast<unsigned>((h + 255) / 256), 256, 0, stream()>>>(
      pg, pb, chunks, h, dgamma.data(), dgamma.dtype(), dbeta.data(), dbeta.dtype());
  MT_CUDA_LAUNCH_CHECK();

  // 3: dx.
  cuda::layernorm_dx_kernel<<<static_cast<unsigned>(n), cuda::row_threads(h), 0, stream()>>>(
      dy.data(), dy.dtype(), x.data(), x.dtype(), gamma.data(), gamma.dtype(), mp, rp, dx.data(), dx.dtype(), h);
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& out) {
  cuda::check_device_i32(tokens, "embedding tokens");
  cuda::check_device_float(wte, "embedding wte");
  cuda::check_device_float(wpe, "embedding wpe");
  cuda::check_device_float(out, "embedding out");
  MT_CHECK(tokens.ndim() == 2) << "embedding tokens " << tokens.describe() << " must be [b, s]";
  MT_CHECK(wte.ndim() == 2 && wpe.ndim() == 2 && wte.dim(1) == wpe.dim(1))
      << "embedding tables wte " << wte.describe() << ", wpe " << wpe.describe();
  const int64_t b = tokens.dim(0), s = tokens.dim(1), vocab = wte.dim(0), h = wte.dim(1);
  MT_CHECK(s <= wpe.dim(0)) << "sequence length " << s << " exceeds position table " << wpe.describe();
  MT_CHECK(out.numel() == s * b * h) << "embedding out " << out.describe() << ", expected [" << s << ", " << b
                                     << ", " << h << "]";
  if (s * b == 0 || h == 0) return;
  const unsigned threads = 256;
  const int64_t col_blocks = (h + threads - 1) / threads;
  cuda::embedding_forward_kernel<<<dim3(static_cast<unsigned>(s * b), static_cast<unsigned>(col_blocks)), threads,
                                   0, stream()>>>(static_cast<const int32_t*>(tokens.data()), wte.data(),
                                                  wte.dtype(), wpe.data(), wpe.dtype(), out.data(), out.dtype(), b,
                                                  s, vocab, h);
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dwte, Tensor& dwpe) {
  cuda::check_device_i32(tokens, "embedding tokens");
  cuda::check_device_float(dout, "embedding dout");
  cuda::check_device_float(dwte, "embedding dwte");
  cuda::check_device_float(dwpe, "embedding dwpe");
  MT_CHECK(tokens.ndim() == 2) << "embedding tokens " << tokens.describe() << " must be [b, s]";
  MT_CHECK(dwte.ndim() == 2 && dwpe.ndim() == 2 && dwte.dim(1) == dwpe.dim(1))
      << "embedding grads dwte " << dwte.describe() << ", dwpe " << dwpe.describe();
  const int64_t b = tokens.dim(0), s = tokens.dim(1), vocab = dwte.dim(0), h = dwte.dim(1);
  MT_CHECK(s <= dwpe.dim(0)) << "sequence length " << s << " exceeds position table " << dwpe.describe();
  MT_CHECK(dout.numel() == s * b * h) << "embedding dout " << dout.describe();
  const int64_t rows = s * b;
  if (rows == 0 || h == 0) return;
  MT_CHECK(rows <= std::numeric_limits<int32_t>::max()) << "embedding: " << rows << " rows exceed the grid";
  const unsigned threads = 256;
  const unsigned col_blocks = static_cast<unsigned>((h + threads - 1) / threads);

  // Sort the keys token * rows + row: unique, so any sort gives the same order.
  const unsigned long long max_key = static_cast<unsigned long long>(vocab + 1) * static_cast<unsigned long long>(rows) - 1;
  int end_bit = 1;
  while (end_bit < 64 && (max_key >> end_bit) != 0) ++end_bit;
  cuda::StreamBuffer keys(2 * static_cast<size_t>(rows) * sizeof(unsigned long long), stream());
  auto* keys_in = keys.as<unsigned long long>();
  auto* keys_out = keys_in + rows;
  cuda::embedding_keys_kernel<<<cuda::grid_for(rows), 256, 0, stream()>>>(static_cast<const int32_t*>(tokens.data()),
                                                                          b, s, vocab, keys_in);
  MT_CUDA_LAUNCH_CHECK();
  size_t temp_bytes = 0;
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, keys_in, keys_out, static_cast<int>(rows), 0,
                                               end_bit, stream()));
  cuda::StreamBuffer temp(temp_bytes, stream());
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(temp.as<void>(), temp_bytes, keys_in, keys_out, static_cast<int>(rows),
                                               0, end_bit, stream()));

  cuda::embedding_dwte_kernel<<<dim3(static_cast<unsigned>(rows), col_blocks), threads, 0, stream()>>>(
      keys_out, rows, vocab, dout.data(), dout.dtype(), dwte.data(), dwte.dtype(), h);
  MT_CUDA_LAUNCH_CHECK();
  cuda::embedding_dwpe_kernel<<<dim3(static_cast<unsigned>(s), col_blocks), threads, 0, stream()>>>(
      dout.data(), dout.dtype(), dwpe.data(), dwpe.dtype(), b, h);
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace megatron::backend
