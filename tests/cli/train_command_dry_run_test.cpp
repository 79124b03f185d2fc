// `megatron train --dry-run --world-size N [--gpus-per-node G]`: one process prints the plan of
// any layout, each pipeline stage's memory (NCCL's buffers included) and megatron plan's
// prediction, exactly as rank 0 of a launcher's N-rank job would (the reference: the same flags
// under torchrun's variables); a layout the world cannot hold names --world-size in its hint.
#include <gtest/gtest.h>

#include <string>

#include "support/paths.h"

namespace megatron {
namespace {

const std::string kLayout =
    "train --model gpt3-1.3b --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 2 "
    "--global-batch-size 64 --sequence-parallel --use-distributed-optimizer --bf16 --lr 1e-4 --train-iters 10 "
    "--dry-run --device cuda";

test::CommandResult megatron(const std::string& env, const std::string& flags) {
  return test::run_command(
      "env -u WORLD_SIZE -u RANK -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u OMPI_COMM_WORLD_SIZE "
      "-u OMPI_COMM_WORLD_RANK -u SLURM_PROCID -u SLURM_NTASKS " +
          env + " " + test::megatron_binary() + " " + flags,
      true);
}

// The output after the padded-vocabulary line, less the --world-size line.
std::string plan_part(const std::string& out) {
  std::string rest = out.substr(out.find(" > padded vocab"));
  const size_t w = rest.find(" > --dry-run for a world of");
  if (w != std::string::npos) rest.erase(w, rest.find('\n', w) + 1 - w);
  return rest;
}

TEST(TrainDryRun, WorldSizeFlagPlansAsTheLaunchersRankZero) {
  const test::CommandResult flag = megatron("", kLayout + " --world-size 16 --gpus-per-node 4 --gpu h100-80gb");
  ASSERT_EQ(flag.status, 0) << flag.output;
  const test::CommandResult launched =
      megatron("WORLD_SIZE=16 RANK=0 LOCAL_RANK=0 LOCAL_WORLD_SIZE=4", kLayout + " --gpu h100-80gb");
  ASSERT_EQ(launched.status, 0) << launched.output;
  EXPECT_EQ(plan_part(flag.output), plan_part(launched.output));
  EXPECT_NE(flag.output.find(" > --dry-run for a world of 16 rank(s), 4 per node (--gpus-per-node): data-parallel "
                             "size 4, tensor-model-parallel size 2, pipeline-model-parallel size 2\n"),
            std::string::npos)
      << flag.output;
  EXPECT_NE(flag.output.find(" > NCCL buffers: the model of plan/nccl_memory.h, 16 ranks, 4 per node"),
            std::string::npos)
      << flag.output;
  EXPECT_NE(flag.output.find(" > pipeline stage 0 of 2:\n"), std::string::npos) << flag.output;
  EXPECT_NE(flag.output.find(" > pipeline stage 1 of 2:\n"), std::string::npos) << flag.output;
  EXPECT_NE(flag.output.find(" > predicted by megatron plan for h100-80gb (4 node(s) x 4 GPU(s)): "), std::string::npos)
      << flag.output;
  // Without --gpus-per-node: 8 per node, megatron plan's default.
  const test::CommandResult eight = megatron("", kLayout + " --world-size 16 --gpu h100-80gb");
  EXPECT_NE(eight.output.find("(2 node(s) x 8 GPU(s))"), std::string::npos) << eight.output;
  const test::CommandResult no_gpu = megatron("", kLayout + " --world-size 16");
  ASSERT_EQ(no_gpu.status, 0) << no_gpu.output;
  EXPECT_NE(no_gpu.output.find(" > no speed prediction: give the GPU kind with --gpu ("), std::string::npos)
      << no_gpu.output;
}

TEST(TrainDryRun, ALayoutTooBigForTheWorldNamesWorldSize) {
  const test::CommandResult one = megatron("", kLayout);
  EXPECT_NE(one.status, 0);
  EXPECT_NE(one.output.find("error: [--tensor-model-parallel-size/--pipeline-model-parallel-size] world size (1) is "
                            "not divisible by tensor parallel size (2) times pipeline parallel size (2); the world "
                            "size comes from the launcher (torchrun, mpirun, srun or --nproc-per-node N); to check "
                            "this layout on one machine: --dry-run --world-size N\n"),
            std::string::npos)
      << one.output;
  const test::CommandResult six = megatron("", kLayout + " --world-size 6");
  EXPECT_NE(six.status, 0);
  EXPECT_NE(six.output.find("world size (6) is not divisible by tensor parallel size (2) times pipeline parallel size "
                            "(2)\n"),
            std::string::npos)
      << six.output;
  const test::CommandResult run = megatron("",
                                           "train --model gpt3-1.3b --micro-batch-size 1 --lr 1e-4 "
                                           "--train-iters 1 --mock-data --world-size 4");
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("error: [--world-size] is for --dry-run only"), std::string::npos) << run.output;
  const test::CommandResult per_node = megatron("",
                                                "train --model gpt3-1.3b --micro-batch-size 1 --lr 1e-4 "
                                                "--train-iters 1 --mock-data --gpus-per-node 4");
  EXPECT_NE(per_node.status, 0);
  EXPECT_NE(per_node.output.find("error: [--gpus-per-node] is for --dry-run only"), std::string::npos)
      << per_node.output;
  const test::CommandResult odd = megatron("", kLayout + " --world-size 16 --gpus-per-node 3");
  EXPECT_NE(odd.status, 0);
  EXPECT_NE(odd.output.find("[--gpus-per-node] world size (16) is not a multiple of --gpus-per-node (3)"),
            std::string::npos)
      << odd.output;
}

}  // namespace
}  // namespace megatron
