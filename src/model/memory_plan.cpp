#include "model/memory_plan.h"

#include <algorithm>
#include <cstdio>

#include "core/checked_int.h"
#include "model/layers/mlp.h"

namespace megatron::model {

namespace {

using I = CheckedInt;

// A LayerNorm's weight and bias, or RMSNorm's weight.
I norm_num_parameters(const GPTConfig& c) { return I(c.layernorm_bias() ? 2 : 1) * c.hidden_size; }

I layer_num_parameters(const GPTConfig& c, int64_t tp) {
  const I h = c.hidden_size, f = c.ffn_hidden_size / tp, q = I(c.num_attention_heads) * c.kv_channels / tp;
  const I f1 = I(c.fc1_out_size()) / tp;   // SwiGLU: gate and up
  const I qkv = I(c.qkv_out_size()) / tp;  // queries, and a key and value per query group
  const I bias = c.add_bias_linear ? 1 : 0;
  // --qk-layernorm: q_layernorm and k_layernorm [kv_channels] (replicated).
  const I qk_norms = c.qk_layernorm ? I(2 * (c.layernorm_bias() ? 2 : 1)) * c.kv_channels : I(0);
  return norm_num_parameters(c)    // input LayerNorm
         + qkv * h + bias * qkv    // QKV (column-parallel)
         + h * q + bias * h        // output projection (row-parallel; bias whole)
         + qk_norms                // query/key norms
         + norm_num_parameters(c)  // pre-MLP LayerNorm
         + f1 * h + bias * f1      // FC1 (column-parallel)
         + h * f + bias * h;       // FC2 (row-parallel; bias whole)
}

I stage_parameters(const GPTConfig& c, int64_t tp, const PipelineStageOptions& pipe) {
  const I h = c.hidden_size, V = c.padded_vocab_size / tp;
  const bool first = pipe.stage == 0, last = pipe.stage == pipe.pp - 1;
  I n = I(c.num_layers / pipe.pp) * layer_num_parameters(c, tp);
  if (first) n += V * h + I(c.learned_positions() ? c.max_position_embeddings : 0) * h;
  if (last) {
    n += norm_num_parameters(c);
    // The output layer: untied, or the last stage's copy of the tied embedding.
    if (c.untie_embeddings_and_output_weights || !first) n += V * h;
  }
  return n;
}

// The one-line error of a shape whose counts do not fit in 64 bits, naming its flags and values
// (`micro_batch_size` 0: the parameters alone overflowed).
[[noreturn]] void does_not_fit(const GPTConfig& c, int64_t micro_batch_size, int64_t tp) {
  const std::string batch = micro_batch_size > 0 ? str_cat(" --micro-batch-size ", micro_batch_size) : "";
  throw IntegerOverflow(str_cat("[model shape] the ", micro_batch_size > 0 ? "memory of one rank" : "parameter count",
                                " does not fit in 64 bits with --num-layers ", c.num_layers, " --hidden-size ",
                                c.hidden_size, " --ffn-hidden-size ", c.ffn_hidden_size, " --num-attention-heads ",
                                c.num_attention_heads, " --kv-channels ", c.kv_channels, " --seq-length ", c.seq_length,
                                " --max-position-embeddings ", c.max_position_embeddings, batch,
                                " --tensor-model-parallel-size ", tp, " and a padded vocabulary of ",
                                c.padded_vocab_size, " (--make-vocab-size-divisible-by): the shape is out of range"));
}

I fp8_bytes(const GPTConfig& c, int64_t micro_batch_size, int64_t tp, int64_t stage_layers) {
  if (!c.fp8) return 0;
  const I n = I(c.seq_length) * micro_batch_size, h = c.hidden_size;
  const I qkv = I(c.qkv_out_size()) / tp, q = I(c.num_attention_heads) * c.kv_channels / tp;
  const I f1 = I(c.fc1_out_size()) / tp, f = I(c.ffn_hidden_size) / tp;
  // Outputs and inputs of QKV, projection, FC1, FC2.
  const I out = std::max({qkv, h, f1}), in = std::max({h, q, f});
  const I buffers = n * std::max(out, in) + h * std::max({qkv, q, f1, f}) + n * out + n * in;
  const I saved_wt = I(stage_layers) * h * (qkv + q + f1 + f);
  const I operands = I(stage_layers) * 4 * 3;
  const I history = c.fp8->recipe == backend::Fp8Recipe::kDelayed ? I(c.fp8->amax_history_len) : I(1);
  // The scaling state: amax history [L, operands], scale [operands], scale_inv [operands, 4].
  const I state_floats = (history + 1 + backend::Fp8ScalingState::kScaleInvStride) * operands;
  return buffers + saved_wt + state_floats * 4;
}

}  // namespace

int64_t fp8_memory_bytes(const GPTConfig& c, int64_t micro_batch_size, int64_t tp, int64_t stage_layers) {
  try {
    return fp8_bytes(c, micro_batch_size, tp, stage_layers).value();
  } catch (const IntegerOverflow&) {
    does_not_fit(c, micro_batch_size, tp);
  }
}

int64_t gpt_num_parameters(const GPTConfig& c, int64_t tp) {
  try {
    const I h = c.hidden_size, V = c.padded_vocab_size / tp;
    const I embeddings = V * h + I(c.learned_positions() ? c.max_position_embeddings : 0) * h;
    const I output = c.untie_embeddings_and_output_weights ? V * h : I(0);
    return (embeddings + I(c.num_layers) * layer_num_parameters(c, tp) + norm_num_parameters(c) + output).value();
  } catch (const IntegerOverflow&) {
    does_not_fit(c, 0, tp);
  }
}

int64_t stage_num_parameters(const GPTConfig& c, int64_t tp, const PipelineStageOptions& pipe) {
  try {
    return stage_parameters(c, tp, pipe).value();
  } catch (const IntegerOverflow&) {
    does_not_fit(c, 0, tp);
  }
}

bool dropout_stream_in_memory(const GPTConfig& c, int64_t tp, const PipelineStageOptions& pipe) {
  return tp == 1 && pipe.pp == 1 && pipe.virtual_chunks == 1 && (c.attention_dropout > 0.0f || c.hidden_dropout > 0.0f);
}

MemoryPlan plan_memory(const GPTConfig& c, DType param_dtype, int64_t micro_batch_size, int64_t tp,
                       bool sequence_parallel, const PipelineStageOptions& pipe, DType grad_dtype) {
  try {
    const I P = stage_parameters(c, tp, pipe);
    const I e = dtype_size(param_dtype);
    const I s = c.seq_length, b = micro_batch_size, n = s * b, h = c.hidden_size, f = c.ffn_hidden_size / tp;
    const I q = I(c.num_attention_heads) * c.kv_channels / tp, a = c.num_attention_heads / tp;
    const I V = c.padded_vocab_size / tp;
    const int64_t vp = pipe.virtual_chunks, Lc = c.num_layers / (pipe.pp * vp);
    const bool first = pipe.stage == 0, last = pipe.stage == pipe.pp - 1;
    // Rows of the residual stream and LayerNorms on this rank: n / tp under sequence parallelism.
    const I nl = sequence_parallel ? n / tp : n;
    // Per layer, in the model dtype: LN1 out, x_mid, LN2 out [nl, h] each, qkv (q + 2gd), attention
    // out (q), fc1 out (f, or 2f with SwiGLU) and the activation's out (f; FP8: see act_out)
    // [n, .]; in fp32: LN1/LN2
    // mean (LayerNorm only) and rstd (2 or 4 nl), attention lse (b*a*s).
    const I f1 = I(c.fc1_out_size()) / tp;
    const I norm_stats = c.layernorm_bias() ? 2 : 1;
    const I qkv = I(c.qkv_out_size()) / tp;  // q + 2 * (query groups) * d
    // --qk-layernorm adds the norms' input [n, (a + g) d] (model dtype; g = query groups / tp) and
    // their statistics [n, a + g] fp32 (mean for LayerNorm only, rstd).
    const I qk_vectors = c.qk_layernorm ? n * (a + I(c.query_groups()) / tp) : I(0);
    // With FP8 and GELU the activation's out is FC2's transposed input codes instead
    // (MLP::fp8_act_bytes: a byte each and 16 for their scale).
    const bool fp8_gelu = c.fp8.has_value() && !c.swiglu;
    const I act_out = fp8_gelu ? I(MLP::fp8_act_bytes(n.value(), f.value())) : n * f * e;
    const I layer = (3 * nl * h + n * (qkv + q + f1) + qk_vectors * c.kv_channels) * e + act_out +
                    2 * norm_stats * nl * 4 + b * a * s * 4 + qk_vectors * norm_stats * 4;
    // Recompute works within a chunk's block of layers (model/gpt_config.h); recomputed layers
    // share the stage's recompute slots, their inputs stay in the residual stream.
    GPTConfig cc = c;
    cc.num_layers = Lc;
    // Per activation set (a chunk's Lc layers): the Lc+1 residual-stream tensors [nl, h] (model
    // dtype) and the kept layers; int32 tokens [n] (and position ids with reset_position_ids) on
    // stage 0 (every stage with rotary embeddings, whose layers read them); int32 key starts [n]
    // with reset_attention_mask; the int64 dropout stream (dropout_stream_in_memory).
    const bool positions_everywhere = c.rope() && c.reset_position_ids;
    const I per_set = (I(Lc) + 1) * nl * h * e + I(cc.kept_layers()) * layer +
                      (dropout_stream_in_memory(c, tp, pipe) ? 8 : 0) + (c.reset_attention_mask ? n * 4 : I(0)) +
                      (positions_everywhere && !first ? n * 4 : I(0));
    const I first_inputs = n * 4 * (c.reset_position_ids ? 2 : 1);
    MemoryPlan p;
    p.num_parameters = P.value();
    p.parameters = (P * e).value();
    p.main_parameters = param_dtype == DType::kF32 ? 0 : (P * 4).value();
    p.gradients = (P * dtype_size(grad_dtype)).value();
    p.grad_dtype = grad_dtype;
    p.optimizer = (2 * P * 4).value();
    // One pool of sets for the stage's chunks, each with the first virtual stage's inputs on stage 0.
    I activations = I(cc.recompute_slots()) * layer + pipe.activation_sets * (per_set + (first ? first_inputs : I(0)));
    // The loss head (last stage): final LN out (model dtype) with mean (LayerNorm) and rstd [nl];
    // logits [n, V] in the model dtype (their gradient reuses the buffer); fp32 losses and lse
    // [n]; int32 labels, the fp32 loss mask and the scaled loss weights [n].
    if (last) activations += nl * h * e + norm_stats * nl * 4 + n * V * e + 2 * n * 4 + 3 * n * 4;
    p.activations = activations.value();
    // Workspace (model dtype): the gradient stream [nl, h], two temporaries [n, h], [n, q + 2gd],
    // [n, q] and [n, f1] (fc1's output gradient); SwiGLU adds the activation's output gradient
    // [n, f], sequence parallelism the [n, h] gather buffer, pp > 1 the received output gradient
    // [nl, h].
    // --apply-layernorm-1p: the fp32 scale 1 + weight and the ones it adds, [h] each.
    p.workspace = ((nl * h + 2 * n * h + n * (I(c.qkv_out_size()) / tp + q) + n * f1 + (c.swiglu ? n * f : I(0)) +
                    (sequence_parallel ? n * h : I(0)) + (pipe.pp > 1 ? nl * h : I(0))) *
                       e +
                   (c.apply_layernorm_1p ? 2 * h * 4 : I(0)))
                      .value();
    p.fp8 = fp8_bytes(c, micro_batch_size, tp, c.num_layers / pipe.pp).value();
    p.total();  // the sum must fit too
    return p;
  } catch (const IntegerOverflow&) {
    does_not_fit(c, micro_batch_size, tp);
  }
}

MemoryPlan shard_optimizer_state(MemoryPlan plan, int64_t dp) {
  const I shard = (I(plan.num_parameters) + dp - 1) / dp;  // <= num_parameters, whose 8 bytes fit
  if (plan.main_parameters > 0) plan.main_parameters = (shard * 4).value();
  plan.optimizer = (2 * shard * 4).value();
  return plan;
}

std::string format_memory_plan(const MemoryPlan& plan) {
  std::string out;
  char line[160];
  auto row = [&](const char* name, int64_t bytes) {
    std::snprintf(line, sizeof(line), "    %-34s %16lld bytes  %10.3f GiB\n", name, static_cast<long long>(bytes),
                  static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
    out += line;
  };
  std::snprintf(line, sizeof(line), " > memory plan per rank (%lld parameters):\n",
                static_cast<long long>(plan.num_parameters));
  out += line;
  row("parameters", plan.parameters);
  row("main parameters (fp32)", plan.main_parameters);
  row(("gradients (" + std::string(dtype_name(plan.grad_dtype)) + ")").c_str(), plan.gradients);
  row("optimizer state (Adam, fp32)", plan.optimizer);
  row("activations (one micro-batch)", plan.activations);
  row("workspace", plan.workspace);
  if (plan.nccl != 0) row("NCCL buffers (model)", plan.nccl);
  if (plan.copy_engine != 0) row("copy-engine receive buffer", plan.copy_engine);
  if (plan.fp8 != 0) row("FP8 buffers and scaling state", plan.fp8);
  row("total", plan.total());
  return out;
}

}  // namespace megatron::model
