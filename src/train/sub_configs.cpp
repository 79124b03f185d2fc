#include "train/sub_configs.h"

#include "train/checkpoint_args.h"

namespace megatron::train {

parallel::DataParallelFlags data_parallel_flags(const TrainConfig& c) {
  parallel::DataParallelFlags f;
  f.use_distributed_optimizer = c.use_distributed_optimizer;
  f.ddp_bucket_size = c.ddp_bucket_size;
  f.ddp_num_buckets = c.ddp_num_buckets;
  f.overlap_grad_reduce = c.overlap_grad_reduce;
  f.overlap_param_gather = c.overlap_param_gather;
  f.nccl_collectives = c.nccl_collectives;
  f.grad_dtype = grad_dtype(c);
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

parallel::OptimizerConfig optimizer_config(const TrainConfig& c) {
  parallel::OptimizerConfig oc;
  oc.beta1 = static_cast<float>(c.adam_beta1);
  oc.beta2 = static_cast<float>(c.adam_beta2);
  oc.eps = static_cast<float>(c.adam_eps);
  oc.clip_grad = c.clip_grad;
  oc.count_zeros = c.log_num_zeros_in_grad;
  oc.check_for_nan_in_grad = c.check_for_nan_in_loss_and_grad;
  oc.decoupled_lr = c.decoupled_lr.has_value();
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

optim::ScheduleFlags schedule_flags(const TrainConfig& c) {
  optim::ScheduleFlags f;
  f.train_iters = c.train_iters;
  f.train_samples = c.train_samples;
  f.global_batch_size = c.global_batch_size;
  f.lr = c.lr;
  f.min_lr = c.min_lr;
  f.decoupled_lr = c.decoupled_lr;
  f.decoupled_min_lr = c.decoupled_min_lr;
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
  if (c.weight_decay_incr_style != optim::WdIncrStyle::kConstant) {  // constant: --weight-decay alone
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
  dc.vocab_size = c.model.vocab_size;  // the tokenizer's, before padding
  dc.split = c.split;
  dc.seq_length = c.model.seq_length;
  dc.split_rule = c.classic_split ? data::SplitRule::kClassic : data::SplitRule::kMegatronCore;
  dc.seed = c.seed;
  dc.data_cache_path = c.data_cache_path;
  dc.targets = data::target_sample_counts(c.train_samples, c.train_samples ? std::nullopt : std::optional(train_iters),
                                          c.global_batch_size, c.eval_interval, c.eval_iters);
  if (c.step_batch_size_schedule && !c.train_samples) {
    // Megatron asks train_iters * args.global_batch_size (mbs * dp) samples here, fewer than a
    // schedule of larger batches reads: ask what the iterations consume.
    dc.targets.train = samples_of_iterations(c.microbatch_calculator(), train_iters);
  }
  dc.log = log;
  return dc;
}

ckpt::CheckpointRun checkpoint_run(const TrainConfig& c) {
  ckpt::CheckpointRun run;
  run.model = c.model;
  for (int64_t s = 0; s < c.pipeline_model_parallel_size; ++s) run.stages.push_back(pipeline_stage(c, s));
  run.tensor_model_parallel_size = c.tensor_model_parallel_size;
  run.data_parallel_size = c.data_parallel_size;
  run.dtype = model_dtype(c);
  run.seed = c.seed;
  run.args = checkpoint_args(c);
  return run;
}

ckpt::SaveOptions save_options(const TrainConfig& c) {
  ckpt::SaveOptions o;
  o.dir = c.save.value_or("");
  o.keep_last = c.save_keep_last;
  o.save_optim = !c.no_save_optim;
  o.fully_parallel = c.ckpt_fully_parallel_save;
  o.async = c.async_save;
  return o;
}

ckpt::LoadOptions load_options(const TrainConfig& c) {
  ckpt::LoadOptions o;
  o.dir = c.load.value_or("");
  o.step = c.ckpt_step;
  o.finetune = c.finetune;
  o.load_optim = !c.no_load_optim;
  o.exit_on_missing = c.exit_on_missing_checkpoint;
  o.override_scheduler = c.override_opt_param_scheduler;
  o.use_checkpoint_scheduler = c.use_checkpoint_opt_param_scheduler;
  return o;
}

}  // namespace megatron::train
