// `megatron train --dry-run --world-size N [--gpus-per-node G]`: one process prints the plan of
// any layout, each pipeline stage's memory (NCCL's buffers included) and megatron plan's
// prediction, exactly as rank 0 of a launcher's N-rank job would (the reference: the same flags
// under torchrun's variables); a layout the world cannot hold names --world-size in its hint.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

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

// --fp8-format: the dry run's plan has each stage's FP8 buffers and scaling state, and its
// prediction is megatron plan's for the same layout with --fp8-format (both recipes, plan's
// default overlaps): the same iteration time and tokens/s, the same FP8 bytes; and not the
// prediction without FP8. (At this small TP 2 shard FP8 is predicted slower: the GEMMs it halves
// are narrow, the quantize passes and the TP all-reduces no longer hidden behind the weight
// gradients cost more.)
TEST(TrainDryRun, Fp8PlanAndPredictionAreMegatronPlans) {
  const std::string plan_layout =
      "plan --model gpt3-1.3b --gpu h100-80gb --gpus-per-node 8 --nodes 1 --tensor-model-parallel-size 2 "
      "--pipeline-model-parallel-size 2 --micro-batch-size 2 --global-batch-size 64 --sequence-parallel "
      "--use-distributed-optimizer --json";
  const std::regex predicted(
      R"( > predicted by megatron plan for h100-80gb \(1 node\(s\) x 8 GPU\(s\)\): ([0-9.]+) ms per iteration, ([0-9]+) tokens/s)");
  const std::regex fp8_line(R"(\n    FP8 buffers and scaling state +([0-9]+) bytes)");
  const std::string train = kLayout + " --overlap-grad-reduce --overlap-param-gather --world-size 8 --gpu h100-80gb";
  const test::CommandResult bf16 = megatron("", train);
  ASSERT_EQ(bf16.status, 0) << bf16.output;
  std::smatch b;
  ASSERT_TRUE(std::regex_search(bf16.output, b, predicted)) << bf16.output;
  EXPECT_EQ(bf16.output.find("FP8"), std::string::npos) << bf16.output;
  for (const std::string recipe : {"delayed --fp8-amax-history-len 16", "tensorwise"}) {
    const std::string fp8 = " --fp8-format hybrid --fp8-recipe " + recipe;
    const test::CommandResult run = megatron("", train + fp8);
    ASSERT_EQ(run.status, 0) << run.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(run.output, m, predicted)) << run.output;
    EXPECT_GT(std::fabs(std::stod(m[1]) - std::stod(b[1])), 1.0) << run.output;
    std::vector<int64_t> stage_fp8;
    for (std::sregex_iterator it(run.output.begin(), run.output.end(), fp8_line), end; it != end; ++it) {
      stage_fp8.push_back(std::stoll((*it)[1]));
    }
    ASSERT_EQ(stage_fp8.size(), 2u) << run.output;
    EXPECT_EQ(stage_fp8[0], stage_fp8[1]) << "12 layers on each stage";
    const test::CommandResult plan = megatron("", plan_layout + fp8);
    ASSERT_EQ(plan.status, 0) << plan.output;
    std::smatch s, t, f;
    ASSERT_TRUE(std::regex_search(plan.output, s, std::regex(R"("seconds_per_iteration": ([0-9.e-]+))")))
        << plan.output;
    ASSERT_TRUE(std::regex_search(plan.output, t, std::regex(R"("tokens_per_s": ([0-9.e+]+))"))) << plan.output;
    ASSERT_TRUE(std::regex_search(plan.output, f, std::regex(R"("fp8": ([0-9]+))"))) << plan.output;
    EXPECT_NEAR(std::stod(m[1]), 1e3 * std::stod(s[1]), 0.051) << run.output;
    EXPECT_NEAR(std::stod(m[2]), std::stod(t[1]), 0.51) << run.output;
    EXPECT_EQ(std::stoll(f[1]), stage_fp8[0]) << plan.output;
  }
  // A GPU without FP8 tensor cores gets a reason, not a number.
  const test::CommandResult a100 =
      megatron("", kLayout + " --world-size 8 --gpu a100-80gb --fp8-format hybrid --fp8-recipe tensorwise");
  ASSERT_EQ(a100.status, 0) << a100.output;
  EXPECT_NE(a100.output.find(" > no prediction by megatron plan for a100-80gb: the GPU has no FP8 tensor cores (this "
                             "run has --fp8-format)\n"),
            std::string::npos)
      << a100.output;
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
