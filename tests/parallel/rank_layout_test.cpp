// Megatron's tp-cp-dp-pp layout (docs/megatron-formats.md, "Parallel groups and rank order"),
// checked against the worked example there and against the definition (a group = the ranks sharing
// every coordinate outside it).
#include "parallel/rank_layout.h"

#include <gtest/gtest.h>

#include <set>

#include "core/error.h"

namespace megatron::comm {
namespace {

using Groups = std::vector<std::vector<int64_t>>;

TEST(RankLayout, MegatronFactsExampleWorld16Tp2Pp4) {
  const parallel::ParallelSizes s = parallel::parallel_sizes(16, /*tp=*/2, /*pp=*/4);
  EXPECT_EQ(s.dp, 2);
  EXPECT_EQ(parallel::rank_groups(s, parallel::GroupKind::kTp),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(parallel::rank_groups(s, parallel::GroupKind::kDp),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(parallel::rank_groups(s, parallel::GroupKind::kPp),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(parallel::rank_groups(s, parallel::GroupKind::kEmbedding), (Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
  EXPECT_EQ(parallel::rank_groups(s, parallel::GroupKind::kPositionEmbedding), (Groups{{0}, {1}, {2}, {3}}));
  // Model parallel = tp x pp: the ranks with the same dp rank.
  EXPECT_EQ(parallel::rank_groups(s, parallel::GroupKind::kModelParallel),
            (Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
  // C23's explicit loops: pp groups are range(i, world, world / pp).
  for (const auto& g : parallel::rank_groups(s, parallel::GroupKind::kPp)) {
    for (size_t k = 1; k < g.size(); ++k) EXPECT_EQ(g[k] - g[k - 1], 16 / 4);
  }
  EXPECT_EQ(parallel::group_index(s, parallel::GroupKind::kEmbedding, 5), -1)
      << "a middle stage is in no embedding group";
  EXPECT_EQ(parallel::group_index(s, parallel::GroupKind::kEmbedding, 13), 1);
}

TEST(RankLayout, CoordinatesRoundTripAndGroupsPartitionTheWorld) {
  for (const parallel::ParallelSizes s : {parallel::ParallelSizes{2, 1, 2, 2}, parallel::ParallelSizes{2, 2, 3, 1},
                                          parallel::ParallelSizes{1, 1, 5, 1}, parallel::ParallelSizes{4, 1, 1, 3}}) {
    for (int64_t r = 0; r < s.world(); ++r) {
      const parallel::RankCoords c = parallel::rank_coords(s, r);
      EXPECT_EQ(parallel::global_rank(s, c), r);
      EXPECT_EQ(r, c.tp + s.tp * (c.cp + s.cp * (c.dp + s.dp * c.pp)));
    }
    for (parallel::GroupKind kind :
         {parallel::GroupKind::kTp, parallel::GroupKind::kCp, parallel::GroupKind::kDp, parallel::GroupKind::kPp,
          parallel::GroupKind::kDpCp, parallel::GroupKind::kModelParallel, parallel::GroupKind::kTpDpCp,
          parallel::GroupKind::kTpCp}) {
      std::set<int64_t> seen;
      for (const auto& g : parallel::rank_groups(s, kind)) {
        for (size_t k = 0; k < g.size(); ++k) {
          EXPECT_TRUE(seen.insert(g[k]).second) << to_string(kind) << ": rank " << g[k] << " twice";
          if (k > 0) EXPECT_LT(g[k - 1], g[k]);
          // Members share every coordinate outside the group's dimensions.
          const parallel::RankCoords a = parallel::rank_coords(s, g[0]), b = parallel::rank_coords(s, g[k]);
          const bool tp_in = kind == parallel::GroupKind::kTp || kind == parallel::GroupKind::kModelParallel ||
                             kind == parallel::GroupKind::kTpDpCp || kind == parallel::GroupKind::kTpCp;
          const bool dp_in = kind == parallel::GroupKind::kDp || kind == parallel::GroupKind::kDpCp ||
                             kind == parallel::GroupKind::kTpDpCp;
          const bool pp_in = kind == parallel::GroupKind::kPp || kind == parallel::GroupKind::kModelParallel;
          const bool cp_in = kind == parallel::GroupKind::kCp || kind == parallel::GroupKind::kDpCp ||
                             kind == parallel::GroupKind::kTpDpCp || kind == parallel::GroupKind::kTpCp;
          if (!tp_in) EXPECT_EQ(a.tp, b.tp);
          if (!dp_in) EXPECT_EQ(a.dp, b.dp);
          if (!pp_in) EXPECT_EQ(a.pp, b.pp);
          if (!cp_in) EXPECT_EQ(a.cp, b.cp);
        }
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), s.world()) << to_string(kind);
    }
  }
}

TEST(RankLayout, DataParallelGroupsWithContextParallel) {
  // tp 2, cp 2, dp 2: dp groups step over tp*cp = 4; dp-cp groups hold cp and dp.
  const parallel::ParallelSizes s = parallel::parallel_sizes(8, 2, 1, 2);
  EXPECT_EQ(parallel::rank_groups(s, parallel::GroupKind::kDp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(parallel::rank_groups(s, parallel::GroupKind::kCp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(parallel::rank_groups(s, parallel::GroupKind::kDpCp), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
}

TEST(RankLayout, WorldNotDivisibleIsAOneLineErrorNamingTheFlags) {
  try {
    parallel::parallel_sizes(6, 4, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m,
              "[--tensor-model-parallel-size/--pipeline-model-parallel-size] world size (6) is not divisible by "
              "tensor parallel size (4) times pipeline parallel size (1)");
  }
  EXPECT_THROW(parallel::parallel_sizes(8, 2, 0), Error);
  EXPECT_EQ(parallel::parallel_sizes(12, 2, 3).dp, 2);
}

}  // namespace
}  // namespace megatron::comm
