// The planner's model of a GPT shape as Megatron's flags default it (ffn = 4h, kv_channels =
// h / heads, max positions = seq), for the plan tests. Header-only: the support library does
// not link the planner.
#pragma once

#include <cstdint>

#include "plan/search.h"

namespace megatron::test {

inline plan::PlanModel gpt_plan_model(int64_t layers, int64_t hidden, int64_t heads, int64_t seq,
                                      int64_t vocab = 50257) {
  plan::PlanModel m;
  model::GPTConfig& c = m.config;
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.kv_channels = hidden / heads;
  c.ffn_hidden_size = 4 * hidden;
  c.seq_length = seq;
  c.max_position_embeddings = seq;
  c.vocab_size = vocab;
  return m;
}

}  // namespace megatron::test
