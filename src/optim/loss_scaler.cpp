// Megatron optimizer/grad_scaler.py: ConstantGradScaler and DynamicGradScaler.
#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace megatron::optim {

GradScaler GradScaler::constant(float scale) {
  if (!(scale > 0.0f)) throw_error("[--loss-scale] must be positive, got ", scale);
  DynamicScalerConfig unused;
  unused.initial_scale = scale;
  return GradScaler(false, unused, GradScalerState{scale, 0, 0});
}

GradScaler GradScaler::dynamic(const DynamicScalerConfig& c) {
  if (!(c.initial_scale > 0.0f)) throw_error("[--initial-loss-scale] must be positive, got ", c.initial_scale);
  if (!(c.min_scale > 0.0f)) throw_error("[--min-loss-scale] must be positive, got ", c.min_scale);
  if (c.min_scale > c.initial_scale)
    throw_error("[--min-loss-scale] ", c.min_scale, " is larger than --initial-loss-scale ", c.initial_scale);
  if (c.growth_interval <= 0) throw_error("[--loss-scale-window] must be positive, got ", c.growth_interval);
  if (c.hysteresis <= 0) throw_error("[--hysteresis] must be positive, got ", c.hysteresis);
  MT_CHECK(c.growth_factor > 1.0f) << "growth factor " << c.growth_factor;
  MT_CHECK(c.backoff_factor > 0.0f && c.backoff_factor < 1.0f) << "backoff " << c.backoff_factor;
  return GradScaler(true, c, GradScalerState{c.initial_scale, 0, c.hysteresis});
}

void GradScaler::update(bool found_inf) {
  if (!dynamic_) return;
  if (found_inf) {
    state_.growth_tracker = 0;
    state_.hysteresis_tracker -= 1;
    if (state_.hysteresis_tracker <= 0)
      state_.scale = std::max(state_.scale * config_.backoff_factor, config_.min_scale);
  } else {
    state_.growth_tracker += 1;
    if (state_.growth_tracker == config_.growth_interval) {
      state_.growth_tracker = 0;
      state_.hysteresis_tracker = config_.hysteresis;
      state_.scale = state_.scale * config_.growth_factor;
    }
  }
}

void GradScaler::load_state(const GradScalerState& state) {
  if (!dynamic_) return;
  MT_CHECK(state.scale > 0.0f) << "checkpointed loss scale " << state.scale;
  state_ = state;
}

bool unscale_grads(const std::vector<std::span<float>>& grads, float inv_scale) {
  bool found_inf = false;
  for (std::span<float> g : grads) {
    float* data = g.data();
    const auto n = static_cast<int64_t>(g.size());
    bool local_inf = false;
#pragma omp parallel for schedule(static) reduction(|| : local_inf)
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(data[i])) local_inf = true;
      data[i] *= inv_scale;
    }
    found_inf = found_inf || local_inf;
  }
  return found_inf;
}

}  // namespace megatron::optim
