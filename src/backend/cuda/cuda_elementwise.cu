// CUDA backend: dropout, Megatron's bias-dropout-add, the fused bias-GELU and SwiGLU (forward
// and backward), the same functions as backend/cpu/cpu_elementwise.cpp.
//
// Every kernel walks the tensor in groups of 4 consecutive elements [4g, 4g + 4) with a
// grid-stride loop. A group shares one Philox4x32-10 block (counter = g), whose 4 words are
// the uniforms of its 4 elements, so the mask is the CPU's (core/rng.h: element i uses word
// i % 4 of block i / 4) at a quarter of the RNG cost. When every pointer is aligned to the
// group's size a group is one 16-byte (fp32) or 8-byte (16-bit) access, else 4 scalar ones.
// Arithmetic is fp32 in the CPU's order; outputs are rounded RNE to their dtype.
// Fast path (every tensor, bias included, of one dtype and 16-byte aligned; the model's case):
// the kernels are templated on the dtype and read 16-byte vectors of 8 bf16/fp16 or 4 fp32
// elements (two or one Philox blocks, the same words per element), the last partial vector
// element by element, with the same arithmetic; the generic kernels below it take the rest.
// SwiGLU (x[n, 2f] = [gate | up] per row, out[n, f]): the vector kernels take W outputs of one
// row at a time (f a multiple of W, so a vector never straddles a row or a half and every
// 16-byte access is aligned), walking the rows with a (row, column) cursor instead of a
// division per vector; any other f, mixed dtypes or misaligned views take a scalar kernel.
// fp32 math in the CPU's order (no fused multiply-adds), each output rounded once.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"

namespace megatron::backend {
namespace cuda {
namespace {

// ---- kernels --------------------------------------------------------------------------------

constexpr int kThreads = 256;

// bias[(i + k) % cols] for k < 4 (0 without a bias).
__device__ __forceinline__ void bias4(const void* bias, DType dt, int64_t i, int64_t cols, float (&b)[4]) {
  if (bias == nullptr) {
#pragma unroll
    for (int k = 0; k < 4; ++k) b[k] = 0.0f;
    return;
  }
  int64_t c = i % cols;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    b[k] = load_f(bias, dt, c);
    if (++c == cols) c = 0;
  }
}

struct DropoutArgs {
  uint64_t seed;
  uint64_t stream;
  uint64_t offset;  // global index of element 0 (ops.h)
  float p;
  const uint64_t* stream_add;  // DropoutParams::stream_add (device memory) or null
  // Adds the value at stream_add to stream, once per thread at the start of a kernel.
  __device__ __forceinline__ void resolve() {
    if (stream_add != nullptr) stream += *stream_add;
  }
};

__global__ void dropout_kernel(const void* x, DType xdt, void* out, DType odt, int64_t n, bool vec, DropoutArgs d) {
  d.resolve();
  const int64_t groups = (n + 3) / 4;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = 4 * g;
    float v[4], m[4];
    load4(x, xdt, i, n, vec, v);
    dropout4(d.seed, d.stream, d.offset + static_cast<uint64_t>(i), d.p, m);
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = __fmul_rn(v[k], m[k]);
    store4(out, odt, i, n, vec, v);
  }
}

// out = residual + dropout(x + bias), with the CPU's rounding order (no fused multiply-add).
__global__ void bias_dropout_add_kernel(const void* x, DType xdt, const void* bias, DType bdt, const void* res,
                                        DType rdt, void* out, DType odt, int64_t n, int64_t cols, bool vec,
                                        DropoutArgs d) {
  d.resolve();
  const int64_t groups = (n + 3) / 4;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = 4 * g;
    float v[4], b[4], r[4], m[4];
    load4(x, xdt, i, n, vec, v);
    load4(res, rdt, i, n, vec, r);
    bias4(bias, bdt, i, cols, b);
    dropout4(d.seed, d.stream, d.offset + static_cast<uint64_t>(i), d.p, m);
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = __fadd_rn(r[k], __fmul_rn(__fadd_rn(v[k], b[k]), m[k]));
    store4(out, odt, i, n, vec, v);
  }
}

