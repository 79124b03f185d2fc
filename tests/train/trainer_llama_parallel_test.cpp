// A tiny Llama (RMSNorm, SwiGLU, no biases, untied output layer, rotary embeddings and
// grouped-query attention with 2 key/value groups for 4 heads) under every parallel layout
// against the single-process run: TP2, TP2 + sequence parallelism, PP2, and TP2 x PP2 x DP2 with
// the distributed optimizer, each also with full recompute; and PP2 over packed documents
// (positions restarting per document reach the rotary embeddings of every stage); and with
// --qk-layernorm (RMSNorm, and LayerNorm with biases) under TP2 and TP2 + sequence parallelism,
// whose query/key norm gradients are partial sums over the TP ranks' heads either way. The bounds
// are the GPT parity tests' (support/parity_runs.h): the layouts change only reduction orders.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/parity_runs.h"
#include "support/paths.h"
#include "support/walk_corpus.h"

namespace megatron::train {
namespace {

using test::expect_same;
using test::read_jsonl;
using test::with;

const std::vector<std::string> kLlama = {"--normalization",
                                         "RMSNorm",
                                         "--swiglu",
                                         "--disable-bias-linear",
                                         "--untie-embeddings-and-output-weights",
                                         "--position-embedding-type",
                                         "rope",
                                         "--rotary-base",
                                         "10000",
                                         "--group-query-attention",
                                         "--num-query-groups",
                                         "2"};
// TP2 pads the vocabulary to a multiple of 128 * 2; one tensor-parallel rank asks for the same rows.
const std::vector<std::string> kTp1Padding = {"--make-vocab-size-divisible-by", "256"};

struct Layout {
  std::string name;
  int np;
  std::vector<std::string> flags;
};

void parity(const std::string& test_name, const std::vector<Layout>& layouts, bool documents,
            const std::vector<std::string>& model = kLlama) {
  const std::string dir = test::scratch_dir(test_name);
  if (documents) {
    test::write_short_walk_corpus(dir);
  } else {
    test::write_walk_corpus(dir);
  }
  std::vector<std::string> base = test::tiny_train_flags(dir, 4, "0");
  base.insert(base.end(), model.begin(), model.end());
  if (documents) base = with(base, {"--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss"});
  std::vector<std::string> reference = base;
  reference.insert(reference.end(), kTp1Padding.begin(), kTp1Padding.end());
  const test::CommandResult one = test::run_ranks(with(reference, {"--log-jsonl", dir + "/one.jsonl"}), 1);
  ASSERT_EQ(one.status, 0) << one.output;
  const auto ref = read_jsonl(dir + "/one.jsonl");
  ASSERT_EQ(ref.size(), 10u) << one.output;
  EXPECT_LT(ref.at(10).loss, ref.at(1).loss - 0.5) << "the run must learn for the comparison to mean anything";
  for (const Layout& l : layouts) {
    const std::string log = dir + "/" + std::to_string(&l - layouts.data()) + ".jsonl";
    std::vector<std::string> full = base;
    full.insert(full.end(), l.flags.begin(), l.flags.end());
    full = with(full, {"--log-jsonl", log});
    const test::CommandResult r = test::run_ranks(full, l.np);
    ASSERT_EQ(r.status, 0) << l.name << "\n" << r.output;
    expect_same(ref, read_jsonl(log), 1, l.name);
  }
}

const std::vector<std::string> kRecompute = {"--recompute-granularity", "full", "--recompute-method", "uniform",
                                             "--recompute-num-layers",  "1"};

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(TrainerLlamaParallel, TensorAndSequenceParallelMatchOneProcess) {
  parity("trainer_llama_tp",
         {{"TP2", 2, {"--tensor-model-parallel-size", "2"}},
          {"TP2 + SP", 2, {"--tensor-model-parallel-size", "2", "--sequence-parallel"}},
          {"TP2 + SP + full recompute", 2,
           plus({"--tensor-model-parallel-size", "2", "--sequence-parallel"}, kRecompute)}},
         false);
}

TEST(TrainerLlamaParallel, PipelineAndAllThreeMatchOneProcess) {
  parity(
      "trainer_llama_pp",
      {{"PP2", 2, plus({"--pipeline-model-parallel-size", "2"}, kTp1Padding)},
       {"PP2 interleaved (vp 2)", 2,
        plus({"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1"}, kTp1Padding)},
       {"TP2 x PP2 x DP2 + distributed optimizer",
        8,
        {"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--use-distributed-optimizer"}}},
      false);
}

TEST(TrainerLlamaParallel, QkLayernormMatchesOneProcessUnderTensorAndSequenceParallelism) {
  const std::vector<Layout> layouts = {{"TP2", 2, {"--tensor-model-parallel-size", "2"}},
                                       {"TP2 + SP", 2, {"--tensor-model-parallel-size", "2", "--sequence-parallel"}}};
  parity("trainer_llama_qk_rmsnorm", layouts, false, plus(kLlama, {"--qk-layernorm"}));
  // LayerNorm with linear biases: the query/key norms' biases too.
  std::vector<std::string> layernorm = plus(kLlama, {"--qk-layernorm"});
  layernorm[1] = "LayerNorm";
  std::erase(layernorm, "--disable-bias-linear");
  parity("trainer_llama_qk_layernorm", layouts, false, layernorm);
}

TEST(TrainerLlamaParallel, PackedDocumentsMatchOneProcessUnderPipelining) {
  parity("trainer_llama_documents", {{"PP2", 2, plus({"--pipeline-model-parallel-size", "2"}, kTp1Padding)}}, true);
}

}  // namespace
}  // namespace megatron::train
