// CPU reference of the query/key norms (backend/qk_norm.h): the vectors are gathered into the
// saved x (queries, then keys), each block normalised by the backend's own layernorm ops over
// [*, d] rows, and the result scattered back into qkv's columns. Gathers and scatters copy bytes
// (one dtype throughout), so the arithmetic is exactly layernorm_forward/backward's.
#include <cstring>

#include "backend/cpu/cpu_util.h"
#include "backend/qk_norm.h"
#include "backend/qkv_layout.h"

namespace megatron::backend {

using namespace cpu_detail;

namespace {

// The query block [n*H, d] and key block [n*G, d] of a [n*(H+G)*d] buffer (x or its statistics
// with d = 1).
struct Blocks {
  Tensor q, k;
};
Blocks split(const Tensor& t, int64_t n, int64_t heads, int64_t groups, int64_t d) {
  if (!t.defined()) return {};
  Shape qs = d > 1 ? Shape{n * heads, d} : Shape{n * heads};
  Shape ks = d > 1 ? Shape{n * groups, d} : Shape{n * groups};
  return {t.flat_view(0, qs), t.flat_view(n * heads * d, ks)};
}

// Copies vector slot `v` of every row between qkv [n, width] and a block [n * count, d]:
// slot v of row r is the block's row r * count + v.
enum class Dir { kGather, kScatter };
void move_vectors(const Tensor& qkv, const QkvLayout& L, bool keys, const Tensor& block, Dir dir) {
  const int64_t es = dtype_size(qkv.dtype()), d = L.head_dim, width = L.width();
  const int64_t count = keys ? L.groups : L.heads;
  const int64_t n = qkv.numel() / width;
  auto* q = static_cast<char*>(qkv.data());
  auto* b = static_cast<char*>(block.data());
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t v = 0; v < count; ++v) {
      char* col = q + (r * width + (keys ? L.k_col(v) : L.q_col(v))) * es;
      char* row = b + ((r * count + v) * d) * es;
      if (dir == Dir::kGather) {
        std::memcpy(row, col, static_cast<size_t>(d * es));
      } else {
        std::memcpy(col, row, static_cast<size_t>(d * es));
      }
    }
  }
}

// The scale the layernorm ops take: the weight, or 1 + weight in fp32.
Tensor scale_of(const Tensor& weight, bool zero_centered) {
  if (!zero_centered) return weight;
  In w(weight, "qk norm weight");
  Tensor g = Tensor::cpu({weight.numel()}, DType::kF32);
  float* gp = g.data_as<float>();
  for (int64_t j = 0; j < weight.numel(); ++j) gp[j] = w[j] + 1.0f;
  return g;
}

// The shared shape contract, then the CPU backend's dtype rules.
QkvLayout check(const Tensor& qkv, const Tensor& x, const Tensor& q_weight, const Tensor& k_weight, const Tensor& mean,
                const Tensor& rstd, const QkNormParams& p, const char* what) {
  check_float(qkv, what);
  check_float(x, "qk norm x");
  check_f32(rstd, "qk norm rstd");
  if (mean.defined()) check_f32(mean, "qk norm mean");
  return check_qk_norm_shapes(qkv, x, q_weight, k_weight, mean, rstd, p, what);
}

}  // namespace

void cpu_qk_norm_forward(Backend& backend, Tensor& qkv, const Tensor& q_weight, const Tensor& q_bias,
                         const Tensor& k_weight, const Tensor& k_bias, Tensor& x, Tensor& mean, Tensor& rstd,
                         const QkNormParams& p) {
  const QkvLayout L = check(qkv, x, q_weight, k_weight, mean, rstd, p, "qk norm qkv");
  const int64_t n = qkv.numel() / L.width(), d = L.head_dim;
  const Blocks xb = split(x, n, L.heads, L.groups, d), mb = split(mean, n, L.heads, L.groups, 1),
               rb = split(rstd, n, L.heads, L.groups, 1);
  for (const bool keys : {false, true}) {
    const Tensor& xs = keys ? xb.k : xb.q;
    move_vectors(qkv, L, keys, xs, Dir::kGather);
    Tensor out = Tensor::cpu(xs.shape(), xs.dtype());
    Tensor m = keys ? mb.k : mb.q, r = keys ? rb.k : rb.q;
    backend.layernorm_forward(xs, scale_of(keys ? k_weight : q_weight, p.zero_centered), keys ? k_bias : q_bias, p.eps,
                              out, m, r);
    move_vectors(qkv, L, keys, out, Dir::kScatter);
  }
}

void cpu_qk_norm_backward(Backend& backend, Tensor& dqkv, const Tensor& x, const Tensor& q_weight,
                          const Tensor& k_weight, const Tensor& mean, const Tensor& rstd, Tensor& dq_weight,
                          Tensor& dq_bias, Tensor& dk_weight, Tensor& dk_bias, const QkNormParams& p, GradWrite write) {
  const QkvLayout L = check(dqkv, x, q_weight, k_weight, mean, rstd, p, "qk norm dqkv");
  const int64_t n = dqkv.numel() / L.width(), d = L.head_dim;
  const Blocks xb = split(x, n, L.heads, L.groups, d), mb = split(mean, n, L.heads, L.groups, 1),
               rb = split(rstd, n, L.heads, L.groups, 1);
  for (const bool keys : {false, true}) {
    const Tensor& xs = keys ? xb.k : xb.q;
    Tensor g = Tensor::cpu(xs.shape(), xs.dtype());  // dy, then dx in place
    move_vectors(dqkv, L, keys, g, Dir::kGather);
    backend.layernorm_backward(g, xs, scale_of(keys ? k_weight : q_weight, p.zero_centered), keys ? mb.k : mb.q,
                               keys ? rb.k : rb.q, g, keys ? dk_weight : dq_weight, keys ? dk_bias : dq_bias, write);
    move_vectors(dqkv, L, keys, g, Dir::kScatter);
  }
}

}  // namespace megatron::backend
