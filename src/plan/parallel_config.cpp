#include "plan/parallel_config.h"

#include "core/error.h"

namespace megatron::plan {

const char* recompute_name(PlanRecompute r) {
  switch (r) {
    case PlanRecompute::kNone:
      return "none";
    case PlanRecompute::kSelective:
      return "selective";
    case PlanRecompute::kFull:
      return "full";
  }
  return "?";
}

std::string ParallelConfig::describe() const {
  return str_cat("tp ", tp, " pp ", pp, " vp ", vp, " dp ", dp, " mbs ", micro_batch, " gbs ", global_batch,
                 " recompute ", recompute_name(recompute), distributed_optimizer ? " dist-opt" : "",
                 sequence_parallel ? " sp" : "", dp_copy_engine ? " copy-engines" : "");
}

}  // namespace megatron::plan
