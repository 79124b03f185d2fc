// The parity spine of tensor parallelism (docs/design.md, "Parallelism is data layout plus
// collectives"): `megatron train` on a tiny GPT (fp32, 10 iterations) as one process, as TP2, TP2
// with --sequence-parallel, and TP2 x DP2 (4 ranks) with and without --use-distributed-optimizer,
// logs the same losses and grad norms, with dropout off and with dropout on (hidden and attention:
// the TP ranks draw the single- process masks, model/gpt_model.h); checkpoints saved under TP2
// resume under TP1 and the reverse with the same next losses; a TP configuration error is one line
// before anything starts. Values are read from --log-jsonl (full double precision) of the last
// rank.
//
// The vocabulary: GPT-2's 50257 ids pad to 50432 at TP2 (a multiple of 128 * 2) and to 50304
// at TP1; the dummy rows take part in the softmax, so the single process is run with
// --make-vocab-size-divisible-by 256 to have the same 50432 rows (Megatron's checkpoints, too,
// only move between TP sizes with the same padded vocabulary).
//
// Tolerance: relative 2e-6 on the loss and 1e-5 on the grad norm, as the DP parity test. The
// runs differ only in the order of fp32 additions: a row-parallel output is two half-sums over
// the split input dimension added by the all-reduce (one blocked GEMM sum in one process), the
// cross-entropy combines the two vocabulary halves' log-sum-exps, and the norm adds the ranks'
// partial sums. Each reordering moves an activation or gradient by a few fp32 ulps (6e-8
// relative); Adam's update and the loss are smooth in them, so after 10 steps losses agree to
// ~1e-7 relative. A real bug (a missing reduction, a head or dropout mask of the wrong rank, a
// duplicated parameter counted twice in the norm) moves the loss or the norm by > 1e-3.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "comm/mpirun.h"
#include "support/parity_runs.h"
#include "support/paths.h"
#include "support/walk_corpus.h"

