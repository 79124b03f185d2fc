// CUDA backend: construction, memory, copy/convert, fill, elementwise add/scale, bias_grad,
// whole-tensor reductions and the AdamW update. See cuda_backend.h for the numerics contract.
//
// Reductions are deterministic: the work split depends only on the tensor's shape and dtype
// (never on timing or the SM count), each block reduces in a fixed tree order, and partial
// results are combined by a second pass in a fixed order (bias_grad: 16 lanes each adding
// every 16th split in order, then the lanes in order; sum_squares: a fixed tree).
// add, scale and bias_grad read 16-byte vectors (8 bf16/fp16 or 4 fp32 elements) when the
// pointers are aligned (bias_grad: and cols % 8 or 4 == 0); otherwise the same operations
// element by element (bias_grad: in the same order). Integer counters (count_zeros) may use atomics,
// since integer addition is exact and order-free.
// Longer than 800 lines because it holds every small kernel of the backend that is not an op
// family of its own (those have their own files).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_adamw.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/device_allocator.h"
#include "backend/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fp8.h"
#include "core/normal_math.h"

namespace megatron::backend {

using namespace cuda;

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLASLt workspace
// Reduction scratch: bias_grad's per-split column partials (up to 2M floats), sum_squares'
// per-block doubles, counters, and an aligned copy of a GEMM bias (cuda_gemm.cu).
constexpr size_t kScratchBytes = cuda::kBackendScratchBytes;  // cuda_common.cuh
constexpr int kThreads = 256;

// ---- checks ------------------------------------------------------------------------------

void check_device(const Tensor& t, const char* what) {
  MT_CHECK(t.defined()) << what << " is undefined";
  MT_CHECK(t.device() == Device::kCUDA) << what << " " << t.describe() << " is not a CUDA tensor";
}
void check_float_device(const Tensor& t, const char* what) {
  check_device(t, what);
  MT_CHECK(is_float(t.dtype())) << what << " " << t.describe() << " is not a float tensor";
}

// set_device_allocator's table: (GPU, kind) -> allocator. Set at start-up, before the threads
// that allocate (one per GPU in tests) run; the lock covers the rare later change.
std::mutex allocators_mutex;
std::map<std::pair<int, int>, DeviceAllocator>& device_allocators() {
  static std::map<std::pair<int, int>, DeviceAllocator> table;
  return table;
}

// Device storage counted under `kind`; freed with cudaFree when the last view goes away (or
// by set_device_allocator's release).
std::shared_ptr<Storage> device_storage(int64_t bytes, MemoryKind kind, int device) {
  if (bytes > 0) {
    DeviceAllocator custom;
    {
      std::lock_guard<std::mutex> lock(allocators_mutex);
      auto it = device_allocators().find({device, static_cast<int>(kind)});
      if (it != device_allocators().end()) custom = it->second;
    }
    if (custom.alloc) {
      if (void* q = custom.alloc(bytes)) {
        return std::make_shared<Storage>(q, bytes, Device::kCUDA, kind, std::move(custom.release));
      }
    }
  }
  void* p = nullptr;
  if (bytes > 0) {
    const cudaError_t err = cudaMalloc(&p, static_cast<size_t>(bytes));
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear it so that the next launch check does not report it again
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      cudaGetLastError();
      throw_error("CUDA out of memory: cannot allocate ", bytes, " bytes for ", memory_kind_name(kind), " (",
                  cudaGetErrorString(err), "; ", free_b, " of ", total_b, " bytes free on the device)");
    }
  }
  return std::make_shared<Storage>(p, bytes, Device::kCUDA, kind, [](void* q) {
    if (q) cudaFree(q);  // never throws from a destructor; cudaFree waits for pending work
  });
}

// ---- bit-exact 16-bit conversions (the same bit operations as core/dtype.cpp) ---------------
// CUDA's __float2bfloat16_rn/__float2half_rn agree with these on every non-NaN input; the
// hand-written forms also keep the CPU's NaN payloads, so copy() is bit-identical to the CPU
// on every input.

