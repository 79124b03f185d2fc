// --check-weight-hash-across-dp-replicas-interval N (Megatron's
// check_param_hashes_across_dp_replicas): the data-parallel replicas of a stage must hold the
// same weights bit for bit (they apply the same reduced gradients, or all-gather the same
// distributed-optimizer shards). A bit flipped in one GPU's memory, or a nondeterministic bug,
// makes one replica drift from the others while the loss curve looks normal. Before training and
// every N iterations each rank hashes every parameter of its stage and compares with its
// data-parallel group's rank 0; any difference stops every rank, the differing ranks naming the
// parameters.
//
// The hash: the parameter's bytes copied to the host, folded 8 bytes at a time into 64 bits with
// an odd multiply and an xor-shift (each step a bijection of the state, so a change to a single
// word always changes the hash; more changes collide with probability ~2^-64), sent as two
// 32-bit halves (exact in doubles).
// Cost: one device-to-host copy of the stage's weights and a pass over them (~2.6 GB for 1.3B
// bf16), hence the interval.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "model/parameters.h"

namespace megatron::obs {

// The 64-bit hash of `bytes` (exposed for tests).
uint64_t weight_hash64(std::span<const unsigned char> bytes);

struct WeightHashCheck {
  int64_t mismatches = 0;  // (rank, parameter) pairs that differ from their DP rank 0, over the world
  // This rank's line when its parameters differ ("" otherwise); on world rank 0 the summary
  // when any rank's do.
  std::string message;
};

// Collective over `dp` (this stage's data-parallel group) and `world` (the agreement).
// `iteration` goes into the messages.
WeightHashCheck compare_weights_across_dp_replicas(const model::ParameterSet& params, backend::Backend& backend,
                                                   comm::Communicator& dp, comm::Communicator& world,
                                                   int64_t iteration);

}  // namespace megatron::obs
