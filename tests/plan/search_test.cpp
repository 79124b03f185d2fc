// The layout search and the smallest-node-count question on the 175B benchmark shape.
#include <gtest/gtest.h>

#include "core/error.h"
#include "plan/search.h"

namespace megatron::plan {
namespace {

PlanModel gpt3_175b() {
  PlanModel m;
  m.config.num_layers = 96;
  m.config.hidden_size = 12288;
  m.config.num_attention_heads = 96;
  m.config.kv_channels = 128;
  m.config.ffn_hidden_size = 4 * 12288;
  m.config.seq_length = 2048;
  m.config.max_position_embeddings = 2048;
  m.config.vocab_size = 50257;
  return m;
}

Cluster h100(int64_t nodes) {
  Cluster c;
  c.gpu = find_gpu("h100-80gb");
  c.nodes = nodes;
  return c;
}

TEST(PlanSearch, PaddedVocabularyFollowsMegatron) {
  EXPECT_EQ(padded_vocab(50257, 128, 1), 50304);
  EXPECT_EQ(padded_vocab(50257, 128, 8), 51200);
}

TEST(PlanSearch, LayoutsAreValidSortedAndFitFirst) {
  SearchSpace space;
  space.global_batch = 1536;
  const std::vector<Candidate> all = enumerate_layouts(gpt3_175b(), h100(16), space);
  ASSERT_FALSE(all.empty());
  ASSERT_TRUE(all.front().fits);
  bool seen_misfit = false;
  for (size_t i = 0; i < all.size(); ++i) {
    const ParallelConfig& p = all[i].parallel;
    EXPECT_EQ(p.world(), 128);
    EXPECT_EQ(96 % p.pp, 0);
    EXPECT_EQ(96 % p.tp, 0);
    EXPECT_LE(p.tp, 8);
    EXPECT_EQ(1536 % (p.micro_batch * p.dp), 0);
    if (!all[i].fits) seen_misfit = true;
    EXPECT_FALSE(seen_misfit && all[i].fits) << "a fitting layout after a misfit at " << i;
    if (i > 0 && all[i].fits && all[i - 1].fits) {
      EXPECT_GE(all[i].prediction.report_time_s, all[i - 1].prediction.report_time_s);
    }
  }
  EXPECT_TRUE(seen_misfit) << "TP 1 x PP 1 cannot hold 175B on one 80 GB GPU";
}

TEST(PlanSearch, SmallestNodeCountFor175B) {
  SearchSpace space;
  space.global_batch = 1536;
  // 175B needs 2.8 TB of weights + grads + Adam (16-bit model, 18 bytes/parameter) before
  // activations: one or two 8 x 80 GB nodes cannot hold it.
  const NodeSearch r = smallest_node_count(gpt3_175b(), h100(1), space, 1, 64, 560.0);
  ASSERT_TRUE(r.nodes.has_value());
  ASSERT_FALSE(r.steps.empty());
  EXPECT_EQ(r.steps.back().nodes, *r.nodes);
  EXPECT_FALSE(r.steps[0].best.has_value());
  EXPECT_FALSE(r.steps[1].best.has_value());
  ASSERT_TRUE(r.steps.back().best.has_value());
  EXPECT_LE(r.steps.back().best->prediction.report_time_s, 560.0);
  for (size_t i = 0; i + 1 < r.steps.size(); ++i) {
    if (r.steps[i].best) {
      EXPECT_GT(r.steps[i].best->prediction.report_time_s, 560.0);
    }
  }
  // A target that is out of reach in the range: no answer, every node count tried.
  const NodeSearch none = smallest_node_count(gpt3_175b(), h100(1), space, 1, 4, 1.0);
  EXPECT_FALSE(none.nodes.has_value());
  EXPECT_EQ(none.steps.size(), 4u);
}

TEST(PlanSearch, EvaluateRejectsInvalidLayoutsNamingTheFlag) {
  try {
    evaluate_layout(gpt3_175b(), h100(1), ParallelConfig{5, 1, 1, 1, 1, 8, PlanRecompute::kNone, false, false});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[--tensor-model-parallel-size]"), std::string::npos) << e.what();
  }
  try {
    evaluate_layout(gpt3_175b(), h100(1), ParallelConfig{8, 1, 1, 1, 1, 12, PlanRecompute::kNone, false, false});
    evaluate_layout(gpt3_175b(), h100(1), ParallelConfig{4, 2, 1, 1, 3, 8, PlanRecompute::kNone, false, false});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[--global-batch-size]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace megatron::plan
