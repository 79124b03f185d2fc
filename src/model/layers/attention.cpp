#include "model/layers/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/rotary_frequencies.h"
#include "core/error.h"

namespace megatron::model {

namespace {

// The heads, groups and rotary settings of `c` (no parameters).
Attention find_shape(const GPTConfig& c) {
  Attention a;
  a.heads = c.num_attention_heads;
  a.groups = c.query_groups();
  a.kv_channels = c.kv_channels;
  if (c.rope()) {
    a.rot_dim = backend::rotary_dim(c.kv_channels, c.rotary.percent);
    a.position_scale = backend::rotary_position_scale(c.rotary.seq_len_interpolation_factor);
    a.document_positions = c.reset_position_ids;
    a.rotary = c.rotary;
  }
  return a;
}

}  // namespace

Attention Attention::declare(ParameterSet& ps, const std::string& prefix, const GPTConfig& c) {
  constexpr int kRows = 0, kCols = 1;  // partition dims: column-parallel rows, row-parallel columns
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.kv_channels, qkv = c.qkv_out_size();
  const bool bias = c.add_bias_linear;
  Attention a = find_shape(c);
  a.qkv.weight = ps.add(prefix + "linear_qkv.weight", {qkv, h}, Init::kNormal, kRows);
  a.qkv.bias = bias ? ps.add(prefix + "linear_qkv.bias", {qkv}, Init::kZeros, kRows) : -1;
  a.proj.weight = ps.add(prefix + "linear_proj.weight", {h, q}, Init::kScaledNormal, kCols);
  a.proj.bias = bias ? ps.add(prefix + "linear_proj.bias", {h}, Init::kZeros) : -1;
  if (c.qk_layernorm) {
    a.q_norm = Norm::declare(ps, prefix + "q_layernorm", c, c.kv_channels);
    a.k_norm = Norm::declare(ps, prefix + "k_layernorm", c, c.kv_channels);
  }
  return a;
}

Attention Attention::find(const ParameterSet& ps, const std::string& prefix, const GPTConfig& c) {
  Attention a = find_shape(c);
  a.qkv.weight = ps.require(prefix + "linear_qkv.weight");
  a.qkv.bias = ps.index_of(prefix + "linear_qkv.bias");
  a.proj.weight = ps.require(prefix + "linear_proj.weight");
  a.proj.bias = ps.index_of(prefix + "linear_proj.bias");
  if (c.qk_layernorm) {
    a.q_norm = Norm::find(ps, prefix + "q_layernorm", c);
    a.k_norm = Norm::find(ps, prefix + "k_layernorm", c);
  }
  return a;
}

Attention::Saved Attention::allocate_saved(const LayerContext& ctx, DType dtype) const {
  backend::Backend& be = *ctx.backend;
  const int64_t s = ctx.seq, b = ctx.batch, ql = local_width(ctx);
  Saved saved;
  saved.qkv = be.empty({s, b, local_qkv_width(ctx)}, dtype, MemoryKind::kActivations);
  saved.out = be.empty({s, b, ql}, dtype, MemoryKind::kActivations);
  saved.lse = be.empty({b, local_heads(ctx), s}, DType::kF32, MemoryKind::kActivations);
  if (qk_layernorm()) {
    const int64_t vectors = s * b * (local_heads(ctx) + local_groups(ctx));
    saved.qk_x = be.empty({qk_norm_numel(ctx, s * b)}, dtype, MemoryKind::kActivations);
    if (q_norm.bias >= 0) saved.qk_mean = be.empty({vectors}, DType::kF32, MemoryKind::kActivations);
    saved.qk_rstd = be.empty({vectors}, DType::kF32, MemoryKind::kActivations);
  }
  return saved;
}

void Attention::allocate_workspace(const LayerContext& ctx, DType dtype, LayerWorkspace& ws) const {
  const int64_t s = ctx.seq, b = ctx.batch, ql = local_width(ctx);
  ws.qkv = ctx.backend->empty({s, b, local_qkv_width(ctx)}, dtype, MemoryKind::kWorkspace);
  ws.q = ctx.backend->empty({s, b, ql}, dtype, MemoryKind::kWorkspace);
  if (rot_dim > 0) ws.rotary_inv_freq = rotary_frequencies(*ctx.backend);
}

Tensor Attention::rotary_frequencies(backend::Backend& backend) const {
  std::vector<float> inv_freq = backend::rotary_inv_freq(rot_dim, rotary.base);
  if (rotary.use_rope_scaling) {
    backend::RopeScaling scaling;
    scaling.factor = rotary.rope_scaling_factor;
    backend::apply_rope_scaling(inv_freq, scaling);
  }
  Tensor host = Tensor::cpu({rot_dim / 2}, DType::kF32);
  std::copy(inv_freq.begin(), inv_freq.end(), host.data_as<float>());
  Tensor dev = backend.empty({rot_dim / 2}, DType::kF32, MemoryKind::kOther);
  backend.copy(host, dev);
  return dev;
}

backend::RotaryParams Attention::rotary_params(const LayerContext& ctx, const Tensor& positions, int64_t offset) const {
  backend::RotaryParams r;
  r.heads = local_heads(ctx);
  r.query_groups = local_groups(ctx);
  r.head_dim = kv_channels;
  r.rot_dim = rot_dim;
  MT_CHECK(ctx.ws != nullptr && ctx.ws->rotary_inv_freq.defined()) << "rotary embeddings without their frequencies";
  r.inv_freq = ctx.ws->rotary_inv_freq;
  r.position_scale = position_scale;
  r.positions = positions;
  r.position_offset = offset;
  return r;
}

backend::QkNormParams Attention::qk_norm_params(const LayerContext& ctx) const {
  backend::QkNormParams p;
  p.heads = local_heads(ctx);
  p.query_groups = local_groups(ctx);
  p.head_dim = kv_channels;
  p.eps = q_norm.eps;
  p.zero_centered = q_norm.zero_centered;
  return p;
}

backend::AttentionParams Attention::params(const LayerContext& ctx, const Run& run) const {
  backend::AttentionParams a;
  a.heads = local_heads(ctx);
  a.query_groups = local_groups(ctx);
  a.head_dim = kv_channels;
  a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(kv_channels));
  a.dropout = run.probs;
  // This rank's heads are the global heads [rank * H/T, (rank + 1) * H/T).
  a.dropout_heads = heads;
  a.dropout_head0 = ctx.tp->rank() * a.heads;
  a.key_start = run.key_start;
  return a;
}

