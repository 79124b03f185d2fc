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
  for (const Tensor* t : {static_cast<const Tensor*>(&param), &grad, static_cast<const Tensor*>(&exp_avg),
                          static_cast<const Tensor*>(&exp_avg_sq)}) {
    check_f32(*t, "adamw_update");
  }
  const int64_t n = param.numel();
  MT_CHECK(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n) << "adamw_update sizes";
  MT_CHECK(s.step >= 1) << "adamw_update step " << s.step;
  const float b1 = s.beta1, b2 = s.beta2, omb1 = 1.0f - b1, omb2 = 1.0f - b2;
  const auto bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(b1), static_cast<double>(s.step)));
  const auto bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(b2), static_cast<double>(s.step)));
  float* p = param.data_as<float>();
  const float* g = grad.data_as<const float>();
  float* m = exp_avg.data_as<float>();
  float* v = exp_avg_sq.data_as<float>();
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = b1 * m[i] + omb1 * gi;
    const float vi = b2 * v[i] + omb2 * gi * gi;
    const float update = (mi / bc1) / (std::sqrt(vi / bc2) + s.eps) + s.weight_decay * p[i];
    p[i] = p[i] - s.lr * update;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace megatron::backend
