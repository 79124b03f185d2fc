#include "support/micro_batches.h"

#include <random>

namespace megatron::test {

model::GPTConfig tiny_gpt_config() {
  model::GPTConfig c;
  c.num_layers = 2;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.kv_channels = 4;
  c.ffn_hidden_size = 16;
  c.seq_length = 5;
  c.max_position_embeddings = 6;
  c.vocab_size = 13;
  c.padded_vocab_size = 16;
  c.init_method_std = 0.3f;
  c.attention_dropout = 0.0f;
  c.hidden_dropout = 0.0f;
  return c;
}

model::MicroBatch random_micro_batch(int64_t b, int64_t s, int64_t vocab, uint32_t seed, bool partial_mask) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab) - 1);
  model::MicroBatch mb;
  mb.batch = b;
  mb.seq = s;
  for (int64_t i = 0; i < b * s; ++i) {
    mb.tokens.push_back(tok(rng));
    mb.labels.push_back(tok(rng));
    mb.loss_mask.push_back(partial_mask && i % 3 == 1 ? 0.0f : 1.0f);
  }
  return mb;
}

}  // namespace megatron::test
