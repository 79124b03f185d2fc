#include "comm/process_groups.h"

#include <algorithm>

#include "core/error.h"

namespace megatron::comm {

Communicator* ProcessGroups::group(GroupKind kind) const {
  switch (kind) {
    case GroupKind::kTp: return tp.get();
    case GroupKind::kCp: return cp.get();
    case GroupKind::kDp: return dp.get();
    case GroupKind::kPp: return pp.get();
    case GroupKind::kDpCp: return dp_cp.get();
    case GroupKind::kModelParallel: return model_parallel.get();
    case GroupKind::kTpDpCp: return tp_dp_cp.get();
    case GroupKind::kTpCp: return tp_cp.get();
    case GroupKind::kEmbedding: return embedding.get();
    case GroupKind::kPositionEmbedding: return position_embedding.get();
  }
  return nullptr;
}

ProcessGroups make_process_groups(std::unique_ptr<Communicator> world, const ParallelSizes& sizes) {
  MT_CHECK(world != nullptr) << "no world communicator";
  MT_CHECK_EQ(world->size(), sizes.world());
  ProcessGroups g;
  g.sizes = sizes;
  const int64_t rank = world->rank();
  g.coords = rank_coords(sizes, rank);
  auto make = [&](GroupKind kind) -> std::unique_ptr<Communicator> {
    const int64_t color = group_index(sizes, kind, rank);
    int64_t key = 0;
    if (color >= 0) {
      const auto members = rank_groups(sizes, kind)[static_cast<size_t>(color)];
      key = std::find(members.begin(), members.end(), rank) - members.begin();
    }
    std::unique_ptr<Communicator> c = world->split(color, key, to_string(kind));
    MT_CHECK((c != nullptr) == (color >= 0)) << "split of " << to_string(kind);
    return c;
  };
  g.tp = make(GroupKind::kTp);
  g.cp = make(GroupKind::kCp);
  g.dp = make(GroupKind::kDp);
  g.pp = make(GroupKind::kPp);
  g.dp_cp = make(GroupKind::kDpCp);
  g.model_parallel = make(GroupKind::kModelParallel);
  g.tp_dp_cp = make(GroupKind::kTpDpCp);
  g.tp_cp = make(GroupKind::kTpCp);
  g.embedding = make(GroupKind::kEmbedding);
  g.position_embedding = make(GroupKind::kPositionEmbedding);
  g.world = std::move(world);
  return g;
}

std::vector<int64_t> pipeline_neighbours(int64_t stage, int64_t pp, bool interleaved) {
  MT_CHECK(pp >= 1 && stage >= 0 && stage < pp) << "pipeline stage " << stage << " of " << pp;
  std::vector<int64_t> out;
  auto add = [&](int64_t peer) {
    if (peer != stage && std::find(out.begin(), out.end(), peer) == out.end()) out.push_back(peer);
  };
  if (stage > 0) add(stage - 1);
  if (stage + 1 < pp) add(stage + 1);
  if (interleaved && stage == 0) add(pp - 1);
  if (interleaved && stage == pp - 1) add(0);
  return out;
}

void connect_pipeline_neighbours(const ProcessGroups& groups, bool interleaved) {
  if (groups.pp->size() > 1) groups.pp->connect_peers(pipeline_neighbours(groups.pp->rank(), groups.pp->size(), interleaved));
}

}  // namespace megatron::comm
