#include "train/config.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <limits>
#include <sstream>
#include <utility>

#include "core/error.h"

namespace megatron::train {
namespace {

TrainConfig ramp_config() {
  TrainConfig c;
  c.micro_batch_size = 1;
  c.data_parallel_size = 1;
  c.global_batch_size = 64;
  c.train_samples = 1000;
  c.rampup_batch_size = RampupBatchSizeFlags{16, 16, 300};
  return c;
}

TEST(TrainConfig, RampupBatchSizeSchedule) {
  // num_increments = (64 - 16) / 16 = 3, samples per increment = 100.
  const TrainConfig c = ramp_config();
  EXPECT_EQ(c.global_batch_size_at(0), 16);
  EXPECT_EQ(c.global_batch_size_at(99), 16);
  EXPECT_EQ(c.global_batch_size_at(100), 32);
  EXPECT_EQ(c.global_batch_size_at(250), 48);
  EXPECT_EQ(c.global_batch_size_at(300), 64);  // int(300/100)*16 + 16
  EXPECT_EQ(c.global_batch_size_at(301), 64);
}

TEST(TrainConfig, TrainItersInSampleModeWithRamp) {
  // Walk while consumed <= 300: seven batches of 16 (consumed 0..96 -> 112), three of 32
  // (112, 144, 176 -> 208), two of 48 (208, 256 -> 304 > 300): 12 iterations; then
  // (1000 - 304) // 64 = 10 more.
  EXPECT_EQ(ramp_config().total_train_iters(), 22);
  TrainConfig c = ramp_config();
  c.rampup_batch_size.reset();
  EXPECT_EQ(c.total_train_iters(), 1000 / 64);
  c.train_samples.reset();
  c.train_iters = 7;
  EXPECT_EQ(c.total_train_iters(), 7);
  EXPECT_EQ(c.num_microbatches(), 64);
}

TEST(TrainConfig, MegatronDefaults) {
  const TrainConfig c;
  EXPECT_EQ(c.split, "969, 30, 1");
  EXPECT_EQ(c.seed, 1234);
  EXPECT_EQ(c.min_lr, 0.0);
  EXPECT_EQ(c.lr_decay_style, optim::LrDecayStyle::kLinear);
  EXPECT_EQ(c.weight_decay, 0.01);
  EXPECT_EQ(c.adam_beta2, 0.999);
  EXPECT_EQ(c.adam_eps, 1e-8);
  EXPECT_EQ(c.clip_grad, 1.0);
  EXPECT_EQ(c.initial_loss_scale, 4294967296.0);
  EXPECT_EQ(c.loss_scale_window, 1000);
  EXPECT_EQ(c.hysteresis, 2);
  EXPECT_EQ(c.log_interval, 100);
  EXPECT_EQ(c.eval_interval, 1000);
  EXPECT_EQ(c.eval_iters, 100);
  EXPECT_EQ(c.make_vocab_size_divisible_by, 128);
  EXPECT_FALSE(c.loss_scale.has_value());
  EXPECT_FALSE(c.lr_warmup_fraction.has_value());
}

// A stage's activation sets cover every global batch of the run. 1F1B: stage s of PP4 holds
// min(4 - s, M) micro-batches, which grows with M (a ramp 1, 2, 3 needs the final 3).
// Interleaved: M == pp holds all M vp sets, more than M = 2 pp needs on the last stage, so a
// ramp through M = pp needs those.
TEST(TrainConfig, PipelineStageSetsCoverTheRamp) {
  TrainConfig c;
  c.model.num_layers = 8;
  c.pipeline_model_parallel_size = 4;
  c.micro_batch_size = 1;
  c.data_parallel_size = 1;
  c.global_batch_size = 2;
  EXPECT_EQ(pipeline_stage(c, 0).activation_sets, 2);
  c.global_batch_size = 8;
  EXPECT_EQ(pipeline_stage(c, 0).activation_sets, 4);
  EXPECT_EQ(pipeline_stage(c, 3).activation_sets, 1);
  c.global_batch_size = 3;
  c.rampup_batch_size = RampupBatchSizeFlags{1, 1, 10};
  EXPECT_EQ(pipeline_stage(c, 0).activation_sets, 3);
  // Interleaved (vp 2): M == pp holds all M vp sets, more than M = 2 pp needs on the last stage.
  c.rampup_batch_size.reset();
  c.num_layers_per_virtual_pipeline_stage = 1;
  c.global_batch_size = 8;
  EXPECT_EQ(pipeline_stage(c, 3).activation_sets, 5);  // (vp - 1) pp + 1
  c.global_batch_size = 4;
  EXPECT_EQ(pipeline_stage(c, 3).activation_sets, 8);
  c.global_batch_size = 8;
  c.rampup_batch_size = RampupBatchSizeFlags{4, 4, 10};  // 4 then 8 micro-batches
  EXPECT_EQ(pipeline_stage(c, 3).activation_sets, 8);
}

// The sets of a long ramp come from its first few sizes: 2^20 micro-batches in steps of one
// once simulated every size's table (hours); now it takes a moment, with the same answer as a
// short ramp. Run in a child with a time limit, so that a regression fails instead of hanging.
TEST(TrainConfig, PipelineStageOfALongRampIsQuick) {
  TrainConfig c;
  c.model.num_layers = 8;
  c.pipeline_model_parallel_size = 4;
  c.micro_batch_size = 1;
  c.data_parallel_size = 1;
  c.global_batch_size = kMaxMicroBatches;
  c.rampup_batch_size = RampupBatchSizeFlags{1, 1, 1000};
  auto bounded = [&c] {
    ::alarm(20);
    ::_exit(pipeline_stage(c, 0).activation_sets == 4 && pipeline_stage(c, 3).activation_sets == 1 ? 0 : 1);
  };
  EXPECT_EXIT(bounded(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace megatron::train
