#include "model/layers/transformer_layer.h"

#include <algorithm>
#include <string>
#include <utility>

namespace megatron::model {

namespace {
std::string layer_prefix(int64_t index) { return "decoder.layers." + std::to_string(index) + "."; }
}  // namespace

TransformerLayer TransformerLayer::declare(ParameterSet& ps, int64_t index, const GPTConfig& config) {
  const std::string pre = layer_prefix(index);
  TransformerLayer l;
  l.index = index;
  l.input_norm = Norm::declare(ps, pre + "input_layernorm", config);
  l.attention = Attention::declare(ps, pre + "self_attention.", config);
  l.pre_mlp_norm = Norm::declare(ps, pre + "pre_mlp_layernorm", config);
  l.mlp = MLP::declare(ps, pre + "mlp.", config);
  return l;
}

TransformerLayer TransformerLayer::find(const ParameterSet& ps, int64_t index, const GPTConfig& config) {
  const std::string pre = layer_prefix(index);
  TransformerLayer l;
  l.index = index;
  l.input_norm = Norm::find(ps, pre + "input_layernorm", config);
  l.attention = Attention::find(ps, pre + "self_attention.", config);
  l.pre_mlp_norm = Norm::find(ps, pre + "pre_mlp_layernorm", config);
  l.mlp = MLP::find(ps, pre + "mlp.", config);
  return l;
}

TransformerLayer::Saved TransformerLayer::allocate_saved(const LayerContext& ctx, DType dtype) const {
  backend::Backend& be = *ctx.backend;
  auto act = [&](Shape shape, DType dt) { return be.empty(std::move(shape), dt, MemoryKind::kActivations); };
  const int64_t nl = ctx.local_rows(), h = ctx.hidden;
  const bool norm_mean = input_norm.bias >= 0;  // RMSNorm keeps no row means
  Saved s;
  s.ln1_out = act({nl, h}, dtype);
  if (norm_mean) s.ln1_mean = act({nl}, DType::kF32);
  s.ln1_rstd = act({nl}, DType::kF32);
  s.attention = attention.allocate_saved(ctx, dtype);
  s.x_mid = act({nl, h}, dtype);
  s.ln2_out = act({nl, h}, dtype);
  if (norm_mean) s.ln2_mean = act({nl}, DType::kF32);
  s.ln2_rstd = act({nl}, DType::kF32);
  s.mlp = mlp.allocate_saved(ctx, dtype);
  return s;
}

void TransformerLayer::allocate_workspace(const LayerContext& ctx, DType dtype, LayerWorkspace& ws) const {
  input_norm.allocate_workspace(ctx, ws);  // shared by every norm of the model (one width)
  attention.allocate_workspace(ctx, dtype, ws);
  mlp.allocate_workspace(ctx, dtype, ws);
}

int64_t TransformerLayer::parameter_end() const { return std::max(mlp.fc2.weight, mlp.fc2.bias) + 1; }

void TransformerLayer::forward(const LayerContext& ctx, const Tensor& x, Tensor& out, Saved& s, const Run& run) const {
  input_norm.forward(ctx, x, s.ln1_out, s.ln1_mean, s.ln1_rstd);
  attention.forward(ctx, s.ln1_out, x, s.x_mid, s.attention, run.attention);
  pre_mlp_norm.forward(ctx, s.x_mid, s.ln2_out, s.ln2_mean, s.ln2_rstd);
  mlp.forward(ctx, s.ln2_out, s.x_mid, out, s.mlp, run.mlp_out);
}

void TransformerLayer::backward(const LayerContext& ctx, Tensor& g, const Tensor& x, const Saved& s, const Run& run,
                                const TransformerLayer* below, const backend::DropoutParams& below_mlp_out,
                                LayerHandoff& handoff) const {
  const BranchGradTaken mlp_taken = handoff.layer == index ? handoff.taken : BranchGradTaken{};
  handoff = {};
  // MLP branch, then g = d(x_mid): the residual path plus the MLP branch (the add fused into
  // norm2's backward, which may also take the output projection's bias gradient).
  const Tensor d_ln2 = mlp.backward(ctx, g, s.ln2_out, s.mlp, run.mlp_out, mlp_taken);
  const BranchGradTaken attention_taken =
      pre_mlp_norm.backward_into(ctx, d_ln2, s.x_mid, s.ln2_mean, s.ln2_rstd, g, &attention.proj, run.attention.out);
  // Attention branch, then g = d(x), which is also d(out) of the layer below: norm1's backward
  // may take that layer's FC2 bias gradient (and with dropout leave its FC2 output gradient).
  const Tensor d_ln1 = attention.backward(ctx, g, s.ln1_out, s.attention, run.attention, attention_taken);
  const BranchGradTaken below_taken = input_norm.backward_into(ctx, d_ln1, x, s.ln1_mean, s.ln1_rstd, g,
                                                               below ? &below->mlp.fc2 : nullptr, below_mlp_out);
  if (below_taken.bias) handoff = {below->index, below_taken};
}

}  // namespace megatron::model
