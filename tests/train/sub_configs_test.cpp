// The typed sub-configs of train/sub_configs.h carry the flags as parse_train_config read them:
// each layer's struct against the flags given on a command line (and Megatron's defaults where
// none is given).
#include "train/sub_configs.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cli/args.h"
#include "cli/train_args.h"
#include "model/memory_plan.h"
#include "train/config.h"

namespace megatron::train {
namespace {

using Argv = std::vector<std::string>;

TrainConfig parse(Argv extra, int64_t world_size = 1) {
  Argv argv = {"--num-layers",
               "2",
               "--hidden-size",
               "64",
               "--num-attention-heads",
               "4",
               "--seq-length",
               "32",
               "--micro-batch-size",
               "2",
               "--lr",
               "1e-4",
               "--dry-run"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  cli::Args args("megatron train");
  cli::declare_train_flags(args);
  EXPECT_TRUE(args.parse(argv));
  return cli::parse_train_config(args, world_size);
}

TEST(SubConfigs, DataParallelFlagsAreTheParsedOnes) {
  const parallel::DataParallelFlags none = data_parallel_flags(parse({"--train-iters", "10"}, 2));
  EXPECT_FALSE(none.use_distributed_optimizer);
  EXPECT_FALSE(none.ddp_bucket_size.has_value());
  EXPECT_FALSE(none.ddp_num_buckets.has_value());
  EXPECT_FALSE(none.overlap_grad_reduce);
  EXPECT_FALSE(none.overlap_param_gather);
  TrainConfig c = parse({"--train-iters", "10", "--use-distributed-optimizer", "--overlap-grad-reduce",
                         "--overlap-param-gather", "--ddp-bucket-size", "1000"},
                        2);
  c.nccl_collectives = true;  // set by the command that connects the ranks
  const parallel::DataParallelFlags all = data_parallel_flags(c);
  EXPECT_TRUE(all.use_distributed_optimizer);
  EXPECT_EQ(all.ddp_bucket_size, 1000);
  EXPECT_TRUE(all.overlap_grad_reduce);
  EXPECT_TRUE(all.overlap_param_gather);
  EXPECT_TRUE(all.nccl_collectives);
  EXPECT_EQ(data_parallel_flags(parse({"--train-iters", "10", "--ddp-num-buckets", "3"}, 2)).ddp_num_buckets, 3);
}

// What --dry-run prints (train_memory_plan): the gradient buffer in Megatron's dtype, 2 bytes a
// parameter with --fp16 and with --bf16 --grad-reduce-in-bf16, 4 otherwise.
TEST(SubConfigs, DryRunGradientBytesFollowTheGradientDtype) {
  auto plan = [&](std::initializer_list<std::string> extra) {
    Argv argv = {"--train-iters", "10"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const TrainConfig c = parse(argv, 1);
    EXPECT_EQ(data_parallel_flags(c).grad_dtype, grad_dtype(c));
    return std::make_pair(train_memory_plan(c), grad_dtype(c));
  };
  const auto [bf16, bf16_dtype] = plan({"--bf16"});
  EXPECT_EQ(bf16_dtype, DType::kF32);
  EXPECT_EQ(bf16.gradients, 4 * bf16.num_parameters);
  const auto [bf16_grads, bf16_grads_dtype] = plan({"--bf16", "--grad-reduce-in-bf16"});
  EXPECT_EQ(bf16_grads_dtype, DType::kBF16);
  EXPECT_EQ(bf16_grads.gradients, bf16.gradients / 2);
  EXPECT_NE(model::format_memory_plan(bf16_grads).find("gradients (bf16)"), std::string::npos);
  const auto [fp16, fp16_dtype] = plan({"--fp16"});
  EXPECT_EQ(fp16_dtype, DType::kF16);
  EXPECT_EQ(fp16.gradients, bf16.gradients / 2);
  const auto [fp16_fp32, fp16_fp32_dtype] = plan({"--fp16", "--accumulate-allreduce-grads-in-fp32"});
  EXPECT_EQ(fp16_fp32_dtype, DType::kF32);
  EXPECT_EQ(fp16_fp32.gradients, bf16.gradients);
}

TEST(SubConfigs, StepFlags) {
  const StepFlags f = step_flags(
      parse({"--train-iters", "10", "--seed", "77", "--overlap-grad-reduce", "--global-batch-size", "8"}, 2));
  EXPECT_EQ(f.seed, 77);
  EXPECT_EQ(f.data_parallel_size, 2);
  EXPECT_TRUE(f.overlap_grad_reduce);
  EXPECT_FALSE(f.overlap_p2p_communication);
}

TEST(SubConfigs, OptimizerConfigAndScaler) {
  const parallel::OptimizerConfig d = optimizer_config(parse({"--train-iters", "10"}));
  EXPECT_EQ(d.beta1, 0.9f);
  EXPECT_EQ(d.beta2, 0.999f);
  EXPECT_EQ(d.eps, 1e-8f);
  EXPECT_EQ(d.clip_grad, 1.0);
  EXPECT_FALSE(d.count_zeros);
  EXPECT_TRUE(d.check_for_nan_in_grad) << "Megatron's default";
  const parallel::OptimizerConfig o = optimizer_config(
      parse({"--train-iters", "10", "--adam-beta1", "0.8", "--adam-beta2", "0.95", "--adam-eps", "1e-5", "--clip-grad",
             "0.5", "--log-num-zeros-in-grad", "--no-check-for-nan-in-loss-and-grad"}));
  EXPECT_EQ(o.beta1, 0.8f);
  EXPECT_EQ(o.beta2, 0.95f);
  EXPECT_EQ(o.eps, 1e-5f);
  EXPECT_EQ(o.clip_grad, 0.5);
  EXPECT_TRUE(o.count_zeros);
  EXPECT_FALSE(o.check_for_nan_in_grad);

  // bf16 and fp32: the constant 1; fp16: --loss-scale's constant, else dynamic from 2^32.
  for (const Argv& precision : {Argv{"--bf16"}, Argv{}}) {
    Argv extra = {"--train-iters", "10"};
    extra.insert(extra.end(), precision.begin(), precision.end());
    const optim::GradScaler s = grad_scaler(parse(extra));
    EXPECT_FALSE(s.is_dynamic()) << (precision.empty() ? "fp32" : "bf16");
    EXPECT_EQ(s.scale(), 1.0f) << (precision.empty() ? "fp32" : "bf16");
  }
  const optim::GradScaler fixed = grad_scaler(parse({"--train-iters", "10", "--fp16", "--loss-scale", "128"}));
  EXPECT_FALSE(fixed.is_dynamic());
  EXPECT_EQ(fixed.scale(), 128.0f);
  const optim::GradScaler dynamic =
      grad_scaler(parse({"--train-iters", "10", "--fp16", "--initial-loss-scale", "65536", "--hysteresis", "3"}));
  EXPECT_TRUE(dynamic.is_dynamic());
  EXPECT_EQ(dynamic.scale(), 65536.0f);
  EXPECT_EQ(dynamic.state().hysteresis_tracker, 3);
}

TEST(SubConfigs, ScheduleFlags) {
  const optim::ScheduleFlags f =
      schedule_flags(parse({"--train-samples", "6400", "--global-batch-size", "64", "--lr-decay-style", "cosine",
                            "--min-lr", "1e-5", "--lr-warmup-fraction", "0.1", "--weight-decay", "0.1"}));
  EXPECT_EQ(f.train_samples, 6400);
  EXPECT_FALSE(f.train_iters.has_value());
  EXPECT_EQ(f.global_batch_size, 64);
  EXPECT_EQ(f.lr, 1e-4);
  EXPECT_EQ(f.min_lr, 1e-5);
  EXPECT_EQ(f.lr_decay_style, "cosine");
  EXPECT_EQ(f.lr_warmup_fraction, 0.1);
  EXPECT_EQ(f.weight_decay, 0.1);
  EXPECT_FALSE(f.start_weight_decay.has_value()) << "the constant style: --weight-decay alone";
  const optim::ScheduleFlags w = schedule_flags(parse({"--train-iters", "10", "--weight-decay-incr-style", "linear",
                                                       "--start-weight-decay", "0.01", "--end-weight-decay", "0.1"}));
  EXPECT_EQ(w.start_weight_decay, 0.01);
  EXPECT_EQ(w.end_weight_decay, 0.1);
  EXPECT_EQ(w.weight_decay_incr_style, "linear");
}

TEST(SubConfigs, DataConfigAsksMegatronsSampleCounts) {
  const TrainConfig c = parse({"--train-iters", "10", "--mock-data", "--global-batch-size", "8", "--eval-interval", "4",
                               "--eval-iters", "2", "--seed", "5", "--split", "90,9,1"});
  const data::GPTDataConfig d = data_config(c, c.total_train_iters(), nullptr);
  EXPECT_TRUE(d.mock);
  EXPECT_EQ(d.seq_length, 32);
  EXPECT_EQ(d.seed, 5);
  EXPECT_EQ(d.split, "90,9,1");
  EXPECT_EQ(d.eod, c.eod_token);
  EXPECT_EQ(d.vocab_size, c.model.vocab_size);
  // train 10 x 8; valid (10 // 4 + 1) x 2 x 8; test 2 x 8.
  EXPECT_EQ(d.targets.train, 80);
  EXPECT_EQ(d.targets.valid, 48);
  EXPECT_EQ(d.targets.test, 16);
}

// With --step-batch-size-schedule and --train-iters the train split holds what the iterations
// consume: 0:4 320:8 at --seq-length 32 is batch 4 below 10 samples, then 8; 10 iterations take
// 3 x 4 + 7 x 8 = 68 samples. Valid and test keep Megatron's counts at gbs = mbs * dp = 2.
TEST(SubConfigs, DataConfigOfAStepScheduleAsksWhatTheIterationsConsume) {
  const TrainConfig c = parse({"--train-iters", "10", "--mock-data", "--step-batch-size-schedule", "0:4 320:8",
                               "--eval-interval", "4", "--eval-iters", "2"});
  const data::GPTDataConfig d = data_config(c, c.total_train_iters(), nullptr);
  EXPECT_EQ(d.targets.train, 68);
  EXPECT_EQ(d.targets.valid, 12);  // (10 // 4 + 1) x 2 x 2
  EXPECT_EQ(d.targets.test, 4);
}

}  // namespace
}  // namespace megatron::train
