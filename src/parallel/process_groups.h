// The parallel groups of one rank, built from the world communicator and Megatron's rank
// layout (parallel/rank_layout.h), passed explicitly to whatever communicates (never a global:
// Megatron-core's ProcessGroupCollection). Each member is a Communicator over the ranks of
// that group, named after its kind ("tp", "dp", "dp-cp", ...).
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "parallel/rank_layout.h"

namespace megatron::parallel {

struct ProcessGroups {
  ParallelSizes sizes;
  RankCoords coords;  // of this rank
  std::unique_ptr<comm::Communicator> world;
  std::unique_ptr<comm::Communicator> tp, cp, dp, pp, dp_cp, model_parallel, tp_dp_cp, tp_cp;
  // Null on ranks outside them (middle pipeline stages).
  std::unique_ptr<comm::Communicator> embedding, position_embedding;

  int64_t rank() const { return world->rank(); }
  int64_t world_size() const { return world->size(); }
  // Megatron prints the iteration line from the last rank and most messages from rank 0.
  bool is_first_rank() const { return rank() == 0; }
  bool is_last_rank() const { return rank() == world_size() - 1; }
  // The communicator of `kind` (may be null for the embedding groups).
  comm::Communicator* group(GroupKind kind) const;
};

// Whether a training step communicates over groups of `kind`: false for cp (1 here), tp-dp-cp,
// tp-cp and the position embedding, which exist for Megatron's layout only. make_process_groups
// lets these take the world's communicator when they have all ranks.
bool used_by_training(GroupKind kind);

// Splits `world` (size == sizes.world(), checked) into every group of Megatron's layout; the
// split is collective over `world`, so every rank calls this with the same sizes.
ProcessGroups make_process_groups(std::unique_ptr<comm::Communicator> world, const ParallelSizes& sizes);

// The pipeline ranks stage `stage` of `pp` exchanges activations and gradients with: the stages
// before and after it, and with `interleaved` (virtual pipeline chunks) also the last stage and
// the first, which the chunks wrap between. Each once, never `stage` itself; empty for pp == 1.
// Symmetric: b is in a's list exactly when a is in b's (for the same pp and interleaved).
std::vector<int64_t> pipeline_neighbours(int64_t stage, int64_t pp, bool interleaved);

// Opens the pp group's connections to pipeline_neighbours (Communicator::connect_peers), so that
// no schedule's first messages can deadlock NCCL. Collective over the pp group; call it once
// before the first pipeline exchange (the trainer and the bench do).
void connect_pipeline_neighbours(const ProcessGroups& groups, bool interleaved);

}  // namespace megatron::parallel
