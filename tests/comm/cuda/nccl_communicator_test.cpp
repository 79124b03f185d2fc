// The copy engines' set-up on a one-rank NCCL group (the one GPU a test machine surely has):
// on over NCCL's symmetric memory, with the reduce-scatter and all-gather still exact; and,
// where a step of the set-up fails (MEGATRON_TEST_NCCL_FAIL names the NCCL call), off with that
// call's reason, the group's collectives still exact on NCCL's kernels, and nothing left behind
// (the device memory back where it was, a second try succeeds). Several ranks' agreement is the
// GPU checks' (bench/gpu_copy_engine_fallback.sh). NCCL answering a registration with no window (newer NCCLs
// without symmetric memory) is not provoked here: NCCL 2.28.3 on one H200 gives windows even
// under NCCL_WIN_ENABLE=0 or NCCL_CUMEM_ENABLE=0.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "comm/communicator.h"
#include "comm/nccl_communicator.h"
#include "core/tensor.h"
#include "support/scoped_env.h"

namespace megatron::comm {
namespace {

using test::ScopedEnv;

constexpr int64_t kElems = 4096 + 3;  // not a multiple of anything NCCL rounds to

class CopyEngineSetUp : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!backend::built_with_cuda() || backend::cuda_device_count() == 0 || !built_with_nccl()) {
      GTEST_SKIP() << "no CUDA device or no NCCL";
    }
    if (!copy_engine_supported()) GTEST_SKIP() << "this build's NCCL is older than 2.28";
    gpu_ = backend::make_cuda_backend(0);
    world_ = make_nccl_world(*gpu_, 0, 1, make_nccl_unique_id());
  }
  void TearDown() override {
    use_symmetric_memory(true);  // forgets an allocation failure
    use_symmetric_memory(false);
  }

  // The parameter and gradient buffers as the trainer makes them: with symmetric memory asked
  // for while they are allocated.
  void make_buffers() {
    ASSERT_TRUE(use_symmetric_memory(true));
    values_ = gpu_->empty({kElems}, DType::kF32, MemoryKind::kParams);
    grads_ = gpu_->empty({kElems}, DType::kF32, MemoryKind::kGrads);
    use_symmetric_memory(false);
  }
  CopyEngineResult enable(int64_t receive = kElems) {
    const Tensor buffers[] = {values_, grads_};
    return world_->enable_copy_engine(buffers, receive);
  }
  // A reduce-scatter of the gradients and an all-gather of the values through the group, each
  // against its input (one rank: the sum of one piece, the gather of one piece).
  void expect_collectives_exact() {
    const Tensor host = backend::host_random({kElems}, DType::kF32, 7);
    gpu_->copy(host, grads_);
    Tensor reduced = gpu_->empty({kElems}, DType::kF32, MemoryKind::kOther);
    reduce_scatter(*world_, grads_, reduced, ReduceOp::kSum);
    EXPECT_TRUE(backend::bitwise(backend::to_host(*gpu_, reduced), host, "reduce_scatter"));
    Tensor piece = backend::to_device(*gpu_, host);
    all_gather(*world_, piece, values_);
    EXPECT_TRUE(backend::bitwise(backend::to_host(*gpu_, values_), host, "all_gather"));
  }

  std::unique_ptr<backend::Backend> gpu_;
  std::unique_ptr<Communicator> world_;
  Tensor values_, grads_;
};

TEST_F(CopyEngineSetUp, OnOverSymmetricMemory) {
  make_buffers();
  const CopyEngineResult r = enable();
  ASSERT_TRUE(r.on) << r.why_off;
  EXPECT_EQ(r.why_off, "");
  expect_collectives_exact();
  const CopyEngineResult again = enable();
  EXPECT_TRUE(again.on) << "the same buffers lie in the windows already registered: " << again.why_off;
}

TEST_F(CopyEngineSetUp, OffWithoutSymmetricMemory) {
  values_ = gpu_->empty({kElems}, DType::kF32, MemoryKind::kParams);
  grads_ = gpu_->empty({kElems}, DType::kF32, MemoryKind::kGrads);
  const CopyEngineResult r = enable();
  EXPECT_FALSE(r.on);
  EXPECT_NE(r.why_off.find("not in NCCL's symmetric memory"), std::string::npos) << r.why_off;
  expect_collectives_exact();
}

