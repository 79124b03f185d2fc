// The parity spine of data parallelism (docs/design.md, "Parallelism is data layout plus
// collectives"): `megatron train` on a tiny GPT (dropout off, fp32) for 10 iterations as one
// process, as DP2 under mpirun, and as DP2 with --use-distributed-optimizer (one bucket, and
// several uneven buckets) logs the same losses and grad norms; a checkpoint saved by the DP2
// distributed-optimizer run resumes as one process with the same next losses; a layout error is one
// line before anything starts; a stopped rank (watchdog) or a killed rank (launcher) ends the whole
// job non-zero. Values are read from --log-jsonl (full double precision) of the last rank.
//
// Tolerance: relative 2e-6 on the loss and 1e-5 on the grad norm. The runs differ only in the
// order of fp32 summation: a gradient element is the sum of 4 micro-batch contributions,
// accumulated in one buffer on one rank and as 2 + 2 plus an all-reduce (scaled by 1/2,
// exact) on two; the norm sums the shards' partial sums. Each reordering changes a gradient
// by a few ulps (fp32 eps = 6e-8); Adam's update and the loss are smooth in the gradients, so
// after 10 steps losses agree to ~1e-7 relative (measured: <= 3e-8) and norms to ~1e-7
// (measured: <= 3e-8). The bounds leave a 20-60x margin; the smallest real bug (a missing
// 1/dp, a rank reading the wrong samples, a stale shard) moves the loss by > 1e-3.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
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

std::vector<std::string> train_flags(const std::string& dir) { return test::tiny_train_flags(dir, 2, "0"); }

TEST(TrainerDataParallel, Dp2AndDistributedOptimizerMatchOneProcess) {
  const std::string dir = test::scratch_dir("trainer_dp_parity");
  test::write_walk_corpus(dir);
  const auto base = train_flags(dir);
  const test::CommandResult one = test::run_ranks(with(base, {"--log-jsonl", dir + "/one.jsonl"}), 1);
  ASSERT_EQ(one.status, 0) << one.output;
  const auto ref = read_jsonl(dir + "/one.jsonl");
  ASSERT_EQ(ref.size(), 10u) << one.output;
  EXPECT_LT(ref.at(10).loss, ref.at(1).loss - 0.5) << "the run must learn for the comparison to mean anything";

  const test::CommandResult dp2 = test::run_ranks(with(base, {"--log-jsonl", dir + "/dp2.jsonl"}), 2);
  ASSERT_EQ(dp2.status, 0) << dp2.output;
  expect_same(ref, read_jsonl(dir + "/dp2.jsonl"), 1, "DP2");
  // Megatron's layout line, and the iteration lines printed once (by the last rank).
  EXPECT_NE(dp2.output.find("using world size: 2, data-parallel size: 2"), std::string::npos) << dp2.output;
  EXPECT_EQ(std::count(dp2.output.begin(), dp2.output.end(), '\n') > 0, true);
  const std::regex iteration_line(R"(\] iteration +10/ +10 \|)");
  const auto lines =
      std::distance(std::sregex_iterator(dp2.output.begin(), dp2.output.end(), iteration_line), std::sregex_iterator());
  EXPECT_EQ(lines, 1) << dp2.output;

  const test::CommandResult dist =
      test::run_ranks(with(base, {"--use-distributed-optimizer", "--log-jsonl", dir + "/dist.jsonl"}), 2);
  ASSERT_EQ(dist.status, 0) << dist.output;
  expect_same(ref, read_jsonl(dir + "/dist.jsonl"), 1, "DP2 distributed optimizer");

  // Several buckets whose pieces split parameters: 3001 elements per bucket or more. The
  // parameter norm is collective under the distributed optimizer; TensorBoard (last rank only)
  // logs it without leaving the other rank waiting (the watchdog would end a hang in 1 min).
  const test::CommandResult buckets = test::run_ranks(
      with(base, {"--use-distributed-optimizer", "--ddp-bucket-size", "3001", "--log-jsonl", dir + "/buckets.jsonl",
                  "--log-params-norm", "--tensorboard-dir", dir + "/tb", "--distributed-timeout-minutes", "1"}),
      2);
  ASSERT_EQ(buckets.status, 0) << buckets.output;
  expect_same(ref, read_jsonl(dir + "/buckets.jsonl"), 1, "DP2 distributed optimizer, buckets");
}

