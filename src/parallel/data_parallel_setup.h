// How `megatron train` and `megatron bench` set up the data-parallel side of the optimizer from
// the flags, so that both run the same reduction: Megatron's default bucket size, buckets cut
// at model-chunk boundaries with the tied embedding alone, and the overlap of gradient
// reduction / parameter gathering with compute (parallel/grad_buffer.h "Overlap"), with any
// number of pipeline stages and chunks (model::ParamHooks, parallel/pipeline_executor.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "model/gpt_model.h"
#include "parallel/optimizer.h"
#include "parallel/pipeline_executor.h"
#include "parallel/process_groups.h"

namespace megatron::parallel {

// What the data-parallel side needs of the flags (validated by cli::parse_train_config; built
// from a TrainConfig by train/sub_configs.h data_parallel_flags).
struct DataParallelFlags {
  bool use_distributed_optimizer = false;  // --use-distributed-optimizer
  std::optional<int64_t> ddp_bucket_size;  // --ddp-bucket-size
  std::optional<int64_t> ddp_num_buckets;  // --ddp-num-buckets
  bool overlap_grad_reduce = false;        // --overlap-grad-reduce
  bool overlap_param_gather = false;       // --overlap-param-gather
  // The collectives run on NCCL (TrainConfig::nccl_collectives): the copy engines need it.
  bool nccl_collectives = false;
  // The gradient buffer's dtype (DataParallelOptions::grad_dtype): the model's 16-bit dtype
  // unless --accumulate-allreduce-grads-in-fp32 (Megatron-Core's grad_reduce_in_fp32).
  DType grad_dtype = DType::kF32;
};

// --ddp-bucket-size; --ddp-num-buckets N: `local_params` (this rank's parameters, all its
// model chunks) / N, as Megatron; else one bucket (0), or with --overlap-grad-reduce Megatron's
// max(40M, 1M x dp-cp) elements.
int64_t ddp_bucket_size(const DataParallelFlags& config, int64_t dp_cp_size, int64_t local_params);

// The optimizer's data-parallel options for these groups, flags and this stage's model: the
// buckets never span two model chunks (Megatron keeps a buffer per chunk) and, with pipeline
// parallelism and tied embeddings, the word embedding (first stage) or its copy (last stage)
// has a bucket of its own, held back from the overlap: its gradient is summed over the
// embedding group first (train/trainer.cpp). The layout is the same with and without the
// overlaps, so that they change only when the collectives start.
DataParallelOptions data_parallel_options(const DataParallelFlags& config, parallel::ProcessGroups& groups,
                                          model::GPTModel& model);

// Copy-engine collectives for the data-parallel reduce-scatters and parameter gathers
// (MEGATRON_DP_COPY_ENGINE=1; comm::Communicator::enable_copy_engine): the GPUs' copy engines
// move the gradients and parameters, so that the GEMMs beside them keep every SM.
// prepare_copy_engine, before the model is built, puts its parameters and gradients in NCCL's
// symmetric memory when the run can use it (the variable set, the distributed optimizer over
// more than one rank, NCCL 2.28+ collectives: DataParallelFlags::nccl_collectives);
// copy_engine_text, after the optimizer is built, switches its gradient buffer over if prepared
// (collective over the data-parallel group) and returns the log line that says whether it did
// and why not.
bool prepare_copy_engine(const DataParallelFlags& config, const parallel::ProcessGroups& groups);
std::string copy_engine_text(bool prepared, const DataParallelFlags& config, MixedPrecisionOptimizer& optimizer);
// MEGATRON_DP_COPY_ENGINE: unset, "" or "0" false, "1" true; anything else is a one-line error.
bool copy_engine_requested();
// copy_engine_requested() and this build's NCCL has the copy engines (comm::copy_engine_supported):
// what the plans (--dry-run, megatron plan, the trainer's prediction) assume.
bool copy_engine_planned();
// The receive buffer's bytes (model::MemoryPlan::copy_engine) of a gradient buffer with the
// copy engines on, 0 with them off.
int64_t copy_engine_plan_bytes(const MixedPrecisionOptimizer& optimizer);

// Points the model's hooks at the optimizer's gradient buffer for the overlaps in effect (no-op
// without them). The gradient buffer must outlive the model's use of the hooks.
void connect_overlap_hooks(const DataParallelFlags& config, model::GPTModel& model, MixedPrecisionOptimizer& optimizer);

// The executor's grad_sync callback for --overlap-grad-reduce (arms chunk c's parameters in the
// gradient buffer around the computes that finish them); the step uses it with the overlap only.
std::function<void(int64_t chunk, bool on)> grad_sync_callback(model::GPTModel& model,
                                                               MixedPrecisionOptimizer& optimizer);

}  // namespace megatron::parallel
