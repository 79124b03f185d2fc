// Checkpoint directories: Megatron's names and tracker text, round trips, keep-last-K,
// re-saving an iteration, cleanup of killed saves, one-line errors naming the file, and the
// core guarantee: a save killed with SIGKILL at a random instant always leaves a directory
// whose tracker names an intact checkpoint.
#include "ckpt/checkpoint_io.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "support/paths.h"

namespace megatron::ckpt {
namespace {

namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_all(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// The content of iteration `it`: every value is a function of (it, index), so a checkpoint
// that mixes two saves, or holds a partial file, is detected.
struct State {
  std::vector<float> weight;
  std::vector<float> exp_avg;
  std::vector<int64_t> step;
  State(int64_t it, size_t n) : weight(n), exp_avg(n / 2), step{it} {
    for (size_t i = 0; i < weight.size(); ++i)
      weight[i] = static_cast<float>((it * 7919 + static_cast<int64_t>(i)) % 65521);
    for (size_t i = 0; i < exp_avg.size(); ++i)
      exp_avg[i] = static_cast<float>((it * 31 + static_cast<int64_t>(i)) % 1021) * 0.5f;
  }
  std::vector<ckpt::CheckpointFile> files(int64_t it, bool with_optimizer = true) const {
    std::vector<ckpt::CheckpointFile> f;
    f.push_back(ckpt::CheckpointFile::safetensors(
        ckpt::kModelFileName, {{"weight", DType::kF32, {static_cast<int64_t>(weight.size())}, weight.data()}},
        {{"iteration", std::to_string(it)}}));
    if (with_optimizer) {
      f.push_back(ckpt::CheckpointFile::safetensors(
          ckpt::kOptimizerFileName, {{"exp_avg", DType::kF32, {static_cast<int64_t>(exp_avg.size())}, exp_avg.data()},
                                     {"step", DType::kI64, {1}, step.data()}}));
    }
    f.push_back(
        ckpt::CheckpointFile::text_file(ckpt::kMetadataFileName, "{\"iteration\": " + std::to_string(it) + "}"));
    return f;
  }
};

// Empty string when `ckpt` is exactly what State(it) saved; otherwise what differs.
std::string verify(const ckpt::LoadedCheckpoint& ckpt, int64_t it, size_t n) {
  const State want(it, n);
  if (ckpt.metadata_json != "{\"iteration\": " + std::to_string(it) + "}")
    return "metadata.json: " + ckpt.metadata_json;
  const ckpt::SafetensorsTensor& w = ckpt.model().at("weight");
  if (w.numel != static_cast<int64_t>(n) || std::memcmp(w.data, want.weight.data(), n * sizeof(float)) != 0) {
    return "model weight differs";
  }
  if (ckpt.model().metadata().at("iteration") != std::to_string(it)) return "model metadata differs";
  if (ckpt.optimizer() == nullptr) return "no optimizer file";
  const ckpt::SafetensorsTensor& m = ckpt.optimizer()->at("exp_avg");
  if (m.numel != static_cast<int64_t>(n / 2) || std::memcmp(m.data, want.exp_avg.data(), n / 2 * sizeof(float)) != 0) {
    return "exp_avg differs";
  }
  int64_t step = 0;
  std::memcpy(&step, ckpt.optimizer()->at("step").data, sizeof(step));
  if (step != it) return "step differs";
  return "";
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CheckpointIo, DirectoryNames) {
  EXPECT_EQ(ckpt::iteration_dir_name(100), "iter_0000100");
  EXPECT_EQ(ckpt::iteration_dir_name(0), "iter_0000000");
  EXPECT_EQ(ckpt::iteration_dir_name(123456789), "iter_123456789");
  EXPECT_EQ(ckpt::parse_iteration_dir_name("iter_0000100"), 100);
  EXPECT_EQ(ckpt::parse_iteration_dir_name("iter_123456789"), 123456789);
  EXPECT_FALSE(ckpt::parse_iteration_dir_name("iter_100"));
  EXPECT_FALSE(ckpt::parse_iteration_dir_name("iter_00001000"));  // not the canonical spelling
  EXPECT_FALSE(ckpt::parse_iteration_dir_name("iter_000010x"));
  EXPECT_FALSE(ckpt::parse_iteration_dir_name(".tmp_iter_0000100.12"));
}

TEST(CheckpointIo, SaveAndLoadMegatronLayout) {
  const std::string dir = test::scratch_dir("ckpt_roundtrip") + "/save";
  const State s(100, 1000);
  ckpt::save_checkpoint_dir(dir, 100, s.files(100));
  EXPECT_EQ(read_all(dir + "/latest_checkpointed_iteration.txt"), "100");  // no newline, as Megatron
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"iter_0000100", "latest_checkpointed_iteration.txt"}));
  EXPECT_EQ(entries(dir + "/iter_0000100"),
            (std::vector<std::string>{"metadata.json", "model.safetensors", "optimizer.safetensors"}));
  const ckpt::LoadedCheckpoint c = ckpt::load_checkpoint_dir(dir);
  ASSERT_TRUE(c.found);
  EXPECT_EQ(c.iteration, 100);
  EXPECT_FALSE(c.release);
  EXPECT_EQ(c.directory, dir + "/iter_0000100");
  EXPECT_EQ(verify(c, 100, 1000), "");
  EXPECT_EQ(c.model().at("weight").layout, ckpt::kDefaultTensorLayout);