namespace megatron::train {
namespace {

using test::expect_same;
using test::read_jsonl;
using test::with;

// The tiny GPT: 2 layers, hidden 32, 4 heads (2 per TP rank), seq 16 (8 per rank under SP),
// global batch 8 of micro-batches of 2.
std::vector<std::string> train_flags(const std::string& dir, bool dropout) {
  return test::tiny_train_flags(dir, 2, dropout ? "0.1" : "0");
}

// One process pads the vocabulary like TP2 (see the header).
std::vector<std::string> one_process(std::vector<std::string> a) {
  return with(std::move(a), {"--make-vocab-size-divisible-by", "256"});
}

// The one-process run of `base` (logging to dir/one.jsonl), which must learn.
std::map<int64_t, test::Logged> learning_reference(const std::vector<std::string>& base, const std::string& dir) {
  const test::CommandResult one = test::run_ranks(one_process(with(base, {"--log-jsonl", dir + "/one.jsonl"})), 1);
  EXPECT_EQ(one.status, 0) << one.output;
  auto ref = read_jsonl(dir + "/one.jsonl");
  EXPECT_EQ(ref.size(), 10u) << one.output;
  if (ref.size() == 10u) {
    EXPECT_LT(ref.at(10).loss, ref.at(1).loss - 0.5) << "the run must learn for the comparison to mean anything";
  }
  return ref;
}

// `got` follows `ref` to bf16 rounding: the worst relative loss and grad-norm differences over
// the run below `loss_bound` and `norm_bound` (the tests below say how they were chosen); prints
// the worst.
void expect_bf16_close(const std::map<int64_t, test::Logged>& ref, const std::map<int64_t, test::Logged>& got,
                       const std::string& what, double loss_bound, double norm_bound) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double worst_loss = 0, worst_norm = 0;
  for (const auto& [it, v] : ref) {
    worst_loss = std::max(worst_loss, std::abs(got.at(it).loss - v.loss) / v.loss);
    worst_norm = std::max(worst_norm, std::abs(got.at(it).grad_norm - v.grad_norm) / v.grad_norm);
  }
  std::printf("%s vs one process: worst relative loss difference %.3g, grad norm %.3g\n", what.c_str(), worst_loss,
              worst_norm);
  EXPECT_LT(worst_loss, loss_bound) << what;
  EXPECT_LT(worst_norm, norm_bound) << what;
}

void parity(bool dropout, const std::string& name) {
  const std::string dir = test::scratch_dir(name);
  test::write_walk_corpus(dir);
  const auto base = train_flags(dir, dropout);
  const auto ref = learning_reference(base, dir);
  ASSERT_EQ(ref.size(), 10u);

  const test::CommandResult tp2 =
      test::run_ranks(with(base, {"--tensor-model-parallel-size", "2", "--log-jsonl", dir + "/tp2.jsonl"}), 2);
  ASSERT_EQ(tp2.status, 0) << tp2.output;
  EXPECT_NE(tp2.output.find("tensor-model-parallel size: 2"), std::string::npos) << tp2.output;
  EXPECT_NE(tp2.output.find(" > padded vocab (size: 50257) with 175 dummy tokens (new size: 50432)"), std::string::npos)
      << tp2.output;
  expect_same(ref, read_jsonl(dir + "/tp2.jsonl"), 1, "TP2");

  const test::CommandResult sp = test::run_ranks(
      with(base, {"--tensor-model-parallel-size", "2", "--sequence-parallel", "--log-jsonl", dir + "/sp.jsonl"}), 2);
  ASSERT_EQ(sp.status, 0) << sp.output;
  expect_same(ref, read_jsonl(dir + "/sp.jsonl"), 1, "TP2 + SP");

  const test::CommandResult tpdp =
      test::run_ranks(with(base, {"--tensor-model-parallel-size", "2", "--log-jsonl", dir + "/tpdp.jsonl"}), 4);
  ASSERT_EQ(tpdp.status, 0) << tpdp.output;
  EXPECT_NE(tpdp.output.find("using world size: 4, data-parallel size: 2"), std::string::npos) << tpdp.output;
  expect_same(ref, read_jsonl(dir + "/tpdp.jsonl"), 1, "TP2 x DP2");

  // The distributed optimizer over DP within TP, several buckets, sequence parallelism.
  const test::CommandResult dist = test::run_ranks(
      with(base, {"--tensor-model-parallel-size", "2", "--sequence-parallel", "--use-distributed-optimizer",
                  "--ddp-bucket-size", "3001", "--log-jsonl", dir + "/dist.jsonl"}),
      4);
  ASSERT_EQ(dist.status, 0) << dist.output;
  expect_same(ref, read_jsonl(dir + "/dist.jsonl"), 1, "TP2 x DP2 + SP, distributed optimizer");
}

TEST(TrainerTensorParallel, MatchesOneProcessWithoutDropout) { parity(/*dropout=*/false, "trainer_tp_parity"); }

TEST(TrainerTensorParallel, MatchesOneProcessWithDropout) { parity(/*dropout=*/true, "trainer_tp_parity_dropout"); }

// Sequences of 4 tokens, one per micro-batch: the gathered-rows workspace (4 x 32 floats) holds
// only 4 of the 10 LayerNorm gradient tensors, so their TP sum goes out in three packed
// all-reduces (4 + 4 + 2 tensors); the losses and norms are the single process's all the same.
TEST(TrainerTensorParallel, SequenceParallelGradientsInSeveralPacksMatchOneProcess) {
  const std::string dir = test::scratch_dir("trainer_tp_sp_packs");
  test::write_walk_corpus(dir);
  const auto base = with(train_flags(dir, /*dropout=*/false), {"--seq-length", "4", "--micro-batch-size", "1"});
  const test::CommandResult one = test::run_ranks(one_process(with(base, {"--log-jsonl", dir + "/one.jsonl"})), 1);
  ASSERT_EQ(one.status, 0) << one.output;
  const test::CommandResult sp = test::run_ranks(
      with(base, {"--tensor-model-parallel-size", "2", "--sequence-parallel", "--log-jsonl", dir + "/sp.jsonl"}), 2);
  ASSERT_EQ(sp.status, 0) << sp.output;
  const auto ref = read_jsonl(dir + "/one.jsonl");
  ASSERT_EQ(ref.size(), 10u) << one.output;
  expect_same(ref, read_jsonl(dir + "/sp.jsonl"), 1, "TP2 + SP, seq 4");
}

// TP4 + SP (one head and a quarter of the sequence per rank; the vocabulary pads to 50688, a
// multiple of 128 * 4), dropout on, with full recomputation (the re-run forward repeats the
// collectives and the masks).
TEST(TrainerTensorParallel, Tp4WithSequenceParallelMatchesOneProcess) {
  const std::string dir = test::scratch_dir("trainer_tp4");
  test::write_walk_corpus(dir);
  const auto base = train_flags(dir, /*dropout=*/true);
  const test::CommandResult one =
      test::run_ranks(with(base, {"--make-vocab-size-divisible-by", "512", "--log-jsonl", dir + "/one.jsonl"}), 1);
  ASSERT_EQ(one.status, 0) << one.output;
  const test::CommandResult tp4 = test::run_ranks(
      with(base, {"--tensor-model-parallel-size", "4", "--sequence-parallel", "--recompute-granularity", "full",
                  "--recompute-method", "uniform", "--recompute-num-layers", "1", "--log-jsonl", dir + "/tp4.jsonl"}),
      4);
  ASSERT_EQ(tp4.status, 0) << tp4.output;
  EXPECT_NE(tp4.output.find("(new size: 50688)"), std::string::npos) << tp4.output;
  expect_same(read_jsonl(dir + "/one.jsonl"), read_jsonl(dir + "/tp4.jsonl"), 1, "TP4 + SP + full recompute");
}

// The benchmark's within-node layout, TP8 with sequence parallelism (checked on the CPU), on
// the tiny GPT with 8 heads (one per rank) and 2 sequence rows per rank: the single process's
// losses and norms. GPT-2's vocabulary pads to 51200 at TP8 (Megatron's "943 dummy tokens"
// line); the single process pads the same way (--make-vocab-size-divisible-by 1024).
TEST(TrainerTensorParallel, Tp8WithSequenceParallelMatchesOneProcess) {
  const std::string dir = test::scratch_dir("trainer_tp8");
  test::write_walk_corpus(dir);
  auto base = train_flags(dir, /*dropout=*/true);
  const auto heads = std::find(base.begin(), base.end(), "--num-attention-heads");
  ASSERT_NE(heads, base.end());
  *(heads + 1) = "8";
  const test::CommandResult one =
      test::run_ranks(with(base, {"--make-vocab-size-divisible-by", "1024", "--log-jsonl", dir + "/one.jsonl"}), 1);
  ASSERT_EQ(one.status, 0) << one.output;
  const test::CommandResult tp8 = test::run_ranks(
      with(base, {"--tensor-model-parallel-size", "8", "--sequence-parallel", "--log-jsonl", dir + "/tp8.jsonl"}), 8);
  ASSERT_EQ(tp8.status, 0) << tp8.output;
  EXPECT_NE(tp8.output.find(" > padded vocab (size: 50257) with 943 dummy tokens (new size: 51200)"), std::string::npos)
      << tp8.output;
  expect_same(read_jsonl(dir + "/one.jsonl"), read_jsonl(dir + "/tp8.jsonl"), 1, "TP8 + SP");
}

// Megatron's Llama-style pieces, --normalization RMSNorm and --swiglu (FC1 [2f, h] = [gate; up],
// each half split over TP: tensor_parallel/partition.h's chunked rows), with dropout: TP2 + SP,
// TP2 x DP2 with the distributed optimizer, and PP2 log the single process's losses and norms;
// a TP2 checkpoint resumes as one process with the uninterrupted run's next losses (the saved
// FC1 is the global [gate; up], not the ranks' shards end to end).
TEST(TrainerTensorParallel, RmsNormAndSwigluMatchOneProcess) {
  const std::string dir = test::scratch_dir("trainer_tp_rmsnorm_swiglu");
  test::write_walk_corpus(dir);
  const auto base = with(train_flags(dir, /*dropout=*/true), {"--normalization", "RMSNorm", "--swiglu"});
  const test::CommandResult one = test::run_ranks(one_process(with(base, {"--log-jsonl", dir + "/one.jsonl"})), 1);
  ASSERT_EQ(one.status, 0) << one.output;
  const auto ref = read_jsonl(dir + "/one.jsonl");
  ASSERT_EQ(ref.size(), 10u) << one.output;
  EXPECT_LT(ref.at(10).loss, ref.at(1).loss - 0.5) << "the run must learn for the comparison to mean anything";

  const test::CommandResult sp = test::run_ranks(
      with(base, {"--tensor-model-parallel-size", "2", "--sequence-parallel", "--log-jsonl", dir + "/sp.jsonl"}), 2);
  ASSERT_EQ(sp.status, 0) << sp.output;
  expect_same(ref, read_jsonl(dir + "/sp.jsonl"), 1, "RMSNorm + SwiGLU, TP2 + SP");

  const test::CommandResult dist =
      test::run_ranks(with(base, {"--tensor-model-parallel-size", "2", "--use-distributed-optimizer", "--save",
                                  dir + "/ck", "--save-interval", "5", "--log-jsonl", dir + "/dist.jsonl"}),
                      4);
  ASSERT_EQ(dist.status, 0) << dist.output;
  expect_same(ref, read_jsonl(dir + "/dist.jsonl"), 1, "RMSNorm + SwiGLU, TP2 x DP2, distributed optimizer");

  const test::CommandResult pp = test::run_ranks(
      one_process(with(base, {"--pipeline-model-parallel-size", "2", "--log-jsonl", dir + "/pp.jsonl"})), 2);
  ASSERT_EQ(pp.status, 0) << pp.output;
  expect_same(ref, read_jsonl(dir + "/pp.jsonl"), 1, "RMSNorm + SwiGLU, PP2");

  const test::CommandResult resumed = test::run_ranks(
      one_process(with(base, {"--load", dir + "/ck", "--ckpt-step", "5", "--log-jsonl", dir + "/resumed.jsonl"})), 1);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  expect_same(ref, read_jsonl(dir + "/resumed.jsonl"), 6, "RMSNorm + SwiGLU TP2 checkpoint resumed as one process");

  // The checkpoint names its variant: a LayerNorm run cannot load it.
  const test::CommandResult wrong = test::run_ranks(
      one_process(with(train_flags(dir, true), {"--swiglu", "--load", dir + "/ck", "--ckpt-step", "5"})), 1);
  EXPECT_NE(wrong.status, 0);
  EXPECT_NE(wrong.output.find("[--normalization] is \"LayerNorm\" but the checkpoint in "), std::string::npos)
      << wrong.output;
}

// A checkpoint holds global tensors: saved under TP2 (with the distributed optimizer over DP2)
// it resumes as one process, and one saved by one process resumes under TP2 + SP, with the
// next losses of the uninterrupted run.
TEST(TrainerTensorParallel, CheckpointsMoveBetweenTensorParallelSizes) {
  const std::string dir = test::scratch_dir("trainer_tp_resume");
  test::write_walk_corpus(dir);
  const auto base = train_flags(dir, /*dropout=*/true);
  const test::CommandResult whole = test::run_ranks(one_process(with(base, {"--log-jsonl", dir + "/whole.jsonl"})), 1);
  ASSERT_EQ(whole.status, 0) << whole.output;
  const auto ref = read_jsonl(dir + "/whole.jsonl");

  const test::CommandResult save_tp2 =
      test::run_ranks(with(base, {"--tensor-model-parallel-size", "2", "--use-distributed-optimizer", "--save",
                                  dir + "/ck_tp2", "--save-interval", "5", "--exit-interval", "5"}),
                      4);
  ASSERT_EQ(save_tp2.status, 0) << save_tp2.output;
  const test::CommandResult load_tp1 = test::run_ranks(
      one_process(with(base, {"--load", dir + "/ck_tp2", "--log-jsonl", dir + "/tp1_resumed.jsonl"})), 1);
  ASSERT_EQ(load_tp1.status, 0) << load_tp1.output;
  EXPECT_NE(load_tp1.output.find("--tensor-model-parallel-size: 2 -> 1"), std::string::npos) << load_tp1.output;
  const auto tp1_resumed = read_jsonl(dir + "/tp1_resumed.jsonl");
  EXPECT_EQ(tp1_resumed.count(5), 0u);
  expect_same(ref, tp1_resumed, 6, "TP2 checkpoint resumed under TP1");

  const test::CommandResult save_tp1 = test::run_ranks(
      one_process(with(base, {"--save", dir + "/ck_tp1", "--save-interval", "5", "--exit-interval", "5"})), 1);
  ASSERT_EQ(save_tp1.status, 0) << save_tp1.output;
  const test::CommandResult load_tp2 =
      test::run_ranks(with(base, {"--tensor-model-parallel-size", "2", "--sequence-parallel", "--load", dir + "/ck_tp1",
                                  "--log-jsonl", dir + "/tp2_resumed.jsonl"}),
                      2);
  ASSERT_EQ(load_tp2.status, 0) << load_tp2.output;
  expect_same(ref, read_jsonl(dir + "/tp2_resumed.jsonl"), 6, "TP1 checkpoint resumed under TP2 + SP");
}

// --dry-run under 2 ranks at TP 2 prints one rank's plan: its shards of the tiny GPT,
// vocabulary rows 50432 / 2 = 25216 x 32 = 806912, positions 16 x 32 = 512, per layer LayerNorms
// 2 x 64, QKV 48 x 32 + 48, proj 32 x 16 + 32, FC1 64 x 32 + 64, FC2 32 x 64 + 32 (6448; x 2
// layers), final LayerNorm 64: 820384 parameters (the whole model: 1639808).
TEST(TrainerTensorParallel, DryRunPrintsThePerRankPlan) {
  const std::string dir = test::scratch_dir("trainer_tp_dry_run");
  const test::CommandResult r = test::run_ranks(
      with(train_flags(dir, false), {"--tensor-model-parallel-size", "2", "--sequence-parallel", "--dry-run"}), 2);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(" > memory plan per rank (820384 parameters):"), std::string::npos) << r.output;
  const test::CommandResult one =
      test::run_ranks(with(train_flags(dir, false), {"--dry-run", "--make-vocab-size-divisible-by", "256"}), 1);
  ASSERT_EQ(one.status, 0) << one.output;
  EXPECT_NE(one.output.find(" > memory plan per rank (1639808 parameters):"), std::string::npos) << one.output;
}

