// AdamW on the host. Checked against apex csrc/multi_tensor_adam.cu (AdamFunctor,
// ADAM_MODE_1) and multi_tensor_adam_cuda:
//  - the bias corrections are computed once per call on the host as
//    float(1 - pow(beta, step)) (std::pow(float, int) promotes to double);
//  - per element, in fp32: m and v updated first, then
//    update = (m/bc1) / (sqrtf(v/bc2) + eps) + decay*p_old and p = p - lr*update, i.e. eps
//    is added after the square root of the bias-corrected v, and the decoupled decay uses the
//    parameter before this step. (torch.optim.AdamW computes p*(1-lr*wd) first and divides
//    sqrt(v) by sqrt(bc2): the same in exact arithmetic, a different fp32 rounding.)
#include "optim/adamw.h"

#include <cmath>

#include "core/error.h"

namespace megatron::optim {

void adamw_update(std::span<float> param, std::span<const float> grad, std::span<float> exp_avg,
                  std::span<float> exp_avg_sq, const AdamWHyper& hyper) {
  MT_CHECK(grad.size() == param.size() && exp_avg.size() == param.size() && exp_avg_sq.size() == param.size())
      << "adamw_update: param, grad, exp_avg and exp_avg_sq must have the same length";
  MT_CHECK(hyper.step >= 1) << "adamw_update: step is 1-based, got " << hyper.step;

  const float beta1 = hyper.beta1;
  const float beta2 = hyper.beta2;
  const float one_minus_beta1 = 1.0f - beta1;
  const float one_minus_beta2 = 1.0f - beta2;
  const auto t = static_cast<double>(hyper.step);
  const auto bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), t));
  const auto bias_correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), t));
  const float eps = hyper.eps;
  const float lr = hyper.lr;
  const float decay = hyper.weight_decay;

  float* p = param.data();
  const float* g = grad.data();
  float* m = exp_avg.data();
  float* v = exp_avg_sq.data();
  const auto n = static_cast<int64_t>(param.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * hyper.grad_scale;
    const float mi = beta1 * m[i] + one_minus_beta1 * gi;
    const float vi = beta2 * v[i] + one_minus_beta2 * gi * gi;
    const float m_hat = mi / bias_correction1;
    const float v_hat = vi / bias_correction2;
    const float denom = std::sqrt(v_hat) + eps;
    const float update = m_hat / denom + decay * p[i];
    p[i] = p[i] - lr * update;
    m[i] = mi;
    v[i] = vi;
  }
}

bool no_weight_decay(std::string_view name, int64_t ndim) { return name.ends_with(".bias") || ndim == 1; }

}  // namespace megatron::optim
