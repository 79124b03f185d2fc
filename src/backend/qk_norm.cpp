#include "backend/qk_norm.h"

#include "backend/profiling_backend.h"
#include "core/error.h"

namespace megatron::backend {

QkvLayout check_qk_norm_shapes(const Tensor& qkv, const Tensor& x, const Tensor& q_weight, const Tensor& k_weight,
                               const Tensor& mean, const Tensor& rstd, const QkNormParams& p, const char* what) {
  const QkvLayout L(p.heads, p.groups(), p.head_dim);
  MT_CHECK(qkv.defined() && qkv.ndim() == 3 && qkv.dim(2) == L.width())
      << what << " " << qkv.describe() << " for " << p.heads << " heads in " << L.groups << " groups of " << p.head_dim;
  const int64_t vectors = qkv.numel() / L.width() * (L.heads + L.groups);
  MT_CHECK(x.defined() && x.dtype() == qkv.dtype() && x.numel() == vectors * L.head_dim)
      << "qk norm x " << x.describe() << " for " << what << " " << qkv.describe() << ": " << vectors * L.head_dim
      << " elements of its dtype expected";
  MT_CHECK(q_weight.defined() && k_weight.defined() && q_weight.numel() == L.head_dim && k_weight.numel() == L.head_dim)
      << "qk norm weights " << q_weight.describe() << ", " << k_weight.describe() << " for head_dim " << L.head_dim;
  MT_CHECK(rstd.defined() && rstd.numel() == vectors && (!mean.defined() || mean.numel() == vectors))
      << "qk norm mean " << mean.describe() << ", rstd " << rstd.describe() << " for " << vectors << " vectors";
  return L;
}

void qk_norm_forward(Backend& backend, Tensor& qkv, const Tensor& q_weight, const Tensor& q_bias,
                     const Tensor& k_weight, const Tensor& k_bias, Tensor& x, Tensor& mean, Tensor& rstd,
                     const QkNormParams& params) {
  if (auto* prof = dynamic_cast<ProfilingBackend*>(&backend)) {
    prof->time_region("qk_norm_forward", [&] {
      qk_norm_forward(prof->inner(), qkv, q_weight, q_bias, k_weight, k_bias, x, mean, rstd, params);
    });
    return;
  }
  switch (backend.device()) {
    case Device::kCPU:
      return cpu_qk_norm_forward(backend, qkv, q_weight, q_bias, k_weight, k_bias, x, mean, rstd, params);
    case Device::kCUDA:
      return cuda_qk_norm_forward(backend, qkv, q_weight, q_bias, k_weight, k_bias, x, mean, rstd, params);
  }
  throw_error("qk_norm_forward: no implementation for this backend's device");
}

void qk_norm_backward(Backend& backend, Tensor& dqkv, const Tensor& x, const Tensor& q_weight, const Tensor& k_weight,
                      const Tensor& mean, const Tensor& rstd, Tensor& dq_weight, Tensor& dq_bias, Tensor& dk_weight,
                      Tensor& dk_bias, const QkNormParams& params, GradWrite write) {
  if (auto* prof = dynamic_cast<ProfilingBackend*>(&backend)) {
    prof->time_region("qk_norm_backward", [&] {
      qk_norm_backward(prof->inner(), dqkv, x, q_weight, k_weight, mean, rstd, dq_weight, dq_bias, dk_weight, dk_bias,
                       params, write);
    });
    return;
  }
  switch (backend.device()) {
    case Device::kCPU:
      return cpu_qk_norm_backward(backend, dqkv, x, q_weight, k_weight, mean, rstd, dq_weight, dq_bias, dk_weight,
                                  dk_bias, params, write);
    case Device::kCUDA:
      return cuda_qk_norm_backward(backend, dqkv, x, q_weight, k_weight, mean, rstd, dq_weight, dq_bias, dk_weight,
                                   dk_bias, params, write);
  }
  throw_error("qk_norm_backward: no implementation for this backend's device");
}

}  // namespace megatron::backend