__device__ __forceinline__ uint16_t f32_to_bf16_bits(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ uint16_t f32_to_fp16_bits(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;
  if (a >= 0x477ff000u) return sign | 0x7c00u;
  if (a >= 0x38800000u) {
    const uint32_t r = a - (112u << 23);
    return sign | static_cast<uint16_t>((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
  }
  const float scaled = __fmul_rn(__uint_as_float(a), 16777216.0f);  // exact
  return sign | static_cast<uint16_t>(rintf(scaled));               // nearest even
}

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

__device__ __forceinline__ float fp16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    const float v = __fmul_rn(static_cast<float>(man), 1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (man << 13));
  return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
}

__device__ __forceinline__ float load_exact(const void* p, DType dt, int64_t i) {
  switch (dt) {
    case DType::kBF16:
      return bf16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16:
      return fp16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ void store_exact(void* p, DType dt, int64_t i, float v) {
  switch (dt) {
    case DType::kBF16:
      static_cast<uint16_t*>(p)[i] = f32_to_bf16_bits(v);
      break;
    case DType::kF16:
      static_cast<uint16_t*>(p)[i] = f32_to_fp16_bits(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
      break;
  }
}

// ---- typed element access for the hot elementwise kernels --------------------------------

template <DType D>
struct Elem;
template <>
struct Elem<DType::kF32> {
  using T = float;
  static __device__ __forceinline__ float load(const T* p, int64_t i) { return p[i]; }
  static __device__ __forceinline__ void store(T* p, int64_t i, float v) { p[i] = v; }
};
template <>
struct Elem<DType::kBF16> {
  using T = __nv_bfloat16;
  static __device__ __forceinline__ float load(const T* p, int64_t i) { return __bfloat162float(p[i]); }
  static __device__ __forceinline__ void store(T* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
};
template <>
struct Elem<DType::kF16> {
  using T = __half;
  static __device__ __forceinline__ float load(const T* p, int64_t i) { return __half2float(p[i]); }
  static __device__ __forceinline__ void store(T* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
};

// Calls f(std::integral_constant<DType, d>{}) for a float dtype d.
template <class F>
void dispatch_float(DType d, F&& f) {
  switch (d) {
    case DType::kF32:
      f(std::integral_constant<DType, DType::kF32>{});
      return;
    case DType::kBF16:
      f(std::integral_constant<DType, DType::kBF16>{});
      return;
    case DType::kF16:
      f(std::integral_constant<DType, DType::kF16>{});
      return;
    default:
      MT_CHECK(false) << "not a float dtype: " << dtype_name(d);
  }
}

// ---- kernels -----------------------------------------------------------------------------

template <class T>
__global__ void fill_kernel(T* p, int64_t n, T value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    p[i] = value;
  }
}

// Backend::init_normal: philox_normal (core/rng.cpp) with the same Philox words and the same
// double operations (core/normal_math.h), so every element has the CPU's bits.
__global__ void init_normal_kernel(void* out, DType dt, int64_t n, NormalInit init) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n; k += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t g =
        static_cast<uint64_t>((k / init.local_cols) * init.global_cols + init.offset + k % init.local_cols);
    const uint64_t block = g >> 1;
    const uint4 w =
        philox4x32_10(make_uint4(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                 static_cast<uint32_t>(init.stream), static_cast<uint32_t>(init.stream >> 32)),
                      make_uint2(static_cast<uint32_t>(init.seed), static_cast<uint32_t>(init.seed >> 32)));
    const float normal = (g & 1) ? normal_math::normal_from_words(w.z, w.w) : normal_math::normal_from_words(w.x, w.y);
    store_f(out, dt, k, __fmul_rn(init.scale, normal));
  }
}

__global__ void convert_kernel(const void* src, DType sdt, void* dst, DType ddt, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    store_exact(dst, ddt, i, load_exact(src, sdt, i));
  }
}

template <DType D>
__global__ void add_same_kernel(const typename Elem<D>::T* a, const typename Elem<D>::T* b, typename Elem<D>::T* out,
                                int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    Elem<D>::store(out, i, __fadd_rn(Elem<D>::load(a, i), Elem<D>::load(b, i)));
  }
}

__global__ void add_mixed_kernel(const void* a, DType adt, const void* b, DType bdt, void* out, DType odt, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    store_f(out, odt, i, __fadd_rn(load_f(a, adt, i), load_f(b, bdt, i)));
  }
}

template <DType D>
__global__ void scale_kernel(typename Elem<D>::T* x, int64_t n, float alpha) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    Elem<D>::store(x, i, __fmul_rn(Elem<D>::load(x, i), alpha));
  }
}

// add / scale, vector fast path (every pointer 16-byte aligned): thread j of the grid takes
// the 16-byte vectors j, j + grid, ... (8 bf16/fp16 or 4 fp32 elements), the last partial
// vector element by element; the same single fp32 operation and RNE rounding as above.
template <class T>
__global__ void add_vec_kernel(const T* a, const T* b, T* out, int64_t n) {
  constexpr int W = kVecWidth<T>;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x * W;
  for (int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * W; i < n; i += stride) {
    float va[W], vb[W];
    if (i + W <= n) {
      load_vec<T>(a + i, va);
      load_vec<T>(b + i, vb);
#pragma unroll
      for (int e = 0; e < W; ++e) va[e] = __fadd_rn(va[e], vb[e]);
      store_vec<T>(out + i, va);
    } else {
      for (int64_t j = i; j < n; ++j) out[j] = from_f32<T>(__fadd_rn(to_f32<T>(a[j]), to_f32<T>(b[j])));
    }
  }
}

