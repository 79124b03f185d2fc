// The optimizer step (train/ holds it because it ties model/ parameters to optim/ math) of Megatron's MixedPrecisionOptimizer / FP32Optimizer (megatron-facts
// §3.6, §3.7) over a model::ParameterSet:
//   1. gradients are already fp32 (main_grad);
//   2. fp16: unscale by 1/loss_scale and check for inf/nan; the scaler updates; on overflow
//      the step is skipped (returns success = false, no grad norm, the LR does not step);
//   3. the global L2 norm is taken (the logged, pre-clip "grad norm") and gradients clipped
//      to --clip-grad;
//   4. AdamW on the fp32 main parameters (the model's own values under fp32), weight decay
//      off for biases and 1-D tensors;
//   5. main parameters are copied back to the model dtype (round-to-nearest-even).
// State: fp32 main parameters when the model dtype is bf16/fp16 (MemoryKind::kMainParams),
// Adam exp_avg and exp_avg_sq (MemoryKind::kOptimizer), the loss scaler and the step count.
// Every step runs through backend ops (scale, all_finite, sum_squares, adamw_update_segments), so
// it runs on any backend; the scalars it needs on the host are the norm and the inf flag.
#pragma once

#include <cstdint>
#include <optional>

#include "backend/ops.h"
#include "model/parameters.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"

namespace megatron::train {

struct OptimizerConfig {
  float beta1 = 0.9f;       // --adam-beta1
  float beta2 = 0.999f;     // --adam-beta2
  float eps = 1e-8f;        // --adam-eps
  double clip_grad = 1.0;   // --clip-grad (0: no clipping, no norm)
  bool count_zeros = false; // --log-num-zeros-in-grad
};

struct StepResult {
  bool success = true;               // false: skipped (fp16 overflow)
  std::optional<double> grad_norm;   // pre-clip; absent when skipped or clip_grad == 0
  std::optional<int64_t> num_zeros;  // with count_zeros
};

class MixedPrecisionOptimizer {
 public:
  // `scaler` is used only when the model dtype is fp16 (bf16/fp32 log a loss scale of 1.0).
  MixedPrecisionOptimizer(model::ParameterSet& params, backend::Backend& backend, const OptimizerConfig& config,
                          optim::GradScaler scaler);

  // The factor the loss is multiplied by before backward (the current loss scale, or 1).
  float loss_scale() const;
  // One update with the scheduler's lr and weight decay for this iteration.
  StepResult step(float lr, float weight_decay);
  void zero_grads();
  // L2 norm of all parameters (the fp32 main copy), for --log-params-norm.
  double params_norm() const;

  int64_t steps() const { return steps_; }
  // The fp32 state a checkpoint keeps: main parameters (the model values themselves under
  // fp32), Adam's moments, the step count and the scaler.
  const Tensor& main_params() const { return main_; }
  const Tensor& exp_avg() const { return exp_avg_; }
  const Tensor& exp_avg_sq() const { return exp_avg_sq_; }
  bool has_separate_main_params() const { return params_.values().dtype() != DType::kF32; }
  // After a checkpoint filled main_params()/exp_avg()/exp_avg_sq() in place.
  void restore(int64_t steps, const optim::GradScalerState& scaler);
  // Main parameters := the model's values (loading weights without optimizer state, as
  // Megatron's reload_model_params()).
  void reload_main_params_from_model();
  const optim::GradScaler& scaler() const { return scaler_; }
  bool uses_scaler() const { return fp16_; }

 private:
  model::ParameterSet& params_;
  backend::Backend& backend_;
  OptimizerConfig config_;
  optim::GradScaler scaler_;
  bool fp16_;
  Tensor main_;        // fp32 [P]; aliases the model values under fp32
  Tensor exp_avg_;     // fp32 [P]
  Tensor exp_avg_sq_;  // fp32 [P]
  Tensor segments_;    // int64 [S, 3]: (offset, numel, decay) runs of parameters, for adamw_update_segments
  int64_t steps_ = 0;  // successful updates (Adam's t)
};

}  // namespace megatron::train
