// The parity spine on the GPU (label gpu; skipped without one): `megatron train` of the tiny
// parity GPT (fp32, 10 iterations, dropout 0.1) with --device cuda, every rank on GPU 0 through
// --distributed-backend mpi (host-staged collectives: NCCL refuses two ranks on one GPU). Each
// layout logs the one-process GPU run's losses and grad norms, to the CPU parity tests' bounds
// (support/parity_runs.h: loss 2e-6, grad norm 1e-5 relative): the layouts reorder fp32
// additions only, on the GPU as on the CPU, and draw the single-process dropout masks. This is
// the CUDA engine's tensor, sequence, pipeline and data parallel code, the distributed
// optimizer with overlapped reductions, and full recompute, run on a GPU without a multi-GPU
// machine; bench/gpu_shared_parallel.sh does the same at a larger size and in bf16 and fp16.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/device.h"
#include "support/parity_runs.h"
#include "support/paths.h"
#include "support/walk_corpus.h"

namespace megatron::train {
namespace {

using test::expect_same;
using test::read_jsonl;
using test::with;

// The tiny GPT of the CPU parity tests with 4 layers (two virtual chunks per pipeline stage),
// on the GPU, its ranks sharing it; the vocabulary padded to 50432 rows as TP2 pads it.
std::vector<std::string> gpu_flags(const std::string& dir) {
  std::vector<std::string> a = test::tiny_train_flags(dir, 4, "0.1");
  const auto device = std::find(a.begin(), a.end(), "--device");
  *(device + 1) = "cuda";
  return with(std::move(a), {"--distributed-backend", "mpi"});
}

TEST(TrainerSharedGpu, EveryLayoutMatchesTheOneProcessGpuRun) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string dir = test::scratch_dir("trainer_shared_gpu");
  test::write_walk_corpus(dir);
  const auto base = gpu_flags(dir);
  const auto one_process = [&](std::vector<std::string> a) {
    return with(std::move(a), {"--make-vocab-size-divisible-by", "256"});
  };
  const test::CommandResult one = test::run_ranks(one_process(with(base, {"--log-jsonl", dir + "/one.jsonl"})), 1);
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_NE(one.output.find(" > device: cuda:0"), std::string::npos) << one.output;
  const auto ref = read_jsonl(dir + "/one.jsonl");
  ASSERT_EQ(ref.size(), 10u) << one.output;
  EXPECT_LT(ref.at(10).loss, ref.at(1).loss - 0.5) << "the run must learn for the comparison to mean anything";

  struct Layout {
    std::string name;
    int ranks;
    std::vector<std::string> flags;
  };
  const std::vector<Layout> layouts = {
      {"DP2, distributed optimizer, overlapped reductions",
       2,
       {"--make-vocab-size-divisible-by", "256", "--use-distributed-optimizer", "--overlap-grad-reduce",
        "--overlap-param-gather", "--ddp-bucket-size", "3001"}},
      {"TP2 + SP", 2, {"--tensor-model-parallel-size", "2", "--sequence-parallel"}},
      {"PP2 interleaved",
       2,
       {"--make-vocab-size-divisible-by", "256", "--pipeline-model-parallel-size", "2",
        "--num-layers-per-virtual-pipeline-stage", "1"}},
      {"TP2 x PP2 x DP2 + SP, distributed optimizer, full recompute",
       8,
       {"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--sequence-parallel",
        "--use-distributed-optimizer", "--recompute-granularity", "full", "--recompute-method", "uniform",
        "--recompute-num-layers", "1"}},
  };
  for (size_t i = 0; i < layouts.size(); ++i) {
    const Layout& l = layouts[i];
    const std::string log = dir + "/layout" + std::to_string(i) + ".jsonl";
    std::vector<std::string> argv = with(base, {"--log-jsonl", log});
    argv.insert(argv.end(), l.flags.begin(), l.flags.end());
    const test::CommandResult r = test::run_ranks(argv, l.ranks);
    ASSERT_EQ(r.status, 0) << l.name << "\n" << r.output;
    const std::string note =
        " > collectives: MPI, GPU tensors staged through host memory (--distributed-backend mpi); " +
        std::to_string(l.ranks) + " ranks share " + std::to_string(backend::cuda_device_count()) + " GPU(s)";
    EXPECT_NE(r.output.find(note), std::string::npos) << l.name << ": rank 0 says the GPU is shared\n" << r.output;
    expect_same(ref, read_jsonl(log), 1, l.name + " on one GPU");
  }
}

}  // namespace
}  // namespace megatron::train