template <class T>
__global__ void scale_vec_kernel(T* x, int64_t n, float alpha) {
  constexpr int W = kVecWidth<T>;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x * W;
  for (int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * W; i < n; i += stride) {
    float v[W];
    if (i + W <= n) {
      load_vec<T>(x + i, v);
#pragma unroll
      for (int e = 0; e < W; ++e) v[e] = __fmul_rn(v[e], alpha);
      store_vec<T>(x + i, v);
    } else {
      for (int64_t j = i; j < n; ++j) x[j] = from_f32<T>(__fmul_rn(to_f32<T>(x[j]), alpha));
    }
  }
}

// bias_grad, pass 1. Block (32, 8): threadIdx.x picks a group of W = 16 / sizeof(T) adjacent
// columns (8 bf16/fp16, 4 fp32) of a tile of 32 W columns (blockIdx.x), threadIdx.y one of 8
// row lanes; blockIdx.y is a split of the rows. Each thread sums its rows r0 + y, r0 + y + 8,
// ... in order for its W columns (one 16-byte load per row when kVec: dy aligned and cols % W
// == 0; else the same columns element by element, the same order), the 8 lanes are combined
// by a fixed tree, and the split's column sums go to partial[split, col] (splits > 1) or
// straight into dbias (one split).
constexpr int kBgCols = 32, kBgLanes = 8;

template <class T, bool kVec>
__global__ void bias_grad_kernel(const T* dy, int64_t rows, int64_t cols, int64_t rows_per_split, float* partial,
                                 void* dbias, DType dbias_dt, bool accumulate) {
  constexpr int W = kVecWidth<T>;
  __shared__ float acc[kBgLanes][W][kBgCols];
  const int64_t c0 = (blockIdx.x * int64_t{kBgCols} + threadIdx.x) * W;
  const int64_t r0 = blockIdx.y * rows_per_split;
  const int64_t r1 = min(rows, r0 + rows_per_split);
  float s[W];
#pragma unroll
  for (int e = 0; e < W; ++e) s[e] = 0.0f;
  if (c0 < cols) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kBgLanes) {
      float v[W];
      load_chunk<T, kVec>(dy + r * cols, c0, cols, v);
#pragma unroll
      for (int e = 0; e < W; ++e) s[e] = __fadd_rn(s[e], v[e]);
    }
  }
#pragma unroll
  for (int e = 0; e < W; ++e) acc[threadIdx.y][e][threadIdx.x] = s[e];
  __syncthreads();
#pragma unroll
  for (int half = kBgLanes / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) {
#pragma unroll
      for (int e = 0; e < W; ++e) {
        acc[threadIdx.y][e][threadIdx.x] =
            __fadd_rn(acc[threadIdx.y][e][threadIdx.x], acc[threadIdx.y + half][e][threadIdx.x]);
      }
    }
    __syncthreads();
  }
  if (threadIdx.y == 0) {
#pragma unroll
    for (int e = 0; e < W; ++e) {
      const int64_t col = c0 + e;
      if (col >= cols) break;
      const float total = acc[0][e][threadIdx.x];
      if (partial) {
        partial[blockIdx.y * cols + col] = total;
      } else {
        store_f(dbias, dbias_dt, col, accumulate ? __fadd_rn(load_f(dbias, dbias_dt, col), total) : total);
      }
    }
  }
}

// bias_grad, pass 2: dbias[col] (+=, or = when !accumulate) the splits' partial sums. Block (32 columns, 16 lanes):
// lane y adds splits y, y + 16, ... in order, then the 16 lane sums are added in lane order.
constexpr int kBgCombineLanes = 16;
__global__ void bias_grad_combine_kernel(const float* partial, int64_t splits, int64_t cols, void* dbias,
                                         DType dbias_dt, bool accumulate) {
  __shared__ float acc[kBgCombineLanes][kBgCols + 1];
  const int64_t col = blockIdx.x * int64_t{kBgCols} + threadIdx.x;
  float s = 0.0f;
  if (col < cols) {
    for (int64_t k = threadIdx.y; k < splits; k += kBgCombineLanes) s = __fadd_rn(s, partial[k * cols + col]);
  }
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || col >= cols) return;
  s = acc[0][threadIdx.x];
#pragma unroll
  for (int y = 1; y < kBgCombineLanes; ++y) s = __fadd_rn(s, acc[y][threadIdx.x]);
  store_f(dbias, dbias_dt, col, accumulate ? __fadd_rn(load_f(dbias, dbias_dt, col), s) : s);
}

