// train/straggler_detector and train/straggler_control:
//  - the report's text: Megatron's fields in its order and format, the least and greatest value
//    with their ranks (ties to the lower rank), GPU fields only where some rank has them, our
//    "slowest" field with the host, and --straggler-minmax-count's two lines;
//  - on one rank, an iteration's time spent in a watched collective is not compute (Rtt);
//  - the control port flips the state, which every rank takes at the next report;
//  - end to end under mpirun: rank 1, stopped for three quarters of the time (SIGSTOP/SIGCONT from
//    a shell around it, as a descheduled or throttled process is), is named the slowest at
//    every log line, its Rtt well over rank 0's, which spends the same time waiting for it.
#include "obs/straggler_detector.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <limits>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "backend/ops.h"
#include "comm/self_communicator.h"
#include "core/host_name.h"
#include "support/held_back_rank.h"
#include "support/parity_runs.h"
#include "support/paths.h"
#include "support/walk_corpus.h"

namespace megatron::obs {
namespace {

obs::StragglerRankStats stats(double rtt, double batch, double etpt) {
  obs::StragglerRankStats s;
  s.rtt_ms = rtt;
  s.batch_ms = batch;
  s.etpt_tflops = etpt;
  return s;
}
obs::StragglerRankStats with_gpu(obs::StragglerRankStats s, double power, double temperature, double util,
                                 double clock) {
  s.gpu = true;
  s.power_w = power;
  s.temperature_c = temperature;
  s.utilization_pct = util;
  s.sm_clock_mhz = clock;
  return s;
}

TEST(StragglerReport, MegatronsFieldsThenTheSlowestRanksHost) {
  const std::vector<obs::StragglerRankStats> ranks = {
      with_gpu(stats(100.0, 0.5, 500.0), 650.0, 60.0, 99.0, 1755.0),
      with_gpu(stats(150.0, 0.25, 333.333), 420.5, 71.0, 98.0, 1410.0),
      with_gpu(stats(100.0, 0.75, 500.0), 650.0, 58.0, 100.0, 1980.0),
  };
  EXPECT_EQ(obs::format_straggler_report(ranks, {"a", "b", "c"}, 1, "[2026-11-25 10:00:00]"),
            "[2026-11-25 10:00:00] | MnRtt/Rnk: 100.00ms/0 | MxRtt/Rnk: 150.00ms/1 | MnPwr/Rnk: 420.50W/1 | "
            "MxPwr/Rnk: 650.00W/0 | MnTmp/Rnk: 58.00C/2 | MxTmp/Rnk: 71.00C/1 | MnUtl/Rnk: 98.00%/1 | "
            "MxUtl/Rnk: 100.00%/2 | MnClk/Rnk: 1410.00MHz/1 | MxClk/Rnk: 1980.00MHz/2 | MnDRtt/Rnk: 0.25ms/1 | "
            "MxDRtt/Rnk: 0.75ms/2 | MnEtpt/Rnk: 333.33TF/1 | MxEtpt/Rnk: 500.00TF/0 | slowest: rank 1 on b, 50.0% "
            "over the fastest\n");
}

TEST(StragglerReport, GpuFieldsOnlyFromRanksThatHaveThem) {
  // CPU ranks: no GPU fields at all; one GPU rank among CPU ones: its values are both ends.
  const std::vector<obs::StragglerRankStats> cpu = {stats(10.0, 1.0, 2.0), stats(12.0, 1.0, 1.5)};
  const std::string line = obs::format_straggler_report(cpu, {"h0", "h1"}, 1, "[t]");
  EXPECT_EQ(line.find("Pwr"), std::string::npos) << line;
  EXPECT_EQ(line.find("Clk"), std::string::npos) << line;
  EXPECT_NE(
      line.find("[t] | MnRtt/Rnk: 10.00ms/0 | MxRtt/Rnk: 12.00ms/1 | MnDRtt/Rnk: 1.00ms/0 | MxDRtt/Rnk: 1.00ms/0"),
      std::string::npos)
      << line;
  const std::vector<obs::StragglerRankStats> mixed = {stats(10.0, 1.0, 2.0),
                                                      with_gpu(stats(10.0, 1.0, 2.0), 300, 40, 50, 1500)};
  const std::string m = obs::format_straggler_report(mixed, {"h0", "h1"}, 1, "[t]");
  EXPECT_NE(m.find("MnPwr/Rnk: 300.00W/1 | MxPwr/Rnk: 300.00W/1"), std::string::npos) << m;
  // A GPU without a utilisation reading (MIG): no Utl fields rather than a made-up 0%.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<obs::StragglerRankStats> mig = {with_gpu(stats(10.0, 1.0, 2.0), 300, 40, nan, 1500),
                                                    with_gpu(stats(11.0, 1.0, 2.0), 310, 45, nan, 1490)};
  const std::string g = obs::format_straggler_report(mig, {"h0", "h1"}, 1, "[t]");
  EXPECT_EQ(g.find("Utl"), std::string::npos) << g;
  EXPECT_NE(g.find("MnTmp/Rnk: 40.00C/0 | MxTmp/Rnk: 45.00C/1 | MnClk/Rnk: 1490.00MHz/1"), std::string::npos) << g;
  EXPECT_NE(m.find("slowest: rank 0 on h0, 0.0% over the fastest"), std::string::npos) << m;
}

TEST(StragglerReport, MinmaxCountListsTheLowestAndHighestEtpt) {
  std::vector<obs::StragglerRankStats> ranks;
  for (const double e : {300.0, 296.5, 310.25, 296.5, 305.0}) ranks.push_back(stats(1.0, 0.0, e));
  const std::vector<std::string> hosts(5, "h");
  const std::string text = obs::format_straggler_report(ranks, hosts, 2, "[t]");
  EXPECT_NE(text.find("\n^^^^ Bottom 2 Ranks with lowest  Etpt(TF): 296.50/1, 296.50/3,\n"
                      "^^^^ Top    2 Ranks with highest Etpt(TF): 305.00/4, 310.25/2,\n"),
            std::string::npos)
      << text;
  // More than there are ranks: every rank, once per line.
  const std::string all = obs::format_straggler_report(ranks, hosts, 9, "[t]");
  EXPECT_NE(all.find("Bottom 5 Ranks with lowest  Etpt(TF): 296.50/1, 296.50/3, 300.00/0, 305.00/4, 310.25/2,\n"),
            std::string::npos)
      << all;
  EXPECT_EQ(obs::format_straggler_report(ranks, hosts, 1, "[t]").find("^^^^"), std::string::npos);
}

// The one-rank group, each all-reduce taking `wait` of host time: a peer that arrives late.
class LateCommunicator final : public comm::Communicator {
 public:
  LateCommunicator(backend::Backend& b, std::chrono::milliseconds wait) : self_(b, "world"), wait_(wait) {}
  int64_t rank() const override { return 0; }
  int64_t size() const override { return 1; }
  const std::string& name() const override { return self_.name(); }
  void all_reduce(Tensor& x, comm::ReduceOp op) override {
    std::this_thread::sleep_for(wait_);
    self_.all_reduce(x, op);
  }
  void all_reduce_host(std::span<double> v, comm::ReduceOp op) override { self_.all_reduce_host(v, op); }
  void reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> c, comm::ReduceOp op) override {
    self_.reduce_scatter(in, out, c, op);
  }
  void all_gather(const Tensor& in, Tensor& out, std::span<const int64_t> c) override { self_.all_gather(in, out, c); }
  void broadcast(Tensor& x, int64_t root) override { self_.broadcast(x, root); }
  void send(const Tensor& x, int64_t peer) override { self_.send(x, peer); }
  void recv(Tensor& x, int64_t peer) override { self_.recv(x, peer); }
  void barrier() override {}
  void send_recv(std::span<const comm::PointToPoint> ops) override { self_.send_recv(ops); }
  std::unique_ptr<comm::Communicator> split(int64_t color, int64_t key, const std::string& n) override {
    return self_.split(color, key, n);
  }

