#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "core/error.h"


namespace megatron::train {


MixedPrecisionOptimizer::MixedPrecisionOptimizer(model::ParameterSet& params, backend::Backend& backend,
                                                 const OptimizerConfig& config, optim::GradScaler scaler)
    : params_(params),
      backend_(backend),
      config_(config),
      scaler_(std::move(scaler)),
      fp16_(params.values().dtype() == DType::kF16) {
  const int64_t P = params.total_numel();
  if (params.values().dtype() == DType::kF32) {
    main_ = params.values();
  } else {
    main_ = backend.empty({P}, DType::kF32, MemoryKind::kMainParams);
    backend.copy(params.values(), main_);
  }
  exp_avg_ = backend.empty({P}, DType::kF32, MemoryKind::kOptimizer);
  exp_avg_sq_ = backend.empty({P}, DType::kF32, MemoryKind::kOptimizer);

  // The AdamW segment table: parameters in buffer order, neighbours with the same weight-decay
  // rule merged (a few hundred bytes: counted as "other", outside the memory plan's kinds).
  std::vector<const model::Parameter*> order;
  for (const model::Parameter& p : params.params()) order.push_back(&p);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->offset < b->offset; });
  std::vector<int64_t> rows;
  for (const model::Parameter* p : order) {
    const int64_t decay = p->no_weight_decay ? 0 : 1;
    const size_t r = rows.size();
    if (r >= 3 && rows[r - 3] + rows[r - 2] == p->offset && rows[r - 1] == decay) {
      rows[r - 2] += p->numel();
    } else {
      rows.insert(rows.end(), {p->offset, p->numel(), decay});
    }
  }
  const int64_t S = static_cast<int64_t>(rows.size() / 3);
  Tensor host = Tensor::cpu({S, 3}, DType::kI64);
  std::copy(rows.begin(), rows.end(), host.data_as<int64_t>());
  segments_ = backend.empty({S, 3}, DType::kI64, MemoryKind::kOther);
  backend.copy(host, segments_);
}

float MixedPrecisionOptimizer::loss_scale() const { return fp16_ ? scaler_.scale() : 1.0f; }

void MixedPrecisionOptimizer::zero_grads() {
  Tensor g = params_.grads();
  backend_.fill(g, 0.0f);
}

StepResult MixedPrecisionOptimizer::step(float lr, float weight_decay) {
  StepResult result;
  Tensor grads = params_.grads();

  if (fp16_) {
    // Unscale, then check: a finite value times 1/scale stays finite, so this finds exactly
    // the inf/nan that were there before (torch's non-finite check and unscale).
    backend_.scale(grads, scaler_.inv_scale());
    const bool found_inf = !backend_.all_finite(grads);
    scaler_.update(found_inf);
    if (found_inf) {
      result.success = false;
      return result;
    }
  }
  if (config_.clip_grad > 0.0) {
    // Megatron clip_grads: the pre-clip norm is logged; clip_coeff = max / (norm + 1e-6)
    // applied as an fp32 factor when < 1. A nan norm never clips; an inf norm zeroes.
    const double norm = std::sqrt(backend_.sum_squares(grads));
    result.grad_norm = norm;
    if (std::isinf(norm)) {
      backend_.fill(grads, 0.0f);
    } else if (!std::isnan(norm)) {
      const double coeff = config_.clip_grad / (norm + 1e-6);
      if (coeff < 1.0) backend_.scale(grads, static_cast<float>(coeff));
    }
  }
  if (config_.count_zeros) result.num_zeros = backend_.count_zeros(grads);

  ++steps_;
  // One pass over all parameters (weight decay per segment), writing the 16-bit model copy.
  backend::AdamWStep s;
  s.lr = lr;
  s.beta1 = config_.beta1;
  s.beta2 = config_.beta2;
  s.eps = config_.eps;
  s.weight_decay = weight_decay;
  s.step = steps_;
  Tensor model_copy = has_separate_main_params() ? params_.values() : Tensor();
  backend_.adamw_update_segments(main_, grads, exp_avg_, exp_avg_sq_, segments_, s, model_copy);
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
