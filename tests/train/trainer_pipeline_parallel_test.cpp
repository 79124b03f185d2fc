// The parity spine of pipeline parallelism (docs/design.md, "Parallelism is data layout plus
// collectives"): `megatron train` on a tiny GPT (4 layers, fp32, dropout off, 10 iterations) as one
// process and as PP2 (1F1B), PP4, PP2 interleaved (2 chunks of 1 layer per stage), TP2 x PP2 and
// TP2 x PP2 x DP2 (8 ranks), each also with --use-distributed-optimizer and full recomputation
// together (and, for PP2 interleaved and the 8-rank layout, each of the two alone), logs the same
// losses and grad norms (PP2 interleaved also with dropout on; PP4 and TP2 + SP x PP2 interleaved
// also on documents packed into samples, --reset-position-ids and --reset-attention-mask);
// checkpoints saved under PP2 resume under PP1 and the reverse with the next losses of the
// uninterrupted run; --dry-run prints every stage's plan; bad pipeline configurations are one line
// before anything starts. Values are read from --log-jsonl (full double precision) of the last
// rank, which is on the last stage.
//
// Tolerance (test/support/parity_runs.h): relative 2e-6 on the loss and 1e-5 on the grad norm,
// as the DP and TP parity tests. Pipelining itself changes no arithmetic inside a stage: each
// micro-batch runs the same ops on the same values, the activations cross stages bit for bit,
// and the gradients of a parameter accumulate over the micro-batches in the same order. What
// differs is the order of a few fp32 sums: the tied word embedding's gradient is the sum of
// the two stages' partial sums (output layer on the last stage, embedding lookup on the first)
// instead of one running sum, and the grad norm adds the stages' partial squares. With TP the
// reorderings of the TP parity test come on top. Each moves a value by a few fp32 ulps (6e-8
// relative), and after 10 Adam steps losses agree to ~1e-7. A real bug (a layer on the wrong
// stage, an activation set reused too early, a missing embedding reduction, the shared
// embedding counted twice in the norm) moves the loss or the norm by > 1e-3.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <utility>
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

// 4 layers (PP2: 2 per stage; interleaved: 1 per chunk), hidden 32, 4 heads, seq 16, global
// batch 8 of micro-batches of 2 (4 micro-batches per iteration; 2 per DP rank at DP2).
std::vector<std::string> train_flags(const std::string& dir, const char* dropout = "0") {
  return test::tiny_train_flags(dir, 4, dropout);
}

// TP2 pads the vocabulary to 50432 (a multiple of 128 * 2); TP1 runs ask for the same rows.
std::vector<std::string> tp1(std::vector<std::string> a) {
  return with(std::move(a), {"--make-vocab-size-divisible-by", "256"});
}

const std::vector<std::string> kDistributed = {"--use-distributed-optimizer", "--ddp-bucket-size", "3001"};
const std::vector<std::string> kRecompute = {"--recompute-granularity", "full", "--recompute-method", "uniform",
                                             "--recompute-num-layers",  "1"};

// Extra flags a layout also runs with, and the name they add.
struct Variant {
  std::string suffix;
  std::vector<std::string> flags;
};
std::vector<Variant> plain_and_both() {
  std::vector<std::string> both = kDistributed;
  both.insert(both.end(), kRecompute.begin(), kRecompute.end());
  return {{"", {}}, {" + distributed optimizer + full recompute", both}};
}

struct Layout {
  std::string name;
  int np;
  std::vector<std::string> flags;  // with the TP1 padding where needed
};

