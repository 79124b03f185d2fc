// obs::EnergyMonitor against a fake energy counter whose readings the test sets: laps count
// only the time between resume() and pause() or the next lap, failed reads count nothing, two
// MPI ranks' laps are summed; and the codecarbon-style emissions.csv: its columns, its values
// against hand-computed kWh and CO2, and the atomic rewrite that keeps other runs' rows.
#include "obs/energy_monitor.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <optional>
#include <regex>
#include <string>

#include "backend/ops.h"
#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "core/error.h"
#include "support/mpi.h"
#include "support/paths.h"

namespace megatron {
namespace {

// Reads *value (nullopt: a failed read).
class FakeCounter final : public backend::EnergyCounter {
 public:
  explicit FakeCounter(std::optional<int64_t>* value) : value_(value) {}
  std::optional<int64_t> millijoules() override { return *value_; }

 private:
  std::optional<int64_t>* value_;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(EnergyMonitor, LapsCountOnlyTheUnpausedTime) {
  auto be = backend::make_cpu_backend();
  comm::SelfCommunicator world(*be, "world");
  std::optional<int64_t> mj = 5'000;  // the counter does not start at 0
  obs::EnergyMonitor m(std::make_unique<FakeCounter>(&mj));
  m.resume();
  mj = 7'500;
  EXPECT_DOUBLE_EQ(m.lap(world), 2.5);
  mj = 8'000;
  m.pause();  // 0.5 J counted
  mj = 20'000;
  m.resume();  // 12 J while paused: not counted
  mj = 21'000;
  EXPECT_DOUBLE_EQ(m.lap(world), 1.5);
  mj = std::nullopt;  // a failed read counts nothing
  EXPECT_DOUBLE_EQ(m.lap(world), 0.0);
  mj = 21'250;
  EXPECT_DOUBLE_EQ(m.lap(world), 0.25);
  EXPECT_DOUBLE_EQ(m.total_joules(), 2.5 + 1.5 + 0.25);
  EXPECT_DOUBLE_EQ(m.wall_joules(), 16.25);  // pauses included: 21.25 - 5 J
}

TEST(EnergyMonitor, NoCounterReadsZero) {
  auto be = backend::make_cpu_backend();
  comm::SelfCommunicator world(*be, "world");
  obs::EnergyMonitor m(nullptr);
  m.resume();
  EXPECT_EQ(m.lap(world), 0.0);
  EXPECT_EQ(m.total_joules(), 0.0);
}

// Rank r's GPU spends (r + 1) J per lap: every rank gets 1 + 2 = 3 J per lap.
TEST(EnergyMonitor, LapsAreSummedOverRanks) {
  if (test::relaunch_under_mpirun(2)) return;
  comm::MpiRuntime mpi;
  auto world = mpi.world();
  const int64_t per_lap = 1000 * (world->rank() + 1);
  std::optional<int64_t> mj = 100 * world->rank();
  obs::EnergyMonitor m(std::make_unique<FakeCounter>(&mj));
  m.resume();
  for (int lap = 1; lap <= 3; ++lap) {
    *mj += per_lap;
    EXPECT_DOUBLE_EQ(m.lap(*world), 3.0) << "lap " << lap;
  }
  EXPECT_DOUBLE_EQ(m.total_joules(), 9.0);
  EXPECT_DOUBLE_EQ(m.wall_joules(), 9.0);
}

TEST(EmissionsCsv, CodecarbonColumnsAndValues) {
  EXPECT_EQ(obs::emissions_csv_header(),
            "timestamp,project_name,run_id,duration,emissions,emissions_rate,gpu_power,gpu_energy,energy_consumed,"
            "gpu_count,pue");
  obs::EmissionsRecord r;
  r.timestamp = "2026-01-02T03:04:05";
  r.run_id = "run-a";
  r.duration_s = 3600.0;
  r.gpu_energy_kwh = 2.0;  // 2 kWh in an hour: 2000 W
  r.gpu_count = 8;
  EXPECT_EQ(obs::emissions_csv_row(r), "2026-01-02T03:04:05,megatron,run-a,3600.0,,,2000.0,2.0,2.0,8,1.0");
  r.carbon_intensity_g_per_kwh = 450.0;  // 2 kWh x 450 g = 0.9 kg, over 3600 s
  EXPECT_EQ(obs::emissions_csv_row(r), "2026-01-02T03:04:05,megatron,run-a,3600.0,0.9,0.00025,2000.0,2.0,2.0,8,1.0");
}

TEST(EmissionsCsv, RewritesItsRowAndKeepsOtherRuns) {
  const std::string dir = test::scratch_dir("emissions_csv") + "/cc";
  obs::EmissionsRecord a;
  a.timestamp = "t1";
  a.run_id = "run-a";
  a.duration_s = 10.0;
  a.gpu_count = 1;
  obs::write_emissions_csv(dir, a);
  obs::EmissionsRecord b = a;
  b.run_id = "run-b";
  obs::write_emissions_csv(dir, b);
  a.timestamp = "t2";
  a.gpu_energy_kwh = 1.0;
  obs::write_emissions_csv(dir, a);  // run-a's row replaced, run-b's kept
  const std::string header = obs::emissions_csv_header() + "\n";
  EXPECT_EQ(read_all(dir + "/emissions.csv"),
            header + obs::emissions_csv_row(b) + "\n" + obs::emissions_csv_row(a) + "\n");
  EXPECT_EQ(obs::emissions_csv_row(a).substr(0, 25), "t2,megatron,run-a,10.0,,,");
  std::ofstream(dir + "/emissions.csv") << "timestamp,project_name\n";
  try {
    obs::write_emissions_csv(dir, a);
    FAIL() << "a file of other columns is overwritten";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[--codecarbon-dir] " + dir + "/emissions.csv: a file with other columns"),
              std::string::npos)
        << e.what();
  }
}

TEST(EmissionsCsv, RunIdsLookLikeUuid4AndDiffer) {
  const std::string a = obs::random_run_id(), b = obs::random_run_id();
  EXPECT_TRUE(std::regex_match(a, std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")))
      << a;
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace megatron
