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

// Every node count without a layout says why: 7 H100 nodes (56 GPUs) give data-parallel sizes
// 7, 14, 28, 56 (TP x PP from the divisors of 56 with PP dividing 96 layers), none of which
// divides the global batch 1536 = 2^9 x 3; on 2 nodes every layout runs out of memory (175B's
// 18 bytes per parameter alone are 2.9 TiB over 16 GPUs).
TEST(PlanSearch, EveryNodeCountWithoutALayoutSaysWhy) {
  SearchSpace space;
  space.global_batch = 1536;
  const NodeSearch r = smallest_node_count(gpt3_175b(), h100(1), space, 1, 64, 560.0);
  for (const NodeSearchStep& s : r.steps) {
    EXPECT_EQ(s.best.has_value(), s.why_none.empty()) << s.nodes << " nodes: " << s.why_none;
  }
  ASSERT_GE(r.steps.size(), 7u);
  EXPECT_NE(r.steps[6].why_none.find("global batch 1536 (--global-batch-size) is not divisible by any data-parallel "
                                     "size of 56 GPUs (7, 14, 28, 56)"),
            std::string::npos)
      << r.steps[6].why_none;
  EXPECT_EQ(r.steps[1].why_none.rfind("does not fit: the smallest layout", 0), 0u) << r.steps[1].why_none;
  EXPECT_NE(r.steps[1].why_none.find("GiB over the"), std::string::npos) << r.steps[1].why_none;
  // Heads: TP 2 fixed for 97 heads (a prime): no TP size is allowed, the first rule checked.
  PlanModel odd = gpt3_175b();
  odd.config.num_attention_heads = 97;
  odd.config.kv_channels = 128;
  SearchSpace fixed = space;
  fixed.tp = 2;
  Cluster one = h100(1);
  EXPECT_EQ(no_layout_reason(odd, one, fixed, {})
                .rfind("no valid layout: no TP size divides both 8 GPUs and the 97 heads", 0),
            0u)
      << no_layout_reason(odd, one, fixed, {});
}

// TP sizes searched beyond a node: whole nodes up to kMaxSearchedTp (TP 8 on 4-GPU nodes).
TEST(PlanSearch, SearchesTensorParallelAcrossWholeNodesUpToEight) {
  SearchSpace space;
  space.global_batch = 1536;
  space.pp = 8;
  space.micro_batch = 1;
  Cluster four = h100(16);
  four.gpus_per_node = 4;
  bool tp8 = false;
  for (const Candidate& k : enumerate_layouts(gpt3_175b(), four, space)) {
    EXPECT_TRUE(k.parallel.tp <= 4 || k.parallel.tp == 8) << k.parallel.tp;
    tp8 = tp8 || k.parallel.tp == 8;
  }
  EXPECT_TRUE(tp8);
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
