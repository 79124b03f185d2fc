// The parallel groups of one rank, built from the world communicator and Megatron's rank
// layout (comm/rank_layout.h), passed explicitly to whatever communicates (never a global:
// Megatron-core's ProcessGroupCollection). Each member is a Communicator over the ranks of
// that group, named after its kind ("tp", "dp", "dp-cp", ...).
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/rank_layout.h"

namespace megatron::comm {

struct ProcessGroups {
  ParallelSizes sizes;
  RankCoords coords;  // of this rank
  std::unique_ptr<Communicator> world;
  std::unique_ptr<Communicator> tp, cp, dp, pp, dp_cp, model_parallel, tp_dp_cp, tp_cp;
  // Null on ranks outside them (middle pipeline stages).
  std::unique_ptr<Communicator> embedding, position_embedding;

  int64_t rank() const { return world->rank(); }
  int64_t world_size() const { return world->size(); }
  // Megatron prints the iteration line from the last rank and most messages from rank 0.
  bool is_first_rank() const { return rank() == 0; }
  bool is_last_rank() const { return rank() == world_size() - 1; }
  // The communicator of `kind` (may be null for the embedding groups).
  Communicator* group(GroupKind kind) const;
};

// Splits `world` (size == sizes.world(), checked) into every group of Megatron's layout; the
// split is collective over `world`, so every rank calls this with the same sizes.
ProcessGroups make_process_groups(std::unique_ptr<Communicator> world, const ParallelSizes& sizes);

}  // namespace megatron::comm
