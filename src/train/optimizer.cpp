#include "train/optimizer.h"

#include <cmath>
#include <span>
#include <vector>

#include "core/error.h"
#include "optim/grad_clip.h"


namespace megatron::train {

using optim::AdamWHyper;
using optim::clip_grads;
using optim::unscale_grads;
using optim::adamw_update;

MixedPrecisionOptimizer::MixedPrecisionOptimizer(model::ParameterSet& params, backend::Backend& backend,
                                                 const OptimizerConfig& config, optim::GradScaler scaler)
    : params_(params),
      backend_(backend),
      config_(config),
      scaler_(std::move(scaler)),
      fp16_(params.values().dtype() == DType::kF16) {
  MT_CHECK(backend.device() == Device::kCPU) << "the host optimizer needs CPU parameters";
  const int64_t P = params.total_numel();
  if (params.values().dtype() == DType::kF32) {
    main_ = params.values();
  } else {
    main_ = backend.empty({P}, DType::kF32, MemoryKind::kMainParams);
    backend.copy(params.values(), main_);
  }
  exp_avg_ = backend.empty({P}, DType::kF32, MemoryKind::kOptimizer);
  exp_avg_sq_ = backend.empty({P}, DType::kF32, MemoryKind::kOptimizer);
}

float MixedPrecisionOptimizer::loss_scale() const { return fp16_ ? scaler_.scale() : 1.0f; }

void MixedPrecisionOptimizer::zero_grads() {
  Tensor g = params_.grads();
  backend_.fill(g, 0.0f);
}

StepResult MixedPrecisionOptimizer::step(float lr, float weight_decay) {
  StepResult result;
  float* grads = params_.grads().data_as<float>();
  const int64_t P = params_.total_numel();
  std::vector<std::span<float>> all{std::span<float>(grads, static_cast<size_t>(P))};

  if (fp16_) {
    const bool found_inf = unscale_grads(all, scaler_.inv_scale());
    scaler_.update(found_inf);
    if (found_inf) {
      result.success = false;
      return result;
    }
  }
  if (config_.clip_grad > 0.0) result.grad_norm = clip_grads(all, config_.clip_grad);
  if (config_.count_zeros) {
    int64_t zeros = 0;
    for (int64_t i = 0; i < P; ++i) zeros += grads[i] == 0.0f;
    result.num_zeros = zeros;
  }

  ++steps_;
  float* main = main_.data_as<float>();
  float* m = exp_avg_.data_as<float>();
  float* v = exp_avg_sq_.data_as<float>();
  for (const model::Parameter& p : params_.params()) {
    AdamWHyper hyper;
    hyper.lr = lr;
    hyper.beta1 = config_.beta1;
    hyper.beta2 = config_.beta2;
    hyper.eps = config_.eps;
    hyper.weight_decay = p.no_weight_decay ? 0.0f : weight_decay;
    hyper.step = steps_;
    const size_t off = static_cast<size_t>(p.offset), n = static_cast<size_t>(p.numel());
    adamw_update(std::span<float>(main + off, n), std::span<const float>(grads + off, n),
                 std::span<float>(m + off, n), std::span<float>(v + off, n), hyper);
  }
  if (params_.values().dtype() != DType::kF32) {
    Tensor values = params_.values();
    backend_.copy(main_, values);
  }
  return result;
}

void MixedPrecisionOptimizer::restore(int64_t steps, const optim::GradScalerState& scaler) {
  MT_CHECK(steps >= 0) << "optimizer steps " << steps;
  steps_ = steps;
  scaler_.load_state(scaler);
}

void MixedPrecisionOptimizer::reload_main_params_from_model() {
  if (has_separate_main_params()) backend_.copy(params_.values(), main_);
}

double MixedPrecisionOptimizer::params_norm() const {
  return std::sqrt(backend_.sum_squares(main_));
}

}  // namespace megatron::train
