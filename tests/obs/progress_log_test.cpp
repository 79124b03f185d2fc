// train/progress_log (--log-progress): the line format of Megatron's progress.txt, where the
// cumulative throughput of a GPU count starts (its first "Starting job" since the count last
// changed, from the FLOPs of the last checkpoint before it), and end to end: a run that saves
// twice, then a resumed job, leave five lines whose FLOPs grow with the consumed samples.
#include "obs/progress_log.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "support/parity_runs.h"
#include "support/paths.h"
#include "support/walk_corpus.h"

namespace megatron::obs {
namespace {

std::chrono::system_clock::time_point at(int day, int hour) {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_isdst = -1;
  return std::chrono::system_clock::from_time_t(std::mktime(&tm));
}

TEST(ProgressLog, LinesAreMegatrons) {
  EXPECT_EQ(obs::progress_line(at(25, 10), "4242", 8, "Starting job"),
            "2026-11-25 10:00:00\tJob ID: 4242\t# GPUs: 8\tStarting job\n");
  EXPECT_EQ(obs::checkpoint_progress_text(false, 1000, 402.14, 398.66, 1.2345e19, 2.05e9),
            "Saved checkpoint\tIteration: 1000\tJob throughput: 402.1 TFLOP/s/GPU\tCumulative throughput: 398.7 "
            "TFLOP/s/GPU\tFloating-point operations: 1.23e+19\tTokens (in billions): 2.05");
  EXPECT_EQ(obs::checkpoint_progress_text(true, 7, 0, 0, 0, 0).rfind("Saving async checkpoint\tIteration: 7\t", 0), 0u);
}

TEST(ProgressLog, CumulativeThroughputStartsAtTheFirstJobOfThisGpuCount) {
  auto saved = [](int day, int hour, int gpus, int64_t it, double flops) {
    return obs::progress_line(at(day, hour), "1", gpus, obs::checkpoint_progress_text(false, it, 1, 1, flops, 1));
  };
  std::string log = obs::progress_line(at(20, 8), "1", 8, "Starting job") + saved(20, 9, 8, 100, 1e18) +
                    obs::progress_line(at(20, 12), "2", 8, "Starting job") + saved(20, 13, 8, 200, 2e18);
  std::optional<obs::ProgressStart> s = obs::cumulative_start(log, 8);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->time, at(20, 8));  // a restart with the same count continues the run
  EXPECT_EQ(s->flops, 0.0);
  EXPECT_FALSE(obs::cumulative_start(log, 16).has_value());
  // 16 GPUs from day 21: their run starts there, from the last checkpoint's FLOPs.
  log +=
      obs::progress_line(at(21, 8), "3", 16, "Starting job") + saved(21, 9, 16, 300, 4e18) + "torn line without tabs\n";
  s = obs::cumulative_start(log, 16);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->time, at(21, 8));
  EXPECT_EQ(s->flops, 2e18);
  EXPECT_FALSE(obs::cumulative_start(log, 8).has_value()) << "another count in between starts the 8-GPU run again";
  // An async save's line (written when it starts; it may never finish) is not counted.
  log += obs::progress_line(at(21, 10), "3", 16, obs::checkpoint_progress_text(true, 400, 1, 1, 5e18, 1));
  log += obs::progress_line(at(22, 8), "4", 8, "Starting job");
  s = obs::cumulative_start(log, 8);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->time, at(22, 8));
  EXPECT_EQ(s->flops, 4e18);
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

double flops_of(const std::string& line) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(line, m, std::regex("Floating-point operations: ([0-9.e+]+)"))) << line;
  return m.empty() ? 0.0 : std::stod(m[1]);
}

TEST(ProgressLog, TrainAppendsAtStartAndAtEachCheckpoint) {
  const std::string dir = test::scratch_dir("progress_log_train");
  test::write_walk_corpus(dir);
  const auto base = test::with(test::tiny_train_flags(dir, 2, "0"),
                               {"--train-iters", "6", "--save", dir + "/ck", "--save-interval", "2", "--log-progress"});
  test::CommandResult r = test::run_ranks(test::with(base, {"--exit-interval", "4"}), 1);
  ASSERT_EQ(r.status, 0) << r.output;
  r = test::run_ranks(test::with(base, {"--load", dir + "/ck"}), 1);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<std::string> lines = lines_of(dir + "/ck/progress.txt");
  ASSERT_EQ(lines.size(), 5u);
  const std::regex head(R"(^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\tJob ID: [^\t]*\t# GPUs: 1\t)");
  for (const std::string& l : lines) EXPECT_TRUE(std::regex_search(l, head)) << l;
  EXPECT_NE(lines[0].find("\tStarting job"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("\tSaved checkpoint\tIteration: 2\t"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("\tSaved checkpoint\tIteration: 4\t"), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find("\tStarting job"), std::string::npos) << lines[3];
  EXPECT_NE(lines[4].find("\tSaved checkpoint\tIteration: 6\t"), std::string::npos) << lines[4];
  // 8 samples per iteration: the FLOPs so far go 2 : 4 : 6 across the resume.
  const double f2 = flops_of(lines[1]);
  EXPECT_GT(f2, 0.0);
  EXPECT_NEAR(flops_of(lines[2]) / f2, 2.0, 0.01);
  EXPECT_NEAR(flops_of(lines[4]) / f2, 3.0, 0.01);
  EXPECT_NE(lines[4].find("Tokens (in billions): 0.00"), std::string::npos) << lines[4];  // 6 x 8 x 16 tokens
}

}  // namespace
}  // namespace megatron::obs
