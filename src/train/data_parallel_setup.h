// How `megatron train` and `megatron bench` set up the data-parallel side of the optimizer from
// the flags, so that both run the same reduction: Megatron's default bucket size, and the
// overlap of gradient reduction / parameter gathering with compute (train/grad_buffer.h
// "Overlap"), which needs the whole model on one pipeline stage (model::ParamHooks).
#pragma once

#include <cstdint>

#include "comm/process_groups.h"
#include "model/gpt_model.h"
#include "train/config.h"
#include "train/optimizer.h"

namespace megatron::train {

// --ddp-bucket-size, else one bucket (0), or with --overlap-grad-reduce Megatron's
// max(40M, 1M x dp-cp) elements.
int64_t ddp_bucket_size(const TrainConfig& config, int64_t dp_cp_size);

// The optimizer's data-parallel options for these groups and flags. The overlaps are on only
// with one pipeline stage (with more, the reductions follow the pipeline flush).
DataParallelOptions data_parallel_options(const TrainConfig& config, comm::ProcessGroups& groups);

// Whether --overlap-grad-reduce is in effect (the flag, one pipeline stage).
bool overlaps_grad_reduce(const TrainConfig& config);

// Points the model's hooks at the optimizer's gradient buffer for the overlaps in effect (no-op
// without them). The gradient buffer must outlive the model's use of the hooks.
void connect_overlap_hooks(const TrainConfig& config, model::GPTModel& model, MixedPrecisionOptimizer& optimizer);

}  // namespace megatron::train
