// The typed configurations of the layers below the trainer, built from a TrainConfig in one
// place. cli::parse_train_config validates the flags (all of them, once); these only copy and
// convert what each layer uses, so that a layer sees its own few fields, not the whole
// TrainConfig:
//   DataParallelFlags  the buckets, distributed optimizer, overlaps (train/data_parallel_setup.h)
//   StepFlags          one training step (train/train_step.h)
//   OptimizerConfig    AdamW and clipping (train/optimizer.h), with its GradScaler
//   ScheduleFlags      the LR and weight-decay schedule (train/lr_scheduler.h)
//   GPTDataConfig      the datasets (data/dataset_config.h)
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>

#include "data/dataset_config.h"
#include "optim/loss_scaler.h"
#include "train/config.h"
#include "train/data_parallel_setup.h"
#include "train/lr_scheduler.h"
#include "train/optimizer.h"
#include "train/train_step.h"

namespace megatron::train {

DataParallelFlags data_parallel_flags(const TrainConfig& config);
StepFlags step_flags(const TrainConfig& config);
// --adam-beta1/2, --adam-eps, --clip-grad, --log-num-zeros-in-grad, the NaN check.
OptimizerConfig optimizer_config(const TrainConfig& config);
// fp16: --loss-scale's constant scaler, else the dynamic one (--initial-loss-scale,
// --min-loss-scale, --loss-scale-window, --hysteresis); bf16 and fp32: the constant 1.
optim::GradScaler grad_scaler(const TrainConfig& config);
ScheduleFlags schedule_flags(const TrainConfig& config);
// The datasets of a run of `train_iters` iterations (the sample counts Megatron asks of each
// split, build_train_valid_test_data_loaders); progress lines go to `log`.
data::GPTDataConfig data_config(const TrainConfig& config, int64_t train_iters, std::ostream* log);

}  // namespace megatron::train
