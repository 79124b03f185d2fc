// fp16 loss scaling, as Megatron's optimizer/grad_scaler.py (C23 and HEAD):
//  - `--loss-scale X`            -> a constant scale X (ConstantGradScaler);
//  - no `--loss-scale` with fp16 -> a dynamic scale (DynamicGradScaler) built from
//    --initial-loss-scale, --min-loss-scale, --loss-scale-window and --hysteresis,
//    growth factor 2 and backoff factor 0.5.
// bf16 and fp32 use no scaler (the log shows "loss scale: 1.0").
// The step that uses it (MixedPrecisionOptimizer.step): unscale_grads() -> found_inf
// (all-reduced MAX over the model-parallel group) -> update(found_inf) -> skip the step
// when found_inf.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace megatron::optim {

// What a checkpoint keeps of a dynamic scaler (Megatron's state_dict keys).
struct GradScalerState {
  float scale = 1.0f;
  int64_t growth_tracker = 0;
  int64_t hysteresis_tracker = 0;
};

struct DynamicScalerConfig {
  float initial_scale = 4294967296.0f;  // --initial-loss-scale, 2**32
  float min_scale = 1.0f;               // --min-loss-scale
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 1000;  // --loss-scale-window
  int64_t hysteresis = 2;          // --hysteresis
};

// One class for both kinds: a constant scaler is a dynamic one whose update() does nothing.
// The scale is fp32 because Megatron keeps it in a float32 CUDA tensor.
class GradScaler {
 public:
  // Throw megatron::Error naming the flag on a non-positive scale or inconsistent values.
  static GradScaler constant(float scale);
  static GradScaler dynamic(const DynamicScalerConfig& config);

  bool is_dynamic() const { return dynamic_; }
  float scale() const { return state_.scale; }
  float inv_scale() const { return 1.0f / state_.scale; }

  // Dynamic: on overflow, reset the growth tracker and count down the hysteresis tracker;
  // once it reaches 0 the scale backs off (never below min_scale), and it stays at 0 so that
  // every further overflow backs off again until a growth. After growth_interval clean steps
  // in a row the scale grows and the hysteresis tracker is refilled. Constant: no-op.
  void update(bool found_inf);

  const GradScalerState& state() const { return state_; }
  // Restores a checkpointed state (Megatron load_state_dict); a no-op for a constant scaler.
  void load_state(const GradScalerState& state);

 private:
  GradScaler(bool dynamic, const DynamicScalerConfig& config, GradScalerState state)
      : dynamic_(dynamic), config_(config), state_(state) {}

  bool dynamic_;
  DynamicScalerConfig config_;
  GradScalerState state_;
};

// Multiplies every gradient by inv_scale in place and returns found_inf: true when any
// element was inf or nan before unscaling (torch._amp_foreach_non_finite_check_and_unscale_).
bool unscale_grads(const std::vector<std::span<float>>& grads, float inv_scale);

}  // namespace megatron::optim
