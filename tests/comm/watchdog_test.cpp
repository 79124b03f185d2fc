// The watchdog: a collective that outlives the timeout is reported once, naming the rank, the
// operation, its sequence number and the group; collectives that finish in time are not.
// (The end-to-end case, a stopped rank ending an mpirun job, is in
// tests/train/trainer_data_parallel_test.cpp.)
#include "comm/watchdog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/ops.h"
#include "comm/self_communicator.h"
#include "core/error.h"

namespace megatron::comm {
namespace {

using namespace std::chrono_literals;

// A one-rank group whose all_reduce takes `delay` (a peer that is late).
class SlowCommunicator final : public Communicator {
 public:
  SlowCommunicator(backend::Backend& b, std::chrono::milliseconds delay) : self_(b, "dp"), delay_(delay) {}
  int64_t rank() const override { return 0; }
  int64_t size() const override { return 2; }  // pretend: the message names the size
  const std::string& name() const override { return self_.name(); }
  void all_reduce(Tensor&, ReduceOp) override { std::this_thread::sleep_for(delay_); }
  void all_reduce_host(std::span<double>, ReduceOp) override { std::this_thread::sleep_for(delay_); }
  void reduce_scatter(Tensor&, Tensor&, std::span<const int64_t>, ReduceOp) override {}
  void all_gather(const Tensor&, Tensor&, std::span<const int64_t>) override {}
  void broadcast(Tensor&, int64_t) override {}
  void send(const Tensor&, int64_t) override {}
  void recv(Tensor&, int64_t) override {}
  void barrier() override {}
  void send_recv(std::span<const PointToPoint>) override {}
  void connect_peers(std::span<const int64_t>) override { std::this_thread::sleep_for(delay_); }
  std::unique_ptr<Communicator> split(int64_t, int64_t, const std::string&) override {
    return std::make_unique<SlowCommunicator>(*this);
  }

 private:
  SelfCommunicator self_;
  std::chrono::milliseconds delay_;
};

TEST(Watchdog, ReportsACollectiveThatOutlivesTheTimeoutOnce) {
  auto backend = backend::make_cpu_backend();
  std::mutex mu;
  std::vector<std::string> reports;
  Watchdog w(3, 500ms, [&](const std::string& m) {
    std::lock_guard<std::mutex> lock(mu);
    reports.push_back(m);
  });
  WatchedCommunicator fast(std::make_unique<SlowCommunicator>(*backend, 1ms), w);
  Tensor x = Tensor::cpu({1});
  for (int i = 0; i < 20; ++i) fast.all_reduce(x, ReduceOp::kSum);  // 20 in time: #1 .. #20
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(reports.empty());
  }
  WatchedCommunicator slow(std::make_unique<SlowCommunicator>(*backend, 1500ms), w);
  double v = 1.0;
  slow.all_reduce_host(std::span<double>(&v, 1), ReduceOp::kSum);  // #21
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(
      reports[0].rfind("[rank 3] watchdog: all_reduce_host #21 on group 'dp' (2 ranks) has not completed after ", 0),
      0u)
      << reports[0];
  EXPECT_NE(reports[0].find("another rank of the group is behind"), std::string::npos);
}

TEST(Watchdog, SplitsAreWatchedToo) {
  auto backend = backend::make_cpu_backend();
  std::mutex mu;
  int fired = 0;
  Watchdog w(0, 300ms, [&](const std::string&) {
    std::lock_guard<std::mutex> lock(mu);
    ++fired;
  });
  WatchedCommunicator parent(std::make_unique<SlowCommunicator>(*backend, 1200ms), w);
  std::unique_ptr<Communicator> child = parent.split(0, 0, "dp");
  ASSERT_NE(child, nullptr);
  Tensor x = Tensor::cpu({1});
  child->all_reduce(x, ReduceOp::kSum);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(fired, 1);
}

// Opening the pipeline's connections waits for the peers (NCCL: on the host, inside the
// group): a peer that never comes is reported like a late collective.
TEST(Watchdog, ConnectingPeersIsWatched) {
  auto backend = backend::make_cpu_backend();
  std::mutex mu;
  std::vector<std::string> reports;
  Watchdog w(2, 300ms, [&](const std::string& m) {
    std::lock_guard<std::mutex> lock(mu);
    reports.push_back(m);
  });
  WatchedCommunicator slow(std::make_unique<SlowCommunicator>(*backend, 1000ms), w);
  const std::vector<int64_t> peers = {1};
  slow.connect_peers(peers);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].rfind("[rank 2] watchdog: connect_peers #1 on group 'dp' (2 ranks)", 0), 0u) << reports[0];
}

