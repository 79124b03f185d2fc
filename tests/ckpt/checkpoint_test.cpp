// Checkpoints through the training loop: resume is bit-exact (every logged loss, grad norm,
// learning rate and loss scale of 2N straight iterations equals N + save + resume + N),
// including fp16 with loss-scale changes and dropout on; --finetune and --no-load-optim
// load what they say; a shape change is refused naming the flag; --exit-interval and
// SIGTERM save and stop; TensorBoard and JSONL files get the metrics.
#include "ckpt/checkpoint.h"
#include "train/sub_configs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "backend/ops.h"
#include "ckpt/checkpoint_io.h"
#include "ckpt/safetensors.h"
#include "cli/args.h"
#include "cli/train_args.h"
#include "comm/mpi_communicator.h"
#include "core/error.h"
#include "data/indexed_dataset.h"
#include "support/mpi.h"
#include "support/paths.h"
#include "train/trainer.h"

namespace megatron::ckpt {
namespace {

std::string write_corpus(const std::string& dir) {
  const std::string prefix = dir + "/walk_text_document";
  data::IndexedDatasetWriter writer(prefix, data::TokenDType::kUInt16);
  for (int d = 0; d < 150; ++d) {
    std::vector<int32_t> tokens;
    int32_t t = d % 37;
    for (int i = 0; i < 30 + d % 5; ++i) {
      tokens.push_back(t);
      t = (5 * t + 3) % 37;
    }
    const int32_t len = static_cast<int32_t>(tokens.size());
    writer.add_document(tokens, std::span<const int32_t>(&len, 1));
  }
  writer.finalize();
  return prefix;
}

struct TrainRun {
  std::string log;
  train::TrainSummary summary;
};

TrainRun train(const std::string& dir, std::vector<std::string> extra) {
  std::vector<std::string> flags = {"--num-layers",
                                    "2",
                                    "--hidden-size",
                                    "16",
                                    "--num-attention-heads",
                                    "2",
                                    "--seq-length",
                                    "8",
                                    "--micro-batch-size",
                                    "2",
                                    "--global-batch-size",
                                    "4",
                                    "--train-iters",
                                    "24",
                                    "--lr",
                                    "0.003",
                                    "--lr-decay-style",
                                    "cosine",
                                    "--lr-warmup-iters",
                                    "3",
                                    "--log-interval",
                                    "1",
                                    "--eval-interval",
                                    "8",
                                    "--eval-iters",
                                    "1",
                                    "--split",
                                    "90,10,0",
                                    "--data-path",
                                    dir + "/walk_text_document",
                                    "--data-cache-path",
                                    dir + "/cache",
                                    "--seed",
                                    "11",
                                    "--vocab-file",
                                    test::gpt2_vocab_file(),
                                    "--merge-file",
                                    test::gpt2_merge_file()};
  flags.insert(flags.end(), extra.begin(), extra.end());
  cli::Args args("train");
  cli::declare_train_flags(args);
  EXPECT_TRUE(args.parse(flags));
  train::TrainConfig c = cli::parse_train_config(args);
  c.model.vocab_size = 40;
  c.model.padded_vocab_size = 48;
  auto backend = backend::make_cpu_backend();
  std::ostringstream out;
  train::Trainer trainer(c, *backend, out);
  TrainRun r;
  r.summary = trainer.run();
  r.log = out.str();
  return r;
}

// Iteration lines without the fields that depend on the clock: iteration -> the rest.
std::map<int64_t, std::string> numbers(const std::string& log) {
  std::map<int64_t, std::string> lines;
  static const std::regex it(R"( iteration +(\d+)/)");
  static const std::regex clock(
      R"(^ \[[^\]]*\]| elapsed time per iteration \(ms\): [0-9.]+ \|| tokens per second: \d+ \| ETA: [0-9:]+ \|)");
  std::istringstream in(log);
  std::string s;
  while (std::getline(in, s)) {
    std::smatch m;
    if (s.find("consumed samples") == std::string::npos || !std::regex_search(s, m, it)) continue;
    lines[std::stoll(m[1])] = std::regex_replace(s, clock, "");
  }
  return lines;
}

void expect_resume_is_exact(const std::string& name, const std::vector<std::string>& precision) {
  const std::string dir = test::scratch_dir(name);
  write_corpus(dir);
  std::vector<std::string> straight = precision;
  const TrainRun full = train(dir, straight);

  std::vector<std::string> first = precision;
  for (const char* f : {"--save", "", "--exit-interval", "12"}) first.push_back(f);
  first[first.size() - 3] = dir + "/ckpt";
  const TrainRun a = train(dir, first);
  EXPECT_TRUE(a.summary.exited_early);
  EXPECT_NE(a.log.find("exiting program at iteration 12"), std::string::npos) << a.log;
  EXPECT_NE(a.log.find("saving checkpoint at iteration      12 to " + dir + "/ckpt"), std::string::npos) << a.log;

  std::vector<std::string> second = precision;
  second.push_back("--load");
  second.push_back(dir + "/ckpt");
  const TrainRun b = train(dir, second);
  EXPECT_NE(b.log.find("successfully loaded checkpoint from " + dir + "/ckpt at iteration 12"), std::string::npos)
      << b.log;

  const auto want = numbers(full.log), got_a = numbers(a.log), got_b = numbers(b.log);
  ASSERT_EQ(want.size(), 24u);
  if (std::find(precision.begin(), precision.end(), "--fp16") != precision.end()) {
    // The run must really exercise the scaler: skips, and the scale changing both before and
    // after the resume point.
    std::set<std::string> before, after;
    int skips = 0;
    static const std::regex scale(R"(loss scale: ([0-9.]+) \|)");
    for (const auto& [i, line] : want) {
      std::smatch m;
      if (std::regex_search(line, m, scale)) (i <= 12 ? before : after).insert(m[1]);
      skips += line.find("number of skipped iterations:   1") != std::string::npos;
    }
    EXPECT_GE(skips, 1);
    EXPECT_GE(before.size(), 2u);
    EXPECT_GE(after.size(), 2u) << "the scale must change after iteration 12 too";
  }
  ASSERT_EQ(got_a.size(), 12u);
  ASSERT_EQ(got_b.size(), 12u);
  for (const auto& [i, line] : got_a) EXPECT_EQ(line, want.at(i)) << "iteration " << i;
  for (const auto& [i, line] : got_b) EXPECT_EQ(line, want.at(i)) << "iteration " << i << " after resume";
  // The validation at iteration 16 and 24 read the same samples (consumed_valid restored).
  const auto valid = [](const std::string& log, const std::string& at) {
    const size_t p = log.find(" validation loss at iteration " + at + " |");
    return p == std::string::npos ? std::string("missing") : log.substr(p, log.find('\n', p) - p);
  };
  EXPECT_EQ(valid(b.log, "16"), valid(full.log, "16"));
  EXPECT_EQ(valid(b.log, "24"), valid(full.log, "24"));
}

TEST(Checkpoint, ResumeIsBitExactFp32WithDropout) { expect_resume_is_exact("ckpt_fp32", {}); }

TEST(Checkpoint, ResumeIsBitExactFp16WithLossScaleChanges) {
  // 2^16 overflows for the first iterations (skips), a window of 3 regrows it, so the scaler's
  // trackers are mid-way at iteration 12.
  expect_resume_is_exact("ckpt_fp16",
                         {"--fp16", "--initial-loss-scale", "65536", "--loss-scale-window", "3", "--hysteresis", "2"});
}

TEST(Checkpoint, ResumeIsBitExactBf16) { expect_resume_is_exact("ckpt_bf16", {"--bf16"}); }

// --save-interval 2:4,3:8,5 saves at 2, 4 (multiples of 2 up to 4), 6 (of 3 in (4, 8]), 10 (of 5
// after 8), and the final save at 12. --exit-samples 10 with 4 samples per iteration saves and
// exits after iteration 3 (12 consumed samples), with no final evaluation.
TEST(Checkpoint, SaveIntervalScheduleAndExitSamples) {
  const std::string dir = test::scratch_dir("ckpt_save_schedule");
  write_corpus(dir);
  train(dir, {"--save", dir + "/ckpt", "--train-iters", "12", "--save-interval", "2:4,3:8,5"});
  std::vector<int64_t> saved;
  for (const ckpt::CheckpointSummary& s : ckpt::list_checkpoints(dir + "/ckpt")) saved.push_back(s.iteration);
  EXPECT_EQ(saved, (std::vector<int64_t>{2, 4, 6, 10, 12}));

  const TrainRun ex = train(dir, {"--save", dir + "/exit", "--train-iters", "12", "--exit-samples", "10"});
  EXPECT_TRUE(ex.summary.exited_early);
  EXPECT_EQ(ex.summary.iterations, 3);
  EXPECT_EQ(ex.summary.consumed_samples, 12);
  EXPECT_NE(ex.log.find("exiting program at iteration 3 after 12 consumed samples (--exit-samples 10)"),
            std::string::npos)
      << ex.log;
  saved.clear();
  for (const ckpt::CheckpointSummary& s : ckpt::list_checkpoints(dir + "/exit")) saved.push_back(s.iteration);
  EXPECT_EQ(saved, (std::vector<int64_t>{3}));
}

TEST(Checkpoint, FinetuneAndNoLoadOptimAndShapeChecks) {
  const std::string dir = test::scratch_dir("ckpt_modes");
  write_corpus(dir);
  train(dir, {"--save", dir + "/ckpt", "--train-iters", "6", "--save-interval", "3", "--save-keep-last", "1"});
  const std::vector<ckpt::CheckpointSummary> list = ckpt::list_checkpoints(dir + "/ckpt");
  ASSERT_EQ(list.size(), 1u) << "keep-last 1";
  EXPECT_EQ(list[0].iteration, 6);

  const TrainRun ft =
      train(dir, {"--load", dir + "/ckpt", "--finetune", "--train-iters", "2", "--lr-warmup-iters", "0"});
  EXPECT_NE(ft.log.find(" iteration        1/       2 | consumed samples:            4 |"), std::string::npos)
      << "finetune starts at iteration 0 with no consumed samples\n"
      << ft.log;

  const TrainRun nl = train(dir, {"--load", dir + "/ckpt", "--no-load-optim", "--train-iters", "8"});
  EXPECT_NE(nl.log.find(" iteration        7/       8 | consumed samples:           28 |"), std::string::npos)
      << nl.log;

  try {
    train(dir, {"--load", dir + "/ckpt", "--hidden-size", "32"});
    ADD_FAILURE() << "a hidden-size change must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[--hidden-size]", 0), 0u) << e.what();
  }
  try {
    train(dir, {"--load", dir + "/nothing", "--exit-on-missing-checkpoint"});
    ADD_FAILURE() << "missing checkpoint with --exit-on-missing-checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[--load]"), std::string::npos) << e.what();
  }
  const TrainRun fresh = train(dir, {"--load", dir + "/nothing", "--train-iters", "1", "--lr-warmup-iters", "0"});
  EXPECT_NE(fresh.log.find("WARNING: could not find the metadata file"), std::string::npos);
}

