#include "model/memory_plan.h"

#include <cstdio>

namespace megatron::model {

int64_t gpt_num_parameters(const GPTConfig& c) {
  const int64_t h = c.hidden_size, f = c.ffn_hidden_size, q = c.num_attention_heads * c.kv_channels;
  const int64_t bias = c.add_bias_linear ? 1 : 0;
  const int64_t per_layer = 2 * h                  // input LayerNorm
                            + 3 * q * h + bias * 3 * q  // QKV
                            + h * q + bias * h          // output projection
                            + 2 * h                     // pre-MLP LayerNorm
                            + f * h + bias * f          // FC1
                            + h * f + bias * h;         // FC2
  const int64_t embeddings = c.padded_vocab_size * h + c.max_position_embeddings * h;
  const int64_t output = c.untie_embeddings_and_output_weights ? c.padded_vocab_size * h : 0;
  return embeddings + c.num_layers * per_layer + 2 * h + output;
}

MemoryPlan plan_memory(const GPTConfig& c, DType param_dtype, int64_t micro_batch_size) {
  MemoryPlan p;
  const int64_t P = gpt_num_parameters(c);
  const int64_t e = dtype_size(param_dtype);
  p.num_parameters = P;
  p.parameters = P * e;
  p.main_parameters = param_dtype == DType::kF32 ? 0 : P * 4;
  p.gradients = P * 4;
  p.optimizer = 2 * P * 4;

  const int64_t s = c.seq_length, b = micro_batch_size, n = s * b, h = c.hidden_size, f = c.ffn_hidden_size;
  const int64_t q = c.num_attention_heads * c.kv_channels, a = c.num_attention_heads, L = c.num_layers;
  const int64_t V = c.padded_vocab_size;
  // Per layer, in the model dtype: LN1 out, qkv (3q), attention out (q), x_mid, LN2 out,
  // fc1 out and GELU out (f each); in fp32: LN1/LN2 mean and rstd (4n), attention lse (b*a*s).
  const int64_t layer = n * (3 * h + 4 * q + 2 * f) * e + 4 * n * 4 + b * a * s * 4;
  // Outside the layers: the L+1 residual-stream tensors [n, h] (model dtype); final LN out
  // (model dtype) with mean/rstd; logits [n, V] in the model dtype (their gradient reuses the
  // buffer); fp32 losses and lse [n]; int32 tokens and labels and fp32 loss weights [n].
  const int64_t outside = (L + 1) * n * h * e + n * h * e + 2 * n * 4 + n * V * e + 2 * n * 4 + 3 * n * 4;
  // Recomputed layers share slots (model/gpt_config.h); their inputs stay in the residual stream.
  p.activations = (c.kept_layers() + c.recompute_slots()) * layer + outside;
  // Workspace (model dtype): three [n, h] (gradient stream and two temporaries), [n, 3q],
  // [n, q] and [n, f].
  p.workspace = (3 * n * h + 4 * n * q + n * f) * e;
  return p;
}

MemoryPlan shard_optimizer_state(MemoryPlan plan, int64_t dp) {
  const int64_t shard = (plan.num_parameters + dp - 1) / dp;
  if (plan.main_parameters > 0) plan.main_parameters = shard * 4;
  plan.optimizer = 2 * shard * 4;
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
  row("gradients (fp32)", plan.gradients);
  row("optimizer state (Adam, fp32)", plan.optimizer);
  row("activations (one micro-batch)", plan.activations);
  row("workspace", plan.workspace);
  row("total", plan.total());
  return out;
}

}  // namespace megatron::model
