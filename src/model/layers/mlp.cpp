#include "model/layers/mlp.h"

namespace megatron::model {

MLP MLP::declare(ParameterSet& ps, const std::string& prefix, const GPTConfig& c) {
  constexpr int kRows = 0, kCols = 1;
  const int64_t h = c.hidden_size, f = c.ffn_hidden_size, f1 = c.fc1_out_size();
  const int64_t f1_chunks = c.swiglu ? 2 : 1;  // [gate; up] with SwiGLU
  const bool bias = c.add_bias_linear;
  MLP m;
  m.swiglu = c.swiglu;
  m.gelu = c.gelu;
  m.ffn = c.ffn_hidden_size;
  m.fp8_gelu = c.fp8.has_value() && !c.swiglu;
  m.fc1.weight = ps.add(prefix + "linear_fc1.weight", {f1, h}, Init::kNormal, kRows, f1_chunks);
  m.fc1.bias = bias ? ps.add(prefix + "linear_fc1.bias", {f1}, Init::kZeros, kRows, f1_chunks) : -1;
  m.fc2.weight = ps.add(prefix + "linear_fc2.weight", {h, f}, Init::kScaledNormal, kCols);
  m.fc2.bias = bias ? ps.add(prefix + "linear_fc2.bias", {h}, Init::kZeros) : -1;
  return m;
}

MLP MLP::find(const ParameterSet& ps, const std::string& prefix, const GPTConfig& c) {
  MLP m;
  m.swiglu = c.swiglu;
  m.gelu = c.gelu;
  m.ffn = c.ffn_hidden_size;
  m.fp8_gelu = c.fp8.has_value() && !c.swiglu;
  m.fc1.weight = ps.require(prefix + "linear_fc1.weight");
  m.fc1.bias = ps.index_of(prefix + "linear_fc1.bias");
  m.fc2.weight = ps.require(prefix + "linear_fc2.weight");
  m.fc2.bias = ps.index_of(prefix + "linear_fc2.bias");
  return m;
}

MLP::Saved MLP::allocate_saved(const LayerContext& ctx, DType dtype) const {
  const int64_t n = ctx.rows();
  Saved saved;
  saved.fc1_out = ctx.backend->empty({n, fc1_local_width(ctx)}, dtype, MemoryKind::kActivations);
  const int64_t f = ffn / ctx.tp->size();
  saved.act_out = fp8_gelu ? ctx.backend->empty({fp8_act_bytes(n, f)}, DType::kF8E4M3, MemoryKind::kActivations)
                           : ctx.backend->empty({n, f}, dtype, MemoryKind::kActivations);
  return saved;
}

void MLP::allocate_workspace(const LayerContext& ctx, DType dtype, LayerWorkspace& ws) const {
  const int64_t n = ctx.rows();
  ws.f = ctx.backend->empty({n, fc1_local_width(ctx)}, dtype, MemoryKind::kWorkspace);
  if (swiglu) ws.act = ctx.backend->empty({n, ffn / ctx.tp->size()}, dtype, MemoryKind::kWorkspace);
}

void MLP::forward(const LayerContext& ctx, const Tensor& ln_out, const Tensor& residual, Tensor& out, Saved& saved,
                  const backend::DropoutParams& dropout) const {
  MT_CHECK(!fp8_gelu || uses_fp8(ctx, fc2.fp8))
      << "the MLP's buffers are FP8's (GPTConfig::fp8) but FC2 runs without it";
  if (swiglu) {
    fc1.forward(ctx, ln_out, saved.fc1_out);
    ctx.backend->swiglu_forward(saved.fc1_out, saved.act_out);
  } else if (uses_fp8(ctx, fc2.fp8)) {
    // FC2 quantizes gelu(fc1_out) as it reads fc1_out: the activation is never written.
    fc1.forward(ctx, ln_out, saved.fc1_out);
    fc2.forward_residual(ctx, gelu_of(saved.fc1_out), residual, out, dropout, Fp8SavedInput{saved.act_out});
    return;
  } else {
    fc1.forward_gelu(ctx, ln_out, saved.fc1_out, saved.act_out, gelu);
  }
  fc2.forward_residual(ctx, saved.act_out, residual, out, dropout);
}

Tensor MLP::backward(const LayerContext& ctx, const Tensor& g, const Tensor& ln_out, const Saved& saved,
                     const backend::DropoutParams& dropout, const BranchGradTaken& taken) const {
  backend::Backend& be = *ctx.backend;
  LayerWorkspace& ws = *ctx.ws;
  // The row-parallel FC2's output gradient, gathered over all n rows: b_fc2's gradient then
  // comes out complete on every rank.
  const Tensor d_fc2 = branch_output_grad(ctx, g, dropout, taken);
  Tensor db_fc2 = taken.bias ? Tensor() : ctx.optional_grad(fc2.bias);
  MT_CHECK(!fp8_gelu || uses_fp8(ctx, fc2.fp8))
      << "the MLP's buffers are FP8's (GPTConfig::fp8) but FC2 runs without it";
  // FC2's backward through the activation: ws.f = d(fc1 + b_fc1).
  if (swiglu) {
    any_linear_backward(ctx, fc2.fp8, d_fc2, saved.act_out, ctx.param(fc2.weight), ws.act, ctx.grad(fc2.weight), db_fc2,
                        ctx.claim_grads(fc2.weight, fc2.bias_unless(taken.bias)));
    be.swiglu_backward(ws.act, saved.fc1_out, ws.f);
  } else if (uses_fp8(ctx, fc2.fp8)) {
    // The FP8 dgrad gives d(act) into ws.f (act and pre have the same shape [n, f] without
    // SwiGLU); FC1's backward quantizes d(act) * gelu'(fc1_out) as it reads them, its bias
    // gradient summed in the same pass.
    any_linear_backward(ctx, fc2.fp8, d_fc2, gelu_of(saved.fc1_out), ctx.param(fc2.weight), ws.f, ctx.grad(fc2.weight),
                        db_fc2, ctx.claim_grads(fc2.weight, fc2.bias_unless(taken.bias)), Fp8SavedInput{saved.act_out});
    if (uses_fp8(ctx, fc1.fp8)) {
      return fc1.backward(ctx, backend::Fp8Source(ws.f, backend::Fp8Prologue::kGeluGrad, gelu, saved.fc1_out), ln_out,
                          ws.h2);
    }
    be.bias_gelu_backward(ws.f, saved.fc1_out, Tensor(), ws.f, gelu);
  } else {
    be.linear_dgelu_backward(d_fc2, saved.act_out, ctx.param(fc2.weight), saved.fc1_out, ws.f, ctx.grad(fc2.weight),
                             db_fc2, gelu, ctx.claim_grads(fc2.weight, fc2.bias_unless(taken.bias)));
  }
  return fc1.backward(ctx, ws.f, ln_out, ws.h2);
}

}  // namespace megatron::model
