// One candidate layout of a training job: the knobs `megatron plan` enumerates.
#pragma once

#include <cstdint>
#include <string>

#include "parallel/micro_batches.h"

namespace megatron::plan {

// Megatron's --recompute-granularity: kSelective recomputes core attention only (with flash
// attention nothing [s, s] is stored, so it changes neither memory nor time here); kFull is
// --recompute-granularity full --recompute-method uniform --recompute-num-layers 1.
enum class PlanRecompute { kNone, kSelective, kFull };
const char* recompute_name(PlanRecompute r);

struct ParallelConfig {
  int64_t tp = 1;            // --tensor-model-parallel-size
  int64_t pp = 1;            // --pipeline-model-parallel-size
  int64_t vp = 1;            // virtual stages per pipeline rank ((L/pp) / --num-layers-per-virtual-pipeline-stage)
  int64_t dp = 1;            // world / (tp * pp)
  int64_t micro_batch = 1;   // --micro-batch-size
  int64_t global_batch = 1;  // --global-batch-size
  PlanRecompute recompute = PlanRecompute::kNone;
  bool distributed_optimizer = false;  // --use-distributed-optimizer
  bool sequence_parallel = false;      // --sequence-parallel (only with tp > 1)
  // MEGATRON_DP_COPY_ENGINE in effect: the distributed optimizer's reduce-scatters and parameter
  // gathers on the copy engines (dp > 1 within a node; plan/search.cpp sets it per layout).
  bool dp_copy_engine = false;
  // --overlap-grad-reduce: gradient buckets of Megatron's size (parallel::overlap_bucket_elements)
  // rather than one; decides the copy engines' receive buffer (plan/search.cpp sets it from the
  // cluster's overlap).
  bool overlap_grad_reduce = true;
  // Pipeline exchanges overlapped (Megatron HEAD's default; --no-overlap-p2p-communication):
  // acts with vp > 1 only, where the moved receives can take one activation set more.
  bool overlap_p2p = true;

  int64_t world() const { return tp * pp * dp; }
  // dp_copy_engine where it can act: the distributed optimizer over more than one rank.
  bool uses_copy_engines() const { return dp_copy_engine && distributed_optimizer && dp > 1; }
  // Micro-batches per iteration on each data-parallel replica (parallel/micro_batches.h; the
  // global batch must divide: plan::validate_layout checks it).
  int64_t num_micro_batches() const { return parallel::num_micro_batches(global_batch, micro_batch, dp); }
  std::string describe() const;  // "tp 8 pp 8 vp 1 dp 4 mbs 1 gbs 1536 recompute none dist-opt sp"
};

}  // namespace megatron::plan