// `documents`: the short-document corpus, trained with --reset-position-ids,
// --reset-attention-mask and --eod-mask-loss (every layout and the reference).
void parity(const std::string& test_name, const std::vector<Layout>& layouts, const char* dropout = "0",
            const std::vector<Variant>& variants = plain_and_both(), bool documents = false) {
  const std::string dir = test::scratch_dir(test_name);
  if (documents) {
    test::write_short_walk_corpus(dir);
  } else {
    test::write_walk_corpus(dir);
  }
  auto base = train_flags(dir, dropout);
  if (documents) base = with(base, {"--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss"});
  const test::CommandResult one = test::run_ranks(tp1(with(base, {"--log-jsonl", dir + "/one.jsonl"})), 1);
  ASSERT_EQ(one.status, 0) << one.output;
  const auto ref = read_jsonl(dir + "/one.jsonl");
  ASSERT_EQ(ref.size(), 10u) << one.output;
  EXPECT_LT(ref.at(10).loss, ref.at(1).loss - 0.5) << "the run must learn for the comparison to mean anything";
  if (documents) {
    // The masks change what is learned: without the two resets the losses differ by ~2e-3
    // relative after 10 iterations, 1000x the parity tolerance, so a layout that ignored them
    // would fail below.
    const std::string log = dir + "/one_without_resets.jsonl";
    const test::CommandResult r =
        test::run_ranks(tp1(with(train_flags(dir, dropout), {"--eod-mask-loss", "--log-jsonl", log})), 1);
    ASSERT_EQ(r.status, 0) << r.output;
    const auto without = read_jsonl(log);
    ASSERT_EQ(without.size(), 10u) << r.output;
    EXPECT_GT(std::abs(without.at(10).loss - ref.at(10).loss), 5e-4 * ref.at(10).loss)
        << "with resets " << ref.at(10).loss << ", without " << without.at(10).loss;
  }
  for (const Layout& l : layouts) {
    for (const Variant& v : variants) {
      const std::string name = l.name + v.suffix;
      const std::string log =
          dir + "/" + std::to_string(&l - layouts.data()) + "_" + std::to_string(&v - variants.data()) + ".jsonl";
      std::vector<std::string> argv = with(l.flags, {"--log-jsonl", log});
      argv.insert(argv.end(), v.flags.begin(), v.flags.end());
      std::vector<std::string> full = base;
      full.insert(full.end(), argv.begin(), argv.end());
      const test::CommandResult r = test::run_ranks(full, l.np);
      ASSERT_EQ(r.status, 0) << name << "\n" << r.output;
      expect_same(ref, read_jsonl(log), 1, name);
    }
  }
}

TEST(TrainerPipelineParallel, Pp2Pp4AndInterleavedMatchOneProcess) {
  parity("trainer_pp_parity",
         {{"PP2", 2, {"--pipeline-model-parallel-size", "2", "--make-vocab-size-divisible-by", "256"}},
          // One layer per stage; the two middle stages send and receive both ways in one exchange.
          {"PP4", 4, {"--pipeline-model-parallel-size", "4", "--make-vocab-size-divisible-by", "256"}},
          {"PP2 interleaved (vp 2)",
           2,
           {"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1",
            "--make-vocab-size-divisible-by", "256"}}});
}

TEST(TrainerPipelineParallel, Tp2Pp2AndTp2Pp2Dp2MatchOneProcess) {
  parity("trainer_tp_pp_parity",
         {{"TP2 x PP2", 4, {"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"}},
          {"TP2 x PP2 x DP2",
           8,
           {"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--sequence-parallel"}}});
}

// The distributed optimizer and recomputation each on their own (the tests above run them
// together), on the interleaved schedule and on the 8-rank layout.
TEST(TrainerPipelineParallel, DistributedOptimizerAndRecomputeEachAloneMatchOneProcess) {
  parity("trainer_pp_parity_each",
         {{"PP2 interleaved (vp 2)",
           2,
           {"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1",
            "--make-vocab-size-divisible-by", "256"}},
          {"TP2 x PP2 x DP2",
           8,
           {"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--sequence-parallel"}}},
         "0", {{" + distributed optimizer", kDistributed}, {" + full recompute", kRecompute}});
}

// Dropout on (hidden and attention): every stage draws the single-process masks (the streams
// take the global layer index and the micro-batch's own dropout context, also when several
// micro-batches are in flight and when recomputation replays them).
TEST(TrainerPipelineParallel, InterleavedWithDropoutMatchesOneProcess) {
  parity("trainer_pp_parity_dropout",
         {{"PP2 interleaved (vp 2), dropout 0.1",
           2,
           {"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1",
            "--make-vocab-size-divisible-by", "256"}}},
         "0.1");
}

// Documents packed into samples: every stage reads each micro-batch's key starts (not only
// the first and last), the first its position ids, under TP + SP the attention of each rank's
// heads follows the same documents; dropout draws the single-process masks.
TEST(TrainerPipelineParallel, DocumentMasksMatchOneProcess) {
  parity("trainer_pp_parity_documents",
         {{"PP4", 4, {"--pipeline-model-parallel-size", "4", "--make-vocab-size-divisible-by", "256"}},
          {"TP2 + SP x PP2 interleaved (vp 2)",
           4,
           {"--tensor-model-parallel-size", "2", "--sequence-parallel", "--pipeline-model-parallel-size", "2",
            "--num-layers-per-virtual-pipeline-stage", "1"}}},
         "0.1", plain_and_both(), /*documents=*/true);
}

