// The typed configurations of the layers below the trainer, built from a TrainConfig in one
// place. cli::parse_train_config validates the flags (all of them, once); these only copy and
// convert what each layer uses, so that a layer sees its own few fields, not the whole
// TrainConfig:
//   DataParallelFlags  the buckets, distributed optimizer, overlaps (parallel/data_parallel_setup.h)
//   StepFlags          one training step (train/train_step.h)
//   OptimizerConfig    AdamW and clipping (parallel/optimizer.h), with its GradScaler
//   ScheduleFlags      the LR and weight-decay schedule (optim/lr_scheduler.h)
//   GPTDataConfig      the datasets (data/dataset_config.h)
//   CheckpointRun, SaveOptions, LoadOptions  checkpoints (ckpt/checkpoint.h)
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>

#include "ckpt/checkpoint.h"
#include "data/dataset_config.h"
#include "optim/loss_scaler.h"
#include "optim/lr_scheduler.h"
#include "parallel/data_parallel_setup.h"
#include "parallel/optimizer.h"
#include "train/config.h"
#include "train/train_step.h"

namespace megatron::train {

parallel::DataParallelFlags data_parallel_flags(const TrainConfig& config);
StepFlags step_flags(const TrainConfig& config);
// --adam-beta1/2, --adam-eps, --clip-grad, --log-num-zeros-in-grad, the NaN check.
parallel::OptimizerConfig optimizer_config(const TrainConfig& config);
// fp16: --loss-scale's constant scaler, else the dynamic one (--initial-loss-scale,
// --min-loss-scale, --loss-scale-window, --hysteresis); bf16 and fp32: the constant 1.
optim::GradScaler grad_scaler(const TrainConfig& config);
optim::ScheduleFlags schedule_flags(const TrainConfig& config);
// The datasets of a run of `train_iters` iterations (the sample counts Megatron asks of each
// split, build_train_valid_test_data_loaders); progress lines go to `log`.
data::GPTDataConfig data_config(const TrainConfig& config, int64_t train_iters, std::ostream* log);

// The run a checkpoint belongs to: the model, every pipeline stage's layers, the layout, the
// precision, the seed and checkpoint_args (train/checkpoint_args.h).
ckpt::CheckpointRun checkpoint_run(const TrainConfig& config);
// --save, --save-keep-last, --no-save-optim, --ckpt-fully-parallel-save, --async-save.
ckpt::SaveOptions save_options(const TrainConfig& config);
// --load, --ckpt-step, --finetune, --no-load-optim, --exit-on-missing-checkpoint and the
// scheduler's --override-opt_param-scheduler / --use-checkpoint-opt_param-scheduler.
ckpt::LoadOptions load_options(const TrainConfig& config);

}  // namespace megatron::train