// sum_squares, pass 1. x is cut into chunks of W = kVecWidth<T> consecutive elements (16
// bytes; the last may be short); thread g of the grid (G threads) takes chunks g, g + G, ...
// and adds the squares of each chunk's elements in order into one double, then a fixed tree
// over the block's 256 threads gives partial[b]. kVec (x 16-byte aligned): a chunk is one
// 16-byte load; otherwise the same chunks element by element, so both give the same bits.
// (The 16-byte loads measured no faster than 4-byte ones: 2.0-2.1 ms for 1.3B's 5.3 GB of fp32
// gradients on the H100, ~2.6 TB/s either way.)
template <class T, bool kVec>
__global__ void sum_squares_kernel(const T* x, int64_t n, double* partial) {
  constexpr int W = kVecWidth<T>;
  __shared__ double acc[kThreads];
  double s = 0.0;
  const int64_t full = n / W;  // whole chunks; a short last chunk goes element by element
  const int64_t chunks = (n + W - 1) / W;
  for (int64_t c = blockIdx.x * int64_t{kThreads} + threadIdx.x; c < chunks; c += int64_t{gridDim.x} * kThreads) {
    float v[W];
    unpack_vec<T>(kVec && c < full ? load_raw<T, true>(x, c * W, n) : load_raw<T, false>(x, c * W, n), v);
#pragma unroll
    for (int e = 0; e < W; ++e) {
      const double d = v[e];
      s = __dadd_rn(s, __dmul_rn(d, d));  // exact square of any fp32 value; past n: +0
    }
  }
  acc[threadIdx.x] = s;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) acc[threadIdx.x] = __dadd_rn(acc[threadIdx.x], acc[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = acc[0];
}

// sum_squares, pass 2 (one block of kMaxSumBlocks threads): a fixed tree over the partials.
constexpr int kMaxSumBlocks = 1024;
__global__ void sum_partials_kernel(const double* partial, int n, double* out) {
  __shared__ double acc[kMaxSumBlocks];
  acc[threadIdx.x] = threadIdx.x < n ? partial[threadIdx.x] : 0.0;
  __syncthreads();
  for (int half = kMaxSumBlocks / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) acc[threadIdx.x] = __dadd_rn(acc[threadIdx.x], acc[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = acc[0];
}

// all_finite: *flag = 1 if any element has an all-ones exponent (inf or NaN). Every writer
// writes the same value, so the result does not depend on which one lands.
template <class U>
__global__ void nonfinite_kernel(const U* bits, int64_t n, U exp_mask, int* flag) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    if ((bits[i] & exp_mask) == exp_mask) *flag = 1;
  }
}

// count_zeros: +0 and -0 both count (the CPU compares with 0.0f). Per-block counts are added
// with an integer atomic: exact, so the order does not matter.
template <class U>
__global__ void count_zeros_kernel(const U* bits, int64_t n, U abs_mask, unsigned long long* count) {
  __shared__ unsigned long long acc[kThreads];
  unsigned long long c = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    c += (bits[i] & abs_mask) == 0;
  }
  acc[threadIdx.x] = c;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) acc[threadIdx.x] += acc[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0 && acc[0] != 0) atomicAdd(count, acc[0]);
}

// AdamW over n elements (cuda_adamw.cuh holds the arithmetic).
template <class G>
__global__ void adamw_kernel(float* __restrict__ p, const G* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, int64_t n, AdamWScalars a) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    p[i] = adamw_element(p, g, m, v, i, a, a.wd);
  }
}

// Host-side conversion for a host -> host copy (the CPU backend's rules).
void host_convert(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  std::vector<float> f(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (src.dtype()) {
      case DType::kF32:
        f[i] = src.data_as<const float>()[i];
        break;
      case DType::kBF16:
        f[i] = bf16_to_float(src.data_as<const uint16_t>()[i]);
        break;
      default:
        f[i] = fp16_to_float(src.data_as<const uint16_t>()[i]);
        break;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    switch (dst.dtype()) {
      case DType::kF32:
        dst.data_as<float>()[i] = f[i];
        break;
      case DType::kBF16:
        dst.data_as<uint16_t>()[i] = float_to_bf16(f[i]);
        break;
      default:
        dst.data_as<uint16_t>()[i] = float_to_fp16(f[i]);
        break;
    }
  }
}

void free_resources(cudaStream_t stream, cublasLtHandle_t lt, void* workspace, void* scratch) {
  if (stream) cudaStreamSynchronize(stream);
  if (lt) cublasLtDestroy(lt);
  if (workspace) cudaFree(workspace);
  if (scratch) cudaFree(scratch);
  if (stream) cudaStreamDestroy(stream);
  cudaGetLastError();
}

}  // namespace

// ---- construction -------------------------------------------------------------------------

std::unique_ptr<Backend> make_cuda_backend(int device) {
  const int count = cuda_device_count();
  if (count == 0) throw_error("[--device] cuda:", device, " requested but no CUDA device is visible");
  if (device < 0 || device >= count) {
    throw_error("[--device] cuda:", device, " does not exist (", count, " CUDA device(s) visible)");
  }
  return std::make_unique<CudaBackend>(device);
}

bool env_switch(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || std::string(v).empty()) return fallback;
  if (std::string(v) == "0") return false;
  if (std::string(v) == "1") return true;
  throw_error("[", name, "] '", v, "' is not 0 or 1");
}

int64_t env_count(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || std::string(v).empty()) return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (*end != '\0' || n < lo || n > hi) throw_error("[", name, "] '", v, "' is not an integer in [", lo, ", ", hi, "]");
  return n;
}