  // --no-save-optim: no optimizer file, still loadable.
  ckpt::save_checkpoint_dir(dir, 200, s.files(100, false));
  const ckpt::LoadedCheckpoint c2 = ckpt::load_checkpoint_dir(dir);
  EXPECT_EQ(c2.iteration, 200);
  EXPECT_EQ(c2.optimizer(), nullptr);
  EXPECT_EQ(c2.tensor_files.size(), 1u);
  // An explicit iteration loads that one (Megatron's --ckpt-step).
  EXPECT_EQ(verify(ckpt::load_checkpoint_dir(dir, 100), 100, 1000), "");
  EXPECT_EQ(read_all(dir + "/latest_checkpointed_iteration.txt"), "200");
}

TEST(CheckpointIo, MissingTrackerMeansStartFromRandom) {
  const std::string dir = test::scratch_dir("ckpt_missing");
  const ckpt::LoadedCheckpoint c = ckpt::load_checkpoint_dir(dir);
  EXPECT_FALSE(c.found);
  EXPECT_EQ(c.tracker_path, dir + "/latest_checkpointed_iteration.txt");
  EXPECT_FALSE(ckpt::load_checkpoint_dir(dir + "/does/not/exist").found);
  EXPECT_TRUE(ckpt::list_checkpoints(dir + "/does/not/exist").empty());
}

TEST(CheckpointIo, TrackerFormats) {
  const std::string dir = test::scratch_dir("ckpt_tracker");
  const std::string tracker = dir + "/latest_checkpointed_iteration.txt";
  const State s(7, 64);
  ckpt::save_checkpoint_dir(dir, 7, s.files(7));
  for (const char* ok : {"7", " 7\n", "+7", "7\r\n"}) {
    write_all(tracker, ok);
    EXPECT_EQ(ckpt::read_tracker(dir)->iteration, 7) << ok;
    EXPECT_EQ(verify(ckpt::load_checkpoint_dir(dir), 7, 64), "") << ok;
  }
  for (const char* bad : {"", "abc", "0", "-5", "1.5", "7 8", "99999999999999999999", "releases", "0x10"}) {
    write_all(tracker, bad);
    const std::string e = error_of([&] { ckpt::load_checkpoint_dir(dir); });
    EXPECT_NE(e.find(tracker + ": invalid tracker content '" + bad + "'"), std::string::npos) << e;
  }
  // "release": iteration 0, the release/ directory.
  fs::rename(dir + "/iter_0000007", dir + "/release");
  write_all(tracker, "release\n");
  const ckpt::LoadedCheckpoint r = ckpt::load_checkpoint_dir(dir);
  EXPECT_TRUE(r.release);
  EXPECT_EQ(r.iteration, 0);
  EXPECT_EQ(r.directory, dir + "/release");
  EXPECT_EQ(verify(r, 7, 64), "");
  const std::vector<ckpt::CheckpointSummary> list = ckpt::list_checkpoints(dir);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_TRUE(list[0].release && list[0].latest);
}