// --overlap-grad-reduce and --overlap-param-gather change when the collectives start, never
// what they compute: with several buckets (3001 elements or more) the overlapped runs log the
// very same losses and grad norms (==, not within a tolerance) as the runs without overlap,
// and a checkpoint written while the parameter gathers are in flight resumes identically.
// Under MPI the started collectives complete at once, so a bucket started before its gradients
// are final would carry a partial sum and move the loss.
TEST(TrainerDataParallel, OverlapChangesNothingButTiming) {
  const std::string dir = test::scratch_dir("trainer_dp_overlap");
  test::write_walk_corpus(dir);
  const auto base = with(train_flags(dir), {"--ddp-bucket-size", "3001"});
  auto run = [&](std::vector<std::string> more, const std::string& name) {
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), more.begin(), more.end());
    const test::CommandResult r = test::run_ranks(with(argv, {"--log-jsonl", dir + "/" + name}), 2);
    EXPECT_EQ(r.status, 0) << r.output;
    return read_jsonl(dir + "/" + name);
  };
  // Every iteration of `b` (a whole run or a part of one) equals `a`'s.
  auto expect_identical = [](const std::map<int64_t, test::Logged>& a, const std::map<int64_t, test::Logged>& b,
                             size_t expected, const std::string& what) {
    ASSERT_EQ(b.size(), expected) << what;
    for (const auto& [it, x] : b) {
      EXPECT_EQ(x.loss, a.at(it).loss) << what << " iteration " << it;
      EXPECT_EQ(x.grad_norm, a.at(it).grad_norm) << what << " iteration " << it;
    }
  };
  const auto plain = run({}, "plain.jsonl");
  ASSERT_EQ(plain.size(), 10u);
  expect_identical(plain, run({"--overlap-grad-reduce"}, "overlap.jsonl"), 10, "--overlap-grad-reduce");

  const auto dist = run({"--use-distributed-optimizer"}, "dist.jsonl");
  ASSERT_EQ(dist.size(), 10u);
  const std::vector<std::string> overlap_all = {"--use-distributed-optimizer", "--overlap-grad-reduce",
                                                "--overlap-param-gather"};
  expect_identical(dist, run(overlap_all, "dist_overlap.jsonl"), 10, "--overlap-param-gather");
  // Saved at iteration 5 (the gathers of step 5 in flight), stopped, resumed.
  std::vector<std::string> first = overlap_all, second = overlap_all;
  first.insert(first.end(), {"--save", dir + "/ck", "--save-interval", "5", "--exit-interval", "5"});
  second.insert(second.end(), {"--load", dir + "/ck"});
  expect_identical(dist, run(first, "first_half.jsonl"), 5, "--overlap-param-gather, saving");
  expect_identical(dist, run(second, "second_half.jsonl"), 5, "--overlap-param-gather, resumed");
}

TEST(TrainerDataParallel, OverlapParamGatherNeedsTheDistributedOptimizerAndGradOverlap) {
  const std::string dir = test::scratch_dir("trainer_dp_overlap_flags");
  test::write_walk_corpus(dir);
  const test::CommandResult r = test::run_ranks(with(train_flags(dir), {"--overlap-param-gather"}), 1);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("[--overlap-param-gather] needs --use-distributed-optimizer"), std::string::npos) << r.output;
  const test::CommandResult r2 =
      test::run_ranks(with(train_flags(dir), {"--overlap-param-gather", "--use-distributed-optimizer"}), 1);
  EXPECT_NE(r2.output.find("[--overlap-param-gather] needs --overlap-grad-reduce"), std::string::npos) << r2.output;
}

