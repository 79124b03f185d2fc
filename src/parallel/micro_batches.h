// Micro-batches per iteration on each data-parallel rank, Megatron's
//   num_microbatches = global_batch / (micro_batch * data_parallel_size):
// the one formula behind train::NumMicroBatchesCalculator (train/microbatches.h, which
// validates the flags and follows --rampup-batch-size; `megatron train`, `bench` and the
// activation sets of train/config.cpp ask it) and the planner's layouts
// (plan::ParallelConfig::num_micro_batches, validated by plan::validate_layout). A pure
// function of sizes, so that both can use it.
#pragma once

#include <cstdint>

#include "core/error.h"

namespace megatron::parallel {

// `global_batch` must be a positive multiple of micro_batch * data_parallel_size (both
// positive): the callers validate the flags first, with messages naming them.
inline int64_t num_micro_batches(int64_t global_batch, int64_t micro_batch, int64_t data_parallel_size) {
  MT_CHECK(micro_batch > 0 && data_parallel_size > 0 && global_batch > 0 &&
           global_batch % (micro_batch * data_parallel_size) == 0)
      << "global batch " << global_batch << ", micro-batch " << micro_batch << ", data-parallel size "
      << data_parallel_size;
  return global_batch / (micro_batch * data_parallel_size);
}

}  // namespace megatron::parallel