namespace {
// cuDNN's Philox seed for the masks of (seed, stream): the two mixed by SplitMix64's finalizer,
// so that every (iteration, micro-batch, layer) draws from its own key (offset 0) instead of
// from overlapping counter ranges of one key.
__global__ void store_cudnn_dropout_seed_kernel(uint64_t* dst, uint64_t seed, uint64_t stream,
                                                const uint64_t* stream_add) {
  if (stream_add != nullptr) stream += *stream_add;
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  dst[0] = mix(seed + 0x9E3779B97F4A7C15ull * (mix(stream) + 1));
  dst[2] = 0;
}
}  // namespace

void store_cudnn_dropout_seed(void* dst, const DropoutParams& dropout, cudaStream_t stream) {
  store_cudnn_dropout_seed_kernel<<<1, 1, 0, stream>>>(static_cast<uint64_t*>(dst), dropout.seed, dropout.stream,
                                                       dropout.stream_add);
  MT_CUDA_LAUNCH_CHECK();
}

CudaBackend& as_cuda(Backend& backend, const char* what) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda == nullptr) throw_error(what, ": the backend is not a CUDA backend");
  return *cuda;
}

CudaBackend::CudaBackend(int device) : device_(device) {
  try {
    MT_CUDA_CHECK(cudaSetDevice(device_));
    int sms = 0;
    MT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_));
    sm_count_ = sms;
    MT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    MT_CUBLAS_CHECK(cublasLtCreate(&lt_));
    MT_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
    workspace_bytes_ = kWorkspaceBytes;
    MT_CUDA_CHECK(cudaMalloc(&scratch_, kScratchBytes));
    scratch_bytes_ = kScratchBytes;
    attention_impl_ = attention_impl_from_env();
    gemm_autotune_ = env_switch("MEGATRON_GEMM_AUTOTUNE", true);
    gemm_tune_candidates_ = static_cast<int>(env_count("MEGATRON_GEMM_TUNE_CANDIDATES", gemm_tune_candidates_, 1, 64));
    layernorm_warp_forward_ = env_switch("MEGATRON_LN_WARP_FORWARD", true);
    record_ = env_switch("MEGATRON_CUDA_GRAPHS", true);
    layernorm_group_sync_ = env_switch("MEGATRON_LN_GROUP_SYNC", true);
    layernorm_backward_blocks_ = env_count("MEGATRON_LN_BACKWARD_BLOCKS", layernorm_backward_blocks_, 1, 65535);
  } catch (...) {
    free_resources(stream_, lt_, workspace_, scratch_);
    throw;
  }
}

CudaBackend::~CudaBackend() {
  cudnn_attention_.reset();  // its handle and workspace go before the stream they use
  free_resources(stream_, lt_, workspace_, scratch_);
}

// ---- memory -------------------------------------------------------------------------------

void set_device_allocator(int device, MemoryKind kind, DeviceAllocator allocator) {
  std::lock_guard<std::mutex> lock(allocators_mutex);
  if (allocator.alloc) {
    device_allocators()[{device, static_cast<int>(kind)}] = std::move(allocator);
  } else {
    device_allocators().erase({device, static_cast<int>(kind)});
  }
}

Tensor CudaBackend::empty(Shape shape, DType dtype, MemoryKind kind) {
  const int64_t bytes = shape_numel(shape) * dtype_size(dtype);
  auto storage = device_storage(bytes, kind, device_);
  if (bytes > 0) MT_CUDA_CHECK(cudaMemsetAsync(storage->data(), 0, static_cast<size_t>(bytes), stream_));
  return Tensor(std::move(storage), 0, std::move(shape), dtype);
}