// ---- 16-byte vector fast path ------------------------------------------------------------------
// All tensors (and the bias, if any) of one dtype T and 16-byte aligned: thread j of the grid
// handles vectors j, j + grid, ... of W = 16 / sizeof(T) elements (8 bf16/fp16, 4 fp32): one
// 16-byte load per input and one store, W / 4 Philox blocks (element i still uses word i % 4
// of block i / 4), and the last partial vector (n % W elements) element by element. The bias
// of element i is bias[i % cols]: one 16-byte load when cols % W == 0 (kBiasVec; a vector
// never wraps), else element by element with wrap-around.
enum BiasMode { kNoBias = 0, kBiasVec = 1, kBiasScalar = 2 };

// The W elements of vector i (elements past n read as 0).
template <class T>
__device__ __forceinline__ void load_tail_or_vec(const T* p, int64_t i, int64_t n, float (&v)[kVecWidth<T>]) {
  if (i + kVecWidth<T> <= n) {
    load_vec<T>(p + i, v);
  } else {
    load_chunk<T, false>(p, i, n, v);
  }
}
template <class T>
__device__ __forceinline__ void store_tail_or_vec(T* p, int64_t i, int64_t n, const float (&v)[kVecWidth<T>]) {
  if (i + kVecWidth<T> <= n) {
    store_vec<T>(p + i, v);
  } else {
    store_chunk<T, false>(p, i, n, v);
  }
}

// Dropout multipliers of elements [i, i + W), i a multiple of W.
template <int W>
__device__ __forceinline__ void dropout_w(uint64_t seed, uint64_t stream, uint64_t i, float p, float (&m)[W]) {
#pragma unroll
  for (int q = 0; q < W / 4; ++q) {
    float m4[4];
    dropout4(seed, stream, i + 4 * q, p, m4);
#pragma unroll
    for (int k = 0; k < 4; ++k) m[4 * q + k] = m4[k];
  }
}

// bias[(i + e) % cols] for e < W, with col = i % cols.
template <class T, int kBias>
__device__ __forceinline__ void bias_w(const T* bias, int64_t col, int64_t cols, float (&b)[kVecWidth<T>]) {
  constexpr int W = kVecWidth<T>;
  if constexpr (kBias == kNoBias) {
#pragma unroll
    for (int e = 0; e < W; ++e) b[e] = 0.0f;
  } else if constexpr (kBias == kBiasVec) {
    load_vec<T>(bias + col, b);
  } else {
#pragma unroll
    for (int e = 0; e < W; ++e) {
      b[e] = to_f32<T>(bias[col]);
      if (++col == cols) col = 0;
    }
  }
}

template <class T>
__global__ void dropout_vec_kernel(const T* x, T* out, int64_t n, DropoutArgs d) {
  d.resolve();
  constexpr int W = kVecWidth<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * W;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * W; i < n; i += stride) {
    float v[W], m[W];
    load_tail_or_vec<T>(x, i, n, v);
    dropout_w<W>(d.seed, d.stream, d.offset + static_cast<uint64_t>(i), d.p, m);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = __fmul_rn(v[k], m[k]);
    store_tail_or_vec<T>(out, i, n, v);
  }
}

// out = residual + dropout(x + bias), with the CPU's rounding order (no fused multiply-add).
template <class T, int kBias>
__global__ void bias_dropout_add_vec_kernel(const T* x, const T* bias, const T* res, T* out, int64_t n, int64_t cols,
                                            int64_t stride_mod_cols, DropoutArgs d) {
  d.resolve();
  constexpr int W = kVecWidth<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * W;
  int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * W;
  int64_t col = kBias == kNoBias ? 0 : i % cols;  // then advanced, not divided again
  for (; i < n; i += stride) {
    float v[W], b[W], r[W], m[W];
    load_tail_or_vec<T>(x, i, n, v);
    load_tail_or_vec<T>(res, i, n, r);
    bias_w<T, kBias>(bias, col, cols, b);
    dropout_w<W>(d.seed, d.stream, d.offset + static_cast<uint64_t>(i), d.p, m);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = __fadd_rn(r[k], __fmul_rn(__fadd_rn(v[k], b[k]), m[k]));
    store_tail_or_vec<T>(out, i, n, v);
    if constexpr (kBias != kNoBias) {
      col += stride_mod_cols;
      if (col >= cols) col -= cols;
    }
  }
}

template <bool kTanh>
__global__ void bias_gelu_forward_kernel(const void* x, DType xdt, const void* bias, DType bdt, void* out, DType odt,
                                         int64_t n, int64_t cols, bool vec) {
  const int64_t groups = (n + 3) / 4;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = 4 * g;
    float v[4], b[4];
    load4(x, xdt, i, n, vec, v);
    bias4(bias, bdt, i, cols, b);
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = gelu<kTanh>(v[k] + b[k]);
    store4(out, odt, i, n, vec, v);
  }
}