// fp16 with the dynamic loss scaler: each rank checks only its shard for inf/nan, and the flag
// is reduced over DP, so DP2 with the distributed optimizer skips exactly the iterations that
// DP2 with replicated state skips, and its loss scale follows the same path (from 2^16 with a
// window of 3: growth, overflow, back-off; the fp16 gradient buffer, Megatron's default,
// overflows at larger scales). The single process is not the reference here: as
// in Megatron each micro-batch's loss is divided by the rank's number of micro-batches (2 under
// DP2, 4 alone) and the 1/dp comes later in the reduction, so DP2's fp16 activation gradients
// are twice as large and overflow at other iterations.
TEST(TrainerDataParallel, Fp16SkipsTheSameIterationsUnderTheDistributedOptimizer) {
  const std::string dir = test::scratch_dir("trainer_dp_fp16");
  test::write_walk_corpus(dir);
  const auto base = with(train_flags(dir), {"--fp16", "--initial-loss-scale", "65536", "--loss-scale-window", "3"});
  const test::CommandResult one = test::run_ranks(with(base, {"--log-jsonl", dir + "/one.jsonl"}), 2);
  ASSERT_EQ(one.status, 0) << one.output;
  const test::CommandResult dist = test::run_ranks(
      with(base, {"--use-distributed-optimizer", "--ddp-bucket-size", "3001", "--log-jsonl", dir + "/dist.jsonl"}), 2);
  ASSERT_EQ(dist.status, 0) << dist.output;
  auto scaler_path = [](const std::string& path) {
    std::vector<std::string> out;
    std::ifstream in(path);
    std::string line;
    static const std::regex re(R"("loss_scale": ([0-9.eE+]+).*"skipped_iterations": (\d+))");
    while (std::getline(in, line)) {
      std::smatch m;
      if (std::regex_search(line, m, re)) out.push_back(std::string(m[1]) + " / " + std::string(m[2]));
    }
    return out;
  };
  const std::vector<std::string> a = scaler_path(dir + "/one.jsonl"), b = scaler_path(dir + "/dist.jsonl");
  ASSERT_EQ(a.size(), 10u);
  EXPECT_EQ(a, b);
  // The path has successes, growths and skips (else the comparison would prove little).
  EXPECT_EQ(a.front(), "65536.0 / 0");
  EXPECT_NE(std::find(a.begin(), a.end(), "262144.0 / 1"), a.end()) << "an overflow after two growths";
  EXPECT_NE(std::find(a.begin(), a.end(), "131072.0 / 0"), a.end()) << "successes at a grown scale";
}

TEST(TrainerDataParallel, CheckpointOfDp2DistributedOptimizerResumesAsOneProcess) {
  const std::string dir = test::scratch_dir("trainer_dp_resume");
  test::write_walk_corpus(dir);
  const auto base = train_flags(dir);
  const test::CommandResult whole = test::run_ranks(with(base, {"--log-jsonl", dir + "/whole.jsonl"}), 1);
  ASSERT_EQ(whole.status, 0) << whole.output;
  // DP2 with the sharded optimizer state saves at iteration 5 and exits.
  const test::CommandResult first = test::run_ranks(with(base, {"--use-distributed-optimizer", "--save", dir + "/ck",
                                                                "--save-interval", "5", "--exit-interval", "5"}),
                                                    2);
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_NE(first.output.find("saving checkpoint at iteration       5"), std::string::npos) << first.output;
  const test::CommandResult second =
      test::run_ranks(with(base, {"--load", dir + "/ck", "--log-jsonl", dir + "/resumed.jsonl"}), 1);
  ASSERT_EQ(second.status, 0) << second.output;
  const auto resumed = read_jsonl(dir + "/resumed.jsonl");
  EXPECT_EQ(resumed.count(5), 0u);
  expect_same(read_jsonl(dir + "/whole.jsonl"), resumed, 6, "resumed under DP1");
}

TEST(TrainerDataParallel, NprocPerNodeStartsTheRanksItself) {
  const std::string dir = test::scratch_dir("trainer_dp_nproc");
  test::write_walk_corpus(dir);
  const test::CommandResult one = test::run_ranks(with(train_flags(dir), {"--log-jsonl", dir + "/one.jsonl"}), 1);
  ASSERT_EQ(one.status, 0) << one.output;
  const test::CommandResult r =
      test::run_ranks(with(train_flags(dir), {"--nproc-per-node", "2", "--log-jsonl", dir + "/spawned.jsonl"}), 1);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("using world size: 2, data-parallel size: 2"), std::string::npos) << r.output;
  expect_same(read_jsonl(dir + "/one.jsonl"), read_jsonl(dir + "/spawned.jsonl"), 1, "--nproc-per-node 2");
}

TEST(TrainerDataParallel, BadLayoutIsOneLineErrorBeforeAnythingStarts) {
  const std::string dir = test::scratch_dir("trainer_dp_layout");
  test::write_walk_corpus(dir);
  // 3 ranks: the global batch of 8 is not divisible by micro-batch 2 x data-parallel 3.
  const test::CommandResult r = test::run_ranks(train_flags(dir), 3);
  EXPECT_NE(r.status, 0);
  const std::string expected =
      "error: [--global-batch-size] global batch size (8) is not divisible by micro batch size (2) times data "
      "parallel size (3)\n";
  size_t count = 0;
  for (size_t at = r.output.find("error: "); at != std::string::npos; at = r.output.find("error: ", at + 1)) ++count;
  EXPECT_EQ(count, 1u) << "one line, from rank 0:\n" << r.output;
  EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("building GPT model"), std::string::npos) << "nothing started:\n" << r.output;
}

}  // namespace
}  // namespace megatron::train

