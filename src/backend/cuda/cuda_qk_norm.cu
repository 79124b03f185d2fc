// CUDA backend: the query/key norms of --qk-layernorm (backend/qk_norm.h) on the strided q and
// k vectors of the fused qkv buffer, v untouched.
//
// Forward: one warp per vector (the n*H queries, then the n*G keys: the saved x's order). Its
// lanes stride over the d elements: two passes (mean, then the centred sum of squares) reduced
// by shuffles in fp32, then y = (x - mean) rstd scale + bias rounded once into qkv; the input is
// copied into x first.
// Backward: the weight and bias gradients first (they read dy before dx overwrites it): one
// block per 32-column chunk of q or of k, a lane per column and 8 warps striding over the
// vectors, each lane's sum in fp32, the warps' sums added in warp order (deterministic); then one
// warp per vector writes dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy scale, over dy.
// The CPU reference (cpu_qk_norm.cpp) keeps its row sums in double: the two agree to fp32
// rounding of the sums.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/qk_norm.h"
#include "backend/qkv_layout.h"

namespace megatron::backend {

using namespace cuda;

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kColumns = 32;

struct QkArgs {
  void* qkv = nullptr;  // qkv (forward) or dqkv (backward)
  void* x = nullptr;
  DType dt = DType::kF32;
  const void* w[2] = {nullptr, nullptr};  // q, k scale weights
  const void* b[2] = {nullptr, nullptr};  // q, k biases (forward; null: none)
  DType wdt[2] = {DType::kF32, DType::kF32};
  DType bdt[2] = {DType::kF32, DType::kF32};
  float* mean = nullptr;  // null: RMSNorm
  float* rstd = nullptr;
  int64_t n = 0, width = 0, group_width = 0;
  int heads = 0, groups = 0, per_group = 0, d = 0;
  float eps = 0.0f, one = 0.0f;  // one: 1 with --apply-layernorm-1p, else 0
};

// Vector v of the n*(H+G): whether it is a key, and its first column in the qkv row-major buffer.
__device__ __forceinline__ int64_t qkv_offset(const QkArgs& a, int64_t v, bool& key) {
  const int64_t nq = a.n * a.heads;
  key = v >= nq;
  if (!key) {
    const int64_t r = v / a.heads, j = v % a.heads;
    return r * a.width + (j / a.per_group) * a.group_width + (j % a.per_group) * a.d;
  }
  const int64_t r = (v - nq) / a.groups, g = (v - nq) % a.groups;
  return r * a.width + g * a.group_width + static_cast<int64_t>(a.per_group) * a.d;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void qk_norm_forward_kernel(const QkArgs a) {
  const int64_t v = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (v >= a.n * (a.heads + a.groups)) return;
  bool key = false;
  const int64_t col = qkv_offset(a, v, key);
  const int kk = key ? 1 : 0;
  const float inv_d = 1.0f / static_cast<float>(a.d);
  float sum = 0.0f;
  if (a.mean != nullptr) {
    for (int j = lane; j < a.d; j += 32) sum += load_f(a.qkv, a.dt, col + j);
  }
  const float m = warp_sum(sum) * inv_d;  // 0 for RMSNorm
  float sq = 0.0f;
  for (int j = lane; j < a.d; j += 32) {
    const float c = load_f(a.qkv, a.dt, col + j) - m;
    sq += c * c;
  }
  const float s = rsqrtf(warp_sum(sq) * inv_d + a.eps);
  for (int j = lane; j < a.d; j += 32) {
    const float xv = load_f(a.qkv, a.dt, col + j);
    store_f(a.x, a.dt, v * a.d + j, xv);
    const float scale = load_f(a.w[kk], a.wdt[kk], j) + a.one;
    const float bias = a.b[kk] != nullptr ? load_f(a.b[kk], a.bdt[kk], j) : 0.0f;
    store_f(a.qkv, a.dt, col + j, (xv - m) * s * scale + bias);
  }
  if (lane == 0) {
    if (a.mean != nullptr) a.mean[v] = m;
    a.rstd[v] = s;
  }
}

// Block (chunk, part): columns [chunk*32, +32) of the query (part 0) or key (part 1) weights.
// The four gradients share dtype gdt (fp32, or a 16-bit gradient buffer's: the fp32 sum plus the
// old value, rounded once).
__global__ void qk_norm_weight_grad_kernel(const QkArgs a, void* dw0, void* db0, void* dw1, void* db1, DType gdt,
                                           bool accumulate) {
  __shared__ float sw[kWarpsPerBlock][kColumns], sb[kWarpsPerBlock][kColumns];
  const int part = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int j = blockIdx.x * kColumns + lane;
  const int64_t first = part == 0 ? 0 : a.n * a.heads;
  const int64_t count = part == 0 ? a.n * a.heads : a.n * a.groups;
  float aw = 0.0f, ab = 0.0f;
  if (j < a.d) {
    for (int64_t v = first + warp; v < first + count; v += kWarpsPerBlock) {
      bool key = false;
      const int64_t col = qkv_offset(a, v, key);
      const float dy = load_f(a.qkv, a.dt, col + j);
      const float m = a.mean != nullptr ? a.mean[v] : 0.0f;
      aw += dy * ((load_f(a.x, a.dt, v * a.d + j) - m) * a.rstd[v]);
      ab += dy;
    }
  }
  sw[warp][lane] = aw;
  sb[warp][lane] = ab;
  __syncthreads();
  if (warp != 0 || j >= a.d) return;
  float tw = 0.0f, tb = 0.0f;
  for (int w = 0; w < kWarpsPerBlock; ++w) {
    tw += sw[w][lane];
    tb += sb[w][lane];
  }
  void* dw = part == 0 ? dw0 : dw1;
  void* db = part == 0 ? db0 : db1;
  store_f(dw, gdt, j, accumulate ? load_f(dw, gdt, j) + tw : tw);
  if (db != nullptr) store_f(db, gdt, j, accumulate ? load_f(db, gdt, j) + tb : tb);
}

__global__ void qk_norm_input_grad_kernel(const QkArgs a) {
  const int64_t v = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (v >= a.n * (a.heads + a.groups)) return;
  bool key = false;
  const int64_t col = qkv_offset(a, v, key);
  const int kk = key ? 1 : 0;
  const float m = a.mean != nullptr ? a.mean[v] : 0.0f, s = a.rstd[v];
  float sg = 0.0f, sgx = 0.0f;
  for (int j = lane; j < a.d; j += 32) {
    const float g = load_f(a.qkv, a.dt, col + j) * (load_f(a.w[kk], a.wdt[kk], j) + a.one);
    sg += g;
    sgx += g * ((load_f(a.x, a.dt, v * a.d + j) - m) * s);
  }
  const float inv_d = 1.0f / static_cast<float>(a.d);
  const float mean_g = a.mean != nullptr ? warp_sum(sg) * inv_d : 0.0f;
  const float mean_gx = warp_sum(sgx) * inv_d;
  for (int j = lane; j < a.d; j += 32) {
    const float g = load_f(a.qkv, a.dt, col + j) * (load_f(a.w[kk], a.wdt[kk], j) + a.one);
    const float xhat = (load_f(a.x, a.dt, v * a.d + j) - m) * s;
    store_f(a.qkv, a.dt, col + j, s * (g - mean_g - xhat * mean_gx));
  }
}

void check_cuda_float(const Tensor& t, const char* what) {
  MT_CHECK(t.defined() && t.device() == Device::kCUDA && is_float(t.dtype()))
      << what << " " << (t.defined() ? t.describe() : std::string("undefined")) << ": a CUDA float tensor expected";
}

QkArgs make_args(Tensor& qkv, const Tensor& x, const Tensor& q_weight, const Tensor& k_weight, const Tensor& mean,
                 const Tensor& rstd, const QkNormParams& p, const char* what) {
  check_cuda_float(qkv, what);
  check_cuda_float(x, "qk norm x");
  check_cuda_float(q_weight, "qk norm q weight");
  check_cuda_float(k_weight, "qk norm k weight");
  MT_CHECK(rstd.defined() && rstd.device() == Device::kCUDA && rstd.dtype() == DType::kF32 &&
           (!mean.defined() || (mean.device() == Device::kCUDA && mean.dtype() == DType::kF32)))
      << "qk norm mean/rstd: CUDA fp32 expected";
  const QkvLayout L = check_qk_norm_shapes(qkv, x, q_weight, k_weight, mean, rstd, p, what);
  const int64_t n = qkv.numel() / L.width(), vectors = n * (L.heads + L.groups);
  MT_CHECK(vectors <= int64_t{0x7fffffff} * kWarpsPerBlock) << what << ": " << vectors << " vectors";
  QkArgs a;
  a.qkv = qkv.data();
  a.x = x.data();
  a.dt = qkv.dtype();
  a.w[0] = q_weight.data();
  a.w[1] = k_weight.data();
  a.wdt[0] = q_weight.dtype();
  a.wdt[1] = k_weight.dtype();
  a.mean = mean.defined() ? static_cast<float*>(mean.data()) : nullptr;
  a.rstd = static_cast<float*>(rstd.data());
  a.n = n;
  a.width = L.width();
  a.group_width = L.group_width();
  a.heads = static_cast<int>(L.heads);
  a.groups = static_cast<int>(L.groups);
  a.per_group = static_cast<int>(L.per_group());
  a.d = static_cast<int>(L.head_dim);
  a.eps = p.eps;
  a.one = p.zero_centered ? 1.0f : 0.0f;
  return a;
}

cudaStream_t stream_of(Backend& backend, const char* what) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  MT_CHECK(cuda != nullptr) << what << ": a CUDA device without the CUDA backend";
  return cuda->stream();
}

unsigned vector_blocks(const QkArgs& a) {
  return static_cast<unsigned>((a.n * (a.heads + a.groups) + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

void cuda_qk_norm_forward(Backend& backend, Tensor& qkv, const Tensor& q_weight, const Tensor& q_bias,
                          const Tensor& k_weight, const Tensor& k_bias, Tensor& x, Tensor& mean, Tensor& rstd,
                          const QkNormParams& params) {
  QkArgs a = make_args(qkv, x, q_weight, k_weight, mean, rstd, params, "qk norm qkv");
  MT_CHECK(mean.defined() ? (q_bias.defined() && k_bias.defined()) : (!q_bias.defined() && !k_bias.defined()))
      << "qk norm: LayerNorm takes both biases, RMSNorm neither";
  if (mean.defined()) {
    check_cuda_float(q_bias, "qk norm q bias");
    check_cuda_float(k_bias, "qk norm k bias");
    MT_CHECK(q_bias.numel() == a.d && k_bias.numel() == a.d) << "qk norm biases for head_dim " << a.d;
    a.b[0] = q_bias.data();
    a.b[1] = k_bias.data();
    a.bdt[0] = q_bias.dtype();
    a.bdt[1] = k_bias.dtype();
  }
  if (a.n == 0) return;
  const cudaStream_t stream = stream_of(backend, "qk_norm_forward");
  qk_norm_forward_kernel<<<vector_blocks(a), kWarpsPerBlock * 32, 0, stream>>>(a);
  MT_CUDA_LAUNCH_CHECK();
}

void cuda_qk_norm_backward(Backend& backend, Tensor& dqkv, const Tensor& x, const Tensor& q_weight,
                           const Tensor& k_weight, const Tensor& mean, const Tensor& rstd, Tensor& dq_weight,
                           Tensor& dq_bias, Tensor& dk_weight, Tensor& dk_bias, const QkNormParams& params,
                           GradWrite write) {
  QkArgs a = make_args(dqkv, x, q_weight, k_weight, mean, rstd, params, "qk norm dqkv");
  const DType gdt = dq_weight.defined() ? dq_weight.dtype() : DType::kF32;
  for (const Tensor* g : {&dq_weight, &dk_weight}) {
    MT_CHECK(g->defined() && g->device() == Device::kCUDA && is_float(g->dtype()) && g->dtype() == gdt &&
             g->numel() == a.d)
        << "qk norm weight gradient " << g->describe() << ": CUDA [" << a.d << "] of one float dtype expected";
  }
  const bool layernorm = mean.defined();
  for (const Tensor* g : {&dq_bias, &dk_bias}) {
    MT_CHECK(layernorm ? (g->defined() && g->device() == Device::kCUDA && g->dtype() == gdt && g->numel() == a.d)
                       : !g->defined())
        << "qk norm bias gradient: "
        << (layernorm ? "CUDA [d] in the weight gradient's dtype expected" : "RMSNorm has no bias");
  }
  const cudaStream_t stream = stream_of(backend, "qk_norm_backward");
  const bool accumulate = write == GradWrite::kAccumulate;
  // With no rows the gradients still take their write (zeros when overwritten).
  const dim3 grid(static_cast<unsigned>((a.d + kColumns - 1) / kColumns), 2);
  qk_norm_weight_grad_kernel<<<grid, kWarpsPerBlock * 32, 0, stream>>>(
      a, dq_weight.data(), layernorm ? dq_bias.data() : nullptr, dk_weight.data(), layernorm ? dk_bias.data() : nullptr,
      gdt, accumulate);
  MT_CUDA_LAUNCH_CHECK();
  if (a.n == 0) return;
  qk_norm_input_grad_kernel<<<vector_blocks(a), kWarpsPerBlock * 32, 0, stream>>>(a);
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace megatron::backend
