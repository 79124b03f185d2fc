// Megatron's timers (obs/timers.h) on one rank: which timers exist at each --timing-log-level,
// the three print formats (label padded with '.' to 48, "%.2f" ms divided by the normalizer),
// reset on log (a running timer counts on from the log), the device synchronised at every start
// and stop, and the names of Megatron's per-iteration timers in its order. Across ranks:
// tests/train/trainer_data_parallel_test.cpp and trainer_pipeline_parallel_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include "backend/ops.h"
#include "comm/self_communicator.h"
#include "obs/timers.h"

namespace megatron::obs {
namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// The milliseconds printed for `name` in a minmax block: (min, max).
std::pair<double, double> printed_min_max(const std::string& block, const std::string& name) {
  std::smatch m;
  const std::regex line("\n    " + name + " \\.+: \\(([0-9]+\\.[0-9]{2}), ([0-9]+\\.[0-9]{2})\\)");
  EXPECT_TRUE(std::regex_search(block, m, line)) << name << " in\n" << block;
  if (m.empty()) return {-1, -1};
  return {std::stod(m[1]), std::stod(m[2])};
}

class TimersTest : public ::testing::Test {
 protected:
  std::unique_ptr<backend::Backend> backend_ = backend::make_cpu_backend();
  comm::SelfCommunicator world_{*backend_, "world"};
  int syncs_ = 0;
  obs::Timers make(int64_t level, obs::TimingLogOption option = obs::TimingLogOption::kMinMax) {
    return obs::Timers(level, option, [this] { ++syncs_; });
  }
};

TEST_F(TimersTest, TimersAboveTheLevelDoNotExist) {
  obs::Timers t = make(1);
  EXPECT_TRUE(t.active(0) && t.active(1) && !t.active(2));
  t.start("level2", 2);
  sleep_ms(2);
  t.stop("level2");
  EXPECT_EQ(t.elapsed_seconds("level2"), 0.0);
  EXPECT_EQ(syncs_, 0) << "a timer that does not exist must not touch the device";
  EXPECT_FALSE(t.log({"level2"}, world_).has_value()) << "no rank timed it: nothing to print";
  t.start("level1", 1);
  t.stop("level1");
  EXPECT_EQ(syncs_, 2) << "start and stop each wait for the device";
  EXPECT_THROW(obs::Timers(3, obs::TimingLogOption::kMinMax, {}), Error);
}

TEST_F(TimersTest, MinMaxBlockPadsNamesAndDividesByTheNormalizer) {
  obs::Timers t = make(2);
  t.start("forward-backward", 1);
  sleep_ms(30);
  t.stop("forward-backward");
  t.start("optimizer", 1);
  t.stop("optimizer");
  const std::optional<std::string> block = t.log({"forward-backward", "never-started", "optimizer"}, world_, 2.0);
  ASSERT_TRUE(block.has_value());
  // Megatron's exact layout: the name and a space, dots to 48 characters, ": (min, max)".
  EXPECT_EQ(
      block->rfind("(min, max) time across ranks (ms):\n    forward-backward ...............................: (", 0),
      0u)
      << *block;
  EXPECT_EQ(block->find("never-started"), std::string::npos) << "untimed names are left out";
  const auto [lo, hi] = printed_min_max(*block, "forward-backward");
  EXPECT_EQ(lo, hi) << "one rank: min == max";
  EXPECT_GE(lo, 15.0) << "30 ms over normalizer 2";
  EXPECT_LT(lo, 500.0);
  EXPECT_LT(block->find("forward-backward"), block->find("optimizer")) << "printed in the order asked";
  // log reset everything: a second log has nothing to print.
  EXPECT_FALSE(t.log({"forward-backward", "optimizer"}, world_).has_value());
}

TEST_F(TimersTest, MaxAndAllFormats) {
  obs::Timers max = make(0, obs::TimingLogOption::kMax);
  max.start("save-checkpoint", 0);
  sleep_ms(5);
  max.stop("save-checkpoint");
  const std::string m = max.log({"save-checkpoint"}, world_).value();
  EXPECT_TRUE(std::regex_match(
      m, std::regex("max time across ranks \\(ms\\):\n    save-checkpoint \\.{32}: [0-9]+\\.[0-9]{2}")))
      << m;
  obs::Timers all = make(0, obs::TimingLogOption::kAll);
  all.start("load-checkpoint", 0);
  sleep_ms(5);
  all.stop("load-checkpoint");
  const std::string a = all.log({"load-checkpoint"}, world_).value();
  EXPECT_TRUE(std::regex_match(
      a, std::regex("times across ranks \\(ms\\):\n  load-checkpoint:\n     rank  0: [0-9]+\\.[0-9]{2}")))
      << a;
  EXPECT_EQ(obs::parse_timing_log_option("all"), obs::TimingLogOption::kAll);
  EXPECT_THROW(obs::parse_timing_log_option("median"), Error);
}

TEST_F(TimersTest, ARunningTimerIsCountedAndKeepsRunningAfterALog) {
  obs::Timers t = make(0);
  t.start("interval", 0);
  sleep_ms(20);
  const auto first = printed_min_max(t.log({"interval"}, world_).value(), "interval");
  EXPECT_GE(first.first, 20.0);
  sleep_ms(20);
  t.stop("interval");
  const auto second = printed_min_max(t.log({"interval"}, world_).value(), "interval");
  EXPECT_GE(second.first, 20.0) << "the second interval counts from the first log";
  EXPECT_LT(second.first, first.first + 20.0 + 200.0);
  // Accumulates over several start/stop pairs until logged; write (max_seconds) resets nothing.
  t.start("interval", 0);
  sleep_ms(5);
  t.stop("interval");
  t.start("interval", 0);
  sleep_ms(5);
  t.stop("interval");
  const auto w = t.max_seconds({"interval", "absent"}, world_, 1.0);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].first, "interval-time");
  EXPECT_GE(w[0].second, 0.010);
  EXPECT_EQ(t.elapsed_seconds("interval"), w[0].second) << "max_seconds must not reset";
  EXPECT_DEATH(t.stop("interval"), "is not started") << "stopping a stopped timer is a bug";
  t.start("interval", 0);
  EXPECT_DEATH(t.start("interval", 0), "already been started") << "starting a started timer is a bug";
}

TEST(IterationTimers, MegatronsOrder) {
  const auto& names = obs::iteration_timer_names();
  ASSERT_EQ(names.size(), 24u);
  EXPECT_EQ(names.front(), "forward-backward");
  EXPECT_EQ(names.back(), "optimizer");
  const auto at = [&](const char* n) { return std::find(names.begin(), names.end(), n) - names.begin(); };
  EXPECT_LT(at("batch-generator"), at("layernorm-grads-all-reduce"));
  EXPECT_LT(at("all-grads-sync"), at("params-all-gather"));
  EXPECT_LT(at("optimizer-clip-main-grad"), at("optimizer-inner-step"));
}

}  // namespace
}  // namespace megatron::obs
