#include "parallel/rank_layout.h"

#include <algorithm>

#include "core/error.h"

namespace megatron::parallel {

const char* to_string(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTp:
      return "tp";
    case GroupKind::kCp:
      return "cp";
    case GroupKind::kDp:
      return "dp";
    case GroupKind::kPp:
      return "pp";
    case GroupKind::kDpCp:
      return "dp-cp";
    case GroupKind::kModelParallel:
      return "tp-pp";
    case GroupKind::kTpDpCp:
      return "tp-dp-cp";
    case GroupKind::kTpCp:
      return "tp-cp";
    case GroupKind::kEmbedding:
      return "embedding";
    case GroupKind::kPositionEmbedding:
      return "position-embedding";
  }
  return "?";
}

ParallelSizes parallel_sizes(int64_t world, int64_t tp, int64_t pp, int64_t cp) {
  if (world <= 0) throw_error("[world size] must be positive, got ", world);
  if (tp <= 0) throw_error("[--tensor-model-parallel-size] must be positive, got ", tp);
  if (pp <= 0) throw_error("[--pipeline-model-parallel-size] must be positive, got ", pp);
  if (cp <= 0) throw_error("[--context-parallel-size] must be positive, got ", cp);
  if (world % (tp * pp * cp) != 0) {
    throw_error("[--tensor-model-parallel-size/--pipeline-model-parallel-size] world size (", world,
                ") is not divisible by tensor parallel size (", tp, ") times pipeline parallel size (", pp, ")",
                cp > 1 ? str_cat(" times context parallel size (", cp, ")") : std::string());
  }
  return ParallelSizes{tp, cp, world / (tp * pp * cp), pp};
}

RankCoords rank_coords(const ParallelSizes& s, int64_t rank) {
  MT_CHECK(rank >= 0 && rank < s.world()) << "rank " << rank << " of " << s.world();
  RankCoords c;
  c.tp = rank % s.tp;
  c.cp = (rank / s.tp) % s.cp;
  c.dp = (rank / (s.tp * s.cp)) % s.dp;
  c.pp = rank / (s.tp * s.cp * s.dp);
  return c;
}

int64_t global_rank(const ParallelSizes& s, const RankCoords& c) {
  return c.tp + s.tp * (c.cp + s.cp * (c.dp + s.dp * c.pp));
}

namespace {

// Which dimensions vary inside a group of `kind` (tp, cp, dp, pp).
struct Mask {
  bool tp, cp, dp, pp;
};

Mask mask_of(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTp:
      return {true, false, false, false};
    case GroupKind::kCp:
      return {false, true, false, false};
    case GroupKind::kDp:
      return {false, false, true, false};
    case GroupKind::kPp:
    case GroupKind::kEmbedding:
    case GroupKind::kPositionEmbedding:
      return {false, false, false, true};
    case GroupKind::kDpCp:
      return {false, true, true, false};
    case GroupKind::kModelParallel:
      return {true, false, false, true};
    case GroupKind::kTpDpCp:
      return {true, true, true, false};
    case GroupKind::kTpCp:
      return {true, true, false, false};
  }
  return {};
}

}  // namespace

std::vector<std::vector<int64_t>> rank_groups(const ParallelSizes& s, GroupKind kind) {
  const Mask m = mask_of(kind);
  // Group id: the coordinates outside the mask, mixed-radix in tp-cp-dp-pp order, which
  // numbers the groups in order of their smallest rank.
  auto group_id = [&](const RankCoords& c) {
    int64_t id = 0, radix = 1;
    auto take = [&](bool varies, int64_t coord, int64_t size) {
      if (varies) return;
      id += coord * radix;
      radix *= size;
    };
    take(m.tp, c.tp, s.tp);
    take(m.cp, c.cp, s.cp);
    take(m.dp, c.dp, s.dp);
    take(m.pp, c.pp, s.pp);
    return id;
  };
  const int64_t per_group = (m.tp ? s.tp : 1) * (m.cp ? s.cp : 1) * (m.dp ? s.dp : 1) * (m.pp ? s.pp : 1);
  std::vector<std::vector<int64_t>> groups(static_cast<size_t>(s.world() / per_group));
  for (int64_t r = 0; r < s.world(); ++r) groups[static_cast<size_t>(group_id(rank_coords(s, r)))].push_back(r);
  if (kind == GroupKind::kEmbedding) {
    for (auto& g : groups) {
      if (g.size() > 1) g = {g.front(), g.back()};
    }
  } else if (kind == GroupKind::kPositionEmbedding) {
    for (auto& g : groups) g = {g.front()};
  }
  return groups;
}

int64_t group_index(const ParallelSizes& s, GroupKind kind, int64_t rank) {
  const auto groups = rank_groups(s, kind);
  for (size_t i = 0; i < groups.size(); ++i) {
    if (std::find(groups[i].begin(), groups[i].end(), rank) != groups[i].end()) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace megatron::parallel