// ---- A rank that stops or dies ends the whole job, non-zero, within a minute. ----------------
namespace megatron::train {
namespace {

// Runs `argv` under mpirun -np 2 in the background with its output in `log`; once rank 1 has
// printed iteration 3, sends `signal` to rank 1; returns mpirun's exit status (or -1 when the
// job is still running 60 s later, after killing it).
int run_and_signal_rank1(const std::vector<std::string>& argv, const std::string& log, int signal) {
  std::vector<std::string> cmd = comm::local_mpirun_command(2, argv);
  const pid_t mpirun = ::fork();
  if (mpirun == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> args;
    for (std::string& w : cmd) args.push_back(w.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  auto read_log = [&] {
    std::ifstream in(log);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  // Rank 1: the child of mpirun whose environment says OMPI_COMM_WORLD_RANK=1.
  auto find_rank1 = [&]() -> pid_t {
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      const std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream stat(e.path() / "stat");
      std::string s((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
      const size_t close = s.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(s.substr(close + 2));
      char state;
      pid_t ppid = 0;
      rest >> state >> ppid;
      if (ppid != mpirun) continue;
      std::ifstream env(e.path() / "environ");
      std::string vars((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
      if (vars.find(std::string("OMPI_COMM_WORLD_RANK=1") + '\0') != std::string::npos) return std::stoi(name);
    }
    return -1;
  };
  const auto start = std::chrono::steady_clock::now();
  pid_t rank1 = -1;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(120)) {
    if (read_log().find("iteration        3/") != std::string::npos && (rank1 = find_rank1()) > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GT(rank1, 0) << "rank 1 never reached iteration 3:\n" << read_log();
  if (rank1 > 0) ::kill(rank1, signal);
  const auto signalled = std::chrono::steady_clock::now();
  int status = 0;
  while (std::chrono::steady_clock::now() - signalled < std::chrono::seconds(60)) {
    if (::waitpid(mpirun, &status, WNOHANG) == mpirun) return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(mpirun, SIGKILL);
  ::waitpid(mpirun, &status, 0);
  if (rank1 > 0) ::kill(rank1, SIGKILL);
  return -1;
}

std::vector<std::string> long_run_flags(const std::string& dir) {
  std::vector<std::string> f = train_flags(dir);
  for (size_t i = 0; i + 1 < f.size(); ++i) {
    if (f[i] == "--train-iters") f[i + 1] = "100000";
  }
  return f;
}

TEST(TrainerDataParallel, StoppedRankEndsTheJobThroughTheWatchdog) {
  const std::string dir = test::scratch_dir("trainer_dp_watchdog");
  test::write_walk_corpus(dir);
  // SIGSTOP: rank 1 is alive but makes no progress, so only the watchdog can notice (6 s: far
  // above an iteration's ~0.5 s on a loaded 2-core machine, so it never fires before).
  const int status = run_and_signal_rank1(with(long_run_flags(dir), {"--distributed-timeout-minutes", "0.1"}),
                                          dir + "/log.txt", SIGSTOP);
  std::ifstream in(dir + "/log.txt");
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_GT(status, 0) << "the job must end non-zero within 60 s:\n" << log;
  EXPECT_TRUE(std::regex_search(
      log,
      std::regex(R"(\[rank 0\] watchdog: \w+ #\d+ on group '[\w-]+' \(2 ranks\) has not completed after [0-9.]+ s)")))
      << log;
}

TEST(TrainerDataParallel, KilledRankEndsTheJobNamingTheRank) {
  const std::string dir = test::scratch_dir("trainer_dp_killed");
  test::write_walk_corpus(dir);
  const int status = run_and_signal_rank1(long_run_flags(dir), dir + "/log.txt", SIGKILL);
  std::ifstream in(dir + "/log.txt");
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_GT(status, 0) << "the job must end non-zero within 60 s:\n" << log;
  // mpirun names the dead rank ("process rank 1 with PID ... exited on signal 9").
  EXPECT_NE(log.find("rank 1"), std::string::npos) << log;
}

}  // namespace
}  // namespace megatron::train
