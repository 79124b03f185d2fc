// `megatron convert --target-tensor-parallel-size` end to end: a checkpoint saved by one process
// is converted offline and resumed under TP2 with mpirun (CPU ranks), on the tiny GPT of
// trainer_tensor_parallel_test (GPT-2's 50257 ids, 2 layers, hidden 32, 4 heads, seq 16).
//
// 1. Same padded vocabulary: saved at TP1 with --make-vocab-size-divisible-by 256 (50432 rows),
//    converted to TP2 with 128 (50432 again: only the recorded layout changes), resumed under
//    TP2: iterations 6..10 log the losses and grad norms of the uninterrupted one-process run,
//    and the trainer reports no TP difference (the checkpoint says TP2).
// 2. Re-padded vocabulary: saved at TP1 with the default 128 (50304 rows), which TP2 (50432)
//    refuses to load; converted to TP2 (128 zero rows added) it resumes under TP2. The dummy
//    rows take part in the softmax, so this is a (slightly) different model from the original
//    run; its reference is the same conversion for one process (TP1 padded to 50432 with
//    --make-vocab-size-divisible-by 256) resumed in one process: the two agree.
// 3. As 1 with --qk-layernorm on a Llama-style attention (RMSNorm, rotary embeddings, 2 key/value
//    groups): the query/key norms are saved, converted as replicated tensors and loaded by both
//    TP ranks, whose partial gradients of them are summed.
// Tolerance: test::expect_same (relative 2e-6 on the loss, 1e-5 on the grad norm), justified in
// trainer_tensor_parallel_test.cpp: the TP runs differ from one process only in fp32 addition
// order.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/parity_runs.h"
#include "support/paths.h"
#include "support/walk_corpus.h"

namespace megatron::convert {
namespace {

using test::expect_same;
using test::read_jsonl;
using test::with;

std::vector<std::string> train_flags(const std::string& dir) { return test::tiny_train_flags(dir, 2, "0.1"); }

test::CommandResult convert(const std::vector<std::string>& flags) {
  std::string cmd = test::megatron_binary() + " convert";
  for (const std::string& f : flags) cmd += " '" + f + "'";
  return test::run_command(cmd, true);
}

void expect_tp2_resume_matches_one_process(const std::string& name, const std::vector<std::string>& model) {
  const std::string dir = test::scratch_dir(name);
  test::write_walk_corpus(dir);
  std::vector<std::string> base = train_flags(dir);
  base.insert(base.end(), model.begin(), model.end());
  const test::CommandResult whole =
      test::run_ranks(with(base, {"--make-vocab-size-divisible-by", "256", "--log-jsonl", dir + "/whole.jsonl"}), 1);
  ASSERT_EQ(whole.status, 0) << whole.output;
  const auto ref = read_jsonl(dir + "/whole.jsonl");
  ASSERT_EQ(ref.size(), 10u);

  const test::CommandResult saved =
      test::run_ranks(with(base, {"--make-vocab-size-divisible-by", "256", "--save", dir + "/tp1", "--save-interval",
                                  "5", "--exit-interval", "5"}),
                      1);
  ASSERT_EQ(saved.status, 0) << saved.output;
  const test::CommandResult conv =
      convert({"--load", dir + "/tp1", "--save", dir + "/tp2", "--target-tensor-parallel-size", "2",
               "--make-vocab-size-divisible-by", "128"});
  ASSERT_EQ(conv.status, 0) << conv.output;
  EXPECT_NE(conv.output.find("tensor-model-parallel size 1 -> 2, pipeline-model-parallel size 1 -> 1, padded vocab "
                             "50432 -> 50432 (size 50257, 0 tensors re-padded)"),
            std::string::npos)
      << conv.output;

  const test::CommandResult resumed = test::run_ranks(
      with(base, {"--tensor-model-parallel-size", "2", "--load", dir + "/tp2", "--log-jsonl", dir + "/tp2.jsonl"}), 2);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("successfully loaded checkpoint from " + dir + "/tp2 at iteration 5"),
            std::string::npos)
      << resumed.output;
  EXPECT_EQ(resumed.output.find("--tensor-model-parallel-size:"), std::string::npos) << resumed.output;
  EXPECT_EQ(resumed.output.find("--make-vocab-size-divisible-by:"), std::string::npos) << resumed.output;
  const auto got = read_jsonl(dir + "/tp2.jsonl");
  EXPECT_EQ(got.count(5), 0u);
  EXPECT_EQ(got.size(), 5u);
  expect_same(ref, got, 6, "TP1 checkpoint converted to TP2, resumed under TP2");
}

TEST(ReshardTensorParallel, ConvertedCheckpointResumesUnderTp2WithTheOriginalLosses) {
  expect_tp2_resume_matches_one_process("reshard_tp_same_padding", {});
}

TEST(ReshardTensorParallel, QkLayernormCheckpointResumesUnderTp2WithTheOriginalLosses) {
  expect_tp2_resume_matches_one_process(
      "reshard_tp_qk_layernorm", {"--qk-layernorm", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
                                  "--group-query-attention", "--num-query-groups", "2"});
}

TEST(ReshardTensorParallel, RepaddedCheckpointResumesUnderTp2AsInOneProcess) {
  const std::string dir = test::scratch_dir("reshard_tp_repadded");
  test::write_walk_corpus(dir);
  const auto base = train_flags(dir);
  const test::CommandResult saved =
      test::run_ranks(with(base, {"--save", dir + "/tp1", "--save-interval", "5", "--exit-interval", "5"}), 1);
  ASSERT_EQ(saved.status, 0) << saved.output;

  const test::CommandResult refused =
      test::run_ranks(with(base, {"--tensor-model-parallel-size", "2", "--load", dir + "/tp1"}), 2);
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.output.find("the padded vocabulary is 50432 but the checkpoint in " + dir +
                                "/tp1/iter_0000005 was trained with 50304"),
            std::string::npos)
      << refused.output;

  const test::CommandResult to_tp2 =
      convert({"--load", dir + "/tp1", "--save", dir + "/tp2", "--target-tensor-parallel-size", "2"});
  ASSERT_EQ(to_tp2.status, 0) << to_tp2.output;
  EXPECT_NE(to_tp2.output.find("padded vocab 50304 -> 50432 (size 50257, 3 tensors re-padded)"), std::string::npos)
      << to_tp2.output;
  const test::CommandResult tp2 = test::run_ranks(
      with(base, {"--tensor-model-parallel-size", "2", "--load", dir + "/tp2", "--log-jsonl", dir + "/tp2.jsonl"}), 2);
  ASSERT_EQ(tp2.status, 0) << tp2.output;

  const test::CommandResult to_one =
      convert({"--load", dir + "/tp1", "--save", dir + "/one", "--make-vocab-size-divisible-by", "256"});
  ASSERT_EQ(to_one.status, 0) << to_one.output;
  const test::CommandResult one = test::run_ranks(
      with(base, {"--make-vocab-size-divisible-by", "256", "--load", dir + "/one", "--log-jsonl", dir + "/one.jsonl"}),
      1);
  ASSERT_EQ(one.status, 0) << one.output;
  const auto ref = read_jsonl(dir + "/one.jsonl");
  ASSERT_EQ(ref.size(), 5u);
  expect_same(ref, read_jsonl(dir + "/tp2.jsonl"), 6, "re-padded checkpoint under TP2 vs one process");
}

}  // namespace
}  // namespace megatron::convert
