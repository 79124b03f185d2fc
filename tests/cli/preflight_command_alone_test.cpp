// `megatron preflight` names a rank stopped four fifths of the time (SIGSTOP/SIGCONT from a shell
// around it, mpirun's MPMD form) slow with its host, and the job exits 1. Its GEMM rate is ~1/5
// of rank 0's (measured 0.12-0.27 here), flagged below 0.6 x the median of the two, i.e. below
// ~0.43 x rank 0's.
//
// The GEMM is timed over 40 x 1024^3 (~0.2 s of rank 0's work on this CPU, ~1 s of rank 1's wall
// time), so it spans ~10 stop cycles of 0.1 s: at 384^3 the window was ~25 ms and fell inside
// one running slice of rank 1 often enough to fail. Run alone (an _alone_test file is RUN_SERIAL)
// because other tests loading the two cores would slow rank 0 as well.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/host_name.h"
#include "support/held_back_rank.h"
#include "support/paths.h"

namespace megatron::cli {
namespace {

TEST(PreflightCommand, NamesAHeldBackRank) {
  const std::vector<std::string> flags = {test::megatron_binary(), "preflight", "--device",     "cpu",
                                          "--gemm-size",           "1024",      "--iterations", "40",
                                          "--tolerance",           "0.4"};
  const test::CommandResult r =
      test::run_command(test::held_back_rank1_command(flags, 0.02, 0.08, 120), /*capture_stderr=*/true);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("  rank 1 on " + host_name("unknown") + ": GEMM fp32 1024 x 1024 x 1024 "), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("  rank 0 on "), std::string::npos) << "rank 0 ran at full speed: " << r.output;
}

}  // namespace
}  // namespace megatron::cli
