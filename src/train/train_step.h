// One training step, shared by `megatron train` (train/trainer.h) and `megatron bench`: zero the
// gradients, forward and backward of the iteration's micro-batches in the pipeline schedule's
// order (the loss head's backward right after each loss), Megatron's finalize_model_grads, then
// the optimizer step. The order of the gradient reductions is the contract both callers rely on
// for bit-identical results:
//   1. sequence-parallel LayerNorm gradients summed over TP (after step 3 instead with
//      --overlap-grad-reduce, whose buckets are already on their way: the sum is linear and the
//      TP ranks' buffers share a layout, so the distributed optimizer's shards line up);
//   2. the tied word embedding's two copies summed over the embedding group {first, last
//      stage}, before the DP reduction, so that it sees whole gradients also when the
//      distributed optimizer keeps only its shards (its bucket is held back from the overlap);
//   3. every gradient over DP (MixedPrecisionOptimizer::reduce_gradients);
//   4. with FP8, the amaxes all-reduced over the amax reduction group (TP x DP x CP of the
//      stage) and the scales updated (GPTModel::fp8_update), before the optimizer step.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "model/gpt_model.h"
#include "parallel/optimizer.h"
#include "parallel/pipeline_executor.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/process_groups.h"

namespace megatron::train {

// What a step needs of the flags (built by train/sub_configs.h step_flags).
struct StepFlags {
  int64_t seed = 1234;                     // --seed: the dropout masks' stream
  int64_t data_parallel_size = 1;          // the global micro-batch index of this rank's k-th
  bool overlap_grad_reduce = false;        // --overlap-grad-reduce (the order above)
  bool overlap_p2p_communication = false;  // --overlap-p2p-communication
};

struct TrainStepInputs {
  // The stage's schedule for the iteration's micro-batches (parallel::pipeline_schedule).
  const std::vector<parallel::PipelineAction>* table = nullptr;
  int64_t num_micro = 1;
  int64_t iteration = 0;  // the dropout masks' iteration (Megatron's, counted from 0)
  // Each micro-batch's loss gradient is scaled by this (1 / num_micro; --calculate-per-token-
  // loss: DP / the global batch's counted tokens).
  float grad_scale = 1.0f;
  float lr = 0.0f;
  float weight_decay = 0.0f;
  std::optional<float> decoupled_lr;  // --decoupled-lr: the embedding and output layer's lr
  // Fills this DP rank's micro-batch k of the iteration (first and last virtual stage).
  std::function<void(int64_t k, model::MicroBatch* mb)> load;
  // Optional: Megatron's timers around each phase (started = true at its start, false at its
  // end) by their names: "forward-backward", "layernorm-grads-all-reduce",
  // "embedding-grads-all-reduce", "all-grads-sync", "optimizer".
  std::function<void(const char* name, bool started)> phase;
  // Optional: around each action of the pipeline (PipelineCallbacks::phase).
  std::function<void(const parallel::PipelineAction& action, bool started)> pipeline_phase;
  // Optional: called between the forward-backward and the optimizer step with this rank's sum
  // of the micro-batch losses (the trainer's loss average over DP goes there).
  std::function<void(double loss_sum)> before_optimizer;
};

struct TrainStepResult {
  double loss_sum = 0.0;  // this rank's sum of the micro-batch losses (last stage; 0 elsewhere)
  parallel::StepResult step;
};

// Runs one step on this rank (collective over the groups the model and optimizer use).
TrainStepResult train_step(const StepFlags& flags, model::GPTModel& model, parallel::MixedPrecisionOptimizer& optimizer,
                           const parallel::ProcessGroups& groups, const TrainStepInputs& inputs);

}  // namespace megatron::train
