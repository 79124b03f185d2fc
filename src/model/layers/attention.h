// Megatron-Core's self-attention block: a column-parallel fused QKV projection, rotary position
// embeddings on the queries and keys (--position-embedding-type rope), causal softmax attention
// (backend attention ops: flash attention, the [s, s] probabilities never stored), a
// row-parallel output projection and the bias-dropout-add into the residual stream:
//   x_mid = x + dropout(proj(attention(rope(qkv(ln_out)))) + b_proj)
// QKV layout (Megatron-Core's, backend/ops.h AttentionParams): weight [(H + 2G) d, h] with, per
// key/value group g of the G (G = H without grouped-query attention), its H/G queries, then its
// key, then its value, d rows each (d = kv_channels). Tensor parallelism splits whole groups:
// rank r holds groups [r G/T, (r+1) G/T) — a contiguous block of QKV's rows — and their query
// heads (columns of proj); T must divide G.
// With --qk-layernorm the query and key heads of qkv are normalised over d right after the
// projection, before rotary embeddings (backend/qk_norm.h): q_layernorm and k_layernorm,
// replicated over TP, each rank normalising its own heads (their gradients are partial sums,
// GPTModel::reduce_layernorm_grads sums them over TP).
#pragma once

#include <cstdint>
#include <string>

#include "backend/qk_norm.h"
#include "model/gpt_config.h"
#include "model/layers/layer_context.h"
#include "model/layers/norm.h"
#include "model/layers/parallel_linear.h"

namespace megatron::model {

struct Attention {
  ColumnParallelLinear qkv;
  RowParallelLinear proj;
  int64_t heads = 0;        // the model's (all ranks)
  int64_t groups = 0;       // key/value heads G (all ranks)
  int64_t kv_channels = 0;  // d
  // Rotary embeddings (rot_dim 0: none): the rotated width, the position scale (1 /
  // --rotary-seq-len-interpolation-factor), and whether the micro-batch's position ids (packed
  // documents, --reset-position-ids) replace 0..s-1. Their frequencies live in ws.rotary_inv_freq.
  int64_t rot_dim = 0;
  float position_scale = 1.0f;
  bool document_positions = false;
  RotaryConfig rotary;
  // --qk-layernorm (weights [d]; weight -1: off). Only their indices, eps and zero_centered are
  // used: the backend's qk norm ops run them.
  Norm q_norm, k_norm;

  // Saved for backward (this rank's heads H/T): qkv [s, b, 3q/T], out [s, b, q/T], and the
  // softmax rows' log-sum-exp lse [b, H/T, s] fp32; with --qk-layernorm the norms' input qk_x
  // [n (H + G) d / T] (model dtype) and statistics qk_mean (LayerNorm only), qk_rstd
  // [n (H + G) / T] fp32, in backend/qk_norm.h's order.
  struct Saved {
    Tensor qkv, out, lse;
    Tensor qk_x, qk_mean, qk_rstd;
  };
  // One micro-batch's run: dropout on the probabilities (its element index is the whole
  // model's: global heads), on the output, and the documents' first visible keys (undefined:
  // the causal mask alone).
  struct Run {
    backend::DropoutParams probs, out;
    Tensor key_start;
    Tensor positions;  // int32 [b, s] position ids (rotary with document_positions), or undefined
  };

  // Declares `prefix`linear_qkv / linear_proj (weight, and bias with add_bias_linear), then with
  // qk_layernorm `prefix`q_layernorm / k_layernorm (weight, and bias for LayerNorm).
  static Attention declare(ParameterSet& ps, const std::string& prefix, const GPTConfig& config);
  static Attention find(const ParameterSet& ps, const std::string& prefix, const GPTConfig& config);

  // This rank's heads and query width q/T.
  int64_t local_heads(const LayerContext& ctx) const { return heads / ctx.tp->size(); }
  int64_t local_width(const LayerContext& ctx) const { return local_heads(ctx) * kv_channels; }
  // The fused QKV projection's width on this rank.
  int64_t local_groups(const LayerContext& ctx) const { return groups / ctx.tp->size(); }
  int64_t local_qkv_width(const LayerContext& ctx) const {
    return local_width(ctx) + 2 * local_groups(ctx) * kv_channels;
  }
  // One layer's key (or value) cache for generation: [batch, G, max_context, d] fp32.
  Shape kv_cache_shape(int64_t batch, int64_t max_context) const { return {batch, groups, max_context, kv_channels}; }
  Tensor rotary_positions(const Run& run) const { return document_positions ? run.positions : Tensor(); }
  bool qk_layernorm() const { return q_norm.weight >= 0; }
  backend::QkNormParams qk_norm_params(const LayerContext& ctx) const;
  // The number of elements of qk_x for `rows` rows on this rank: rows (H + G) d / T.
  int64_t qk_norm_numel(const LayerContext& ctx, int64_t rows) const {
    return rows * (local_heads(ctx) + local_groups(ctx)) * kv_channels;
  }
  backend::RotaryParams rotary_params(const LayerContext& ctx, const Tensor& positions, int64_t offset) const;
  backend::AttentionParams params(const LayerContext& ctx, const Run& run) const;
  // The buffers of Saved for one micro-batch (activations), and the attention's workspace:
  // ws.qkv [s, b, (H + 2G) d / T], ws.q [s, b, q/T], and with rotary embeddings the constant
  // ws.rotary_inv_freq [rot_dim / 2] fp32 (computed on the host, rotary_frequencies.h).
  Saved allocate_saved(const LayerContext& ctx, DType dtype) const;
  void allocate_workspace(const LayerContext& ctx, DType dtype, LayerWorkspace& ws) const;
  // inv_freq [rot_dim / 2] fp32 on `backend`'s device.
  Tensor rotary_frequencies(backend::Backend& backend) const;

  // x_mid [n_local, h] = residual + the block's output, from the norm output ln_out [n_local, h].
  void forward(const LayerContext& ctx, const Tensor& ln_out, const Tensor& residual, Tensor& x_mid, Saved& saved,
               const Run& run) const;
  // From g = d(x_mid) [n_local, h] (`taken`: what the norm backward below x_mid did for the
  // output projection): the parameter gradients and d(ln_out), summed over TP (the return value;
  // its partial sums in ws.h2).
  Tensor backward(const LayerContext& ctx, const Tensor& g, const Tensor& ln_out, const Saved& saved, const Run& run,
                  const BranchGradTaken& taken) const;
  // Generation (one rank, no dropout): the keys and values of the new rows [t, b] join the caches
  // [b, G, max_context, d] at position `past` (every sequence at the same position), after the
  // query/key norms and rotary embeddings; qkv [t, b, 3q] and out [t, b, q] are temporaries (the
  // norms' statistics too, allocated here).
  void forward_cached(const LayerContext& ctx, const Tensor& ln_out, const Tensor& residual, Tensor& x_mid,
                      Tensor& qkv_rows, Tensor& out_rows, Tensor& k_cache, Tensor& v_cache, int64_t past) const;
};

}  // namespace megatron::model