void CudaBackend::fill(Tensor& t, float value) {
  check_device(t, "fill target");
  const int64_t n = t.numel();
  if (n == 0) return;
  const unsigned grid = grid_for(n, kThreads);
  switch (t.dtype()) {
    case DType::kF32:
      fill_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<float*>(t.data()), n, value);
      break;
    case DType::kBF16:
      fill_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<uint16_t*>(t.data()), n, float_to_bf16(value));
      break;
    case DType::kF16:
      fill_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<uint16_t*>(t.data()), n, float_to_fp16(value));
      break;
    case DType::kI32:
      fill_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<int32_t*>(t.data()), n, static_cast<int32_t>(value));
      break;
    case DType::kI64:
      fill_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<int64_t*>(t.data()), n, static_cast<int64_t>(value));
      break;
    case DType::kF8E4M3:
      fill_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<uint8_t*>(t.data()), n,
                                                  float_to_fp8(value, Fp8Format::kE4M3));
      break;
    case DType::kF8E5M2:
      fill_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<uint8_t*>(t.data()), n,
                                                  float_to_fp8(value, Fp8Format::kE5M2));
      break;
  }
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::init_normal(Tensor& t, const NormalInit& init) {
  check_device(t, "init_normal target");
  MT_CHECK(is_float(t.dtype())) << "init_normal of " << t.describe();
  MT_CHECK(init.local_cols > 0 && init.global_cols >= init.local_cols)
      << "init_normal columns " << init.local_cols << " of " << init.global_cols;
  const int64_t n = t.numel();
  if (n == 0) return;
  init_normal_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_>>>(t.data(), t.dtype(), n, init);
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
  MT_CHECK(src.defined() && dst.defined()) << "copy of an undefined tensor";
  MT_CHECK_EQ(src.numel(), dst.numel()) << src.describe() << " -> " << dst.describe();
  const int64_t n = src.numel();
  const bool src_host = src.device() == Device::kCPU, dst_host = dst.device() == Device::kCPU;
  if (n == 0) return;
  if (src.dtype() == dst.dtype()) {
    if (src.data() == dst.data()) return;
    if (src_host && dst_host) {
      std::memmove(dst.data(), src.data(), static_cast<size_t>(src.nbytes()));
      return;
    }
    MT_CUDA_CHECK(
        cudaMemcpyAsync(dst.data(), src.data(), static_cast<size_t>(src.nbytes()), cudaMemcpyDefault, stream_));
    // A host buffer may be reused or read as soon as copy() returns.
    if (src_host || dst_host) MT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return;
  }
  MT_CHECK(is_float(src.dtype()) && is_float(dst.dtype())) << "copy " << src.describe() << " -> " << dst.describe();
  if (src_host && dst_host) {
    host_convert(src, dst);
    return;
  }
  // Conversions run on the GPU; a host side is staged through a device buffer of its dtype.
  Tensor s = src, d = dst;
  if (src_host) {
    s = Tensor(device_storage(src.nbytes(), MemoryKind::kOther, device_), 0, {n}, src.dtype());
    MT_CUDA_CHECK(
        cudaMemcpyAsync(s.data(), src.data(), static_cast<size_t>(src.nbytes()), cudaMemcpyHostToDevice, stream_));
  }
  if (dst_host) d = Tensor(device_storage(dst.nbytes(), MemoryKind::kOther, device_), 0, {n}, dst.dtype());
  convert_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_>>>(s.data(), s.dtype(), d.data(), d.dtype(), n);
  MT_CUDA_LAUNCH_CHECK();
  if (dst_host) {
    MT_CUDA_CHECK(
        cudaMemcpyAsync(dst.data(), d.data(), static_cast<size_t>(dst.nbytes()), cudaMemcpyDeviceToHost, stream_));
  }
  // The staging buffers are freed (cudaFree waits for the device) when s and d go out of scope;
  // a host destination must be complete before returning.
  if (src_host || dst_host) MT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::synchronize() { MT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

Tensor CudaBackend::host_staging(Shape shape, DType dtype) {
  const int64_t bytes = shape_numel(shape) * dtype_size(dtype);
  void* p = nullptr;
  if (bytes > 0) {
    MT_CUDA_CHECK(cudaHostAlloc(&p, static_cast<size_t>(bytes), cudaHostAllocDefault));
    std::memset(p, 0, static_cast<size_t>(bytes));
  }
  auto storage = std::make_shared<Storage>(p, bytes, Device::kCPU, MemoryKind::kOther, [](void* q) {
    if (q) cudaFreeHost(q);  // never throws from a destructor
  });
  return Tensor(std::move(storage), 0, std::move(shape), dtype);
}

void CudaBackend::copy_to_host_async(const Tensor& src, Tensor& dst) {
  check_device(src, "copy_to_host_async source");
  MT_CHECK(dst.defined() && dst.device() == Device::kCPU && dst.dtype() == src.dtype() && dst.numel() == src.numel())
      << "copy_to_host_async: " << src.describe() << " -> " << (dst.defined() ? dst.describe() : "undefined")
      << " (a host tensor of the same dtype and size)";
  if (src.nbytes() == 0) return;
  // Into page-locked memory this returns at once; into pageable memory CUDA completes it first.
  MT_CUDA_CHECK(
      cudaMemcpyAsync(dst.data(), src.data(), static_cast<size_t>(src.nbytes()), cudaMemcpyDeviceToHost, stream_));
}

// ---- elementwise --------------------------------------------------------------------------

void CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  check_float_device(a, "add a");
  check_float_device(b, "add b");
  check_float_device(out, "add out");
  MT_CHECK(a.numel() == b.numel() && a.numel() == out.numel())
      << "add: " << a.describe() << " + " << b.describe() << " -> " << out.describe();
  const int64_t n = a.numel();
  if (n == 0) return;
  const unsigned grid = grid_for(n, kThreads);
  if (a.dtype() == b.dtype() && a.dtype() == out.dtype() && vec_aligned(a.data()) && vec_aligned(b.data()) &&
      vec_aligned(out.data())) {
    dispatch_float_type(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      add_vec_kernel<T><<<grid_for((n + kVecWidth<T> - 1) / kVecWidth<T>, kThreads), kThreads, 0, stream_>>>(
          static_cast<const T*>(a.data()), static_cast<const T*>(b.data()), static_cast<T*>(out.data()), n);
    });
  } else if (a.dtype() == b.dtype() && a.dtype() == out.dtype()) {
    dispatch_float(a.dtype(), [&](auto d) {
      constexpr DType D = decltype(d)::value;
      using T = typename Elem<D>::T;
      add_same_kernel<D><<<grid, kThreads, 0, stream_>>>(
          static_cast<const T*>(a.data()), static_cast<const T*>(b.data()), static_cast<T*>(out.data()), n);
    });
  } else {
    add_mixed_kernel<<<grid, kThreads, 0, stream_>>>(a.data(), a.dtype(), b.data(), b.dtype(), out.data(), out.dtype(),
                                                     n);
  }
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::scale(Tensor& x, float alpha) {
  check_float_device(x, "scale x");
  const int64_t n = x.numel();
  if (n == 0) return;
  if (vec_aligned(x.data())) {
    dispatch_float_type(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      scale_vec_kernel<T><<<grid_for((n + kVecWidth<T> - 1) / kVecWidth<T>, kThreads), kThreads, 0, stream_>>>(
          static_cast<T*>(x.data()), n, alpha);
    });
  } else {
    dispatch_float(x.dtype(), [&](auto d) {
      constexpr DType D = decltype(d)::value;
      using T = typename Elem<D>::T;
      scale_kernel<D><<<grid_for(n, kThreads), kThreads, 0, stream_>>>(static_cast<T*>(x.data()), n, alpha);
    });
  }
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::bias_grad(const Tensor& dy, Tensor& dbias, GradWrite write) {
  check_float_device(dy, "bias_grad dy");
  check_float_device(dbias, "bias_grad dbias");
  const int64_t cols = dbias.numel();
  MT_CHECK(cols > 0 && dy.ndim() >= 1 && dy.dim(-1) == cols && dy.numel() % cols == 0)
      << "bias_grad: dy " << dy.describe() << " vs dbias " << dbias.describe();
  const int64_t rows = dy.numel() / cols;
  const bool accumulate = write == GradWrite::kAccumulate;
  if (rows == 0) {
    if (!accumulate) fill(dbias, 0.0f);
    return;
  }
  // The split of the rows depends only on (rows, cols, dy's dtype): about 1024 blocks in all,
  // at least 64 rows per split, and the partials must fit the scratch buffer.
  dispatch_float_type(dy.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int W = kVecWidth<T>;
    const int64_t col_blocks = (cols + kBgCols * W - 1) / (kBgCols * W);
    int64_t splits = (1024 + col_blocks - 1) / col_blocks;
    splits = std::min<int64_t>(splits, (rows + 63) / 64);
    splits = std::min<int64_t>(splits, static_cast<int64_t>(scratch_bytes_ / sizeof(float)) / cols);
    splits = std::max<int64_t>(splits, 1);
    const int64_t rows_per_split = (rows + splits - 1) / splits;
    splits = (rows + rows_per_split - 1) / rows_per_split;  // no empty split
    MT_CHECK(col_blocks < (int64_t{1} << 31) && splits <= 65535) << "bias_grad grid " << col_blocks << "x" << splits;
    float* partial = splits > 1 ? static_cast<float*>(scratch_) : nullptr;
    const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(splits));
    const dim3 block(kBgCols, kBgLanes);
    const bool vec = cols % W == 0 && vec_aligned(dy.data());
    auto kernel = vec ? bias_grad_kernel<T, true> : bias_grad_kernel<T, false>;
    kernel<<<grid, block, 0, stream_>>>(static_cast<const T*>(dy.data()), rows, cols, rows_per_split, partial,
                                        dbias.data(), dbias.dtype(), accumulate);
    MT_CUDA_LAUNCH_CHECK();
    if (partial) {
      bias_grad_combine_kernel<<<static_cast<unsigned>((cols + kBgCols - 1) / kBgCols), dim3(kBgCols, kBgCombineLanes),
                                 0, stream_>>>(partial, splits, cols, dbias.data(), dbias.dtype(), accumulate);
      MT_CUDA_LAUNCH_CHECK();
    }
  });
}

