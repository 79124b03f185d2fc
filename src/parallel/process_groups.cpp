#include "parallel/process_groups.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "comm/shared_communicator.h"
#include "core/error.h"

namespace megatron::parallel {

comm::Communicator* ProcessGroups::group(GroupKind kind) const {
  switch (kind) {
    case GroupKind::kTp:
      return tp.get();
    case GroupKind::kCp:
      return cp.get();
    case GroupKind::kDp:
      return dp.get();
    case GroupKind::kPp:
      return pp.get();
    case GroupKind::kDpCp:
      return dp_cp.get();
    case GroupKind::kModelParallel:
      return model_parallel.get();
    case GroupKind::kTpDpCp:
      return tp_dp_cp.get();
    case GroupKind::kTpCp:
      return tp_cp.get();
    case GroupKind::kEmbedding:
      return embedding.get();
    case GroupKind::kPositionEmbedding:
      return position_embedding.get();
  }
  return nullptr;
}

namespace {

// The groups of a kind as a set (each group's members ascending, as rank_groups lists them):
// two kinds with equal sets have the same communicators.
std::vector<std::vector<int64_t>> partition_of(const ParallelSizes& sizes, GroupKind kind) {
  std::vector<std::vector<int64_t>> groups = rank_groups(sizes, kind);
  std::sort(groups.begin(), groups.end());
  return groups;
}

}  // namespace

ProcessGroups make_process_groups(std::unique_ptr<comm::Communicator> world, const ParallelSizes& sizes) {
  MT_CHECK(world != nullptr) << "no world communicator";
  MT_CHECK_EQ(world->size(), sizes.world());
  ProcessGroups g;
  g.sizes = sizes;
  const int64_t rank = world->rank();
  g.coords = rank_coords(sizes, rank);
  // The communicators made so far, by their groups. Every rank computes the same partitions, so
  // every rank shares or splits alike (a split is collective over the world). The world's is a
  // candidate only for the kinds no training step uses (cp, tp-dp-cp, tp-cp, the position
  // embedding): its collectives at iteration boundaries (exit checks, the timers' barrier) must
  // not wait for a used kind's started collectives (the next forward's parameter gathers).
  std::vector<std::pair<std::vector<std::vector<int64_t>>, comm::Communicator*>> made;
  const std::vector<std::vector<int64_t>> world_partition = {[&] {
    std::vector<int64_t> all(static_cast<size_t>(sizes.world()));
    for (int64_t r = 0; r < sizes.world(); ++r) all[static_cast<size_t>(r)] = r;
    return all;
  }()};
  auto make = [&](GroupKind kind) -> std::unique_ptr<comm::Communicator> {
    const int64_t color = group_index(sizes, kind, rank);
    const std::vector<std::vector<int64_t>> partition = partition_of(sizes, kind);
    if (!used_by_training(kind) && partition == world_partition) {
      return std::make_unique<comm::SharedCommunicator>(*world, to_string(kind));
    }
    for (const auto& [groups, comm] : made) {
      if (groups != partition) continue;
      // The same groups as a kind made before (members in the same order): a second name.
      if (color < 0) return nullptr;
      return std::make_unique<comm::SharedCommunicator>(*comm, to_string(kind));
    }
    int64_t key = 0;
    if (color >= 0) {
      const auto members = rank_groups(sizes, kind)[static_cast<size_t>(color)];
      key = std::find(members.begin(), members.end(), rank) - members.begin();
    }
    std::unique_ptr<comm::Communicator> c = world->split(color, key, to_string(kind));
    MT_CHECK((c != nullptr) == (color >= 0)) << "split of " << to_string(kind);
    made.push_back({partition, c.get()});
    return c;
  };
  // In declaration order (process_groups.h): a shared name is destroyed before its target.
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

bool used_by_training(GroupKind kind) {
  return kind != GroupKind::kCp && kind != GroupKind::kTpDpCp && kind != GroupKind::kTpCp &&
         kind != GroupKind::kPositionEmbedding;
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
  comm::Communicator& pp = *groups.pp;
  if (pp.size() > 1) pp.connect_peers(pipeline_neighbours(pp.rank(), pp.size(), interleaved));
}

}  // namespace megatron::parallel
