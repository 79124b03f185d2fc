// LayerNorm (weight and bias) or RMSNorm (weight only; x rstd gamma, no mean kept) over rows of
// the residual stream [rows, h]. Replicated over TP; under sequence parallelism each rank
// normalises its own rows and the gradients are partial sums (GPTModel's
// reduce_layernorm_grads all-reduces them).
// Saved for backward: out [rows, h] (the model dtype), mean (LayerNorm only) and rstd [rows]
// fp32; an undefined mean selects RMSNorm in the backend ops (backend/ops.h).
#pragma once

#include <cstdint>
#include <string>

#include "model/gpt_config.h"
#include "model/layers/layer_context.h"
#include "model/layers/parallel_linear.h"

namespace megatron::model {

struct Norm {
  int64_t weight = -1, bias = -1;  // bias -1: RMSNorm
  float eps = 1e-5f;
  // --apply-layernorm-1p: the scale is 1 + weight, formed in fp32 (ws.norm_gamma) so that a
  // 16-bit weight near 0 keeps its precision; its gradient is the weight's.
  bool zero_centered = false;

  // With zero_centered, ws.norm_gamma and ws.ones [h] fp32 (once per model: every norm shares them).
  void allocate_workspace(const LayerContext& ctx, LayerWorkspace& ws) const;

  // Declares `name`.weight (ones; zeros when zero-centred) and, for LayerNorm, `name`.bias
  // (zeros), of `width` elements (0: the hidden size).
  static Norm declare(ParameterSet& ps, const std::string& name, const GPTConfig& config, int64_t width = 0);
  // The parameters of `name` in a set declared that way (e.g. a loaded checkpoint's).
  static Norm find(const ParameterSet& ps, const std::string& name, const GPTConfig& config);

  void forward(const LayerContext& ctx, const Tensor& x, Tensor& out, Tensor& mean, Tensor& rstd) const;
  // g += d(x) from dy = d(out) (the residual gradient's add fused in), with the weight and bias
  // gradients. With `branch` (the row-parallel output of the residual branch whose sum with the
  // residual is x) and branch->bias_grad_in_next_norm: that bias's gradient too, from g after
  // the add — its column sums (layernorm_backward_colsum), or with dropout.p > 0 those of dz =
  // dropout's backward of g, written into ws.h1's local rows (layernorm_backward_dropout_colsum).
  // Returns what it took (BranchGradTaken).
  BranchGradTaken backward_into(const LayerContext& ctx, const Tensor& dy, const Tensor& x, const Tensor& mean,
                                const Tensor& rstd, Tensor& g, const RowParallelLinear* branch = nullptr,
                                const backend::DropoutParams& dropout = {}) const;
  // The scale the backend ops take: the weight, or 1 + weight in ws.norm_gamma.
  Tensor gamma(const LayerContext& ctx) const;
  // dx = d(x) from dy, overwritten (the loss head's final norm).
  void backward(const LayerContext& ctx, const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                Tensor& dx) const;
};

}  // namespace megatron::model