template <bool kTanh>
__global__ void bias_gelu_backward_kernel(const void* dy, DType dydt, const void* x, DType xdt, const void* bias,
                                          DType bdt, void* dx, DType dxdt, int64_t n, int64_t cols, bool vec) {
  const int64_t groups = (n + 3) / 4;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = 4 * g;
    float d[4], v[4], b[4];
    load4(dy, dydt, i, n, vec, d);
    load4(x, xdt, i, n, vec, v);
    bias4(bias, bdt, i, cols, b);
#pragma unroll
    for (int k = 0; k < 4; ++k) d[k] = d[k] * gelu_grad<kTanh>(v[k] + b[k]);
    store4(dx, dxdt, i, n, vec, d);
  }
}

template <class T, bool kTanh, int kBias>
__global__ void bias_gelu_forward_vec_kernel(const T* x, const T* bias, T* out, int64_t n, int64_t cols,
                                             int64_t stride_mod_cols) {
  constexpr int W = kVecWidth<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * W;
  int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * W;
  int64_t col = kBias == kNoBias ? 0 : i % cols;
  for (; i < n; i += stride) {
    float v[W], b[W];
    load_tail_or_vec<T>(x, i, n, v);
    bias_w<T, kBias>(bias, col, cols, b);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = gelu<kTanh>(v[k] + b[k]);
    store_tail_or_vec<T>(out, i, n, v);
    if constexpr (kBias != kNoBias) {
      col += stride_mod_cols;
      if (col >= cols) col -= cols;
    }
  }
}

template <class T, bool kTanh, int kBias>
__global__ void bias_gelu_backward_vec_kernel(const T* dy, const T* x, const T* bias, T* dx, int64_t n, int64_t cols,
                                              int64_t stride_mod_cols) {
  constexpr int W = kVecWidth<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * W;
  int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * W;
  int64_t col = kBias == kNoBias ? 0 : i % cols;
  for (; i < n; i += stride) {
    float d[W], v[W], b[W];
    load_tail_or_vec<T>(dy, i, n, d);
    load_tail_or_vec<T>(x, i, n, v);
    bias_w<T, kBias>(bias, col, cols, b);
#pragma unroll
    for (int k = 0; k < W; ++k) d[k] = d[k] * gelu_grad<kTanh>(v[k] + b[k]);
    store_tail_or_vec<T>(dx, i, n, d);
    if constexpr (kBias != kNoBias) {
      col += stride_mod_cols;
      if (col >= cols) col -= cols;
    }
  }
}

// ---- SwiGLU ---------------------------------------------------------------------------------------
// out = silu(gate) * up, silu(g) = g sigmoid(g); d/dgate = dy up silu'(gate), d/dup = dy silu(gate)
// with silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))). The CPU's expressions and association
// (cpu_elementwise.cpp), spelled with __fmul_rn / __fadd_rn so that no multiply-add is fused:
// the only difference left is expf's (within 2 ulp) against the host's.
__device__ __forceinline__ float sigmoid(float g) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g))); }
__device__ __forceinline__ float swiglu(float g, float u) { return __fmul_rn(__fmul_rn(g, sigmoid(g)), u); }
// dgate and dup of one element.
__device__ __forceinline__ void swiglu_grad(float d, float g, float u, float& dg, float& du) {
  const float sg = sigmoid(g);
  dg = __fmul_rn(__fmul_rn(__fmul_rn(d, u), sg), __fadd_rn(1.0f, __fmul_rn(g, __fadd_rn(1.0f, -sg))));
  du = __fmul_rn(__fmul_rn(d, g), sg);
}

// The grid-stride cursor over [rows, f] outputs taken W at a time (f % W == 0): output i =
// row * f + col; a step of `stride` outputs is rows_step rows and col_step columns.
struct RowCursor {
  int64_t row, col;
  __device__ __forceinline__ void advance(int64_t rows_step, int64_t col_step, int64_t f) {
    row += rows_step;
    col += col_step;
    if (col >= f) {
      col -= f;
      ++row;
    }
  }
};