TEST(CheckpointIo, ErrorsNameTheFile) {
  const std::string dir = test::scratch_dir("ckpt_errors");
  const State s(3, 64);
  ckpt::save_checkpoint_dir(dir, 3, s.files(3));
  const std::string it = dir + "/iter_0000003";

  write_all(dir + "/latest_checkpointed_iteration.txt", "5");
  EXPECT_NE(
      error_of([&] { ckpt::load_checkpoint_dir(dir); }).find(dir + "/iter_0000005: checkpoint directory is missing"),
      std::string::npos);
  EXPECT_NE(error_of([&] { ckpt::load_checkpoint_dir(dir, 4); }).find("iter_0000004"), std::string::npos);
  write_all(dir + "/latest_checkpointed_iteration.txt", "3");

  const std::string model = read_all(it + "/model.safetensors");
  write_all(it + "/model.safetensors", model.substr(0, model.size() - 1));
  EXPECT_NE(error_of([&] { ckpt::load_checkpoint_dir(dir); }).find(it + "/model.safetensors: safetensors: "),
            std::string::npos);
  fs::remove(it + "/model.safetensors");
  EXPECT_NE(error_of([&] { ckpt::load_checkpoint_dir(dir); }).find(it + "/model.safetensors: missing"),
            std::string::npos);
  write_all(it + "/model.safetensors", model);

  const std::string opt = read_all(it + "/optimizer.safetensors");
  write_all(it + "/optimizer.safetensors", opt.substr(0, 20));
  EXPECT_NE(error_of([&] { ckpt::load_checkpoint_dir(dir); }).find(it + "/optimizer.safetensors: safetensors: "),
            std::string::npos);
  write_all(it + "/optimizer.safetensors", opt);

  write_all(it + "/metadata.json", "{\"iteration\": 3");
  EXPECT_NE(error_of([&] { ckpt::load_checkpoint_dir(dir); }).find(it + "/metadata.json: not valid JSON"),
            std::string::npos);
  fs::remove(it + "/metadata.json");
  EXPECT_NE(error_of([&] { ckpt::load_checkpoint_dir(dir); }).find(it + "/metadata.json: missing"), std::string::npos);

  EXPECT_NE(error_of([&] { ckpt::save_checkpoint_dir(dir, 0, s.files(3)); }).find("cannot save iteration 0"),
            std::string::npos);
  std::vector<ckpt::CheckpointFile> twice = s.files(3);
  twice.push_back(twice.back());
  EXPECT_NE(error_of([&] { ckpt::save_checkpoint_dir(dir, 4, twice); }).find("given twice"), std::string::npos);
  EXPECT_NE(error_of([&] {
              ckpt::save_checkpoint_dir(dir, 4, {ckpt::CheckpointFile::text_file("a/b", "")});
            }).find("invalid file name"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir + "/iter_0000004"));
}

TEST(CheckpointIo, KeepLastK) {
  const std::string dir = test::scratch_dir("ckpt_keep");
  const State s(1, 64);
  for (int64_t it = 1; it <= 5; ++it) ckpt::save_checkpoint_dir(dir, it * 10, State(it * 10, 64).files(it * 10), 2);
  EXPECT_EQ(entries(dir),
            (std::vector<std::string>{"iter_0000040", "iter_0000050", "latest_checkpointed_iteration.txt"}));
  // Saving an older iteration keeps the two newest and the one just written.
  ckpt::save_checkpoint_dir(dir, 30, State(30, 64).files(30), 2);
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"iter_0000030", "iter_0000040", "iter_0000050",
                                                    "latest_checkpointed_iteration.txt"}));
  EXPECT_EQ(ckpt::load_checkpoint_dir(dir).iteration, 30);
  // keep_last = 0 keeps everything.
  ckpt::save_checkpoint_dir(dir, 60, State(60, 64).files(60));
  EXPECT_EQ(ckpt::list_checkpoints(dir).size(), 4u);
  ckpt::save_checkpoint_dir(dir, 70, State(70, 64).files(70), 1);
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"iter_0000070", "latest_checkpointed_iteration.txt"}));
  EXPECT_EQ(verify(ckpt::load_checkpoint_dir(dir), 70, 64), "");
}

