// Generation against the training forward pass: the KV-cache path must give the same logits
// as GPTModel::forward on the same tokens, token by token and for a whole prompt at once;
// and the sampler's rules (greedy, top-k, top-p, determinism).
#include "model/gpt_generator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>

#include "core/error.h"

#include "model/gpt_model.h"
#include "model/sampling.h"

namespace megatron::model {
namespace {

GPTConfig config() {
  GPTConfig c;
  c.num_layers = 3;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.kv_channels = 4;
  c.ffn_hidden_size = 32;
  c.seq_length = 9;
  c.max_position_embeddings = 12;
  c.vocab_size = 30;
  c.padded_vocab_size = 32;
  c.init_method_std = 0.2f;
  return c;
}

// Query/key norm weights (and biases) away from their init values (ones, zeros), different for
// queries and keys, so that the generator must read each one.
void perturb_qk_norms(ParameterSet& ps) {
  for (Parameter& p : ps.params()) {
    const bool q = p.name.find("q_layernorm") != std::string::npos, k = p.name.find("k_layernorm") != std::string::npos;
    if (!q && !k) continue;
    float* v = p.value.data_as<float>();
    for (int64_t j = 0; j < p.numel(); ++j) v[j] += (q ? 0.15f : -0.1f) * static_cast<float>(j + 1);
  }
}

void expect_logits_match(DType dtype, bool untied, bool llama = false, bool qk = false) {
  GPTConfig c = config();
  c.qk_layernorm = qk;
  c.untie_embeddings_and_output_weights = untied;
  if (llama) {
    // Rotary positions through the KV cache's offsets, 2 key/value groups for 4 heads.
    c.normalization = Normalization::kRMSNorm;
    c.swiglu = true;
    c.add_bias_linear = false;
    c.position_embedding = PositionEmbedding::kRope;
    c.rotary.base = 100.0f;
    c.num_query_groups = 2;
  }
  auto backend = backend::make_cpu_backend();
  GPTModel model(c, *backend, dtype, 1);
  model.parameters().initialize(*backend, 5, c.init_method_std, c.num_layers);
  if (qk && dtype == DType::kF32) perturb_qk_norms(model.parameters());
  MicroBatch mb;
  mb.batch = 1;
  mb.seq = c.seq_length;
  std::mt19937 rng(3);
  for (int64_t i = 0; i < c.seq_length; ++i) {
    mb.tokens.push_back(static_cast<int32_t>(rng() % c.vocab_size));
    mb.labels.push_back(0);
    mb.loss_mask.push_back(1.0f);
  }
  DropoutContext eval;
  eval.training = false;
  model.forward(mb, eval);
  Tensor ref = Tensor::cpu({c.seq_length, c.padded_vocab_size});
  backend->copy(model.logits(), ref);
  const float* r = ref.data_as<float>();

  // Token by token: row i of the training logits (b = 1: row = position).
  GPTGenerator gen(c, model.parameters(), *backend, c.max_position_embeddings);
  for (int64_t i = 0; i < c.seq_length; ++i) {
    const std::vector<float> got = gen.append(std::span<const int32_t>(&mb.tokens[static_cast<size_t>(i)], 1));
    for (int64_t v = 0; v < c.padded_vocab_size; ++v) {
      // Same ops, same arithmetic order up to the attention sums over cached rows: fp32 rounding.
      EXPECT_NEAR(got[static_cast<size_t>(v)], r[i * c.padded_vocab_size + v], 1e-4) << "position " << i << " id " << v;
    }
  }
  // The whole prompt at once: the last row.
  gen.reset();
  const std::vector<float> all = gen.append(mb.tokens);
  for (int64_t v = 0; v < c.padded_vocab_size; ++v) {
    EXPECT_NEAR(all[static_cast<size_t>(v)], r[(c.seq_length - 1) * c.padded_vocab_size + v], 1e-4);
  }
  EXPECT_THROW(gen.append(std::vector<int32_t>(4, 1)), Error) << "12 positions, 9 + 4 asked";
}

TEST(GPTGenerator, LogitsMatchTheTrainingForward) { expect_logits_match(DType::kF32, false); }
TEST(GPTGenerator, LogitsMatchTheTrainingForwardUntiedBf16) { expect_logits_match(DType::kBF16, true); }
TEST(GPTGenerator, LogitsMatchTheTrainingForwardLlama) { expect_logits_match(DType::kF32, true, true); }
// --qk-layernorm: the new rows' queries and keys are normalised before rotary embeddings and the
// cache (RMSNorm with the Llama pieces, LayerNorm with biases on the GPT).
TEST(GPTGenerator, LogitsMatchTheTrainingForwardQkLayernorm) {
  expect_logits_match(DType::kF32, true, true, true);
  expect_logits_match(DType::kF32, false, false, true);
}

// A batch of sequences at one context length gives each sequence's own logits (as batch 1
// does), for the last position and for every position; the KV cache keeps the sequences apart.
void expect_batch_matches_one_by_one(bool llama, bool qk = false) {
  GPTConfig c = config();
  c.qk_layernorm = qk;
  if (llama) {
    c.normalization = Normalization::kRMSNorm;
    c.swiglu = true;
    c.add_bias_linear = false;
    c.position_embedding = PositionEmbedding::kRope;
    c.num_query_groups = 2;
  }
  auto backend = backend::make_cpu_backend();
  GPTModel model(c, *backend, DType::kF32, 1);
  model.parameters().initialize(*backend, 7, c.init_method_std, c.num_layers);
  if (qk) perturb_qk_norms(model.parameters());
  const int64_t b = 3, t = 4, V = c.padded_vocab_size;
  std::mt19937 rng(11);
  std::vector<int32_t> prompts(static_cast<size_t>(b * t)), next(static_cast<size_t>(b));
  for (int32_t& id : prompts) id = static_cast<int32_t>(rng() % c.vocab_size);
  for (int32_t& id : next) id = static_cast<int32_t>(rng() % c.vocab_size);

  GPTGenerator batched(c, model.parameters(), *backend, c.max_position_embeddings, 4);
  const std::vector<float> all = batched.append(prompts, b, true);  // [t, b, V]
  const std::vector<float> step = batched.append(next, b);          // [b, V]
  ASSERT_EQ(all.size(), static_cast<size_t>(t * b * V));
  ASSERT_EQ(step.size(), static_cast<size_t>(b * V));
  GPTGenerator single(c, model.parameters(), *backend, c.max_position_embeddings);
  for (int64_t i = 0; i < b; ++i) {
    single.reset();
    for (int64_t p = 0; p < t; ++p) {
      const std::vector<float> got =
          single.append(std::span<const int32_t>(&prompts[static_cast<size_t>(i * t + p)], 1));
      for (int64_t v = 0; v < V; ++v) {
        EXPECT_NEAR(all[static_cast<size_t>((p * b + i) * V + v)], got[static_cast<size_t>(v)], 1e-5)
            << "sequence " << i << " position " << p << " id " << v;
      }
    }
    const std::vector<float> got = single.append(std::span<const int32_t>(&next[static_cast<size_t>(i)], 1));
    for (int64_t v = 0; v < V; ++v) {
      EXPECT_NEAR(step[static_cast<size_t>(i * V + v)], got[static_cast<size_t>(v)], 1e-5) << "sequence " << i;
    }
  }
}

TEST(GPTGenerator, BatchMatchesOneByOne) { expect_batch_matches_one_by_one(false); }
TEST(GPTGenerator, BatchMatchesOneByOneLlama) { expect_batch_matches_one_by_one(true); }
TEST(GPTGenerator, BatchMatchesOneByOneQkLayernorm) { expect_batch_matches_one_by_one(true, true); }

TEST(Sampling, GreedyTopKTopP) {
  // Logits 0..9 plus two padded ids with huge logits that must never be chosen.
  std::vector<float> logits = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100, 100};
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(sample_token(logits, 10, greedy, 0), 9);

