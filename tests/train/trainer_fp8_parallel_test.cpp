// FP8's scales are one per tensor whatever the layout (Transformer Engine's amax reduction over
// Megatron's amax reduction group, TP x DP x CP of a stage; GPTModel::fp8_update): the tiny GPT
// in fp32 with --fp8-format hybrid, delayed scaling (history 4, max) under TP2 and TP2 +
// sequence parallelism, tensorwise scaling (each tensor's own amax) under DP2, both under PP2.
// PP2's 1F1B runs the first stage's second forward before its first backward: the backward must
// use its own micro-batch's scales (FC2's kept codes carry theirs), not the slot's latest.
//
// Why it holds: every rank quantizes its shard of a tensor with the whole tensor's scale (the
// all-reduced amax), so its FP8 codes are the single process's codes of those elements; the
// GEMMs multiply codes exactly, and the runs differ only in the order of fp32 additions, as in
// trainer_tensor_parallel_test.cpp. So the first iterations log the single process's losses and
// grad norms to expect_same's bounds (2e-6, 1e-5). Later the reordering's ulps, carried by the
// weights, tip some value sitting on an FP8 rounding boundary to the neighbouring code (2 or 3
// mantissa bits: a 12-25% step of that element); the grad norm then moves by up to ~1e-3 and
// the loss by ~1e-5 (measured: 5e-6 TP2, 2e-5 DP2), so from there on only the loss is held, to
// 1e-4. Without the reduction the shards' scales differ from the first delayed update on and
// iteration 2 differs by more than the exact bounds.
//
// Not covered, because it does not hold: delayed scaling under DP. Its first iteration quantizes
// with the initial scale 1, and each rank's loss gradient is scaled by 1 / its own micro-batch
// count (Megatron's, before the DP average), so DP2's output gradients are twice one process's
// and a different share of them underflows E5M2 (iteration 1's grad norm differs by 4e-4);
// Megatron with Transformer Engine has the same dependence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "support/parity_runs.h"
#include "support/paths.h"
#include "support/walk_corpus.h"

namespace megatron::train {
namespace {

using test::read_jsonl;
using test::with;

struct Layout {
  std::string name;
  int np;
  std::vector<std::string> flags;
};

// Iterations 1..exact_through to expect_same's bounds, the rest's loss to 1e-4 (the header).
void parity(const std::string& test_name, const std::vector<std::string>& recipe, const std::vector<Layout>& layouts,
            int64_t exact_through) {
  const std::string dir = test::scratch_dir(test_name);
  test::write_walk_corpus(dir);
  std::vector<std::string> base = test::tiny_train_flags(dir, 2, "0");
  base.insert(base.end(), recipe.begin(), recipe.end());
  // One process pads the vocabulary as TP2 does (a multiple of 128 * 2).
  const test::CommandResult one =
      test::run_ranks(with(base, {"--make-vocab-size-divisible-by", "256", "--log-jsonl", dir + "/one.jsonl"}), 1);
  ASSERT_EQ(one.status, 0) << one.output;
  const auto ref = read_jsonl(dir + "/one.jsonl");
  ASSERT_EQ(ref.size(), 10u) << one.output;
  EXPECT_LT(ref.at(10).loss, ref.at(1).loss - 0.5) << "the run must learn for the comparison to mean anything";
  for (const Layout& l : layouts) {
    const std::string log = dir + "/" + std::to_string(&l - layouts.data()) + ".jsonl";
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), l.flags.begin(), l.flags.end());
    const test::CommandResult r = test::run_ranks(with(argv, {"--log-jsonl", log}), l.np);
    ASSERT_EQ(r.status, 0) << l.name << "\n" << r.output;
    const auto got = read_jsonl(log);
    double worst = 0;
    for (int64_t i = 1; i <= 10; ++i) {
      ASSERT_TRUE(got.count(i)) << l.name << ": iteration " << i << " missing";
      const double tol = i <= exact_through ? 2e-6 : 1e-4;
      EXPECT_NEAR(got.at(i).loss, ref.at(i).loss, tol * ref.at(i).loss) << l.name << " iteration " << i;
      if (i <= exact_through) {
        EXPECT_NEAR(got.at(i).grad_norm, ref.at(i).grad_norm, 1e-5 * ref.at(i).grad_norm)
            << l.name << " iteration " << i;
      }
      worst = std::max(worst, std::abs(got.at(i).loss - ref.at(i).loss) / ref.at(i).loss);
    }
    std::printf("%s: max relative loss difference %.2e\n", l.name.c_str(), worst);
  }
}

const std::vector<std::string> kTp1Padding = {"--make-vocab-size-divisible-by", "256"};

// Delayed scaling's first update (after iteration 1) is where TP could differ.
TEST(TrainerFp8Parallel, DelayedScalingMatchesOneProcessUnderTpAndSp) {
  parity("trainer_fp8_delayed_parity",
         {"--fp8-format", "hybrid", "--fp8-recipe", "delayed", "--fp8-amax-history-len", "4", "--fp8-amax-compute-algo",
          "max"},
         {{"TP2", 2, {"--tensor-model-parallel-size", "2"}},
          {"TP2 + SP", 2, {"--tensor-model-parallel-size", "2", "--sequence-parallel"}},
          {"PP2", 2, with(kTp1Padding, {"--pipeline-model-parallel-size", "2"})}},
         4);
}

TEST(TrainerFp8Parallel, TensorwiseScalingMatchesOneProcessUnderDp) {
  parity("trainer_fp8_tensorwise_parity", {"--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"},
         {{"DP2", 2, kTp1Padding}, {"PP2", 2, with(kTp1Padding, {"--pipeline-model-parallel-size", "2"})}}, 3);
}

}  // namespace
}  // namespace megatron::train