// Checkpoints hold global tensors by global layer names: saved under PP2 (the last stage's
// copy of the tied embedding is not saved twice) they resume as one process, and the reverse;
// so does a checkpoint streamed from TP2 x PP2 x DP2 with the distributed optimizer.
TEST(TrainerPipelineParallel, CheckpointsMoveBetweenPipelineSizes) {
  const std::string dir = test::scratch_dir("trainer_pp_resume");
  test::write_walk_corpus(dir);
  const auto base = tp1(train_flags(dir));
  const test::CommandResult whole = test::run_ranks(with(base, {"--log-jsonl", dir + "/whole.jsonl"}), 1);
  ASSERT_EQ(whole.status, 0) << whole.output;
  const auto ref = read_jsonl(dir + "/whole.jsonl");

  const test::CommandResult save_pp2 =
      test::run_ranks(with(base, {"--pipeline-model-parallel-size", "2", "--use-distributed-optimizer", "--save",
                                  dir + "/ck_pp2", "--save-interval", "5", "--exit-interval", "5"}),
                      4);
  ASSERT_EQ(save_pp2.status, 0) << save_pp2.output;
  const test::CommandResult load_pp1 =
      test::run_ranks(with(base, {"--load", dir + "/ck_pp2", "--log-jsonl", dir + "/pp1_resumed.jsonl"}), 1);
  ASSERT_EQ(load_pp1.status, 0) << load_pp1.output;
  EXPECT_NE(load_pp1.output.find("--pipeline-model-parallel-size: 2 -> 1"), std::string::npos) << load_pp1.output;
  const auto pp1_resumed = read_jsonl(dir + "/pp1_resumed.jsonl");
  EXPECT_EQ(pp1_resumed.count(5), 0u);
  expect_same(ref, pp1_resumed, 6, "PP2 x DP2 checkpoint resumed under PP1");

  const test::CommandResult save_pp1 =
      test::run_ranks(with(base, {"--save", dir + "/ck_pp1", "--save-interval", "5", "--exit-interval", "5"}), 1);
  ASSERT_EQ(save_pp1.status, 0) << save_pp1.output;
  const test::CommandResult load_pp2 =
      test::run_ranks(with(base, {"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1",
                                  "--load", dir + "/ck_pp1", "--log-jsonl", dir + "/pp2_resumed.jsonl"}),
                      2);
  ASSERT_EQ(load_pp2.status, 0) << load_pp2.output;
  expect_same(ref, read_jsonl(dir + "/pp2_resumed.jsonl"), 6, "PP1 checkpoint resumed under PP2 interleaved");

  // Every part of the streamed save at once (ckpt/checkpoint.h): TP gathers, the sharded
  // optimizer state gathered per parameter over DP, and each stage's tensors sent to rank 0.
  const test::CommandResult save_8 = test::run_ranks(
      with(base, {"--tensor-model-parallel-size", "2", "--make-vocab-size-divisible-by", "128",  // 50432 too
                  "--pipeline-model-parallel-size", "2", "--use-distributed-optimizer", "--ddp-bucket-size", "3001",
                  "--save", dir + "/ck_8", "--save-interval", "5", "--exit-interval", "5"}),
      8);
  ASSERT_EQ(save_8.status, 0) << save_8.output;
  const test::CommandResult load_8 =
      test::run_ranks(with(base, {"--load", dir + "/ck_8", "--log-jsonl", dir + "/from_8.jsonl"}), 1);
  ASSERT_EQ(load_8.status, 0) << load_8.output;
  expect_same(ref, read_jsonl(dir + "/from_8.jsonl"), 6,
              "TP2 x PP2 x DP2 distributed-optimizer checkpoint resumed as one process");
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The parallel save (every rank writes what it holds at its offsets: TP shards by rows and by
// columns, replicated tensors split over DP, the distributed optimizer's owned ranges across
// bucket boundaries) writes the very files of the streamed save (--no-ckpt-fully-parallel-save:
// rank 0 writes every tensor, gathered and sent to it) of the same run: byte for byte, metadata
// included. fp16 for the main_param tensors; buckets of 3001 elements cut parameters.
TEST(TrainerPipelineParallel, ParallelSaveWritesTheStreamedFiles) {
  const std::string dir = test::scratch_dir("trainer_pp_parallel_save");
  test::write_walk_corpus(dir);
  const auto base = with(train_flags(dir), {"--make-vocab-size-divisible-by", "128", "--fp16", "--ddp-bucket-size",
                                            "3001", "--save-interval", "3", "--exit-interval", "3"});
  const std::vector<std::pair<std::vector<std::string>, int>> layouts = {
      {{"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--use-distributed-optimizer"}, 8},
      {{"--tensor-model-parallel-size", "2", "--sequence-parallel", "--pipeline-model-parallel-size", "2"}, 8},
      {{"--use-distributed-optimizer"}, 4},
      // The distributed optimizer on one DP rank: a shard per bucket, none of them sharded.
      {{"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--use-distributed-optimizer"}, 4},
  };
  int case_index = 0;
  for (const auto& [layout, np] : layouts) {
    std::vector<std::string> flags = base;
    flags.insert(flags.end(), layout.begin(), layout.end());
    const std::string parallel = dir + "/parallel" + std::to_string(case_index);
    const std::string streamed = dir + "/streamed" + std::to_string(case_index);
    const test::CommandResult a = test::run_ranks(with(flags, {"--save", parallel}), np);
    ASSERT_EQ(a.status, 0) << a.output;
    EXPECT_EQ(a.output.find("rank 0 writes the whole checkpoint"), std::string::npos) << a.output;
    const test::CommandResult b =
        test::run_ranks(with(flags, {"--save", streamed, "--no-ckpt-fully-parallel-save"}), np);
    ASSERT_EQ(b.status, 0) << b.output;
    for (const char* name : {"model.safetensors", "optimizer.safetensors", "metadata.json"}) {
      const std::string x = file_bytes(parallel + "/iter_0000003/" + name);
      EXPECT_FALSE(x.empty()) << name;
      EXPECT_TRUE(x == file_bytes(streamed + "/iter_0000003/" + name)) << name << " differs, layout " << case_index;
    }
    EXPECT_FALSE(std::filesystem::exists(parallel + "/iter_0000003/.shared_storage_probe"));
    ++case_index;
  }
}

// --async-save writes the synchronous save's checkpoints byte for byte while training goes on:
// DP2 x PP2 with the distributed optimizer, a save at every iteration (each waits for the one
// before, the others are committed when an iteration finds every rank done), the last one
// committed before the process exits.
TEST(TrainerPipelineParallel, AsyncSaveWritesTheSameCheckpoints) {
  const std::string dir = test::scratch_dir("trainer_pp_async_save");
  test::write_walk_corpus(dir);
  const auto base = with(tp1(train_flags(dir)), {"--pipeline-model-parallel-size", "2", "--use-distributed-optimizer",
                                                 "--train-iters", "4", "--save-interval", "1"});
  const test::CommandResult sync = test::run_ranks(with(base, {"--save", dir + "/sync"}), 4);
  ASSERT_EQ(sync.status, 0) << sync.output;
  const test::CommandResult async = test::run_ranks(with(base, {"--save", dir + "/async", "--async-save"}), 4);
  ASSERT_EQ(async.status, 0) << async.output;
  EXPECT_NE(async.output.find("writing it in the background (--async-save)"), std::string::npos) << async.output;
  EXPECT_NE(async.output.find(" > --async-save: "), std::string::npos) << "the buffer is pinned before training";
  EXPECT_EQ(file_bytes(dir + "/async/latest_checkpointed_iteration.txt"), "4");
  for (const char* it : {"iter_0000001", "iter_0000002", "iter_0000003", "iter_0000004"}) {
    for (const char* name : {"model.safetensors", "optimizer.safetensors", "metadata.json"}) {
      const std::string a = file_bytes(dir + "/async/" + it + "/" + name);
      EXPECT_FALSE(a.empty()) << it << "/" << name;
      EXPECT_TRUE(a == file_bytes(dir + "/sync/" + it + "/" + name)) << it << "/" << name << " differs";
    }
  }
}

// A write that fails on one rank mid-save (rank 1 may write files of at most 1 MB: `ulimit -f`,
// SIGXFSZ ignored, so its pwrite past that fails with EFBIG) stops both ranks with an error,
// rank 1 naming the file, rank 0 pointing at it, synchronously and with --async-save (where the
// failure surfaces when the save is committed); no checkpoint is named the latest.
TEST(TrainerPipelineParallel, AWriteFailureOnOneRankStopsBoth) {
  const std::string dir = test::scratch_dir("trainer_pp_write_failure");
  test::write_walk_corpus(dir);
  const auto base = with(tp1(train_flags(dir)), {"--save-interval", "2", "--exit-interval", "2"});
  for (const bool async : {false, true}) {
    const std::string save = dir + (async ? "/async" : "/sync");
    std::vector<std::string> flags = with(base, {"--save", save});
    if (async) flags.push_back("--async-save");
    std::vector<std::string> cmd = comm::local_mpirun_command(1, flags);
    cmd.insert(cmd.end(), {":", "-np", "1", "bash", "-c", "trap '' XFSZ; ulimit -f 1024; exec \"$@\"", "bash"});
    cmd.insert(cmd.end(), flags.begin(), flags.end());
    const test::CommandResult r = test::run_command("timeout 120 " + comm::shell_join(cmd), /*capture_stderr=*/true);
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_NE(r.status, 124) << "a rank hung: " << r.output;
    EXPECT_NE(r.output.find("model.safetensors: write failed: File too large"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("writing the checkpoint failed on another rank"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("successfully saved"), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(save + "/latest_checkpointed_iteration.txt"));
  }
}

// A --save directory rank 0 cannot create (a file is in the way) stops every rank before the
// first step (the start-up check that every rank sees it), none waiting for the others: rank 0
// names the path, the others point at it.
TEST(TrainerPipelineParallel, FailedSaveStopsEveryRank) {
  const std::string dir = test::scratch_dir("trainer_pp_failed_save");
  test::write_walk_corpus(dir);
  std::ofstream(dir + "/in_the_way") << "x";
  const test::CommandResult r = test::run_ranks(
      with(tp1(train_flags(dir)), {"--pipeline-model-parallel-size", "2", "--save", dir + "/in_the_way/ck",
                                   "--save-interval", "2", "--exit-interval", "2"}),
      2);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(dir + "/in_the_way"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("checking the directory failed on another rank"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" iteration "), std::string::npos) << "no step before the error: " << r.output;
}

// Ranks whose --load directories differ (node-local disks under one path) do not train on from
// different states: rank 0 reads a directory whose tracker names iteration 3, rank 1 a copy
// whose tracker names iteration 2 (mpirun's MPMD form gives each its own --load); every rank
// stops before the first step, naming both iterations.
TEST(TrainerPipelineParallel, RanksThatLoadDifferentCheckpointsStop) {
  const std::string dir = test::scratch_dir("trainer_pp_load_mismatch");
  test::write_walk_corpus(dir);
  const auto base = with(tp1(train_flags(dir)), {"--train-iters", "6"});
  const test::CommandResult saved =
      test::run_ranks(with(base, {"--save", dir + "/a", "--save-interval", "1", "--exit-interval", "3"}), 1);
  ASSERT_EQ(saved.status, 0) << saved.output;
  std::filesystem::copy(dir + "/a", dir + "/b", std::filesystem::copy_options::recursive);
  std::ofstream(dir + "/b/latest_checkpointed_iteration.txt", std::ios::trunc) << "2";
  std::vector<std::string> cmd = comm::local_mpirun_command(1, with(base, {"--load", dir + "/a"}));
  const std::vector<std::string> second = with(base, {"--load", dir + "/b"});
  cmd.insert(cmd.end(), {":", "-np", "1"});
  cmd.insert(cmd.end(), second.begin(), second.end());
  const test::CommandResult r = test::run_command("timeout 120 " + comm::shell_join(cmd), /*capture_stderr=*/true);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.status, 124) << "a rank hung: " << r.output;
  EXPECT_NE(r.output.find("the ranks loaded different checkpoints (iterations 2 to 3"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" iteration        4/"), std::string::npos) << "no step after the load: " << r.output;

  // Rank 1 finds no checkpoint at all: under --finetune both would start at iteration 0, one
  // from the loaded weights and one from random ones.
  std::filesystem::create_directories(dir + "/empty");
  std::vector<std::string> finetune = comm::local_mpirun_command(1, with(base, {"--load", dir + "/a", "--finetune"}));
  const std::vector<std::string> none = with(base, {"--load", dir + "/empty", "--finetune"});
  finetune.insert(finetune.end(), {":", "-np", "1"});
  finetune.insert(finetune.end(), none.begin(), none.end());
  const test::CommandResult f = test::run_command("timeout 120 " + comm::shell_join(finetune), /*capture_stderr=*/true);
  EXPECT_NE(f.status, 0) << f.output;
  EXPECT_NE(f.output.find("the ranks loaded different checkpoints (iterations none to 3"), std::string::npos)
      << f.output;
}

// Runs `base` + `more` on np ranks and returns its log.
std::map<int64_t, test::Logged> run_logged(const std::vector<std::string>& base, const std::vector<std::string>& more,
                                           int np, const std::string& log) {
  std::vector<std::string> argv = base;
  argv.insert(argv.end(), more.begin(), more.end());
  const test::CommandResult r = test::run_ranks(with(argv, {"--log-jsonl", log}), np);
  EXPECT_EQ(r.status, 0) << r.output;
  return read_jsonl(log);
}

// Every iteration of `b` (a whole run or a part of one) equals `a`'s, bit for bit.
void expect_identical(const std::map<int64_t, test::Logged>& a, const std::map<int64_t, test::Logged>& b,
                      size_t expected, const std::string& what) {
  ASSERT_EQ(b.size(), expected) << what;
  for (const auto& [it, x] : b) {
    ASSERT_TRUE(a.count(it)) << what << " iteration " << it;
    EXPECT_EQ(x.loss, a.at(it).loss) << what << " iteration " << it;
    EXPECT_EQ(x.grad_norm, a.at(it).grad_norm) << what << " iteration " << it;
  }
}

// --overlap-grad-reduce and --overlap-param-gather under DP2 x PP2, 1F1B and interleaved
// (vp 2), change when the collectives start, never what they compute: the overlapped runs log
// the very same losses and grad norms (==) as the runs without (the interleaved runs overlap
// the pipeline exchanges too, the default), and a checkpoint written while the parameter gathers
// are in flight resumes identically. Buckets of 3001 elements: several per chunk, and the tied
// embedding's own bucket on the first and last stage. Under MPI a started collective completes
// at once, so a bucket started before the last micro-batch's backward of its chunk (or the
// tied embedding's before its embedding-group sum) would reduce a partial gradient and move
// the loss.
TEST(TrainerPipelineParallel, OverlapChangesNothingButTiming) {
  const std::string dir = test::scratch_dir("trainer_pp_overlap");
  test::write_walk_corpus(dir);
  const auto base = with(tp1(train_flags(dir)), {"--ddp-bucket-size", "3001"});
  const std::vector<std::string> dist = {"--use-distributed-optimizer"};
  const std::vector<std::string> grads = {"--overlap-grad-reduce"};
  const std::vector<std::string> all = {"--use-distributed-optimizer", "--overlap-grad-reduce",
                                        "--overlap-param-gather", "--overlap-p2p-communication"};
  const std::vector<std::pair<std::string, std::vector<std::string>>> layouts = {
      {"DP2 x PP2", {"--pipeline-model-parallel-size", "2"}},
      {"DP2 x PP2 interleaved",
       {"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1"}}};
  for (size_t i = 0; i < layouts.size(); ++i) {
    const auto& [name, flags] = layouts[i];
    std::vector<std::string> b = base;
    b.insert(b.end(), flags.begin(), flags.end());
    const std::string at = dir + "/" + std::to_string(i);
    const auto plain = run_logged(b, {}, 4, at + "plain.jsonl");
    ASSERT_EQ(plain.size(), 10u) << name;
    expect_identical(plain, run_logged(b, grads, 4, at + "grads.jsonl"), 10, name + " --overlap-grad-reduce");
    const auto sharded = run_logged(b, dist, 4, at + "dist.jsonl");
    ASSERT_EQ(sharded.size(), 10u) << name;
    expect_identical(sharded, run_logged(b, all, 4, at + "all.jsonl"), 10,
                     name + " distributed optimizer, all overlaps");
    if (i == 1) {
      // Saved at iteration 5 (the gathers of step 5 in flight), stopped, resumed.
      std::vector<std::string> first = all, second = all;
      first.insert(first.end(), {"--save", dir + "/ck", "--save-interval", "5", "--exit-interval", "5"});
      second.insert(second.end(), {"--load", dir + "/ck"});
      expect_identical(sharded, run_logged(b, first, 4, at + "first_half.jsonl"), 5, name + " all overlaps, saving");
      expect_identical(sharded, run_logged(b, second, 4, at + "second_half.jsonl"), 5, name + " all overlaps, resumed");
    }
  }
}

// Pipeline exchange overlap, on by default with the interleaved schedule as in Megatron HEAD
// (PP2 and PP4, 8 layers so that PP4 has 2 chunks of 1 layer, dropout on), against
// --no-overlap-p2p-communication: the exchanges are split into activation and gradient groups,
// started, waited for later, and in the steady state the next forward's input is received
// during the backward (parallel::overlapped_exchanges); the values are the blocking exchanges'
// (==). A receive waited for too late, posted into a set still in use, or a send buffer
// overwritten while in flight would feed a stage other activations or gradients and move the
// loss. 1F1B never overlaps (Megatron's validate_args turns it off there, with its warning),
// and --overlap-p2p-communication is older Megatron's spelling of the default.
TEST(TrainerPipelineParallel, OverlappedP2PMatchesBlockingBitForBit) {
  const std::string dir = test::scratch_dir("trainer_pp_overlap_p2p");
  test::write_walk_corpus(dir);
  const auto base = tp1(test::tiny_train_flags(dir, 8, "0.1"));  // dropout on: the masks follow the micro-batches
  struct Case {
    std::string name;
    int np;
    std::vector<std::string> flags;
  };
  const std::vector<Case> cases = {
      {"PP2 interleaved", 2, {"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "2"}},
      {"PP4 interleaved", 4, {"--pipeline-model-parallel-size", "4", "--num-layers-per-virtual-pipeline-stage", "1"}}};
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<std::string> b = base;
    b.insert(b.end(), cases[i].flags.begin(), cases[i].flags.end());
    const std::string at = dir + "/" + std::to_string(i);
    const auto blocking = run_logged(b, {"--no-overlap-p2p-communication"}, cases[i].np, at + "blocking.jsonl");
    ASSERT_EQ(blocking.size(), 10u) << cases[i].name;
    expect_identical(blocking, run_logged(b, {}, cases[i].np, at + "overlap.jsonl"), 10,
                     cases[i].name + " overlapped by default");
    if (i == 0) {
      expect_identical(blocking, run_logged(b, {"--overlap-p2p-communication"}, cases[i].np, at + "alias.jsonl"), 10,
                       cases[i].name + " --overlap-p2p-communication");
    }
  }
}

// --dry-run at PP2 prints each stage's plan. Stage 0: word embedding 50432 x 32 = 1613824,
// positions 16 x 32 = 512, 2 layers of 12704 (LayerNorms 2 x 64, QKV 96 x 32 + 96, proj
// 32 x 32 + 32, FC1 128 x 32 + 128, FC2 32 x 128 + 32): 1639744. Stage 1: 2 layers, final
// LayerNorm 64 and its copy of the tied embedding: 1639296.
TEST(TrainerPipelineParallel, DryRunPrintsEveryStage) {
  const std::string dir = test::scratch_dir("trainer_pp_dry_run");
  const test::CommandResult r =
      test::run_ranks(tp1(with(train_flags(dir), {"--pipeline-model-parallel-size", "2", "--dry-run"})), 2);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(" > pipeline stage 0 of 2:\n > memory plan per rank (1639744 parameters):"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(" > pipeline stage 1 of 2:\n > memory plan per rank (1639296 parameters):"),
            std::string::npos)
      << r.output;
}

int occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// --timing-log-level: Megatron's timer blocks, gathered over the ranks and printed once by the
// last rank after each iteration line; the pipeline exchanges under p2p_communication's names;
// the distributed optimizer's params-all-gather; --timing-log-option all lists every rank.
// Timing (device syncs, barriers) changes no value: the losses are those of the untimed run.
TEST(TrainerPipelineParallel, TimersPrintMegatronsBlocksOnceForAllRanks) {
  const std::string dir = test::scratch_dir("trainer_pp_timers");
  test::write_walk_corpus(dir);
  const auto base = tp1(train_flags(dir));
  const test::CommandResult plain =
      test::run_ranks(with(base, {"--pipeline-model-parallel-size", "2", "--log-jsonl", dir + "/plain.jsonl"}), 2);
  ASSERT_EQ(plain.status, 0) << plain.output;
  EXPECT_EQ(occurrences(plain.output, "forward-backward ...."), 0) << "level 0 has no iteration timers";
  EXPECT_EQ(occurrences(plain.output, "    model-and-optimizer-setup ......................: ("), 1) << plain.output;

  const test::CommandResult pp2 = test::run_ranks(
      with(base, {"--pipeline-model-parallel-size", "2", "--timing-log-level", "2", "--log-jsonl", dir + "/pp2.jsonl"}),
      2);
  ASSERT_EQ(pp2.status, 0) << pp2.output;
  expect_same(read_jsonl(dir + "/plain.jsonl"), read_jsonl(dir + "/pp2.jsonl"), 1, "PP2 with timers");
  EXPECT_EQ(occurrences(pp2.output, "(min, max) time across ranks (ms):\n    forward-backward ...."), 10) << pp2.output;
  for (const char* name : {"forward-compute", "backward-compute", "batch-generator", "forward-send", "backward-recv",
                           "forward-send-backward-recv", "backward-send-forward-recv", "layernorm-grads-all-reduce",
                           "embedding-grads-all-reduce", "all-grads-sync", "optimizer-clip-main-grad",
                           "optimizer-inner-step", "optimizer"}) {
    EXPECT_EQ(occurrences(pp2.output, std::string("\n    ") + name + " ."), 10) << name << "\n" << pp2.output;
  }
  EXPECT_EQ(occurrences(pp2.output, "params-all-gather"), 0) << "the replicated optimizer gathers nothing";

  const test::CommandResult dp2 =
      test::run_ranks(with(base, {"--use-distributed-optimizer", "--timing-log-level", "1", "--timing-log-option",
                                  "all", "--log-jsonl", dir + "/dp2.jsonl"}),
                      2);
  ASSERT_EQ(dp2.status, 0) << dp2.output;
  EXPECT_EQ(occurrences(dp2.output, "times across ranks (ms):\n  forward-backward:\n     rank  0: "), 10) << dp2.output;
  EXPECT_EQ(occurrences(dp2.output, "\n  params-all-gather:\n     rank  0: "), 10) << dp2.output;
  EXPECT_EQ(occurrences(dp2.output, "\n     rank  1: "), 10 * occurrences(dp2.output, "\n     rank  0: ") / 10)
      << "every timer runs on both ranks";
  EXPECT_EQ(occurrences(dp2.output, "forward-compute"), 0) << "level 2 timers do not exist at level 1";
}

// check_for_nan_in_loss_and_grad under PP2: the last stage names its NaN loss, the first stage
// (no loss there) stops on the same step's NaN gradient norm; both exit, nobody waits on a peer.
TEST(TrainerPipelineParallel, NanLossStopsEveryStage) {
  const std::string dir = test::scratch_dir("trainer_pp_nan");
  test::write_walk_corpus(dir);
  const test::CommandResult r =
      test::run_ranks(with(tp1(train_flags(dir)), {"--pipeline-model-parallel-size", "2", "--lr", "1e30",
                                                   "--lr-warmup-iters", "0", "--distributed-timeout-minutes", "1"}),
                      2);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1: found NaN in the local forward loss at iteration "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0: found NaN in the gradients (grad norm) at iteration "), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("watchdog"), std::string::npos) << "the ranks stop together, not by timeout\n" << r.output;
}

void expect_one_line(const std::vector<std::string>& argv, int np, const std::string& expected) {
  const test::CommandResult r = test::run_ranks(argv, np);
  EXPECT_NE(r.status, 0);
  size_t count = 0;
  for (size_t at = r.output.find("error: "); at != std::string::npos; at = r.output.find("error: ", at + 1)) ++count;
  EXPECT_EQ(count, 1u) << "one line, from rank 0:\n" << r.output;
  EXPECT_NE(r.output.find("error: " + expected + "\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("building GPT model"), std::string::npos) << "nothing started:\n" << r.output;
}

TEST(TrainerPipelineParallel, BadPipelineConfigIsOneLineBeforeAnythingStarts) {
  const std::string dir = test::scratch_dir("trainer_pp_config");
  test::write_walk_corpus(dir);
  const auto base = tp1(train_flags(dir));
  expect_one_line(with(base, {"--pipeline-model-parallel-size", "3"}), 3,
                  "[--num-layers] 4 is not divisible by --pipeline-model-parallel-size 3");
  // Global batch 6 = 3 micro-batches: the interleaved schedule runs them in groups of 2.
  expect_one_line(with(base, {"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1",
                              "--global-batch-size", "6"}),
                  2,
                  "[--num-layers-per-virtual-pipeline-stage] number of microbatches (3) is not divisible by "
                  "--pipeline-model-parallel-size (2) when using the interleaved schedule");
  expect_one_line(with(base, {"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "3"}),
                  2,
                  "[--num-layers-per-virtual-pipeline-stage] the layers per pipeline stage (2) are not divisible by 3");
}

}  // namespace
}  // namespace megatron::train