  SamplingParams topk;
  topk.top_k = 3;
  std::map<int32_t, int> seen;
  for (uint64_t s = 0; s < 3000; ++s) ++seen[sample_token(logits, 10, topk, s)];
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_TRUE(seen.count(9) && seen.count(8) && seen.count(7));
  // softmax over (9, 8, 7): p(9) = 1 / (1 + e^-1 + e^-2) = 0.665.
  EXPECT_NEAR(seen[9] / 3000.0, 0.665, 0.03);

  SamplingParams topp;
  topp.top_p = 0.7f;  // p(9) = 0.632 < 0.7, p(9) + p(8) = 0.865 >= 0.7: {9, 8}
  seen.clear();
  for (uint64_t s = 0; s < 3000; ++s) ++seen[sample_token(logits, 10, topp, s)];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_NEAR(seen[9] / 3000.0, 0.632 / 0.865, 0.03);

  SamplingParams hot;
  hot.temperature = 100.0f;  // nearly uniform over the 10 real ids
  seen.clear();
  for (uint64_t s = 0; s < 5000; ++s) ++seen[sample_token(logits, 10, hot, s)];
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_EQ(sample_token(logits, 10, topk, 42), sample_token(logits, 10, topk, 42)) << "deterministic";

  SamplingParams bad;
  bad.top_p = 1.5f;
  EXPECT_THROW(sample_token(logits, 10, bad, 0), Error);
}

}  // namespace
}  // namespace megatron::model