// ---- reductions ---------------------------------------------------------------------------

// fp64 partials: each square of an fp32/bf16/fp16 value is exact in double, so the only
// rounding is in the additions, as on the CPU (which also sums squares in double); the result
// then agrees with the CPU's to ~1e-15 relative rather than the ~1e-7 of fp32 partials, which
// matters because the gradient norm feeds clipping and the logged grad-norm. The kernel stays
// memory-bound: H100's fp64 rate (~60 TFLOP/s) far exceeds 2 flops per 2-4 loaded bytes.
void CudaBackend::queue_sum_squares(const Tensor& x, double* result) {
  check_float_device(x, "sum_squares input");
  const int64_t n = x.numel();
  if (n == 0) {
    MT_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(double), stream_));
    return;
  }
  const int64_t chunk = 16 / dtype_size(x.dtype());
  const int blocks =
      static_cast<int>(std::min<int64_t>(kMaxSumBlocks, (n + kThreads * chunk * 2 - 1) / (kThreads * chunk * 2)));
  double* partial = static_cast<double*>(scratch_);
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(x.data());
    if (vec_aligned(p)) {
      sum_squares_kernel<T, true><<<blocks, kThreads, 0, stream_>>>(p, n, partial);
    } else {
      sum_squares_kernel<T, false><<<blocks, kThreads, 0, stream_>>>(p, n, partial);
    }
  });
  MT_CUDA_LAUNCH_CHECK();
  sum_partials_kernel<<<1, kMaxSumBlocks, 0, stream_>>>(partial, blocks, result);
  MT_CUDA_LAUNCH_CHECK();
}

