#include "backend/qk_norm.h"

#include "backend/profiling_backend.h"
#include "core/error.h"

namespace megatron::backend {

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

void qk_norm_backward(Backend& backend, Tensor& dqkv, const Tensor& x, const Tensor& q_weight,
                      const Tensor& k_weight, const Tensor& mean, const Tensor& rstd, Tensor& dq_weight,
                      Tensor& dq_bias, Tensor& dk_weight, Tensor& dk_bias, const QkNormParams& params,
                      GradWrite write) {
  if (auto* prof = dynamic_cast<ProfilingBackend*>(&backend)) {
    prof->time_region("qk_norm_backward", [&] {
      qk_norm_backward(prof->inner(), dqkv, x, q_weight, k_weight, mean, rstd, dq_weight, dq_bias, dk_weight,
                       dk_bias, params, write);
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