 private:
  comm::SelfCommunicator self_;
  std::chrono::milliseconds wait_;
};

double field(const std::string& text, const std::string& name) {
  const std::smatch m = [&] {
    std::smatch s;
    std::regex_search(text, s, std::regex(" " + name + "/Rnk: ([0-9.]+)"));
    return s;
  }();
  return m.empty() ? -1.0 : std::stod(m[1]);
}

TEST(StragglerDetector, TimeInCollectivesIsNotCompute) {
  auto be = backend::make_cpu_backend();
  obs::StragglerOptions options;
  options.control_port = 0;
  obs::StragglerDetector detector(*be, options, 0, -1);
  std::unique_ptr<comm::Communicator> world =
      detector.watch(std::make_unique<LateCommunicator>(*be, std::chrono::milliseconds(300)));
  Tensor x = be->empty({4}, DType::kF32, MemoryKind::kOther);
  be->fill(x, 1.0f);
  // Two iterations of 20 ms of work and one 300 ms collective each, 5 ms of it reading data.
  for (int i = 0; i < 2; ++i) {
    detector.begin_iteration();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    detector.add_batch_seconds(0.005);
    world->all_reduce(x, comm::ReduceOp::kSum);
    detector.end_iteration(2e12);
  }
  world->all_reduce(x, comm::ReduceOp::kSum);  // between iterations: not timed at all
  const std::optional<std::string> text = detector.report(*world);
  ASSERT_TRUE(text.has_value());
  const double rtt = field(*text, "MnRtt");
  EXPECT_GE(rtt, 19.0) << *text;
  EXPECT_LT(rtt, 150.0) << "the collective's 300 ms counted as compute: " << *text;
  EXPECT_DOUBLE_EQ(field(*text, "MnDRtt"), 5.0) << *text;
  // Etpt: 2 TFLOP per iteration over the Rtt.
  EXPECT_NEAR(field(*text, "MnEtpt"), 2.0 / (rtt / 1000.0), 0.01 * 2.0 / (rtt / 1000.0)) << *text;
  EXPECT_NE(text->find(", 0.0% over the fastest"), std::string::npos) << *text;
  EXPECT_NE(text->find(" on " + host_name("unknown") + ","), std::string::npos) << *text;
  // An interval with no iteration timed (none ran) reports nothing.
  EXPECT_FALSE(detector.report(*world).has_value());
}

