// The fused QKV column arithmetic with query groups (backend/qkv_layout.h): the worked example
// of its header, the multi-head special case, and every column owned exactly once.
#include "backend/qkv_layout.h"

#include <gtest/gtest.h>

#include <vector>

namespace megatron::backend {
namespace {

TEST(QkvLayout, WorkedExample) {
  const QkvLayout L(4, 2, 8);
  EXPECT_EQ(L.per_group(), 2);
  EXPECT_EQ(L.group_width(), 32);
  EXPECT_EQ(L.width(), 64);
  EXPECT_EQ(L.group_of(3), 1);
  EXPECT_EQ(L.q_col(3), 40);
  EXPECT_EQ(L.k_col(1), 48);
  EXPECT_EQ(L.v_col(1), 56);
  EXPECT_EQ(L.q_col(0), 0);
  EXPECT_EQ(L.q_col(1), 8);
  EXPECT_EQ(L.k_col(0), 16);
  EXPECT_EQ(L.v_col(0), 24);
}

// Groups = heads (or 0) is Megatron's [q, k, v] per head: head j at j*3d + {0, d, 2d}.
TEST(QkvLayout, MultiHeadIsQkvPerHead) {
  for (const int64_t groups : {int64_t{0}, int64_t{5}}) {
    const QkvLayout L(5, groups, 6);
    EXPECT_EQ(L.groups, 5);
    EXPECT_EQ(L.width(), 5 * 3 * 6);
    for (int64_t j = 0; j < 5; ++j) {
      EXPECT_EQ(L.q_col(j), j * 18);
      EXPECT_EQ(L.k_col(j), j * 18 + 6);
      EXPECT_EQ(L.v_col(j), j * 18 + 12);
    }
  }
}

TEST(QkvLayout, EveryColumnHasOneOwner) {
  for (const auto& [heads, groups] : std::vector<std::pair<int64_t, int64_t>>{{8, 1}, {8, 2}, {6, 3}, {4, 4}}) {
    const int64_t d = 3;
    const QkvLayout L(heads, groups, d);
    std::vector<int> owners(static_cast<size_t>(L.width()), 0);
    auto own = [&](int64_t c0) {
      for (int64_t c = c0; c < c0 + d; ++c) ++owners[static_cast<size_t>(c)];
    };
    for (int64_t h = 0; h < heads; ++h) own(L.q_col(h));
    for (int64_t g = 0; g < L.groups; ++g) {
      own(L.k_col(g));
      own(L.v_col(g));
    }
    for (size_t c = 0; c < owners.size(); ++c) EXPECT_EQ(owners[c], 1) << heads << "/" << groups << " column " << c;
  }
}

TEST(QkvLayout, HeadsMustBeAMultipleOfTheGroups) { EXPECT_DEATH(QkvLayout(6, 4, 8), "multiple of the groups"); }

}  // namespace
}  // namespace megatron::backend