TEST(TrainerTensorParallel, BadTensorParallelConfigIsOneLineBeforeAnythingStarts) {
  const std::string dir = test::scratch_dir("trainer_tp_config");
  test::write_walk_corpus(dir);
  // 3 ranks at TP 3: the 4 heads do not split (every rank finds it; rank 0 alone says so).
  const test::CommandResult r = test::run_ranks(
      with(train_flags(dir, false), {"--tensor-model-parallel-size", "3", "--global-batch-size", "2"}), 3);
  EXPECT_NE(r.status, 0);
  const std::string expected = "error: [--num-attention-heads] 4 is not divisible by --tensor-model-parallel-size 3\n";
  size_t count = 0;
  for (size_t at = r.output.find("error: "); at != std::string::npos; at = r.output.find("error: ", at + 1)) ++count;
  EXPECT_EQ(count, 1u) << "one line, from rank 0:\n" << r.output;
  EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("building GPT model"), std::string::npos) << "nothing started:\n" << r.output;

  // --distributed-backend takes nccl, mpi or gloo; rank 0 says so in one line.
  const test::CommandResult backend = test::run_ranks(
      with(train_flags(dir, false), {"--tensor-model-parallel-size", "2", "--distributed-backend", "ucc"}), 2);
  EXPECT_NE(backend.status, 0);
  EXPECT_NE(backend.output.find("error: [--distributed-backend] expected nccl, mpi or gloo, got 'ucc'\n"),
            std::string::npos)
      << backend.output;
  EXPECT_EQ(backend.output.find("building GPT model"), std::string::npos) << "nothing started:\n" << backend.output;
}