// Connects to the control port and returns the reply's body.
std::string flip(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  const std::string request = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  EXPECT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string reply;
  char buf[512];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) reply.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const size_t body = reply.find("\r\n\r\n");
  EXPECT_EQ(reply.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << reply;
  return body == std::string::npos ? "" : reply.substr(body + 4);
}

TEST(StragglerControl, EachConnectionFlipsTheState) {
  obs::StragglerControl control(0, false);
  ASSERT_GT(control.port(), 0);
  EXPECT_FALSE(control.requested());
  EXPECT_EQ(flip(control.port()), "straggler detector on from the next log interval\n");
  EXPECT_TRUE(control.requested());
  EXPECT_EQ(flip(control.port()), "straggler detector off from the next log interval\n");
  EXPECT_FALSE(control.requested());
  // A port already taken is one error naming the flag and the port.
  try {
    obs::StragglerControl second(control.port(), true);
    ADD_FAILURE() << "a second listener on port " << control.port();
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("[--straggler-ctrlr-port] cannot listen on port " + std::to_string(control.port())),
        std::string::npos)
        << e.what();
  }
}

TEST(StragglerDetector, OffAtStartTimesNothingUntilTurnedOn) {
  auto be = backend::make_cpu_backend();
  obs::StragglerOptions options;
  options.on_at_start = false;
  options.control_port = 0;
  obs::StragglerDetector detector(*be, options, 0, -1);
  const std::string note = detector.start_up_note();
  const std::smatch port = [&] {
    std::smatch m;
    std::regex_search(note, m, std::regex(":([0-9]+)` turns it on"));
    return m;
  }();
  ASSERT_FALSE(port.empty()) << note;
  std::unique_ptr<comm::Communicator> world = detector.watch(std::make_unique<comm::SelfCommunicator>(*be, "world"));
  detector.begin_iteration();
  EXPECT_FALSE(detector.timing());
  detector.end_iteration(1.0);
  EXPECT_FALSE(detector.report(*world).has_value());
  flip(std::stoi(port[1]));
  EXPECT_EQ(detector.report(*world).value_or(""), " > straggler detector on from the next iteration\n");
  detector.begin_iteration();
  EXPECT_TRUE(detector.timing());
  detector.end_iteration(1.0);
  const std::string text = detector.report(*world).value_or("");
  EXPECT_NE(text.find("MnRtt/Rnk: "), std::string::npos) << text;
}

// End to end: `megatron train --log-straggler` on 2 CPU ranks, rank 1 stopped 60 ms of every
// 80 (so its iterations take ~4x as long) by a shell loop around it (mpirun's MPMD form).
TEST(StragglerDetector, NamesTheRankThatIsHeldBack) {
  const std::string dir = test::scratch_dir("straggler_detector_mpi");
  test::write_walk_corpus(dir);
  const std::vector<std::string> flags =
      test::with(test::tiny_train_flags(dir, 2, "0"), {"--train-iters", "24", "--log-interval", "8", "--log-straggler",
                                                       "--straggler-ctrlr-port", "0", "--straggler-minmax-count", "2"});
  const test::CommandResult r =
      test::run_command(test::held_back_rank1_command(flags, 0.02, 0.06, 300), /*capture_stderr=*/true);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(" > straggler detector (--log-straggler): on"), std::string::npos) << r.output;
  const std::regex line(
      R"(\| MnRtt/Rnk: ([0-9.]+)ms/(\d) \| MxRtt/Rnk: ([0-9.]+)ms/(\d) \|.*\| slowest: rank (\d) on )");
  int reports = 0;
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), line); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    ++reports;
    EXPECT_EQ(m[2], "0") << m.str();
    EXPECT_EQ(m[4], "1") << m.str();
    EXPECT_EQ(m[5], "1") << m.str();
    // Rank 0 computes as fast as ever and waits for rank 1: ~4x apart alone, ~1.5x when other
    // tests load both cores. Without the waits left out both would read the same (and the
    // ranks named would be a coin toss).
    EXPECT_GT(std::stod(m[3]), 1.25 * std::stod(m[1])) << m.str();
  }
  EXPECT_EQ(reports, 3) << r.output;
  EXPECT_NE(r.output.find("^^^^ Bottom 2 Ranks with lowest  Etpt(TF): "), std::string::npos) << r.output;
}

}  // namespace
}  // namespace megatron::obs
