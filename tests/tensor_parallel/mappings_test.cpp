// The sequence-parallel collectives under mpirun -np 2, with closed-form values: rank r's rows
// hold r + 1 (gather), and the reduce-scatter of two full tensors keeps each rank's rows of
// their sum.
#include "tensor_parallel/mappings.h"

#include <gtest/gtest.h>

#include "comm/mpi_communicator.h"
#include "support/mpi.h"

namespace megatron::tensor_parallel {
namespace {

TEST(Mappings, GatherAndReduceScatterAlongTheSequence) {
  if (test::relaunch_under_mpirun(2)) return;
  comm::MpiRuntime mpi;
  auto tp = mpi.world();
  const int64_t n = 6, h = 3, r = tp->rank();
  EXPECT_EQ(shard_rows(*tp, n), 3);
  Tensor full = Tensor::cpu({n, h}, DType::kF32);
  Tensor shard = sequence_shard(*tp, full);
  EXPECT_EQ(shard.shape(), (Shape{3, h}));
  EXPECT_EQ(shard.data(), full.data_as<float>() + r * 3 * h) << "the shard is a view of rows [3r, 3r + 3)";
  for (int64_t i = 0; i < shard.numel(); ++i) shard.data_as<float>()[i] = static_cast<float>(r + 1);
  gather_sequence(*tp, shard, full);
  for (int64_t i = 0; i < full.numel(); ++i) EXPECT_EQ(full.data_as<float>()[i], i < 9 ? 1.0f : 2.0f) << i;

  // Not in place: a separate shard tensor.
  Tensor mine = Tensor::cpu({3, h}, DType::kF32);
  for (int64_t i = 0; i < mine.numel(); ++i) mine.data_as<float>()[i] = static_cast<float>(10 * (r + 1) + i);
  gather_sequence(*tp, mine, full);
  for (int64_t i = 0; i < full.numel(); ++i)
    EXPECT_EQ(full.data_as<float>()[i], static_cast<float>(i < 9 ? 10 + i : 20 + i - 9));

  // Element i of rank r's full tensor is i * (r + 1): the sum is 3 i; rank r keeps rows [3r, 3r + 3).
  for (int64_t i = 0; i < full.numel(); ++i) full.data_as<float>()[i] = static_cast<float>(i * (r + 1));
  Tensor out = Tensor::cpu({3, h}, DType::kF32);
  reduce_scatter_sequence(*tp, full, out);
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_EQ(out.data_as<float>()[i], 3.0f * static_cast<float>(r * 9 + i));
  // In place into the shard view.
  for (int64_t i = 0; i < full.numel(); ++i) full.data_as<float>()[i] = static_cast<float>(i * (r + 1));
  Tensor view = sequence_shard(*tp, full);
  reduce_scatter_sequence(*tp, full, view);
  for (int64_t i = 0; i < view.numel(); ++i) EXPECT_EQ(view.data_as<float>()[i], 3.0f * static_cast<float>(r * 9 + i));

  Tensor x = Tensor::cpu({2}, DType::kF32);
  x.data_as<float>()[0] = static_cast<float>(r);
  x.data_as<float>()[1] = 1.0f;
  all_reduce_tp(*tp, x);
  EXPECT_EQ(x.data_as<float>()[0], 1.0f);
  EXPECT_EQ(x.data_as<float>()[1], 2.0f);
}

// The started forms give the blocking calls' results once waited for (in place and not), and
// two started reductions complete in start order even when waited for in reverse.
TEST(Mappings, StartedReductionsEqualTheBlockingOnes) {
  if (test::relaunch_under_mpirun(2)) return;
  comm::MpiRuntime mpi;
  auto tp = mpi.world();
  const int64_t n = 6, h = 3, r = tp->rank();
  Tensor full = Tensor::cpu({n, h}, DType::kF32), x = Tensor::cpu({4}, DType::kF32);
  for (int64_t i = 0; i < full.numel(); ++i) full.data_as<float>()[i] = static_cast<float>(i * (r + 1));
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = static_cast<float>(r * 10 + i);
  Tensor view = sequence_shard(*tp, full);
  auto scatter = start_reduce_scatter_sequence(*tp, full, view);
  auto sum = start_all_reduce_tp(*tp, x);
  sum->wait();
  scatter->wait();
  for (int64_t i = 0; i < view.numel(); ++i) EXPECT_EQ(view.data_as<float>()[i], 3.0f * static_cast<float>(r * 9 + i));
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(x.data_as<float>()[i], static_cast<float>(10 + 2 * i));

  for (int64_t i = 0; i < full.numel(); ++i) full.data_as<float>()[i] = static_cast<float>(i * (r + 1));
  Tensor out = Tensor::cpu({3, h}, DType::kF32);
  start_reduce_scatter_sequence(*tp, full, out)->wait();
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_EQ(out.data_as<float>()[i], 3.0f * static_cast<float>(r * 9 + i));
}

}  // namespace
}  // namespace megatron::tensor_parallel