// bf16 under TP on CPU ranks: MPI reduces fp32 only, so the row-parallel all-reduces (TP2) and the
// sequence-parallel reduce-scatters of bf16 activations go through the host-staged communicator
// (comm/host_staged_communicator.h: widened to fp32, reduced, rounded once). TP2 and TP2 + SP
// follow the one-process bf16 run. Not to fp32 rounding: a row-parallel GEMM rounds each
// rank's half-sum to bf16 before the reduction, where one process rounds the whole sum once, so
// activations differ by ~1 bf16 ulp (2^-8 relative) here and there. Measured over the 10
// steps: loss within 3e-5 relative, grad norm within 2e-3; bounds 1e-3 and 2e-2. With the
// staged reduce-scatter dropped (each rank keeping its own partial sums) the loss moves by
// 1e-2 and the grad norm by 0.4, so the bounds separate a bug from bf16 rounding.
TEST(TrainerTensorParallel, Bf16RanksFollowTheOneProcessBf16Run) {
  const std::string dir = test::scratch_dir("trainer_tp_bf16");
  test::write_walk_corpus(dir);
  const auto base = with(train_flags(dir, false), {"--bf16"});
  const auto ref = learning_reference(base, dir);
  ASSERT_EQ(ref.size(), 10u);
  for (const bool sequence_parallel : {false, true}) {
    const std::string what = sequence_parallel ? "bf16 TP2 + SP" : "bf16 TP2";
    const std::string log = dir + (sequence_parallel ? "/sp.jsonl" : "/tp2.jsonl");
    auto flags = with(base, {"--tensor-model-parallel-size", "2", "--log-jsonl", log});
    if (sequence_parallel) flags.push_back("--sequence-parallel");
    const test::CommandResult r = test::run_ranks(flags, 2);
    ASSERT_EQ(r.status, 0) << r.output;
    expect_bf16_close(ref, read_jsonl(log), what, 1e-3, 2e-2);
  }
}