void Attention::forward(const LayerContext& ctx, const Tensor& ln_out, const Tensor& residual, Tensor& x_mid,
                        Saved& saved, const Run& run) const {
  const int64_t n = ctx.rows(), ql = local_width(ctx);
  Tensor qkv_rows = saved.qkv.view({n, local_qkv_width(ctx)});
  qkv.forward(ctx, ln_out, qkv_rows);
  if (qk_layernorm()) {
    backend::qk_norm_forward(*ctx.backend, saved.qkv, ctx.param(q_norm.weight), ctx.optional_param(q_norm.bias),
                             ctx.param(k_norm.weight), ctx.optional_param(k_norm.bias), saved.qk_x, saved.qk_mean,
                             saved.qk_rstd, qk_norm_params(ctx));
  }
  if (rot_dim > 0) ctx.backend->rotary_forward(saved.qkv, rotary_params(ctx, rotary_positions(run), 0));
  ctx.backend->attention_forward(saved.qkv, saved.out, saved.lse, params(ctx, run));
  proj.forward_residual(ctx, saved.out.view({n, ql}), residual, x_mid, run.out);
}

Tensor Attention::backward(const LayerContext& ctx, const Tensor& g, const Tensor& ln_out, const Saved& saved,
                           const Run& run, const BranchGradTaken& taken) const {
  backend::Backend& be = *ctx.backend;
  LayerWorkspace& ws = *ctx.ws;
  const int64_t n = ctx.rows(), ql = local_width(ctx);
  const Tensor d_proj = branch_output_grad(ctx, g, run.out, taken);
  Tensor dq = ws.q.view({n, ql});
  Tensor db_proj = taken.bias ? Tensor() : ctx.optional_grad(proj.bias);
  any_linear_backward(ctx, proj.fp8, d_proj, saved.out.view({n, ql}), ctx.param(proj.weight), dq, ctx.grad(proj.weight),
                      db_proj, ctx.claim_grads(proj.weight, proj.bias_unless(taken.bias)));
  be.attention_backward(ws.q, saved.qkv, saved.out, saved.lse, ws.qkv, params(ctx, run));
  if (rot_dim > 0) be.rotary_backward(ws.qkv, rotary_params(ctx, rotary_positions(run), 0));
  if (qk_layernorm()) {
    // One write for the four gradients: they are always written together.
    const backend::GradWrite write = ctx.claim_grads(q_norm.weight, q_norm.bias);
    MT_CHECK(ctx.claim_grads(k_norm.weight, k_norm.bias) == write) << "q_layernorm and k_layernorm gradients apart";
    Tensor dq_bias = ctx.optional_grad(q_norm.bias), dk_bias = ctx.optional_grad(k_norm.bias);
    backend::qk_norm_backward(be, ws.qkv, saved.qk_x, ctx.param(q_norm.weight), ctx.param(k_norm.weight), saved.qk_mean,
                              saved.qk_rstd, ctx.grad(q_norm.weight), dq_bias, ctx.grad(k_norm.weight), dk_bias,
                              qk_norm_params(ctx), write);
  }
  return qkv.backward(ctx, ws.qkv.view({n, local_qkv_width(ctx)}), ln_out, ws.h2);
}

void Attention::forward_cached(const LayerContext& ctx, const Tensor& ln_out, const Tensor& residual, Tensor& x_mid,
                               Tensor& qkv_rows, Tensor& out_rows, Tensor& k_cache, Tensor& v_cache,
                               int64_t past) const {
  const int64_t n = qkv_rows.shape()[0] * qkv_rows.shape()[1], ql = local_width(ctx);  // [t, b, width]
  Tensor qkv2 = qkv_rows.view({n, local_qkv_width(ctx)});
  qkv.forward(ctx, ln_out, qkv2);
  if (qk_layernorm()) {
    backend::Backend& be = *ctx.backend;
    const int64_t vectors = qk_norm_numel(ctx, n) / kv_channels;
    Tensor x = be.empty({qk_norm_numel(ctx, n)}, qkv_rows.dtype(), MemoryKind::kWorkspace);
    Tensor mean = q_norm.bias >= 0 ? be.empty({vectors}, DType::kF32, MemoryKind::kWorkspace) : Tensor();
    Tensor rstd = be.empty({vectors}, DType::kF32, MemoryKind::kWorkspace);
    backend::qk_norm_forward(be, qkv_rows, ctx.param(q_norm.weight), ctx.optional_param(q_norm.bias),
                             ctx.param(k_norm.weight), ctx.optional_param(k_norm.bias), x, mean, rstd,
                             qk_norm_params(ctx));
  }
  if (rot_dim > 0) ctx.backend->rotary_forward(qkv_rows, rotary_params(ctx, Tensor(), past));
  ctx.backend->attention_kv_cache(qkv_rows, k_cache, v_cache, past, out_rows, params(ctx, Run{}));
  proj.forward_residual(ctx, out_rows.view({n, ql}), residual, x_mid, {});
}

}  // namespace megatron::model