template <class T>
__global__ void swiglu_forward_vec_kernel(const T* x, T* out, int64_t n, int64_t f, int64_t rows_step,
                                          int64_t col_step) {
  constexpr int W = kVecWidth<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * W;
  int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * W;
  RowCursor at{i / f, i % f};
  for (; i < n; i += stride) {
    const T* gate = x + 2 * f * at.row + at.col;
    float g[W], u[W], o[W];
    load_vec<T>(gate, g);
    load_vec<T>(gate + f, u);
#pragma unroll
    for (int e = 0; e < W; ++e) o[e] = swiglu(g[e], u[e]);
    store_vec<T>(out + i, o);
    at.advance(rows_step, col_step, f);
  }
}

template <class T>
__global__ void swiglu_backward_vec_kernel(const T* dy, const T* x, T* dx, int64_t n, int64_t f, int64_t rows_step,
                                           int64_t col_step) {
  constexpr int W = kVecWidth<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * W;
  int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * W;
  RowCursor at{i / f, i % f};
  for (; i < n; i += stride) {
    const int64_t at_gate = 2 * f * at.row + at.col;
    float d[W], g[W], u[W], dg[W], du[W];
    load_vec<T>(dy + i, d);
    load_vec<T>(x + at_gate, g);
    load_vec<T>(x + at_gate + f, u);
#pragma unroll
    for (int e = 0; e < W; ++e) swiglu_grad(d[e], g[e], u[e], dg[e], du[e]);
    store_vec<T>(dx + at_gate, dg);
    store_vec<T>(dx + at_gate + f, du);
    at.advance(rows_step, col_step, f);
  }
}

// Any f, dtypes and alignment: one output (and its gate / up) per thread and step.
__global__ void swiglu_forward_kernel(const void* x, DType xdt, void* out, DType odt, int64_t n, int64_t f) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t gate = i + (i / f) * f;  // row * 2f + col
    store_f(out, odt, i, swiglu(load_f(x, xdt, gate), load_f(x, xdt, gate + f)));
  }
}

__global__ void swiglu_backward_kernel(const void* dy, DType dydt, const void* x, DType xdt, void* dx, DType dxdt,
                                       int64_t n, int64_t f) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t gate = i + (i / f) * f;
    float dg, du;
    swiglu_grad(load_f(dy, dydt, i), load_f(x, xdt, gate), load_f(x, xdt, gate + f), dg, du);
    store_f(dx, dxdt, gate, dg);
    store_f(dx, dxdt, gate + f, du);
  }
}

// ---- host helpers -----------------------------------------------------------------------------

void check_device_float(const Tensor& t, const char* what) {
  MT_CHECK(t.defined()) << what << " is undefined";
  MT_CHECK(t.device() == Device::kCUDA) << what << " " << t.describe() << " is not a CUDA tensor";
  MT_CHECK(is_float(t.dtype())) << what << " " << t.describe() << " is not a float tensor";
}

void check_dropout(const DropoutParams& d) {
  MT_CHECK(d.p >= 0.0f && d.p < 1.0f) << "dropout probability " << d.p << " is not in [0, 1)";
}

void check_same_numel(const Tensor& a, const Tensor& b, const char* op) {
  MT_CHECK(a.numel() == b.numel()) << op << ": " << a.describe() << " vs " << b.describe();
}

// Columns of x that a bias is added to (x's last dim); checks the bias when defined.
int64_t bias_cols(const Tensor& x, const Tensor& bias, const char* op) {
  const int64_t cols = x.ndim() > 0 ? x.dim(-1) : 1;
  if (bias.defined()) {
    check_device_float(bias, op);
    MT_CHECK(bias.numel() == cols) << op << ": bias " << bias.describe() << " for input " << x.describe();
  }
  return cols;
}

// True when t's data is aligned to a group of 4 elements (16 bytes fp32, 8 bytes 16-bit).
bool group_aligned(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data()) % static_cast<uintptr_t>(4 * dtype_size(t.dtype())) == 0;
}

DropoutArgs dropout_args(const DropoutParams& d) { return DropoutArgs{d.seed, d.stream, d.offset, d.p, d.stream_add}; }

// The vector fast path applies: every tensor of `dtype` and 16-byte aligned.
bool vec_path(DType dtype, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t->defined() && (t->dtype() != dtype || !vec_aligned(t->data()))) return false;
  }
  return true;
}