TEST(CheckpointIo, ResavingTheSameIterationReplacesIt) {
  const std::string dir = test::scratch_dir("ckpt_resave");
  ckpt::save_checkpoint_dir(dir, 5, State(5, 256).files(5));
  ckpt::save_checkpoint_dir(dir, 6, State(6, 256).files(6));
  // Iteration 5 again with other content (State(50) under the name 5): the new copy wins.
  State other(50, 128);
  ckpt::save_checkpoint_dir(dir, 5, other.files(50));
  EXPECT_EQ(entries(dir),
            (std::vector<std::string>{"iter_0000005", "iter_0000006", "latest_checkpointed_iteration.txt"}));
  const ckpt::LoadedCheckpoint c = ckpt::load_checkpoint_dir(dir);
  EXPECT_EQ(c.iteration, 5);
  EXPECT_EQ(verify(c, 50, 128), "");
  EXPECT_EQ(verify(ckpt::load_checkpoint_dir(dir, 6), 6, 256), "");
}

TEST(CheckpointIo, LeftoversOfKilledSavesAreCleanedUp) {
  const std::string dir = test::scratch_dir("ckpt_stale");
  ckpt::save_checkpoint_dir(dir, 1, State(1, 64).files(1));
  ckpt::save_checkpoint_dir(dir, 2, State(2, 64).files(2));
  fs::create_directories(dir + "/.tmp_iter_0000003.999/sub");
  write_all(dir + "/.tmp_iter_0000003.999/model.safetensors", "partial");
  write_all(dir + "/latest_checkpointed_iteration.txt.tmp-999", "3");
  fs::create_directories(dir + "/.del_iter_0000000.999");
  // A re-save of iteration 2 killed between its two renames (file systems without
  // RENAME_EXCHANGE): the loader uses the moved-aside copy, the next save puts it back.
  fs::rename(dir + "/iter_0000002", dir + "/.old_iter_0000002.999");
  EXPECT_EQ(verify(ckpt::load_checkpoint_dir(dir), 2, 64), "");
  // A moved-aside copy whose iteration is in place is just deleted.
  fs::create_directories(dir + "/.old_iter_0000001.998");
  // list_checkpoints ignores all leftovers.
  EXPECT_EQ(ckpt::list_checkpoints(dir).size(), 1u);

  ckpt::save_checkpoint_dir(dir, 4, State(4, 64).files(4));
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"iter_0000001", "iter_0000002", "iter_0000004",
                                                    "latest_checkpointed_iteration.txt"}));
  EXPECT_EQ(verify(ckpt::load_checkpoint_dir(dir, 2), 2, 64), "");
  EXPECT_EQ(verify(ckpt::load_checkpoint_dir(dir, 1), 1, 64), "");
}

TEST(CheckpointIo, ListCheckpoints) {
  const std::string dir = test::scratch_dir("ckpt_list");
  ckpt::save_checkpoint_dir(dir, 20, State(20, 100).files(20));
  ckpt::save_checkpoint_dir(dir, 10, State(10, 300).files(10, false));
  fs::create_directories(dir + "/iter_12");  // not Megatron's spelling: ignored
  const std::vector<ckpt::CheckpointSummary> list = ckpt::list_checkpoints(dir);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].iteration, 10);
  EXPECT_TRUE(list[0].latest);
  EXPECT_EQ(list[1].iteration, 20);
  EXPECT_FALSE(list[1].latest);
  for (const ckpt::CheckpointSummary& s : list) {
    int64_t bytes = 0;
    for (const auto& e : fs::directory_iterator(s.path)) bytes += static_cast<int64_t>(e.file_size());
    EXPECT_EQ(s.bytes, bytes);
  }
  EXPECT_GT(list[0].bytes, 1200);
}

