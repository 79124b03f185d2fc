#include "support/mpi.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "comm/mpirun.h"
#include "support/paths.h"

namespace megatron::test {

namespace {
constexpr const char* kRanksVar = "MT_TEST_MPI_RANKS";
// A test whose ranks deadlock fails after this long instead of holding ctest (which has no
// timeout of its own) until CI's limit; every multi-rank test body takes seconds.
constexpr int kRanksTimeoutSeconds = 300;

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}
}  // namespace

bool in_mpirun_ranks() { return std::getenv(kRanksVar) != nullptr; }

bool relaunch_under_mpirun(int np) {
  if (in_mpirun_ranks()) return false;
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string filter = std::string(info->test_suite_name()) + "." + info->name();
  const std::vector<std::string> cmd =
      comm::local_mpirun_command(np, {self_exe(), "--gtest_filter=" + filter}, {std::string(kRanksVar) + "=1"});
  const CommandResult r =
      run_command("timeout --kill-after=10 " + std::to_string(kRanksTimeoutSeconds) + " " + comm::shell_join(cmd),
                  /*capture_stderr=*/true);
  EXPECT_NE(r.status, 124) << "mpirun -np " << np << " " << filter << " did not finish in " << kRanksTimeoutSeconds
                           << " s (deadlocked ranks?):\n"
                           << r.output;
  EXPECT_EQ(r.status, 0) << "mpirun -np " << np << " " << filter << " failed:\n" << r.output;
  return true;
}

}  // namespace megatron::test
