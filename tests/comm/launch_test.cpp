// The --nproc-per-node launcher's own (GPU) path, with /bin/sh as the worker: every worker sees
// torchrun's variables; when one fails, the launcher names it, stops the others and fails.
// (The CPU path hands the ranks to mpirun: tests/train/trainer_data_parallel_test.cpp.)
#include "comm/launch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "support/paths.h"

namespace megatron::comm {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Launch, WorkersGetTorchrunVariables) {
  const std::string dir = test::scratch_dir("launch_env");
  const int rc = spawn_local_workers(
      3, {"/bin/sh", "-c", "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR\" > " + dir + "/$RANK"},
      /*gpu=*/true);
  EXPECT_EQ(rc, 0);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(read(dir + "/" + std::to_string(r)), std::to_string(r) + " 3 " + std::to_string(r) + " 3 127.0.0.1\n");
  }
}

TEST(Launch, AFailingRankStopsTheOthersAndIsNamed) {
  ::testing::internal::CaptureStderr();
  const auto start = std::chrono::steady_clock::now();
  // Rank 1 fails at once; ranks 0 and 2 would sleep for 60 s (SIGTERM ends them).
  const int rc =
      spawn_local_workers(3, {"/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 60"}, /*gpu=*/true);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 1);
  EXPECT_LT(seconds, 30.0);
  EXPECT_NE(err.find("error: [--nproc-per-node] rank 1 (pid "), std::string::npos) << err;
  EXPECT_NE(err.find(") exited with status 3; stopping the other ranks"), std::string::npos) << err;
}

TEST(Launch, RanksIgnoringSigtermAreKilledAfterTheGracePeriod) {
  const auto start = std::chrono::steady_clock::now();
  ::testing::internal::CaptureStderr();
  const int rc = spawn_local_workers(
      2, {"/bin/sh", "-c", "if [ \"$RANK\" = 0 ]; then sleep 1; exit 1; fi; trap '' TERM; while :; do sleep 0.1; done"},
      /*gpu=*/true);
  ::testing::internal::GetCapturedStderr();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(rc, 1);
  EXPECT_GE(seconds, 9.0);  // the 10 s grace period
  EXPECT_LT(seconds, 30.0);
}

}  // namespace
}  // namespace megatron::comm