// 16-bit gradients (--bf16 --grad-reduce-in-bf16) under TP2 x DP2 with sequence parallelism and
// the distributed optimizer, its reduce-scatters overlapped with the backward over several
// buckets: the norms' partial gradients (summed over TP by reduce_layernorm_grads) are bf16 too,
// and must be summed before their buckets' DP reduction uses them. The run follows the
// one-process run with the same 16-bit gradients to bf16 rounding, with the overlap and without
// it. Measured: loss within 1.5e-5 relative, grad norm within 2.4e-3; with the norms' TP sum
// left out (each rank keeping its partial gradient) 9.8e-5 and 9.6e-3. Bounds 5e-5 and 5e-3.
TEST(TrainerTensorParallel, Bf16GradientsWithSequenceParallelAndOverlapFollowOneProcess) {
  const std::string dir = test::scratch_dir("trainer_tp_grad16");
  test::write_walk_corpus(dir);
  const auto base = with(train_flags(dir, false), {"--bf16", "--grad-reduce-in-bf16"});
  const auto ref = learning_reference(base, dir);
  ASSERT_EQ(ref.size(), 10u);
  for (const bool overlap : {false, true}) {
    const std::string what = std::string("16-bit gradients, TP2 x DP2 + SP") + (overlap ? ", overlapped" : "");
    const std::string log = dir + (overlap ? "/overlap.jsonl" : "/plain.jsonl");
    auto flags = with(base, {"--tensor-model-parallel-size", "2", "--sequence-parallel", "--use-distributed-optimizer",
                             "--ddp-bucket-size", "3001", "--log-jsonl", log});
    if (overlap) flags.push_back("--overlap-grad-reduce");
    const test::CommandResult r = test::run_ranks(flags, 4);
    ASSERT_EQ(r.status, 0) << r.output;
    expect_bf16_close(ref, read_jsonl(log), what, 5e-5, 5e-3);
  }
}

}  // namespace
}  // namespace megatron::train
