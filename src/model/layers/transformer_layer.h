// One pre-norm transformer layer (Megatron-Core's TransformerLayer with the local spec):
//   x_mid = x + dropout(attention(norm1(x)))      (attention.h)
//   x_out = x_mid + dropout(mlp(norm2(x_mid)))    (mlp.h)
// Parameters are named decoder.layers.<global index>.{input_layernorm, self_attention.*,
// pre_mlp_layernorm, mlp.*} and are contiguous in the ParameterSet, in that order.
//
// The fusion between neighbouring layers in backward: without TP, the norm backward that
// produces a residual gradient also takes the bias gradient of the branch whose output was
// added there (Norm::backward_into). Inside a layer that is norm2 for the attention's output
// projection; across layers it is layer l's norm1 for layer l - 1's FC2, which runs next: the
// LayerHandoff carries what was taken down to it.
#pragma once

#include <cstdint>

#include "model/gpt_config.h"
#include "model/layers/attention.h"
#include "model/layers/layer_context.h"
#include "model/layers/mlp.h"
#include "model/layers/norm.h"

namespace megatron::model {

// What a layer's backward left for the layer below it (global index `layer`; -1: nothing): its
// FC2 bias gradient taken, and with dropout its FC2 output gradient in ws.h1. Whatever else
// writes ws.h1 in between (a recomputed forward) must clear grad_in_h1.
struct LayerHandoff {
  int64_t layer = -1;
  BranchGradTaken taken;
};

struct TransformerLayer {
  int64_t index = 0;  // global layer index (names, dropout streams)
  Norm input_norm;
  Attention attention;
  Norm pre_mlp_norm;
  MLP mlp;

  // Saved for backward, besides the layer's input x [n_local, h] (the previous layer's output):
  // norm outputs [n_local, h] with mean/rstd [n_local] fp32, x_mid [n_local, h], and the
  // attention's and MLP's own (attention.h, mlp.h). Dropout masks are regenerated, not stored.
  struct Saved {
    Tensor ln1_out, ln1_mean, ln1_rstd;
    Attention::Saved attention;
    Tensor x_mid, ln2_out, ln2_mean, ln2_rstd;
    MLP::Saved mlp;
  };
  // One micro-batch's dropouts and documents (attention.h's Run, plus the MLP's output dropout).
  struct Run {
    Attention::Run attention;
    backend::DropoutParams mlp_out;
  };

  // The buffers of Saved for one micro-batch (activations), and the layer's workspace (the
  // attention's and MLP's parts of it).
  Saved allocate_saved(const LayerContext& ctx, DType dtype) const;
  void allocate_workspace(const LayerContext& ctx, DType dtype, LayerWorkspace& ws) const;

  static TransformerLayer declare(ParameterSet& ps, int64_t index, const GPTConfig& config);
  static TransformerLayer find(const ParameterSet& ps, int64_t index, const GPTConfig& config);
  // The layer's parameter indices are [first_parameter(), parameter_end()).
  int64_t first_parameter() const { return input_norm.weight; }
  int64_t parameter_end() const;

  // out [n_local, h] from x [n_local, h].
  void forward(const LayerContext& ctx, const Tensor& x, Tensor& out, Saved& saved, const Run& run) const;
  // g: d(out) on entry, d(x) on exit [n_local, h]. `handoff`: what the layer above left (read and
  // replaced by what this one leaves for `below`, the layer that runs next, with its MLP output
  // dropout `below_mlp_out`; null at the bottom of a chunk).
  void backward(const LayerContext& ctx, Tensor& g, const Tensor& x, const Saved& saved, const Run& run,
                const TransformerLayer* below, const backend::DropoutParams& below_mlp_out,
                LayerHandoff& handoff) const;
};

}  // namespace megatron::model