// Launch shape of the vector kernels (one thread per vector, grid_for's cap) and the bias
// cursor's step, (grid * threads * W) % cols.
struct VecLaunch {
  unsigned grid;
  int64_t stride_mod_cols;
};
VecLaunch vec_launch(int64_t n, int width, int64_t cols) {
  const unsigned grid = grid_for((n + width - 1) / width, kThreads);
  return VecLaunch{grid, (static_cast<int64_t>(grid) * kThreads * width) % cols};
}

// x[.., 2f] = [gate | up] per row: f, checked against y[.., f] (out, or dy), as the CPU does.
int64_t swiglu_half(const Tensor& x, const Tensor& y, const char* op) {
  MT_CHECK(x.ndim() >= 1 && x.dim(-1) % 2 == 0) << op << " x " << x.describe() << " must end in an even dim [.., 2f]";
  const int64_t f = x.dim(-1) / 2;
  MT_CHECK(y.numel() * 2 == x.numel() && y.ndim() >= 1 && y.dim(-1) == f)
      << op << " " << y.describe() << " for x " << x.describe() << ", expected [.., " << f << "]";
  return f;
}

// The vector SwiGLU kernels' launch: grid (one thread per vector of W outputs, grid_for's cap)
// and the cursor's step in rows and columns per grid stride.
struct RowLaunch {
  unsigned grid;
  int64_t rows_step, col_step;
};
RowLaunch row_launch(int64_t n, int width, int64_t f) {
  const unsigned grid = grid_for((n + width - 1) / width, kThreads);
  const int64_t stride = static_cast<int64_t>(grid) * kThreads * width;
  return RowLaunch{grid, stride / f, stride % f};
}

// Calls f(std::integral_constant<int, mode>{}) for the bias mode of `bias` on rows of `cols`.
template <int W, class F>
void dispatch_bias(const Tensor& bias, int64_t cols, F&& f) {
  if (!bias.defined()) {
    f(std::integral_constant<int, kNoBias>{});
  } else if (cols % W == 0) {
    f(std::integral_constant<int, kBiasVec>{});
  } else {
    f(std::integral_constant<int, kBiasScalar>{});
  }
}

}  // namespace
}  // namespace cuda

// ---- launchers ------------------------------------------------------------------------------

void CudaBackend::dropout_forward(const Tensor& x, Tensor& out, const DropoutParams& dropout) {
  cuda::check_dropout(dropout);
  cuda::check_device_float(x, "dropout x");
  cuda::check_device_float(out, "dropout out");
  cuda::check_same_numel(x, out, "dropout_forward");
  const int64_t n = x.numel();
  if (n == 0) return;
  if (cuda::vec_path(x.dtype(), {&x, &out})) {
    cuda::dispatch_float_type(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const cuda::VecLaunch l = cuda::vec_launch(n, cuda::kVecWidth<T>, 1);
      cuda::dropout_vec_kernel<T><<<l.grid, cuda::kThreads, 0, stream()>>>(
          static_cast<const T*>(x.data()), static_cast<T*>(out.data()), n, cuda::dropout_args(dropout));
    });
    MT_CUDA_LAUNCH_CHECK();
    return;
  }
  const bool vec = cuda::group_aligned(x) && cuda::group_aligned(out);
  cuda::dropout_kernel<<<cuda::grid_for((n + 3) / 4, cuda::kThreads), cuda::kThreads, 0, stream()>>>(
      x.data(), x.dtype(), out.data(), out.dtype(), n, vec, cuda::dropout_args(dropout));
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::dropout_backward(const Tensor& dy, Tensor& dx, const DropoutParams& dropout) {
  dropout_forward(dy, dx, dropout);  // the same mask and scale: dropout is linear
}

