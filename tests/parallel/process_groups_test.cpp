// ProcessGroups over MPI: with world 8 = tp 2 x dp 2 x pp 2, every communicator holds exactly
// the ranks that rank_layout says (each rank all-gathers the world ranks of its group), in
// that order; the single-process groups are one-rank groups.
#include "parallel/process_groups.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "comm/shared_communicator.h"
#include "support/mpi.h"

namespace megatron::comm {
namespace {

TEST(ProcessGroups, MpiGroupsMatchTheRankLayout) {
  if (test::relaunch_under_mpirun(8)) return;
  MpiRuntime mpi;
  const parallel::ParallelSizes sizes = parallel::parallel_sizes(8, /*tp=*/2, /*pp=*/2);
  ASSERT_EQ(sizes.dp, 2);
  parallel::ProcessGroups g = parallel::make_process_groups(mpi.world(), sizes);
  const int64_t me = g.rank();
  EXPECT_EQ(parallel::global_rank(sizes, g.coords), me);
  EXPECT_EQ(g.is_last_rank(), me == 7);
  for (parallel::GroupKind kind :
       {parallel::GroupKind::kTp, parallel::GroupKind::kCp, parallel::GroupKind::kDp, parallel::GroupKind::kPp,
        parallel::GroupKind::kDpCp, parallel::GroupKind::kModelParallel, parallel::GroupKind::kTpDpCp,
        parallel::GroupKind::kTpCp, parallel::GroupKind::kEmbedding, parallel::GroupKind::kPositionEmbedding}) {
    const int64_t index = parallel::group_index(sizes, kind, me);
    Communicator* c = g.group(kind);
    if (index < 0) {
      EXPECT_EQ(c, nullptr) << to_string(kind);
      continue;
    }
    ASSERT_NE(c, nullptr) << to_string(kind);
    EXPECT_EQ(c->name(), to_string(kind));
    const std::vector<int64_t> expected = parallel::rank_groups(sizes, kind)[static_cast<size_t>(index)];
    ASSERT_EQ(c->size(), static_cast<int64_t>(expected.size())) << to_string(kind);
    Tensor mine = Tensor::cpu({1}, DType::kI64), all = Tensor::cpu({c->size()}, DType::kI64);
    mine.data_as<int64_t>()[0] = me;
    all_gather(*c, mine, all);
    for (int64_t k = 0; k < c->size(); ++k) {
      EXPECT_EQ(all.data_as<int64_t>()[k], expected[static_cast<size_t>(k)]) << to_string(kind) << " member " << k;
    }
  }
}

// A kind whose groups are those of a kind made before gets a second name for that
// communicator, not one of its own (each NCCL communicator costs ~250 MiB of device memory).
// World 4 = tp 2 x pp 2: dp, cp and the position embedding are one-rank groups (the first of
// them made, the rest named after it); tp-cp and tp-dp-cp are tp; the embedding group (first and
// last stage of 2) is pp. Model-parallel has the world's ranks but its own communicator (the
// world is never shared). Collectives through a second name still reach exactly its members.
TEST(ProcessGroups, KindsWithTheSameGroupsShareOneCommunicator) {
  if (test::relaunch_under_mpirun(4)) return;
  MpiRuntime mpi;
  parallel::ProcessGroups g =
      parallel::make_process_groups(mpi.world(), parallel::parallel_sizes(4, /*tp=*/2, /*pp=*/2));
  auto shared = [](const std::unique_ptr<Communicator>& c) {
    return dynamic_cast<SharedCommunicator*>(c.get()) != nullptr;
  };
  EXPECT_FALSE(shared(g.tp));
  EXPECT_FALSE(shared(g.cp));
  EXPECT_TRUE(shared(g.dp));
  EXPECT_FALSE(shared(g.pp));
  EXPECT_TRUE(shared(g.dp_cp));
  EXPECT_FALSE(shared(g.model_parallel));
  EXPECT_TRUE(shared(g.tp_dp_cp));
  EXPECT_TRUE(shared(g.tp_cp));
  EXPECT_TRUE(shared(g.embedding));
  EXPECT_EQ(g.model_parallel->name(), to_string(parallel::GroupKind::kModelParallel));
  EXPECT_EQ(g.tp_cp->name(), to_string(parallel::GroupKind::kTpCp));
  EXPECT_EQ(g.embedding->size(), 2);
  double mine = static_cast<double>(g.rank() + 1);
  g.model_parallel->all_reduce_host(std::span<double>(&mine, 1), ReduceOp::kSum);
  EXPECT_EQ(mine, 1.0 + 2.0 + 3.0 + 4.0);
  double tp_sum = static_cast<double>(g.rank());
  g.tp_cp->all_reduce_host(std::span<double>(&tp_sum, 1), ReduceOp::kSum);
  EXPECT_EQ(tp_sum, g.coords.pp == 0 ? 0.0 + 1.0 : 2.0 + 3.0);
}

// World 2 = tp 2: tp has the world's ranks but its own communicator (a used kind); the unused
// kinds with all ranks (tp-cp, tp-dp-cp) take the world's, model-parallel takes tp's.
TEST(ProcessGroups, UnusedKindsWithAllRanksShareTheWorld) {
  if (test::relaunch_under_mpirun(2)) return;
  MpiRuntime mpi;
  parallel::ProcessGroups g =
      parallel::make_process_groups(mpi.world(), parallel::parallel_sizes(2, /*tp=*/2, /*pp=*/1));
  auto shared = [](const std::unique_ptr<Communicator>& c) {
    return dynamic_cast<SharedCommunicator*>(c.get()) != nullptr;
  };
  EXPECT_FALSE(shared(g.tp));
  EXPECT_TRUE(shared(g.model_parallel));
  EXPECT_TRUE(shared(g.tp_cp));
  EXPECT_TRUE(shared(g.tp_dp_cp));
  double mine = static_cast<double>(g.rank() + 1);
  g.tp_dp_cp->all_reduce_host(std::span<double>(&mine, 1), ReduceOp::kSum);
  EXPECT_EQ(mine, 3.0);
}

// The links connect_pipeline_neighbours opens: each stage's neighbours, with interleaving also
// the wrap between the last stage and the first; each once, never itself, and symmetric
// (Communicator::connect_peers needs both ends to name each other, or it waits forever).
TEST(ProcessGroups, PipelineNeighboursAreSymmetric) {
  EXPECT_EQ(parallel::pipeline_neighbours(0, 1, false), std::vector<int64_t>{});
  EXPECT_EQ(parallel::pipeline_neighbours(0, 1, true), std::vector<int64_t>{});
  EXPECT_EQ(parallel::pipeline_neighbours(0, 2, true), std::vector<int64_t>{1});
  EXPECT_EQ(parallel::pipeline_neighbours(1, 2, false), std::vector<int64_t>{0});
  EXPECT_EQ(parallel::pipeline_neighbours(0, 4, false), std::vector<int64_t>{1});
  EXPECT_EQ(parallel::pipeline_neighbours(0, 4, true), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(parallel::pipeline_neighbours(2, 4, false), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(parallel::pipeline_neighbours(3, 4, false), std::vector<int64_t>{2});
  EXPECT_EQ(parallel::pipeline_neighbours(3, 4, true), (std::vector<int64_t>{2, 0}));
  for (bool interleaved : {false, true}) {
    for (int64_t pp = 1; pp <= 9; ++pp) {
      for (int64_t a = 0; a < pp; ++a) {
        const std::vector<int64_t> mine = parallel::pipeline_neighbours(a, pp, interleaved);
        const int64_t inner = (a > 0) + (a + 1 < pp);
        EXPECT_EQ(static_cast<int64_t>(mine.size()), interleaved ? std::min<int64_t>(pp - 1, 2) : inner)
            << a << " of " << pp;
        for (int64_t b : mine) {
          EXPECT_NE(b, a);
          const std::vector<int64_t> theirs = parallel::pipeline_neighbours(b, pp, interleaved);
          EXPECT_EQ(std::count(theirs.begin(), theirs.end(), a), 1) << a << " and " << b << " of " << pp;
        }
      }
    }
  }
}

TEST(ProcessGroups, SingleProcessHasOneRankGroups) {
  auto backend = backend::make_cpu_backend();
  parallel::ProcessGroups g =
      parallel::make_process_groups(std::make_unique<SelfCommunicator>(*backend, "world"), parallel::ParallelSizes{});
  EXPECT_TRUE(g.is_first_rank());
  EXPECT_TRUE(g.is_last_rank());
  ASSERT_NE(g.dp, nullptr);
  EXPECT_EQ(g.dp->size(), 1);
  EXPECT_EQ(g.dp->name(), "dp");
  ASSERT_NE(g.embedding, nullptr);
  Tensor in = Tensor::cpu({4}), out = Tensor::cpu({4});
  in.data_as<float>()[3] = 2.5f;
  reduce_scatter(*g.dp, in, out, ReduceOp::kSum);
  EXPECT_EQ(out.data_as<float>()[3], 2.5f);
}

}  // namespace
}  // namespace megatron::comm
