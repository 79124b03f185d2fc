// CPU backend: elementwise ops (add, scale, dropout, bias-dropout-add, bias gradient, GELU).
//
// Dropout: element i (the flat index in the tensor dropout applies to) is kept iff
// dropout_keep(seed, stream, offset + i, p) (offset: a shard's global start, ops.h); kept values are scaled by 1 / (1 -
// p); p == 0 draws nothing and is the identity.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"
#include "core/rng.h"

namespace megatron::backend {

using namespace cpu_detail;

namespace {

void check_dropout(const DropoutParams& d) {
  MT_CHECK(d.p >= 0.0f && d.p < 1.0f) << "dropout probability " << d.p << " is not in [0, 1)";
}

// The dropout multiplier of element i: 0 if dropped, 1 / (1 - p) if kept, 1 without dropout.
inline float dropout_factor(const DropoutParams& d, int64_t i) {
  if (d.p == 0.0f) return 1.0f;
  return dropout_keep(d.seed, d.host_stream(), d.offset + static_cast<uint64_t>(i), d.p) ? 1.0f / (1.0f - d.p) : 0.0f;
}

void check_same_numel(const Tensor& a, const Tensor& b, const char* op) {
  MT_CHECK(a.numel() == b.numel()) << op << ": " << a.describe() << " vs " << b.describe();
}

// Columns of x that a bias of `bias` elements is added to (undefined bias: x's last dim).
int64_t bias_cols(const Tensor& x, const Tensor& bias, const char* op) {
  const int64_t cols = x.ndim() > 0 ? x.dim(-1) : 1;
  if (bias.defined()) {
    MT_CHECK(bias.numel() == cols) << op << ": bias " << bias.describe() << " for input " << x.describe();
  }
  return cols;
}

}  // namespace

void CpuBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  check_same_numel(a, b, "add");
  check_same_numel(a, out, "add");
  In av(a, "add a"), bv(b, "add b");
  Out ov(out, "add out");
  const int64_t n = a.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t i = 0; i < n; ++i) ov[i] = av[i] + bv[i];
  ov.commit();
}

void CpuBackend::scale(Tensor& x, float alpha) {
  Out xv(x, "scale x", /*load=*/true);
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t i = 0; i < n; ++i) xv[i] *= alpha;
  xv.commit();
}

void CpuBackend::bias_dropout_add(const Tensor& x, const Tensor& bias, const Tensor& residual, Tensor& out,
                                  const DropoutParams& dropout) {
  check_dropout(dropout);
  check_same_numel(x, residual, "bias_dropout_add");
  check_same_numel(x, out, "bias_dropout_add");
  const int64_t cols = bias_cols(x, bias, "bias_dropout_add");
  In xv(x, "bias_dropout_add x"), rv(residual, "bias_dropout_add residual");
  In bv = In::optional(bias, "bias_dropout_add bias");
  Out ov(out, "bias_dropout_add out");
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float v = bv ? xv[i] + bv[i % cols] : xv[i];
    ov[i] = rv[i] + v * dropout_factor(dropout, i);
  }
  ov.commit();
}

void CpuBackend::dropout_forward(const Tensor& x, Tensor& out, const DropoutParams& dropout) {
  check_dropout(dropout);
  check_same_numel(x, out, "dropout_forward");
  In xv(x, "dropout x");
  Out ov(out, "dropout out");
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t i = 0; i < n; ++i) ov[i] = xv[i] * dropout_factor(dropout, i);
  ov.commit();
}

void CpuBackend::dropout_backward(const Tensor& dy, Tensor& dx, const DropoutParams& dropout) {
  dropout_forward(dy, dx, dropout);  // the same mask and scale: dropout is linear
}

void CpuBackend::bias_grad(const Tensor& dy, Tensor& dbias, GradWrite write) {
  const int64_t cols = dbias.numel();
  const int64_t rows = rows_of(dy, cols, "bias_grad dy");
  MT_CHECK(dy.dim(-1) == cols) << "bias_grad: dy " << dy.describe() << " vs dbias " << dbias.describe();
  In dyv(dy, "bias_grad dy");
  const bool accumulate = write == GradWrite::kAccumulate;
  Out dbv(dbias, "bias_grad dbias", /*load=*/accumulate);
  // Each column chunk belongs to one thread, which adds the rows in order.
  const int64_t chunks = (cols + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelWork)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t c0 = c * kColumnChunk, c1 = std::min(cols, c0 + kColumnChunk);
    float acc[kColumnChunk] = {};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = c0; j < c1; ++j) acc[j - c0] += dyv[r * cols + j];
    for (int64_t j = c0; j < c1; ++j) dbv[j] = accumulate ? dbv[j] + acc[j - c0] : acc[j - c0];
  }
  dbv.commit();
}