// A grace (Communicator::set_watchdog_grace, given to checkpoint saves) lets a long wait pass,
// and taken back, the timeout applies again; the report names the grace while it holds.
TEST(Watchdog, GraceLetsALongWaitPass) {
  auto backend = backend::make_cpu_backend();
  std::mutex mu;
  std::vector<std::string> reports;
  Watchdog w(1, 300ms, [&](const std::string& m) {
    std::lock_guard<std::mutex> lock(mu);
    reports.push_back(m);
  });
  WatchedCommunicator slow(std::make_unique<SlowCommunicator>(*backend, 800ms), w);
  Tensor x = Tensor::cpu({1});
  slow.set_watchdog_grace(3000ms);
  slow.all_reduce(x, ReduceOp::kSum);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(reports.empty()) << reports.front();
  }
  slow.set_watchdog_grace(0ms);
  slow.all_reduce(x, ReduceOp::kSum);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].find("granted"), std::string::npos) << reports[0];
}

// The longest timeout a clock reading is compared with: no overflow makes it fire at once
// (milliseconds::max() in the clock's nanoseconds, or plus a grace, wrapped negative).
TEST(Watchdog, HugeTimeoutsAndGracesNeverFire) {
  auto backend = backend::make_cpu_backend();
  std::mutex mu;
  int fired = 0;
  Watchdog w(0, std::chrono::milliseconds::max(), [&](const std::string&) {
    std::lock_guard<std::mutex> lock(mu);
    ++fired;
  });
  WatchedCommunicator slow(std::make_unique<SlowCommunicator>(*backend, 300ms), w);
  Tensor x = Tensor::cpu({1});
  slow.all_reduce(x, ReduceOp::kSum);
  slow.set_watchdog_grace(std::chrono::milliseconds::max());
  slow.all_reduce(x, ReduceOp::kSum);
  Watchdog w2(0, timeout_from_minutes(kMaxTimeoutMinutes), [&](const std::string&) {
    std::lock_guard<std::mutex> lock(mu);
    ++fired;
  });
  WatchedCommunicator slow2(std::make_unique<SlowCommunicator>(*backend, 300ms), w2);
  slow2.set_watchdog_grace(std::chrono::milliseconds::max());
  slow2.all_reduce(x, ReduceOp::kSum);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(fired, 0);
}

// --distributed-timeout-minutes as a duration: positive, finite and at most ten years, or an
// error naming the flag (inf and 1e300 were negative timeouts that killed healthy jobs).
TEST(Watchdog, TimeoutFromMinutes) {
  EXPECT_EQ(timeout_from_minutes(10), std::chrono::milliseconds(600000));
  EXPECT_EQ(timeout_from_minutes(0.5), std::chrono::milliseconds(30000));
  EXPECT_EQ(timeout_from_minutes(1e-9), std::chrono::milliseconds(1));
  EXPECT_EQ(timeout_from_minutes(kMaxTimeoutMinutes).count(), 10LL * 366 * 24 * 60 * 60000);
  for (double bad : {0.0, -1.0, 1e300, kMaxTimeoutMinutes * 2, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    try {
      timeout_from_minutes(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[--distributed-timeout-minutes] must be in (0, ", 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace megatron::comm
