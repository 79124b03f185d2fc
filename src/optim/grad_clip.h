// Global gradient-norm clipping, as Megatron optimizer/clip_grads.py (--clip-grad, L2).
// These functions see the gradients of this process only. In a parallel run the caller
// passes only the gradients that count (not TP duplicates, not the tied "shared" output
// embedding copy) and all-reduces the sum of squares (SUM over the model-parallel group, or
// data+model-parallel with the distributed optimizer) before taking the root; see
// grad_sum_of_squares() and clip_grads_with_norm().
#pragma once

#include <span>
#include <vector>

namespace megatron::optim {

// Σ g² over all elements of all tensors, accumulated in double. Deterministic: the sum is
// formed over fixed blocks in a fixed order, independent of the OpenMP thread count.
double grad_sum_of_squares(const std::vector<std::span<const float>>& grads);

// sqrt(grad_sum_of_squares(grads)): the logged "grad norm". inf/nan when a gradient is.
double global_grad_norm(const std::vector<std::span<const float>>& grads);

// True when no element is inf or nan.
bool all_finite(const std::vector<std::span<const float>>& grads);

// Scales all grads in place by clip_coeff = max_norm / (total_norm + 1e-6) when that is < 1
// (as an fp32 factor, like apex multi_tensor_scale). total_norm is the already-reduced
// global norm. A nan norm never clips; an inf norm zeroes the grads (Megatron does the same).
void clip_grads_with_norm(const std::vector<std::span<float>>& grads, double max_norm, double total_norm);

// Local convenience: computes the norm, clips, and returns the PRE-clip norm.
// max_norm == 0 disables clipping: nothing is computed and 0.0 is returned (C23 logs no
// grad norm then; HEAD logs 0.0). Throws megatron::Error naming --clip-grad if max_norm < 0.
double clip_grads(const std::vector<std::span<float>>& grads, double max_norm);

}  // namespace megatron::optim