TEST(Checkpoint, SigtermSavesAndStops) {
  const std::string dir = test::scratch_dir("ckpt_sigterm");
  write_corpus(dir);
  train::Trainer::request_exit();  // as if SIGTERM arrived during the first iteration
  const TrainRun r = train(dir, {"--save", dir + "/ckpt", "--exit-signal-handler"});
  EXPECT_TRUE(r.summary.exited_early);
  EXPECT_EQ(r.summary.iterations, 1);
  EXPECT_NE(r.log.find("exiting program after receiving SIGTERM."), std::string::npos);
  const std::optional<ckpt::TrackerInfo> tracker = ckpt::read_tracker(dir + "/ckpt");
  ASSERT_TRUE(tracker.has_value());
  EXPECT_EQ(tracker->iteration, 1);
}

// all_ranks_see_directory under mpirun -np 2: true when both ranks pass the same directory (and
// the probe is gone afterwards, the directory created); false on both when rank 1's is another
// directory, as a node-local disk under the same path on another node would be; an Error on
// both when rank 0 cannot create it.
TEST(Checkpoint, AllRanksSeeDirectoryNoticesNodeLocalStorage) {
  if (test::relaunch_under_mpirun(2)) return;
  comm::MpiRuntime mpi;
  auto world = mpi.world();
  // One path on both ranks: rank 0's scratch directory (named with its pid).
  double pid = world->rank() == 0 ? static_cast<double>(::getpid()) : 0.0;
  world->all_reduce_host({&pid, 1}, comm::ReduceOp::kMax);
  const std::string dir =
      test::binary_dir() + "/test_scratch/ckpt_shared_probe-" + std::to_string(static_cast<int64_t>(pid));
  if (world->rank() == 0) test::scratch_dir("ckpt_shared_probe");
  world->barrier();
  EXPECT_TRUE(ckpt::all_ranks_see_directory(dir + "/save", *world));
  world->barrier();
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/save"));
  EXPECT_TRUE(std::filesystem::is_empty(dir + "/save")) << "the probe file is removed";
  const std::string mine = dir + "/save_of_rank" + std::to_string(world->rank());
  std::filesystem::create_directories(mine);
  EXPECT_FALSE(ckpt::all_ranks_see_directory(mine, *world));
  if (world->rank() == 0) std::ofstream(dir + "/a_file") << "x";
  world->barrier();
  try {
    ckpt::all_ranks_see_directory(dir + "/a_file/save", *world);
    ADD_FAILURE() << "no error on rank " << world->rank();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(dir + "/a_file"), std::string::npos) << what;
    if (world->rank() == 1) EXPECT_NE(what.find("failed on another rank"), std::string::npos) << what;
  }
}

