// Rank discovery from the launchers' environments (docs/design.md, "Launching").
#include "comm/launch_env.h"

#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "support/scoped_env.h"

namespace megatron::comm {
namespace {

using test::env_of;

TEST(LaunchEnv, SingleProcessWithoutLauncherVariables) {
  const LaunchEnv e = detect_launch_env(env_of({}));
  EXPECT_EQ(e.launcher, Launcher::kSingle);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_FALSE(e.mpi_available);
}

TEST(LaunchEnv, Torchrun) {
  const LaunchEnv e = detect_launch_env(env_of(
      {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node3"}, {"MASTER_PORT", "6000"}}));
  EXPECT_EQ(e.launcher, Launcher::kTorchrun);
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.master_addr, "node3");
  EXPECT_EQ(e.master_port, 6000);
}

TEST(LaunchEnv, SlurmAndOpenMpi) {
  LaunchEnv e = detect_launch_env(env_of({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "3"}}));
  EXPECT_EQ(e.launcher, Launcher::kSlurm);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_FALSE(e.mpi_available);
  e = detect_launch_env(env_of({{"OMPI_COMM_WORLD_RANK", "1"},
                                {"OMPI_COMM_WORLD_SIZE", "2"},
                                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                {"SLURM_PROCID", "0"},
                                {"SLURM_NTASKS", "1"}}));
  EXPECT_EQ(e.launcher, Launcher::kOpenMpi) << "mpirun inside an sbatch script: Open MPI's variables win";
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_TRUE(e.mpi_available);
  // torchrun's variables come first of all.
  e = detect_launch_env(
      env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}));
  EXPECT_EQ(e.launcher, Launcher::kTorchrun);
}

TEST(LaunchEnv, RanksPerNodeFromTheLauncher) {
  EXPECT_EQ(ranks_per_node(env_of({}), 16), 16);  // no launcher variable: one node
  EXPECT_EQ(ranks_per_node(env_of({{"LOCAL_WORLD_SIZE", "8"}}), 16), 8);
  EXPECT_EQ(ranks_per_node(env_of({{"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}), 16), 4);
  EXPECT_EQ(ranks_per_node(env_of({{"SLURM_NTASKS_PER_NODE", "2"}}), 16), 2);
  // The first variable that divides the world wins; one that does not is skipped.
  EXPECT_EQ(ranks_per_node(env_of({{"LOCAL_WORLD_SIZE", "3"}, {"SLURM_NTASKS_PER_NODE", "4"}}), 16), 4);
  EXPECT_EQ(ranks_per_node(env_of({{"LOCAL_WORLD_SIZE", "32"}}), 16), 16);
  EXPECT_THROW(ranks_per_node(env_of({{"LOCAL_WORLD_SIZE", "eight"}}), 16), Error);
}

TEST(LaunchEnv, BadValuesNameTheVariable) {
  auto message = [](std::map<std::string, std::string> vars) {
    try {
      detect_launch_env(env_of(std::move(vars)));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), "[RANK] expected an integer in the environment, got 'x'");
  EXPECT_EQ(message({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), "[RANK] 2 is not a rank of a world of 2 (WORLD_SIZE)");
  EXPECT_EQ(message({{"MASTER_PORT", "70000"}}), "[MASTER_PORT] 70000 is not a TCP port");
}

}  // namespace
}  // namespace megatron::comm