double CudaBackend::sum_squares(const Tensor& x) { return sum_squares_each({x})[0]; }

static_assert(kScratchBytes / sizeof(double) > kMaxSumBlocks, "the scratch holds the partials and result slots");

std::vector<double> CudaBackend::sum_squares_each(const std::vector<Tensor>& xs) {
  // The scratch holds the partials of one tensor at a time (the kernels run in stream order),
  // then one result per tensor; more tensors than result slots go in batches.
  double* results = static_cast<double*>(scratch_) + kMaxSumBlocks;
  const size_t slots = scratch_bytes_ / sizeof(double) - kMaxSumBlocks;
  std::vector<double> out(xs.size(), 0.0);
  for (size_t first = 0; first < xs.size(); first += slots) {
    const size_t count = std::min(slots, xs.size() - first);
    for (size_t i = 0; i < count; ++i) queue_sum_squares(xs[first + i], results + i);
    MT_CUDA_CHECK(
        cudaMemcpyAsync(out.data() + first, results, count * sizeof(double), cudaMemcpyDeviceToHost, stream_));
    MT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  return out;
}

bool CudaBackend::all_finite(const Tensor& x) {
  check_device(x, "all_finite input");
  const int64_t n = x.numel();
  if (n == 0 || !is_float(x.dtype())) return true;  // integers are always finite
  int* flag = static_cast<int*>(scratch_);
  MT_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), stream_));
  const unsigned grid = grid_for(n, kThreads);
  if (x.dtype() == DType::kF32) {
    nonfinite_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<const uint32_t*>(x.data()), n, 0x7f800000u, flag);
  } else {
    const uint16_t mask = x.dtype() == DType::kBF16 ? 0x7f80 : 0x7c00;
    nonfinite_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<const uint16_t*>(x.data()), n, mask, flag);
  }
  MT_CUDA_LAUNCH_CHECK();
  int host = 0;
  MT_CUDA_CHECK(cudaMemcpyAsync(&host, flag, sizeof(int), cudaMemcpyDeviceToHost, stream_));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return host == 0;
}

int64_t CudaBackend::count_zeros(const Tensor& x) {
  check_float_device(x, "count_zeros");
  const int64_t n = x.numel();
  if (n == 0) return 0;
  auto* count = static_cast<unsigned long long*>(scratch_);
  MT_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(unsigned long long), stream_));
  const unsigned grid = grid_for(n, kThreads);
  if (x.dtype() == DType::kF32) {
    count_zeros_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<const uint32_t*>(x.data()), n, 0x7fffffffu, count);
  } else {
    count_zeros_kernel<<<grid, kThreads, 0, stream_>>>(static_cast<const uint16_t*>(x.data()), n,
                                                       static_cast<uint16_t>(0x7fff), count);
  }
  MT_CUDA_LAUNCH_CHECK();
  unsigned long long host = 0;
  MT_CUDA_CHECK(cudaMemcpyAsync(&host, count, sizeof(host), cudaMemcpyDeviceToHost, stream_));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return static_cast<int64_t>(host);
}

// ---- optimizer ----------------------------------------------------------------------------

void CudaBackend::adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                               const AdamWStep& s) {
  for (const Tensor* t : {static_cast<const Tensor*>(&param), static_cast<const Tensor*>(&exp_avg),
                          static_cast<const Tensor*>(&exp_avg_sq)}) {
    check_device(*t, "adamw_update");
    MT_CHECK(t->dtype() == DType::kF32) << "adamw_update " << t->describe() << " must be fp32";
  }
  check_float_device(grad, "adamw_update grad");
  const int64_t n = param.numel();
  MT_CHECK(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n) << "adamw_update sizes";
  MT_CHECK(s.step >= 1) << "adamw_update step " << s.step;
  if (n == 0) return;
  dispatch_float_type(grad.dtype(), [&](auto tag) {
    using G = typename decltype(tag)::type;
    adamw_kernel<G><<<grid_for(n, kThreads), kThreads, 0, stream_>>>(
        static_cast<float*>(param.data()), static_cast<const G*>(grad.data()), static_cast<float*>(exp_avg.data()),
        static_cast<float*>(exp_avg_sq.data()), n, adamw_scalars(s));
  });
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace megatron::backend