// checkpoint_save_memory: its checkpoint bytes are the saved files' tensor bytes (fp32 and bf16,
// for the layout that saved them and for every other: the files do not depend on the layout),
// and what a save holds beyond training is bounded by the largest saved tensor (here an MLP
// weight, 64 x 16, larger than this vocabulary's 48 x 16 embedding; fp32 with the optimizer
// state, the model dtype without), whatever the layout.
TEST(Checkpoint, SaveMemoryIsBoundedByTheLargestTensor) {
  const std::string dir = test::scratch_dir("ckpt_save_memory");
  write_corpus(dir);
  for (const char* precision : {"fp32", "bf16"}) {
    const bool bf16 = std::string(precision) == "bf16";
    const std::string save = dir + "/ckpt_" + precision;
    std::vector<std::string> flags = {"--train-iters", "4",  "--lr-warmup-iters", "1",
                                      "--save",        save, "--save-interval",   "2"};
    if (bf16) flags.push_back("--bf16");
    train(dir, flags);
    int64_t bytes = 0, largest = 0, largest_weight = 0;
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
      const ckpt::SafetensorsFile f(save + "/iter_0000002/" + file);
      for (const ckpt::SafetensorsTensor& t : f.tensors()) {
        bytes += t.bytes;
        largest = std::max(largest, t.bytes);
        if (std::string(file) == "model.safetensors") largest_weight = std::max(largest_weight, t.bytes);
      }
    }
    EXPECT_EQ(largest, 64 * 16 * 4) << "the fixture's largest tensor is an fp32 MLP weight's state";
    cli::Args args("train");
    cli::declare_train_flags(args);
    std::vector<std::string> argv = {"--num-layers",
                                     "2",
                                     "--hidden-size",
                                     "16",
                                     "--num-attention-heads",
                                     "2",
                                     "--seq-length",
                                     "8",
                                     "--micro-batch-size",
                                     "2",
                                     "--train-iters",
                                     "2",
                                     "--lr",
                                     "0.003",
                                     "--dry-run",
                                     "--save",
                                     save};
    if (bf16) argv.push_back("--bf16");
    ASSERT_TRUE(args.parse(argv));
    train::TrainConfig c = cli::parse_train_config(args);
    c.model.vocab_size = 40;
    c.model.padded_vocab_size = 48;
    for (const auto& [tp, pp] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 2}, {2, 1}, {2, 2}}) {
      train::TrainConfig layout = c;
      layout.tensor_model_parallel_size = tp;
      layout.pipeline_model_parallel_size = pp;
      layout.world_size = tp * pp;
      const ckpt::CheckpointSaveMemory m =
          ckpt::checkpoint_save_memory(train::checkpoint_run(layout), !layout.no_save_optim);
      EXPECT_EQ(m.checkpoint_bytes, bytes) << precision << " tp " << tp << " pp " << pp;
      EXPECT_EQ(m.host_bytes, 2 * largest);
      EXPECT_EQ(m.device_bytes, largest);
    }
    c.no_save_optim = true;
    EXPECT_EQ(ckpt::checkpoint_save_memory(train::checkpoint_run(c), !c.no_save_optim).device_bytes, largest_weight)
        << "weights only: the model dtype";
    EXPECT_EQ(largest_weight, 64 * 16 * (bf16 ? 2 : 4));
  }
}

