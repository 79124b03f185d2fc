// AdamW, the update of Megatron's `--optimizer adam` (classic C23: apex FusedAdam with
// adam_w_mode=True and bias correction on; HEAD: TE FusedAdam, decoupled_weight_decay=True).
// Host fp32 reference: the CPU backend's optimizer and the oracle a fused CUDA kernel is
// tested against. Parameter groups: no_weight_decay() says which tensors get wd_mult = 0.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "backend/ops.h"

namespace megatron::optim {

// The scalars of one update. `lr` and `weight_decay` are the values the scheduler set for
// this parameter's group (lr * lr_mult, wd * wd_mult). `step` is 1-based: the caller
// increments it before each successful update (skipped fp16 steps do not count).
using AdamWHyper = backend::AdamWStep;  // the same scalars the backends' adamw_update takes

// In place on fp32 host arrays of the same length; every element independently:
//   m = b1*m + (1-b1)*g
//   v = b2*v + (1-b2)*g*g
//   p = p - lr * ( (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) + wd*p )
// Same operation order and fp32 rounding as apex multi_tensor_adam.cu (ADAM_MODE_1).
void adamw_update(std::span<float> param, std::span<const float> grad, std::span<float> exp_avg,
                  std::span<float> exp_avg_sq, const AdamWHyper& hyper);

// Megatron get_param_groups: biases (name ends with ".bias") and every 1-D tensor
// (LayerNorm weights and biases) get no weight decay. Embeddings, position embeddings and
// the output layer are 2-D and are decayed.
bool no_weight_decay(std::string_view name, int64_t ndim);

}  // namespace megatron::optim
