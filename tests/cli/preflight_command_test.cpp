// `megatron preflight` on CPU ranks: every group of a TP2 x PP2 layout is measured (the
// tensor-parallel reductions, the pipeline ring, the world) and nothing is slow at tolerance 1;
// --json is one object; bad flags are one line. (A held-back rank: preflight_command_alone_test.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/mpirun.h"
#include "support/paths.h"

namespace megatron::cli {
namespace {

TEST(PreflightCommand, MeasuresEveryGroupOfTheLayout) {
  const test::CommandResult r =
      test::run_command(comm::shell_join({test::megatron_binary(), "preflight", "--device", "cpu", "--nproc-per-node",
                                          "4", "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size",
                                          "2", "--tolerance", "1"}),
                        /*capture_stderr=*/true);
  EXPECT_EQ(r.status, 0) << r.output;
  for (const char* line :
       {"preflight: 4 rank(s) on 1 host(s), CPU, TP 2 x PP 2 x DP 1", "  GEMM fp32 256 x 256 x 256",
        "  device copy 32 MiB", "  all_reduce [tp] 8 MiB fp32", "  all_gather [tp] 8 MiB fp32",
        "  send_recv [pp] 8 MiB fp32", "  all_reduce [world] 8 MiB fp32",
        "every rank and group within 100% of its median", "for `megatron plan`: --intra-node-bandwidth "}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
  EXPECT_EQ(r.output.find("[dp]"), std::string::npos) << "DP 1 has no group to measure: " << r.output;
  EXPECT_NE(r.output.find("[4 values]"), std::string::npos) << r.output;
}

// --json: stdout is one JSON object that Python's json module reads (the device line on stderr).
TEST(PreflightCommand, JsonIsOneObjectOnStdout) {
  const std::string dir = test::scratch_dir("preflight_json");
  const test::CommandResult r =
      test::run_command(comm::shell_join({test::megatron_binary(), "preflight", "--device", "cpu", "--iterations", "2",
                                          "--tolerance", "1", "--json"}) +
                            " > " + dir + "/out.json",
                        false);
  ASSERT_EQ(r.status, 0);
  const test::CommandResult py = test::run_command(
      "python3 -c \"import json,sys; d=json.load(open('" + dir +
          "/out.json')); print(d['slow'], [r['what'] for r in d['rows']], d['rows'][0]['values'][0]['ranks'])\"",
      true);
  EXPECT_EQ(py.status, 0) << py.output;
  EXPECT_EQ(py.output, "0 ['GEMM fp32 256 x 256 x 256', 'device copy 32 MiB'] [0]\n");
}

TEST(PreflightCommand, BadFlagsAreOneLine) {
  const test::CommandResult r = test::run_command(
      comm::shell_join({test::megatron_binary(), "preflight", "--device", "cpu", "--tolerance", "2"}), true);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("error: [--tolerance] must be within [0, 1], got 2"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace megatron::cli
