#include "train/sub_configs.h"

namespace megatron::train {

DataParallelFlags data_parallel_flags(const TrainConfig& c) {
  DataParallelFlags f;
  f.use_distributed_optimizer = c.use_distributed_optimizer;
  f.ddp_bucket_size = c.ddp_bucket_size;
  f.ddp_num_buckets = c.ddp_num_buckets;
  f.overlap_grad_reduce = c.overlap_grad_reduce;
  f.overlap_param_gather = c.overlap_param_gather;
  f.nccl_collectives = c.nccl_collectives;
  return f;
}

StepFlags step_flags(const TrainConfig& c) {
  StepFlags f;
  f.seed = c.seed;
  f.data_parallel_size = c.data_parallel_size;
  f.overlap_grad_reduce = c.overlap_grad_reduce;
  f.overlap_p2p_communication = c.overlap_p2p_communication;
  return f;
}

OptimizerConfig optimizer_config(const TrainConfig& c) {
  OptimizerConfig oc;
  oc.beta1 = static_cast<float>(c.adam_beta1);
  oc.beta2 = static_cast<float>(c.adam_beta2);
  oc.eps = static_cast<float>(c.adam_eps);
  oc.clip_grad = c.clip_grad;
  oc.count_zeros = c.log_num_zeros_in_grad;
  oc.check_for_nan_in_grad = c.check_for_nan_in_loss_and_grad;
  return oc;
}

optim::GradScaler grad_scaler(const TrainConfig& c) {
  if (!c.fp16) return optim::GradScaler::constant(1.0f);
  if (c.loss_scale) return optim::GradScaler::constant(static_cast<float>(*c.loss_scale));
  optim::DynamicScalerConfig dyn;
  dyn.initial_scale = static_cast<float>(c.initial_loss_scale);
  dyn.min_scale = static_cast<float>(c.min_loss_scale);
  dyn.growth_interval = c.loss_scale_window;
  dyn.hysteresis = c.hysteresis;
  return optim::GradScaler::dynamic(dyn);
}

ScheduleFlags schedule_flags(const TrainConfig& c) {
  ScheduleFlags f;
  f.train_iters = c.train_iters;
  f.train_samples = c.train_samples;
  f.global_batch_size = c.global_batch_size;
  f.lr = c.lr;
  f.min_lr = c.min_lr;
  f.lr_warmup_init = c.lr_warmup_init;
  f.lr_decay_style = to_string(c.lr_decay_style);
  f.lr_decay_iters = c.lr_decay_iters;
  f.lr_decay_samples = c.lr_decay_samples;
  f.lr_warmup_iters = c.lr_warmup_iters;
  f.lr_warmup_samples = c.lr_warmup_samples;
  f.lr_warmup_fraction = c.lr_warmup_fraction;
  f.lr_wsd_decay_style = to_string(c.lr_wsd_decay_style);
  f.lr_wsd_decay_iters = c.lr_wsd_decay_iters;
  f.lr_wsd_decay_samples = c.lr_wsd_decay_samples;
  f.weight_decay = c.weight_decay;
  if (c.weight_decay_incr_style != WdIncrStyle::kConstant) {  // constant: --weight-decay alone
    f.start_weight_decay = c.start_weight_decay;
    f.end_weight_decay = c.end_weight_decay;
  }
  f.weight_decay_incr_style = to_string(c.weight_decay_incr_style);
  return f;
}

data::GPTDataConfig data_config(const TrainConfig& c, int64_t train_iters, std::ostream* log) {
  data::GPTDataConfig dc;
  dc.data_path = c.data_path;
  dc.split_data_path = c.split_data_path;
  dc.mock = c.mock_data;
  dc.eod = c.eod_token;
  dc.split = c.split;
  dc.seq_length = c.model.seq_length;
  dc.seed = c.seed;
  dc.data_cache_path = c.data_cache_path;
  dc.targets = data::target_sample_counts(c.train_samples, c.train_samples ? std::nullopt : std::optional(train_iters),
                                          c.global_batch_size, c.eval_interval, c.eval_iters);
  dc.log = log;
  return dc;
}

}  // namespace megatron::train
