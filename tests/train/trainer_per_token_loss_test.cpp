// --calculate-per-token-loss (Megatron-Core): the loss of a global batch is the sum of its
// counted token losses over the number of counted tokens, so how the batch is cut into
// micro-batches and data-parallel ranks does not matter. With --eod-mask-loss on the
// short-document corpus (an end of document every 4-12 tokens, so micro-batches count different
// numbers of tokens): micro-batches of 2, 4 and 8 samples, DP2 and PP2 log the same losses and grad
// norms (to the parity tolerance, support/parity_runs.h: only fp32 summation orders differ);
// without the flag, the micro-batch means of 2 and of 8 samples differ; with one micro-batch the
// two definitions agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
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

struct Runs {
  std::string dir;
  std::vector<std::string> base;
  std::map<int64_t, test::Logged> run(const std::string& name, std::vector<std::string> flags, int np = 1) const {
    const std::string log = dir + "/" + name + ".jsonl";
    flags.insert(flags.end(), {"--log-jsonl", log});
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), flags.begin(), flags.end());
    const test::CommandResult r = test::run_ranks(argv, np);
    EXPECT_EQ(r.status, 0) << name << "\n" << r.output;
    auto logged = read_jsonl(log);
    EXPECT_EQ(logged.size(), 10u) << name << "\n" << r.output;
    return logged;
  }
};

Runs setup(const std::string& name) {
  Runs r;
  r.dir = test::scratch_dir(name);
  test::write_short_walk_corpus(r.dir);
  r.base = with(test::tiny_train_flags(r.dir, 2, "0"), {"--eod-mask-loss"});
  return r;
}

TEST(TrainerPerTokenLoss, MicroBatchAndDataParallelSplitsDoNotMatter) {
  const Runs runs = setup("trainer_per_token_loss");
  const std::vector<std::string> per_token = {"--calculate-per-token-loss"};
  const auto whole = runs.run("mbs8", with(per_token, {"--micro-batch-size", "8"}));
  ASSERT_EQ(whole.size(), 10u);
  EXPECT_LT(whole.at(10).loss, whole.at(1).loss - 0.5) << "the run must learn for the comparison to mean anything";
  expect_same(whole, runs.run("mbs2", with(per_token, {"--micro-batch-size", "2"})), 1, "micro-batches of 2");
  expect_same(whole, runs.run("mbs4", with(per_token, {"--micro-batch-size", "4"})), 1, "micro-batches of 4");
  expect_same(whole, runs.run("dp2", with(per_token, {"--micro-batch-size", "2"}), 2), 1, "DP2, micro-batches of 2");
  expect_same(whole,
              runs.run("pp2", with(per_token, {"--micro-batch-size", "2", "--pipeline-model-parallel-size", "2"}), 2),
              1, "PP2, micro-batches of 2");
  // One micro-batch: its mean is the per-token loss.
  expect_same(whole, runs.run("mbs8_mean", {"--micro-batch-size", "8"}), 1, "one micro-batch, mean");
  // The means of micro-batches of 2 weigh tokens unequally: other losses, by far more than the
  // parity tolerance (2e-6 relative).
  const auto means = runs.run("mbs2_mean", {"--micro-batch-size", "2"});
  ASSERT_EQ(means.size(), 10u);
  double moved = 0.0;
  for (int64_t i = 1; i <= 10; ++i) moved = std::max(moved, std::abs(means.at(i).loss / whole.at(i).loss - 1.0));
  EXPECT_GT(moved, 1e-4) << "means and per-token losses should differ";
  std::printf("micro-batch means vs per token: max relative difference %.2e\n", moved);
}

}  // namespace
}  // namespace megatron::train