void CudaBackend::bias_dropout_add(const Tensor& x, const Tensor& bias, const Tensor& residual, Tensor& out,
                                   const DropoutParams& dropout) {
  cuda::check_dropout(dropout);
  cuda::check_device_float(x, "bias_dropout_add x");
  cuda::check_device_float(residual, "bias_dropout_add residual");
  cuda::check_device_float(out, "bias_dropout_add out");
  cuda::check_same_numel(x, residual, "bias_dropout_add");
  cuda::check_same_numel(x, out, "bias_dropout_add");
  const int64_t cols = cuda::bias_cols(x, bias, "bias_dropout_add bias");
  const int64_t n = x.numel();
  if (n == 0) return;
  if (cuda::vec_path(x.dtype(), {&x, &bias, &residual, &out})) {
    cuda::dispatch_float_type(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const cuda::VecLaunch l = cuda::vec_launch(n, cuda::kVecWidth<T>, cols);
      const T* bp = bias.defined() ? static_cast<const T*>(bias.data()) : nullptr;
      cuda::dispatch_bias<cuda::kVecWidth<T>>(bias, cols, [&](auto mode) {
        cuda::bias_dropout_add_vec_kernel<T, decltype(mode)::value><<<l.grid, cuda::kThreads, 0, stream()>>>(
            static_cast<const T*>(x.data()), bp, static_cast<const T*>(residual.data()), static_cast<T*>(out.data()), n,
            cols, l.stride_mod_cols, cuda::dropout_args(dropout));
      });
    });
    MT_CUDA_LAUNCH_CHECK();
    return;
  }
  const bool vec = cuda::group_aligned(x) && cuda::group_aligned(residual) && cuda::group_aligned(out);
  cuda::bias_dropout_add_kernel<<<cuda::grid_for((n + 3) / 4, cuda::kThreads), cuda::kThreads, 0, stream()>>>(
      x.data(), x.dtype(), bias.defined() ? bias.data() : nullptr, bias.defined() ? bias.dtype() : DType::kF32,
      residual.data(), residual.dtype(), out.data(), out.dtype(), n, cols, vec, cuda::dropout_args(dropout));
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::bias_gelu_forward(const Tensor& x, const Tensor& bias, Tensor& out, Gelu kind) {
  cuda::check_device_float(x, "bias_gelu x");
  cuda::check_device_float(out, "bias_gelu out");
  cuda::check_same_numel(x, out, "bias_gelu_forward");
  const int64_t cols = cuda::bias_cols(x, bias, "bias_gelu bias");
  const int64_t n = x.numel();
  if (n == 0) return;
  if (cuda::vec_path(x.dtype(), {&x, &bias, &out})) {
    cuda::dispatch_float_type(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const cuda::VecLaunch l = cuda::vec_launch(n, cuda::kVecWidth<T>, cols);
      const T* bp = bias.defined() ? static_cast<const T*>(bias.data()) : nullptr;
      cuda::dispatch_bias<cuda::kVecWidth<T>>(bias, cols, [&](auto mode) {
        constexpr int kMode = decltype(mode)::value;
        auto kernel = kind == Gelu::kTanh ? cuda::bias_gelu_forward_vec_kernel<T, true, kMode>
                                          : cuda::bias_gelu_forward_vec_kernel<T, false, kMode>;
        kernel<<<l.grid, cuda::kThreads, 0, stream()>>>(static_cast<const T*>(x.data()), bp,
                                                        static_cast<T*>(out.data()), n, cols, l.stride_mod_cols);
      });
    });
    MT_CUDA_LAUNCH_CHECK();
    return;
  }
  const bool vec = cuda::group_aligned(x) && cuda::group_aligned(out);
  const void* bp = bias.defined() ? bias.data() : nullptr;
  const DType bdt = bias.defined() ? bias.dtype() : DType::kF32;
  const unsigned grid = cuda::grid_for((n + 3) / 4, cuda::kThreads);
  if (kind == Gelu::kTanh) {
    cuda::bias_gelu_forward_kernel<true>
        <<<grid, cuda::kThreads, 0, stream()>>>(x.data(), x.dtype(), bp, bdt, out.data(), out.dtype(), n, cols, vec);
  } else {
    cuda::bias_gelu_forward_kernel<false>
        <<<grid, cuda::kThreads, 0, stream()>>>(x.data(), x.dtype(), bp, bdt, out.data(), out.dtype(), n, cols, vec);
  }
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::bias_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx, Gelu kind) {
  cuda::check_device_float(dy, "bias_gelu dy");
  cuda::check_device_float(x, "bias_gelu x");
  cuda::check_device_float(dx, "bias_gelu dx");
  cuda::check_same_numel(x, dy, "bias_gelu_backward");
  cuda::check_same_numel(x, dx, "bias_gelu_backward");
  const int64_t cols = cuda::bias_cols(x, bias, "bias_gelu bias");
  const int64_t n = x.numel();
  if (n == 0) return;
  if (cuda::vec_path(x.dtype(), {&dy, &x, &bias, &dx})) {
    cuda::dispatch_float_type(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const cuda::VecLaunch l = cuda::vec_launch(n, cuda::kVecWidth<T>, cols);
      const T* bp = bias.defined() ? static_cast<const T*>(bias.data()) : nullptr;
      cuda::dispatch_bias<cuda::kVecWidth<T>>(bias, cols, [&](auto mode) {
        constexpr int kMode = decltype(mode)::value;
        auto kernel = kind == Gelu::kTanh ? cuda::bias_gelu_backward_vec_kernel<T, true, kMode>
                                          : cuda::bias_gelu_backward_vec_kernel<T, false, kMode>;
        kernel<<<l.grid, cuda::kThreads, 0, stream()>>>(static_cast<const T*>(dy.data()),
                                                        static_cast<const T*>(x.data()), bp, static_cast<T*>(dx.data()),
                                                        n, cols, l.stride_mod_cols);
      });
    });
    MT_CUDA_LAUNCH_CHECK();
    return;
  }
  const bool vec = cuda::group_aligned(dy) && cuda::group_aligned(x) && cuda::group_aligned(dx);
  const void* bp = bias.defined() ? bias.data() : nullptr;
  const DType bdt = bias.defined() ? bias.dtype() : DType::kF32;
  const unsigned grid = cuda::grid_for((n + 3) / 4, cuda::kThreads);
  if (kind == Gelu::kTanh) {
    cuda::bias_gelu_backward_kernel<true><<<grid, cuda::kThreads, 0, stream()>>>(
        dy.data(), dy.dtype(), x.data(), x.dtype(), bp, bdt, dx.data(), dx.dtype(), n, cols, vec);
  } else {
    cuda::bias_gelu_backward_kernel<false><<<grid, cuda::kThreads, 0, stream()>>>(
        dy.data(), dy.dtype(), x.data(), x.dtype(), bp, bdt, dx.data(), dx.dtype(), n, cols, vec);
  }
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::swiglu_forward(const Tensor& x, Tensor& out) {
  cuda::check_device_float(x, "swiglu x");
  cuda::check_device_float(out, "swiglu out");
  const int64_t f = cuda::swiglu_half(x, out, "swiglu_forward");
  const int64_t n = out.numel();
  if (n == 0) return;
  cuda::dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int W = cuda::kVecWidth<T>;
    if (f % W == 0 && cuda::vec_path(x.dtype(), {&x, &out})) {
      const cuda::RowLaunch l = cuda::row_launch(n, W, f);
      cuda::swiglu_forward_vec_kernel<T><<<l.grid, cuda::kThreads, 0, stream()>>>(
          static_cast<const T*>(x.data()), static_cast<T*>(out.data()), n, f, l.rows_step, l.col_step);
    } else {
      cuda::swiglu_forward_kernel<<<cuda::grid_for(n, cuda::kThreads), cuda::kThreads, 0, stream()>>>(
          x.data(), x.dtype(), out.data(), out.dtype(), n, f);
    }
  });
  MT_CUDA_LAUNCH_CHECK();
}

