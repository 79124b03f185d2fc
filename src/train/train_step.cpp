#include "train/train_step.h"

#include "core/error.h"
#include "parallel/data_parallel_setup.h"

namespace megatron::train {

TrainStepResult train_step(const StepFlags& c, model::GPTModel& model, parallel::MixedPrecisionOptimizer& optimizer,
                           const parallel::ProcessGroups& groups, const TrainStepInputs& in) {
  MT_CHECK(in.table != nullptr && in.num_micro >= 1) << "train_step without a schedule";
  const auto phase = [&](const char* name, bool started) {
    if (in.phase) in.phase(name, started);
  };
  TrainStepResult r;
  optimizer.zero_grads();
  phase("forward-backward", true);
  model::HeadBackward head;
  head.loss_scale = optimizer.loss_scale();
  head.grad_scale = in.grad_scale;
  parallel::PipelineCallbacks cb;
  cb.load = in.load;
  cb.phase = in.pipeline_phase;
  cb.dropout = [&](int64_t k) {
    model::DropoutContext dropout;
    dropout.seed = static_cast<uint64_t>(c.seed);
    dropout.iteration = in.iteration;
    // The global micro-batch index: this DP rank's k-th holds the single process's micro-batch
    // k * dp + dp_rank, so the masks differ across DP ranks and equal the single-process run's.
    dropout.micro_batch = k * c.data_parallel_size + groups.coords.dp;
    return dropout;
  };
  cb.head = &head;
  // --overlap-grad-reduce: each chunk's last micro-batch starts its buckets; the others
  // accumulate (Megatron's no_sync).
  cb.grad_sync = c.overlap_grad_reduce ? grad_sync_callback(model, optimizer) : nullptr;
  cb.overlap_p2p = c.overlap_p2p_communication;
  r.loss_sum = parallel::run_pipeline(*in.table, model, *groups.pp, cb);

  // finalize_model_grads, in the order of the header comment.
  const bool overlapped = c.overlap_grad_reduce;
  const auto reduce_layernorm_grads = [&] {
    phase("layernorm-grads-all-reduce", true);
    model.reduce_layernorm_grads();
    phase("layernorm-grads-all-reduce", false);
  };
  if (!overlapped) reduce_layernorm_grads();
  phase("embedding-grads-all-reduce", true);
  if (model::Parameter* tied = model.tied_embedding()) {
    MT_CHECK(groups.embedding != nullptr) << "a stage with the tied embedding outside the embedding group";
    groups.embedding->all_reduce(tied->grad, comm::ReduceOp::kSum);
  }
  phase("embedding-grads-all-reduce", false);
  phase("all-grads-sync", true);
  optimizer.reduce_gradients();
  phase("all-grads-sync", false);
  if (overlapped) reduce_layernorm_grads();
  // FP8's scales for the next iteration, from this one's amaxes (every rank of a stage the same).
  model.fp8_update(groups.tp_dp_cp.get());
  phase("forward-backward", false);

  if (in.before_optimizer) in.before_optimizer(r.loss_sum);
  phase("optimizer", true);
  r.step = optimizer.step(in.lr, in.weight_decay, in.decoupled_lr);
  phase("optimizer", false);
  return r;
}

}  // namespace megatron::train
