#include "train/config.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "core/checked_int.h"
#include "core/error.h"
#include "parallel/pipeline_schedule.h"

namespace megatron::train {

model::PipelineStageOptions pipeline_stage(const TrainConfig& c, int64_t stage) {
  model::PipelineStageOptions p;
  p.pp = c.pipeline_model_parallel_size;
  p.stage = stage;
  p.virtual_chunks = c.virtual_pipeline_chunks();
  // The most sets any global batch of the run needs: with --rampup-batch-size every size of the
  // ramp (fewer micro-batches can need more sets: interleaved, M == pp holds all M vp). Sizes past
  // kActivationSetsSaturation * pp micro-batches need what that many need, so the ramp is walked
  // only up to there (each increment adds at least one micro-batch).
  p.activation_sets = 1;
  const int64_t saturated = parallel::kActivationSetsSaturation * p.pp;
  for (const int64_t m : c.microbatch_calculator().reachable_num_microbatches(saturated)) {
    p.activation_sets = std::max(p.activation_sets, parallel::activation_sets_needed({p.pp, stage, m, p.virtual_chunks},
                                                                                     c.overlap_p2p_communication));
  }
  return p;
}

DType model_dtype(const TrainConfig& c) { return c.bf16 ? DType::kBF16 : c.fp16 ? DType::kF16 : DType::kF32; }

DType grad_dtype(const TrainConfig& c) { return c.accumulate_allreduce_grads_in_fp32 ? DType::kF32 : model_dtype(c); }

model::MemoryPlan train_memory_plan(const TrainConfig& c, int64_t stage) {
  model::MemoryPlan plan = model::plan_memory(c.model, model_dtype(c), c.micro_batch_size, c.tensor_model_parallel_size,
                                              c.sequence_parallel, pipeline_stage(c, stage), grad_dtype(c));
  if (c.use_distributed_optimizer) plan = model::shard_optimizer_state(plan, c.data_parallel_size);
  return plan;
}

NumMicroBatchesCalculator TrainConfig::microbatch_calculator() const {
  if (step_batch_size_schedule) {
    return NumMicroBatchesCalculator(*step_batch_size_schedule, micro_batch_size, data_parallel_size);
  }
  std::optional<RampupBatchSize> ramp;
  if (rampup_batch_size) {
    ramp = RampupBatchSize{rampup_batch_size->start, rampup_batch_size->increment, rampup_batch_size->ramp_samples};
  }
  return NumMicroBatchesCalculator(global_batch_size, micro_batch_size, data_parallel_size, ramp);
}

int64_t TrainConfig::num_microbatches() const { return microbatch_calculator().final_num_microbatches(); }

int64_t TrainConfig::global_batch_size_at(int64_t consumed_samples) const {
  return microbatch_calculator().global_batch_size_at(consumed_samples);
}

int64_t TrainConfig::total_train_iters() const {
  if (train_iters) return *train_iters;
  MT_CHECK(train_samples.has_value()) << "total_train_iters() before parse_train_config()";
  return train_iters_from_samples(microbatch_calculator(), *train_samples);
}

const char* to_string(RecomputeGranularity s) {
  switch (s) {
    case RecomputeGranularity::kNone:
      return "none";
    case RecomputeGranularity::kFull:
      return "full";
    case RecomputeGranularity::kSelective:
      return "selective";
  }
  return "?";
}

const char* to_string(RecomputeMethod s) {
  switch (s) {
    case RecomputeMethod::kNone:
      return "none";
    case RecomputeMethod::kUniform:
      return "uniform";
    case RecomputeMethod::kBlock:
      return "block";
  }
  return "?";
}

const char* to_string(FlopsConvention c) {
  switch (c) {
    case FlopsConvention::k2025:
      return "2025";
    case FlopsConvention::k2024:
      return "2024";
  }
  return "?";
}

}  // namespace megatron::train
