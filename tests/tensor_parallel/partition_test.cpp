// Shard <-> global index math of partitioned parameters: the worked example of the header, and
// under mpirun -np 2 the gather of both ranks' shards reassembles the global tensor, which
// slice_partition cuts back into the same shards.
#include "tensor_parallel/partition.h"

#include <gtest/gtest.h>

#include "comm/mpi_communicator.h"
#include "support/mpi.h"

namespace megatron::tensor_parallel {
namespace {

TEST(Partition, ShapesAndGlobalIndices) {
  const Shape g{2, 4};
  EXPECT_EQ(local_shape(g, {0, 1, 2}), (Shape{1, 4}));
  EXPECT_EQ(local_shape(g, {1, 1, 2}), (Shape{2, 2}));
  EXPECT_EQ(local_shape(g, {-1, 1, 2}), g);
  // Columns: rank 0 [[0 1] [4 5]], rank 1 [[2 3] [6 7]].
  std::vector<int64_t> r0, r1;
  for (int64_t k = 0; k < 4; ++k) {
    r0.push_back(global_index(g, {1, 0, 2}, k));
    r1.push_back(global_index(g, {1, 1, 2}, k));
  }
  EXPECT_EQ(r0, (std::vector<int64_t>{0, 1, 4, 5}));
  EXPECT_EQ(r1, (std::vector<int64_t>{2, 3, 6, 7}));
  // Rows: rank 1 of [2, 4] holds elements 4..7.
  EXPECT_EQ(global_index(g, {0, 1, 2}, 0), 4);
  EXPECT_EQ(global_index(g, {-1, 1, 2}, 3), 3);
}

// SwiGLU's FC1 [2f, h] = [gate; up] as 2 row chunks over 2 ranks (f = 4, h = 3): rank r holds
// gate rows 2r, 2r + 1 then up rows 4 + 2r, 4 + 2r + 1; the init map and the runs agree.
TEST(Partition, ChunkedRowsHoldTheirRowsOfEachChunk) {
  const Shape g{8, 3};
  for (int64_t rank : {0, 1}) {
    const Partition p{0, rank, 2, 2};
    ASSERT_EQ(local_shape(g, p), (Shape{4, 3}));
    std::vector<int64_t> rows;
    for (int64_t k = 0; k < 12; k += 3) rows.push_back(global_index(g, p, k) / 3);
    EXPECT_EQ(rows, (std::vector<int64_t>{2 * rank, 2 * rank + 1, 4 + 2 * rank, 5 + 2 * rank})) << rank;
    for (int64_t k = 0; k < 12; ++k) EXPECT_EQ(global_index(g, p, k) % 3, k % 3);
    const backend::NormalInit m = shard_index_map(g, p);  // global = offset + k / local * global_cols + k % local
    for (int64_t k = 0; k < 12; ++k) {
      EXPECT_EQ(m.offset + k / m.local_cols * m.global_cols + k % m.local_cols, global_index(g, p, k)) << k;
    }
    int runs = 0;
    for_each_global_run(g, p, 0, 12, [&](int64_t global_start, int64_t local_start, int64_t len) {
      EXPECT_EQ(len, 6);
      EXPECT_EQ(global_start, global_index(g, p, local_start));
      ++runs;
    });
    EXPECT_EQ(runs, 2) << "one run per chunk";
  }
  // Rows that do not split into chunks x ranks are a bug (MT_CHECK aborts).
  EXPECT_DEATH(local_shape(Shape{6, 3}, Partition{0, 0, 2, 2}), "does not split along dim 0 over 2 x 2 chunks");
}

// Every element of every sub-range of every shard lands where global_index puts it, in runs
// that are maximal (the next element is never the continuation of the run before it) and
// cover the range exactly once, in order.
TEST(Partition, GlobalRunsFollowGlobalIndex) {
  const Shape g{5, 6};
  for (int dim : {-1, 0, 1}) {
    for (int64_t size : {1, 2, 3}) {
      if (dim == 0 && 5 % size != 0) continue;
      for (int64_t rank = 0; rank < size; ++rank) {
        const Partition p{dim, rank, size};
        const int64_t n = shape_numel(local_shape(g, p));
        for (int64_t begin = 0; begin <= n; ++begin) {
          for (int64_t count = 0; begin + count <= n; ++count) {
            int64_t next_local = begin, runs = 0, last_end = -1;
            for_each_global_run(g, p, begin, count, [&](int64_t global_start, int64_t local_start, int64_t len) {
              ASSERT_EQ(local_start, next_local);
              ASSERT_GT(len, 0);
              EXPECT_NE(global_start, last_end) << "run not maximal";
              for (int64_t i = 0; i < len; ++i) ASSERT_EQ(global_index(g, p, local_start + i), global_start + i);
              next_local += len;
              last_end = global_start + len;
              ++runs;
            });
            EXPECT_EQ(next_local, begin + count);
            if (count == 0) {
              EXPECT_EQ(runs, 0);
            }
          }
        }
      }
    }
  }
}

TEST(Partition, GatherThenSliceRoundTrips) {
  if (test::relaunch_under_mpirun(2)) return;
  comm::MpiRuntime mpi;
  auto tp = mpi.world();
  auto backend = backend::make_cpu_backend();
  const Shape g{8, 4};
  for (int dim : {-1, 0, 1, 2}) {  // 2: dim 0 in two row chunks (SwiGLU's FC1)
    const Partition p{dim == 2 ? 0 : dim, tp->rank(), 2, dim == 2 ? 2 : 1};
    Tensor shard = Tensor::cpu(local_shape(g, p), DType::kF32);
    for (int64_t k = 0; k < shard.numel(); ++k) {
      shard.data_as<float>()[k] = static_cast<float>(dim == -1 ? k : global_index(g, p, k));
    }
    const Tensor whole = gather_partitioned(*tp, *backend, shard, g, p);
    ASSERT_EQ(whole.shape(), g);
    for (int64_t i = 0; i < whole.numel(); ++i) EXPECT_EQ(whole.data_as<float>()[i], static_cast<float>(i)) << dim;
    const Tensor back = slice_partition(whole, p);
    ASSERT_EQ(back.shape(), shard.shape());
    for (int64_t k = 0; k < back.numel(); ++k) EXPECT_EQ(back.data_as<float>()[k], shard.data_as<float>()[k]) << dim;
  }
}

}  // namespace
}  // namespace megatron::tensor_parallel