void CudaBackend::swiglu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  cuda::check_device_float(dy, "swiglu dy");
  cuda::check_device_float(x, "swiglu x");
  cuda::check_device_float(dx, "swiglu dx");
  const int64_t f = cuda::swiglu_half(x, dy, "swiglu_backward");
  cuda::check_same_numel(x, dx, "swiglu_backward");
  // Each thread reads its dy and x before writing, but other threads' dx would land on them.
  MT_CHECK(!overlaps(dx, x) && !overlaps(dx, dy))
      << "swiglu_backward dx " << dx.describe() << " must not alias x or dy";
  const int64_t n = dy.numel();
  if (n == 0) return;
  cuda::dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int W = cuda::kVecWidth<T>;
    if (f % W == 0 && cuda::vec_path(x.dtype(), {&dy, &x, &dx})) {
      const cuda::RowLaunch l = cuda::row_launch(n, W, f);
      cuda::swiglu_backward_vec_kernel<T>
          <<<l.grid, cuda::kThreads, 0, stream()>>>(static_cast<const T*>(dy.data()), static_cast<const T*>(x.data()),
                                                    static_cast<T*>(dx.data()), n, f, l.rows_step, l.col_step);
    } else {
      cuda::swiglu_backward_kernel<<<cuda::grid_for(n, cuda::kThreads), cuda::kThreads, 0, stream()>>>(
          dy.data(), dy.dtype(), x.data(), x.dtype(), dx.data(), dx.dtype(), n, f);
    }
  });
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace megatron::backend
