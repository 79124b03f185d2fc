// CPU backend: the optimizer's elementwise ops. adamw_update follows the operation order of
// optim/adamw.h (apex FusedAdam, ADAM_MODE_1) exactly; tests/backend/cpu/cpu_optimizer_test.cpp
// checks the two bit for bit.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace megatron::backend {

using namespace cpu_detail;

int64_t CpuBackend::count_zeros(const Tensor& x) {
  check_float(x, "count_zeros");
  In v(x, "count_zeros");
  int64_t zeros = 0;
  for (int64_t i = 0; i < x.numel(); ++i) zeros += v[i] == 0.0f;
  return zeros;
}

void CpuBackend::adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                              const AdamWStep& s) {
  for (const Tensor* t : {static_cast<const Tensor*>(&param), static_cast<const Tensor*>(&exp_avg),
                          static_cast<const Tensor*>(&exp_avg_sq)}) {
    check_f32(*t, "adamw_update");
  }
  const In g(grad, "adamw_update grad");  // a 16-bit gradient widened (exact)
  const int64_t n = param.numel();
  MT_CHECK(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n) << "adamw_update sizes";
  MT_CHECK(s.step >= 1) << "adamw_update step " << s.step;
  const float b1 = s.beta1, b2 = s.beta2, omb1 = 1.0f - b1, omb2 = 1.0f - b2;
  const auto bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(b1), static_cast<double>(s.step)));
  const auto bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(b2), static_cast<double>(s.step)));
  float* p = param.data_as<float>();
  float* m = exp_avg.data_as<float>();
  float* v = exp_avg_sq.data_as<float>();
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = (g[i] * s.grad_unscale) * s.grad_scale;
    const float mi = b1 * m[i] + omb1 * gi;
    const float vi = b2 * v[i] + omb2 * gi * gi;
    const float update = (mi / bc1) / (std::sqrt(vi / bc2) + s.eps) + s.weight_decay * p[i];
    p[i] = p[i] - s.lr * update;
    m[i] = mi;
    v[i] = vi;
  }
}

// The reference: adamw_update and copy on each segment's views.
void CpuBackend::adamw_update_segments(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                                       const Tensor& segments, const AdamWStep& s, Tensor& model_copy) {
  check_cpu(segments, "adamw_update_segments segments");
  MT_CHECK(segments.dtype() == DType::kI64 && segments.ndim() == 2 && segments.dim(1) == 3)
      << "adamw_update_segments segments " << segments.describe() << " must be int64 [S, 3]";
  const int64_t n = param.numel();
  MT_CHECK(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n &&
           (!model_copy.defined() || model_copy.numel() == n))
      << "adamw_update_segments sizes";
  const int64_t* seg = segments.data_as<const int64_t>();
  int64_t end = 0;
  for (int64_t k = 0; k < segments.dim(0); ++k) {
    const int64_t off = seg[3 * k], len = seg[3 * k + 1];
    MT_CHECK(off >= end && len >= 0 && off + len <= n)
        << "adamw_update_segments segment " << k << " [" << off << ", " << off + len << ") is unsorted, overlapping "
        << "or past " << n;
    end = off + len;
    if (len == 0) continue;
    AdamWStep sk = s;
    sk.weight_decay = seg[3 * k + 2] != 0 ? s.weight_decay : 0.0f;
    Tensor p = param.flat_view(off, {len}), m = exp_avg.flat_view(off, {len}), v = exp_avg_sq.flat_view(off, {len});
    adamw_update(p, grad.flat_view(off, {len}), m, v, sk);
    if (model_copy.defined()) {
      Tensor dst = model_copy.flat_view(off, {len});
      copy(p, dst);
    }
  }
}

}  // namespace megatron::backend