TEST(Checkpoint, TensorBoardAndJsonl) {
  const std::string dir = test::scratch_dir("ckpt_tb");
  write_corpus(dir);
  train(dir, {"--tensorboard-dir", dir + "/tb", "--log-jsonl", dir + "/metrics.jsonl", "--train-iters", "8",
              "--log-validation-ppl-to-tensorboard", "--log-timers-to-tensorboard", "--timing-log-level", "1",
              "--log-memory-to-tensorboard", "--log-world-size-to-tensorboard"});
  std::ifstream jl(dir + "/metrics.jsonl");
  std::string line;
  int iterations = 0, validations = 0;
  while (std::getline(jl, line)) {
    iterations += line.find("\"consumed_samples\"") != std::string::npos;
    validations += line.find("\"split\":\"validation\"") != std::string::npos ||
                   line.find("\"split\": \"validation\"") != std::string::npos;
  }
  EXPECT_EQ(iterations, 8);
  EXPECT_EQ(validations, 2);  // iteration 8 and the final one
  int event_files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/tb")) {
    event_files += e.path().filename().string().starts_with("events.out.tfevents.");
    EXPECT_GT(std::filesystem::file_size(e.path()), 1000u);
    // The tags Megatron writes for these flags (the records themselves are decoded and
    // CRC-checked by tests/obs/tensorboard_reader_test.py).
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const char* tag :
         {"learning-rate", "learning-rate vs samples", "lm loss", "lm loss vs samples", "loss-scale", "grad-norm",
          "iteration-time", "forward-backward-time", "optimizer-time", "lm loss validation",
          "lm loss validation ppl vs samples", "mem-allocated-bytes", "mem-reserved-bytes", "mem-allocated-count",
          "world-size", "world-size vs samples", "all-grads-sync-time", "optimizer-inner-step-time"}) {
      EXPECT_NE(bytes.find(tag), std::string::npos) << tag;
    }
  }
  EXPECT_EQ(event_files, 1);
}

}  // namespace
}  // namespace megatron::ckpt