void CpuBackend::bias_gelu_forward(const Tensor& x, const Tensor& bias, Tensor& out, Gelu kind) {
  check_same_numel(x, out, "bias_gelu_forward");
  const int64_t cols = bias_cols(x, bias, "bias_gelu_forward");
  In xv(x, "bias_gelu x");
  In bv = In::optional(bias, "bias_gelu bias");
  Out ov(out, "bias_gelu out");
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t i = 0; i < n; ++i) ov[i] = gelu(bv ? xv[i] + bv[i % cols] : xv[i], kind);
  ov.commit();
}

void CpuBackend::bias_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx, Gelu kind) {
  check_same_numel(x, dy, "bias_gelu_backward");
  check_same_numel(x, dx, "bias_gelu_backward");
  const int64_t cols = bias_cols(x, bias, "bias_gelu_backward");
  In dyv(dy, "bias_gelu dy"), xv(x, "bias_gelu x");
  In bv = In::optional(bias, "bias_gelu bias");
  Out dxv(dx, "bias_gelu dx");
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t i = 0; i < n; ++i) dxv[i] = dyv[i] * gelu_grad(bv ? xv[i] + bv[i % cols] : xv[i], kind);
  dxv.commit();
}

namespace {

// x[n, 2f] = [gate | up] per row: the row count and f, checked against out[n, f].
int64_t swiglu_half(const Tensor& x, const Tensor& out, const char* op) {
  MT_CHECK(x.ndim() >= 1 && x.dim(-1) % 2 == 0) << op << " x " << x.describe() << " must end in an even dim [.., 2f]";
  const int64_t f = x.dim(-1) / 2;
  MT_CHECK(out.numel() * 2 == x.numel() && out.dim(-1) == f)
      << op << " " << out.describe() << " for x " << x.describe() << ", expected [.., " << f << "]";
  return f;
}

float sigmoid(float g) { return 1.0f / (1.0f + std::exp(-g)); }

}  // namespace

void CpuBackend::swiglu_forward(const Tensor& x, Tensor& out) {
  const int64_t f = swiglu_half(x, out, "swiglu_forward");
  const int64_t n = x.numel() / (2 * f);
  In xv(x, "swiglu x");
  Out ov(out, "swiglu out");
#pragma omp parallel for schedule(static) if (n * f >= kParallelWork)
  for (int64_t r = 0; r < n; ++r) {
    const float* gate = xv.data() + r * 2 * f;
    const float* up = gate + f;
    for (int64_t j = 0; j < f; ++j) ov[r * f + j] = gate[j] * sigmoid(gate[j]) * up[j];
  }
  ov.commit();
}

void CpuBackend::swiglu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  const int64_t f = swiglu_half(x, dy, "swiglu_backward");
  check_same_numel(x, dx, "swiglu_backward");
  MT_CHECK(!overlaps(dx, x) && !overlaps(dx, dy))
      << "swiglu_backward dx " << dx.describe() << " must not alias x or dy";
  const int64_t n = x.numel() / (2 * f);
  In dyv(dy, "swiglu dy"), xv(x, "swiglu x");
  Out dxv(dx, "swiglu dx");
#pragma omp parallel for schedule(static) if (n * f >= kParallelWork)
  for (int64_t r = 0; r < n; ++r) {
    const float* gate = xv.data() + r * 2 * f;
    const float* up = gate + f;
    float* dgate = dxv.data() + r * 2 * f;
    float* dup = dgate + f;
    for (int64_t j = 0; j < f; ++j) {
      const float g = gate[j], sg = sigmoid(g), d = dyv[r * f + j];
      dgate[j] = d * up[j] * sg * (1.0f + g * (1.0f - sg));
      dup[j] = d * g * sg;
    }
  }
  dxv.commit();
}

}  // namespace megatron::backend