// SIGKILL during saves: a child saves iterations k, k+1, ... (every third one twice, which
// takes the re-save path) with keep_last = 3 and reports each finished save on a pipe. The
// parent waits for 0-3 reports, then kills the child at a random instant of its next save
// (the wait is drawn from the last save's measured duration, so the kills cover whole saves
// however loaded the machine is), and loads. The tracker's checkpoint must always load and
// hold exactly that iteration's data, never go backwards, and never be older than a save
// the child reported as finished.
TEST(CheckpointIo, KillDuringSaveAlwaysLeavesALoadableCheckpoint) {
  const std::string dir = test::scratch_dir("ckpt_kill");
  constexpr size_t kFloats = 768 * 1024;  // 3 MB of weights + 1.5 MB of optimizer state per save

  // How long one save takes here: the kill window when no save has been reported yet.
  const auto t0 = std::chrono::steady_clock::now();
  ckpt::save_checkpoint_dir(dir + "/timing", 1, State(1, kFloats).files(1));
  const double first_save_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  fs::remove_all(dir + "/timing");

  std::mt19937 rng(20240607);
  int64_t last_seen = 0;
  int advanced = 0, unchanged = 0;
  constexpr int kKills = 30;
  for (int kill_no = 0; kill_no < kKills; ++kill_no) {
    const int64_t start = last_seen + 1;
    int report[2];
    ASSERT_EQ(::pipe(report), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(report[0]);
      try {
        for (int64_t it = start;; ++it) {
          const State s(it, kFloats);
          for (int copy = 0; copy < (it % 3 == 0 ? 2 : 1); ++copy) {
            ckpt::save_checkpoint_dir(dir, it, s.files(it), 3);
            if (::write(report[1], &it, sizeof it) != static_cast<ssize_t>(sizeof it)) ::_exit(4);
          }
        }
      } catch (...) {
        ::_exit(3);
      }
    }
    ::close(report[1]);
    // Wait for `reports` finished saves, timing the last one (the first includes building
    // the state, so the window is a little wider than one save).
    const int reports = std::uniform_int_distribution<int>(0, 3)(rng);
    int64_t reported = 0;
    double window_us = first_save_us;
    auto since = std::chrono::steady_clock::now();
    for (int r = 0; r < reports; ++r) {
      int64_t it = 0;
      ASSERT_EQ(::read(report[0], &it, sizeof it), static_cast<ssize_t>(sizeof it)) << "the saver died";
      const auto now = std::chrono::steady_clock::now();
      window_us = std::chrono::duration<double, std::micro>(now - since).count();
      since = now;
      reported = it;
    }
    const auto delay = std::chrono::microseconds(
        static_cast<int64_t>(std::uniform_real_distribution<double>(0.0, 1.2 * window_us)(rng)));
    std::this_thread::sleep_for(delay);
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ::close(report[0]);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the saver stopped by itself (status " << status << ")";

    const ckpt::LoadedCheckpoint c = ckpt::load_checkpoint_dir(dir);  // must not throw
    if (!c.found) {
      ASSERT_EQ(last_seen, 0) << "the tracker disappeared after kill " << kill_no;
      ASSERT_EQ(reported, 0) << "iteration " << reported << " was reported saved but no tracker exists";
      ++unchanged;
      continue;
    }
    ASSERT_EQ(c.iteration, ckpt::read_tracker(dir)->iteration);
    ASSERT_GE(c.iteration, last_seen) << "the tracker went backwards after kill " << kill_no;
    ASSERT_GE(c.iteration, reported) << "a finished save was lost after kill " << kill_no;
    ASSERT_EQ(verify(c, c.iteration, kFloats), "") << "iteration " << c.iteration << " after kill " << kill_no;
    (c.iteration > last_seen ? advanced : unchanged)++;
    last_seen = c.iteration;
  }
  std::printf("%d kills: tracker advanced %d times, unchanged %d times; last iteration %lld; first save ~%.0f us\n",
              kKills, advanced, unchanged, static_cast<long long>(last_seen), first_save_us);
  EXPECT_GT(last_seen, 0);

  // Whatever the kills left behind, the next save cleans it up.
  ckpt::save_checkpoint_dir(dir, last_seen + 1, State(last_seen + 1, 16).files(last_seen + 1), 3);
  for (const std::string& name : entries(dir)) {
    EXPECT_TRUE(name == "latest_checkpointed_iteration.txt" || ckpt::parse_iteration_dir_name(name)) << name;
  }
  EXPECT_LE(ckpt::list_checkpoints(dir).size(), 3u);
}

}  // namespace
}  // namespace megatron::ckpt