// The platform refusing ncclMemAlloc: the buffers come from cudaMalloc and work; the engines
// say why they are off.
TEST_F(CopyEngineSetUp, FailedSymmetricAllocationFallsBackToCudaMalloc) {
  {
    ScopedEnv fail("MEGATRON_TEST_NCCL_FAIL", "ncclMemAlloc");
    make_buffers();
  }
  ASSERT_TRUE(values_.defined() && grads_.defined());
  const CopyEngineResult r = enable();
  EXPECT_FALSE(r.on);
  EXPECT_NE(r.why_off.find("ncclMemAlloc failed"), std::string::npos) << r.why_off;
  EXPECT_NE(r.why_off.find("MEGATRON_TEST_NCCL_FAIL"), std::string::npos) << r.why_off;
  expect_collectives_exact();
}

// A failed step after the child communicator exists undoes it: a later try with the same
// buffers turns the engines on.
TEST_F(CopyEngineSetUp, FailedSplitOrRegistrationIsUndone) {
  make_buffers();
  for (const char* call : {"ncclCommSplit", "ncclCommWindowRegister"}) {
    ScopedEnv fail("MEGATRON_TEST_NCCL_FAIL", call);
    const CopyEngineResult r = enable();
    EXPECT_FALSE(r.on) << call;
    EXPECT_NE(r.why_off.find(std::string("rank 0: ") + call + " failed"), std::string::npos) << r.why_off;
    expect_collectives_exact();
  }
  const CopyEngineResult r = enable();
  ASSERT_TRUE(r.on) << r.why_off;
  expect_collectives_exact();
}

// The receive buffer's own allocation failing (the third ncclMemAlloc: values, gradients,
// receive buffer): off, the windows of the buffers deregistered.
TEST_F(CopyEngineSetUp, FailedReceiveBufferIsUndone) {
  make_buffers();
  {
    ScopedEnv fail("MEGATRON_TEST_NCCL_FAIL", "ncclMemAlloc:3");
    const CopyEngineResult r = enable();
    EXPECT_FALSE(r.on);
    EXPECT_NE(r.why_off.find("the receive buffer: ncclMemAlloc failed"), std::string::npos) << r.why_off;
    expect_collectives_exact();
  }
  const CopyEngineResult r = enable();
  ASSERT_TRUE(r.on) << r.why_off;
  expect_collectives_exact();
}

int64_t free_device_bytes() {
  size_t free_b = 0, total_b = 0;
  EXPECT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  return static_cast<int64_t>(free_b);
}

// The last step failing, after the buffers' windows and a 1 GiB receive buffer exist (the
// third registration): everything is released, the device memory back within what NCCL keeps
// for itself, far less than the receive buffer or a communicator's ~250 MiB.
TEST_F(CopyEngineSetUp, FailedLastRegistrationReleasesEverything) {
  make_buffers();
  constexpr int64_t kReceive = int64_t{256} << 20;  // fp32 elements: 1 GiB
  const int64_t before = free_device_bytes();
  {
    ScopedEnv fail("MEGATRON_TEST_NCCL_FAIL", "ncclCommWindowRegister:3");
    const CopyEngineResult r = enable(kReceive);
    EXPECT_FALSE(r.on);
    EXPECT_NE(
        r.why_off.find("ncclCommWindowRegister failed for " + std::to_string(kReceive * 4 + kSymmetricSlackBytes)),
        std::string::npos)
        << r.why_off;
  }
  const int64_t kept = before - free_device_bytes();
  std::printf("device memory not returned after the failed set-up: %lld bytes\n", static_cast<long long>(kept));
  EXPECT_LT(kept, int64_t{64} << 20);
  expect_collectives_exact();
  const CopyEngineResult r = enable(kReceive);
  ASSERT_TRUE(r.on) << r.why_off;
  expect_collectives_exact();
}

}  // namespace
}  // namespace megatron::comm
