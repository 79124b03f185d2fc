// The copy engines' log line (parallel::copy_engine_text): nothing without MEGATRON_DP_COPY_ENGINE;
// with it, on and the receive buffer's size where the data-parallel group turns them on, and
// otherwise off with the group's own reason or what the run lacks (the distributed optimizer,
// the preparation).
#include "parallel/data_parallel_setup.h"

#include <gtest/gtest.h>

#include <string>

#include "backend/ops.h"
#include "parallel/optimizer.h"
#include "support/recording_communicator.h"
#include "support/scoped_env.h"

namespace megatron::parallel {
namespace {

model::ParameterSet make_params(backend::Backend& backend) {
  model::ParameterSet ps;
  ps.add("a.weight", {64, 64}, model::Init::kNormal);  // [0, 4096)
  ps.add("b.weight", {1000}, model::Init::kOnes);      // [4096, 5096)
  ps.allocate(backend, DType::kF32);
  ps.initialize(backend, 11, 0.5f, 2);
  return ps;
}

struct OneRankTwoGroup {
  std::unique_ptr<backend::Backend> cpu = backend::make_cpu_backend();
  model::ParameterSet ps = make_params(*cpu);
  test::RecordingCommunicator dp{{ps.grads(), ps.values()}};
  std::string text(bool prepared, bool distributed) {
    parallel::DataParallelFlags config;
    config.use_distributed_optimizer = distributed;
    parallel::DataParallelOptions o;
    o.group = &dp;
    o.distributed = distributed;
    o.bucket_size = 2000;  // buckets [0, 4096) and [4096, 5096): the largest in pieces of 2048
    parallel::MixedPrecisionOptimizer optimizer(ps, *cpu, parallel::OptimizerConfig{},
                                                optim::GradScaler::constant(1.0f), o);
    return parallel::copy_engine_text(prepared, config, optimizer);
  }
};

TEST(CopyEngineText, SaysWhetherTheEnginesAreOnAndWhyNot) {
  OneRankTwoGroup s;
  {
    test::ScopedEnv unasked("MEGATRON_DP_COPY_ENGINE", "0");
    EXPECT_EQ(s.text(true, true), "") << "not asked for";
  }
  test::ScopedEnv asked("MEGATRON_DP_COPY_ENGINE", "1");
  const std::string refused = s.text(true, true);
  EXPECT_EQ(refused,
            " > MEGATRON_DP_COPY_ENGINE: off (no copy engines here): the data-parallel collectives stay on "
            "the SMs\n");
  // Not prepared (parallel::prepare_copy_engine): without the distributed optimizer, or without
  // NCCL's collectives or a second data-parallel rank.
  EXPECT_EQ(s.text(false, false),
            " > MEGATRON_DP_COPY_ENGINE: off (needs --use-distributed-optimizer: an all-reduce needs the SMs)\n");
  EXPECT_NE(s.text(false, true).find("off (needs NCCL 2.28+ collectives"), std::string::npos);
  s.dp.copy_engine_available = true;
  // The largest bucket, 4096 elements in 2 pieces of 2048: a receive buffer of 2 x 2048 fp32
  // values, 16 KiB, which rounds to 0 MiB.
  const std::string on = s.text(true, true);
  EXPECT_EQ(on,
            " > MEGATRON_DP_COPY_ENGINE: data-parallel reduce-scatters and parameter gathers on the copy engines "
            "(receive buffer 0 MiB, and one more NCCL communicator)\n");
}

}  // namespace
}  // namespace megatron::parallel
