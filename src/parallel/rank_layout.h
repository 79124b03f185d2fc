// Megatron's rank layout, as pure functions (no communication): which global ranks form each
// parallel group. Order "tp-cp-dp-pp", fastest-varying first (docs/megatron-formats.md, "Parallel
// groups and rank order"; parallel_state.RankGenerator with ep = 1):
//
//   rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))
//
// A group of kind X (a set of the dimensions tp/cp/dp/pp) is the ranks that share every
// coordinate outside X (generate_masked_orthogonal_rank_groups); its members are listed in
// increasing rank order, which is also their rank inside the group.
// Example, world 16, tp 2, pp 4 (dp 2): tp groups [0,1],[2,3],...; dp groups [0,2],[1,3],
// [4,6],...; pp groups [0,4,8,12],[1,5,9,13],...; embedding groups [0,12],[1,13],[2,14],[3,15].
#pragma once

#include <cstdint>
#include <vector>

namespace megatron::parallel {

enum class GroupKind {
  kTp,                 // tensor parallel
  kCp,                 // context parallel
  kDp,                 // data parallel
  kPp,                 // pipeline parallel
  kDpCp,               // data parallel with context parallel (gradient reduction)
  kModelParallel,      // tp-pp (Megatron's model-parallel group)
  kTpDpCp,             // tp-dp-cp
  kTpCp,               // tp-cp
  kEmbedding,          // first and last stage of each pp group (the tied embedding)
  kPositionEmbedding,  // first stage of each pp group
};
const char* to_string(GroupKind kind);

struct ParallelSizes {
  int64_t tp = 1, cp = 1, dp = 1, pp = 1;
  int64_t world() const { return tp * cp * dp * pp; }
};

// dp = world / (tp * cp * pp). Throws megatron::Error with Megatron's message when world is not
// divisible, naming the flags: "[--tensor-model-parallel-size/...] world size (W) is not
// divisible by ...".
ParallelSizes parallel_sizes(int64_t world, int64_t tp, int64_t pp, int64_t cp = 1);

struct RankCoords {
  int64_t tp = 0, cp = 0, dp = 0, pp = 0;
};
RankCoords rank_coords(const ParallelSizes& sizes, int64_t rank);
int64_t global_rank(const ParallelSizes& sizes, const RankCoords& coords);

// Every group of `kind`, each in increasing rank order. Embedding groups of pp 1 have one
// member (the rank itself), as Megatron's.
std::vector<std::vector<int64_t>> rank_groups(const ParallelSizes& sizes, GroupKind kind);
// The index (into rank_groups) of the group of `kind` holding `rank`, or -1 when the rank is
// in none (embedding groups on middle pipeline stages).
int64_t group_index(const ParallelSizes& sizes, GroupKind kind, int64_t rank);

}  // namespace megatron::parallel
