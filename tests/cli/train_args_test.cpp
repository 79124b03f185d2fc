#include "cli/train_args.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "parallel/data_parallel_setup.h"
#include "support/paths.h"
#include "train/sub_configs.h"

namespace megatron::cli {
namespace {

using train::TrainConfig;
using Argv = std::vector<std::string>;

// A small, valid iteration-mode job.
Argv base_args() {
  return {"--num-layers", "2",    "--hidden-size",      "64", "--num-attention-heads", "4",
          "--seq-length", "32",   "--micro-batch-size", "2",  "--train-iters",         "10",
          "--lr",         "1e-4", "--dry-run"};
}

Argv with(Argv a, const Argv& extra) {
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

Argv without(const Argv& a, const std::string& flag, int values = 1) {
  Argv out;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == flag) {
      i += values;
      continue;
    }
    out.push_back(a[i]);
  }
  return out;
}

TrainConfig parse(const Argv& argv, int64_t world_size = 1, std::ostream* log = nullptr) {
  Args args("megatron train");
  declare_train_flags(args);
  EXPECT_TRUE(args.parse(argv));
  return parse_train_config(args, world_size, log);
}

std::string error_of(const Argv& argv, int64_t world_size = 1) {
  try {
    parse(argv, world_size);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_ERROR_NAMES(argv, flag)                                    \
  do {                                                                    \
    const std::string msg_ = error_of(argv);                              \
    EXPECT_EQ(msg_.rfind("[" flag, 0), 0u) << "message: " << msg_;        \
    EXPECT_EQ(msg_.find('\n'), std::string::npos) << "message: " << msg_; \
  } while (0)

TEST(TrainArgs, DerivedDefaults) {
  std::ostringstream log;
  const TrainConfig c = parse(base_args(), 4, &log);
  EXPECT_EQ(c.model.ffn_hidden_size, 256);
  EXPECT_EQ(c.model.kv_channels, 16);
  EXPECT_EQ(c.model.max_position_embeddings, 32);
  EXPECT_EQ(c.data_parallel_size, 4);
  EXPECT_EQ(c.global_batch_size, 8);
  EXPECT_EQ(c.num_microbatches(), 1);
  EXPECT_EQ(log.str(), "setting global batch size to 8\n");
  EXPECT_EQ(c.total_train_iters(), 10);
  EXPECT_EQ(c.seed, 1234);
  EXPECT_EQ(c.tokenizer_type, "GPT2BPETokenizer");
  EXPECT_EQ(c.flops_convention, train::FlopsConvention::k2025);
  EXPECT_EQ(c.model.gelu, model::Gelu::kTanh);
  EXPECT_TRUE(c.dry_run);
}

TEST(TrainArgs, PresetsExpandAndExplicitFlagsOverride) {
  Argv a = {"--model", "gpt3-175b", "--micro-batch-size", "1", "--train-iters", "5", "--lr", "6e-5", "--dry-run"};
  TrainConfig c = parse(a);
  EXPECT_EQ(c.model_preset, "gpt3-175b");
  EXPECT_EQ(c.model.num_layers, 96);
  EXPECT_EQ(c.model.hidden_size, 12288);
  EXPECT_EQ(c.model.num_attention_heads, 96);
  EXPECT_EQ(c.model.seq_length, 2048);
  EXPECT_EQ(c.model.max_position_embeddings, 2048);
  EXPECT_EQ(c.model.ffn_hidden_size, 4 * 12288);
  EXPECT_EQ(c.model.kv_channels, 128);

  c = parse(with(a, {"--num-layers", "4", "--seq-length", "1024"}));
  EXPECT_EQ(c.model.num_layers, 4);
  EXPECT_EQ(c.model.hidden_size, 12288);
  EXPECT_EQ(c.model.seq_length, 1024);
  EXPECT_EQ(c.model.max_position_embeddings, 1024);

  c = parse({"--model", "gpt2-124m", "--micro-batch-size", "1", "--train-iters", "5", "--lr", "6e-4", "--dry-run"});
  EXPECT_EQ(c.model.num_layers, 12);
  EXPECT_EQ(c.model.hidden_size, 768);
  EXPECT_EQ(c.model.num_attention_heads, 12);
  EXPECT_EQ(c.model.seq_length, 1024);

  c = parse({"--model", "gpt-7.5b", "--micro-batch-size", "1", "--train-iters", "5", "--lr", "6e-4", "--dry-run"});
  EXPECT_EQ(c.model.num_layers, 36);
  EXPECT_EQ(c.model.hidden_size, 4096);
  EXPECT_EQ(c.model.num_attention_heads, 32);
  EXPECT_EQ(c.model.seq_length, 2048);

  c = parse({"--model", "gpt3-13b", "--micro-batch-size", "1", "--train-iters", "5", "--lr", "6e-4", "--dry-run"});
  EXPECT_EQ(c.model.num_layers, 40);
  EXPECT_EQ(c.model.hidden_size, 5120);
  EXPECT_EQ(c.model.num_attention_heads, 32);
}

TEST(TrainArgs, EveryPresetIsAValidShape) {
  for (const ModelPreset& p : model_presets()) {
    const TrainConfig c =
        parse({"--model", p.name, "--micro-batch-size", "1", "--train-iters", "1", "--lr", "1e-4", "--dry-run"});
    EXPECT_EQ(c.model.hidden_size % c.model.num_attention_heads, 0) << p.name;
  }
  EXPECT_EQ(model_presets().size(), 24u);  // 16 GPT shapes, 8 Llama
}

// The benchmark's 13B (head_dim 5120 / 32 = 160) runs on CUDA only on cuDNN's fused attention:
// said before anything is allocated, naming the flags, and nothing for what cuDNN can run.
TEST(TrainArgs, CudaAttentionPastHeadDim128NeedsWhatCudnnRuns) {
  const Argv shape = {"--num-layers", "2",    "--hidden-size",      "640", "--num-attention-heads", "4",
                      "--seq-length", "32",   "--micro-batch-size", "2",   "--train-iters",         "10",
                      "--lr",         "1e-4", "--dry-run"};
  EXPECT_EQ(cuda_attention_problem(parse(base_args())), "");  // head_dim 16
  const std::string fp32 = cuda_attention_problem(parse(shape));
  EXPECT_EQ(fp32.rfind("[--hidden-size / --num-attention-heads / --kv-channels] head_dim 160 ", 0), 0u) << fp32;
  EXPECT_NE(fp32.find("--bf16"), std::string::npos) << fp32;
  EXPECT_EQ(cuda_attention_problem(parse(with(shape, {"--bf16"}))), "");
  const std::string tp_dropout =
      cuda_attention_problem(parse(with(shape, {"--bf16", "--tensor-model-parallel-size", "2"}), 2));
  EXPECT_NE(tp_dropout.find("--attention-dropout 0"), std::string::npos) << tp_dropout;
  EXPECT_EQ(tp_dropout.find('\n'), std::string::npos);
  EXPECT_EQ(cuda_attention_problem(
                parse(with(shape, {"--fp16", "--tensor-model-parallel-size", "2", "--attention-dropout", "0"}), 2)),
            "");
  EXPECT_EQ(cuda_attention_problem(parse(with(shape, {"--bf16", "--kv-channels", "128"}))), "");
}

TEST(TrainArgs, UnknownPreset) { EXPECT_ERROR_NAMES(with(base_args(), {"--model", "gpt5"}), "--model]"); }

TEST(TrainArgs, RequiredShapeFlags) {
  EXPECT_ERROR_NAMES(without(base_args(), "--num-layers"), "--num-layers]");
  EXPECT_ERROR_NAMES(without(base_args(), "--hidden-size"), "--hidden-size]");
  EXPECT_ERROR_NAMES(without(base_args(), "--num-attention-heads"), "--num-attention-heads]");
  EXPECT_ERROR_NAMES(without(base_args(), "--seq-length"), "--seq-length]");
  EXPECT_ERROR_NAMES(without(base_args(), "--micro-batch-size"), "--micro-batch-size]");
  EXPECT_ERROR_NAMES(without(base_args(), "--lr"), "--lr]");
}

TEST(TrainArgs, HeadsMustDivideHiddenUnlessKvChannelsGiven) {
  const Argv bad = with(without(base_args(), "--num-attention-heads"), {"--num-attention-heads", "5"});
  EXPECT_EQ(error_of(bad), "[--num-attention-heads] 5 does not divide --hidden-size 64 (or give --kv-channels)");
  const TrainConfig c = parse(with(bad, {"--kv-channels", "16"}));
  EXPECT_EQ(c.model.kv_channels, 16);
}

TEST(TrainArgs, SeqLengthAboveMaxPositions) {
  EXPECT_EQ(error_of(with(base_args(), {"--max-position-embeddings", "16"})),
            "[--seq-length] 32 is larger than --max-position-embeddings 16");
  EXPECT_EQ(parse(with(base_args(), {"--max-position-embeddings", "64"})).model.max_position_embeddings, 64);
}

TEST(TrainArgs, GlobalBatchDivisibility) {
  EXPECT_EQ(error_of(with(base_args(), {"--global-batch-size", "10"}), 2),
            "[--global-batch-size] global batch size (10) is not divisible by micro batch size (2) times data "
            "parallel size (2)");
  const TrainConfig c = parse(with(base_args(), {"--global-batch-size", "12"}), 2);
  EXPECT_EQ(c.num_microbatches(), 3);
}

// --step-batch-size-schedule: thresholds in tokens (--seq-length 32: 320 tokens = 10 samples),
// not with --global-batch-size (Megatron's ValueError) nor --rampup-batch-size; the global batch
// size falls back to mbs * dp, as in Megatron.
TEST(TrainArgs, StepBatchSizeSchedule) {
  std::ostringstream log;
  const TrainConfig c = parse(with(base_args(), {"--step-batch-size-schedule", "0:4 320:8"}), 2, &log);
  ASSERT_TRUE(c.step_batch_size_schedule.has_value());
  EXPECT_EQ(c.step_batch_size_schedule->steps, (std::vector<train::StepBatchSizeSchedule::Step>{{0, 4}, {10, 8}}));
  EXPECT_EQ(c.global_batch_size, 4);  // 2 x dp 2
  EXPECT_NE(log.str().find("setting global batch size to 4"), std::string::npos) << log.str();
  EXPECT_EQ(c.global_batch_size_at(9), 4);
  EXPECT_EQ(c.global_batch_size_at(10), 8);
  EXPECT_EQ(c.num_microbatches(), 2);  // the last step: 8 / (2 x 2)
  EXPECT_EQ(error_of(with(base_args(), {"--step-batch-size-schedule", "0:4", "--global-batch-size", "4"}), 2),
            "[--step-batch-size-schedule] Cannot specify both --step-batch-size-schedule and --global-batch-size");
  EXPECT_ERROR_NAMES(
      with(without(base_args(), "--train-iters"),
           {"--train-samples", "100", "--step-batch-size-schedule", "0:4", "--rampup-batch-size", "2", "2", "10"}),
      "--step-batch-size-schedule]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--step-batch-size-schedule", "64:4"}),
                     "--step-batch-size-schedule]");  // 2 samples
  // --train-samples 100 with batches 4 up to sample 10, then 8: 3 + ceil(88 / 8) = 14 iterations.
  const TrainConfig s = parse(with(without(base_args(), "--train-iters"),
                                   {"--train-samples", "100", "--step-batch-size-schedule", "0:4 320:8"}),
                              2);
  EXPECT_EQ(s.total_train_iters(), 14);
}

TEST(TrainArgs, ExactlyOneOfTrainItersAndSamples) {
  EXPECT_ERROR_NAMES(with(base_args(), {"--train-samples", "100"}), "--train-iters/--train-samples]");
  EXPECT_ERROR_NAMES(without(base_args(), "--train-iters"), "--train-iters/--train-samples]");
  EXPECT_NE(error_of(without(base_args(), "--train-iters")).find("neither"), std::string::npos);
}

TEST(TrainArgs, IterationModeRejectsSampleFlags) {
  EXPECT_ERROR_NAMES(with(base_args(), {"--lr-decay-samples", "100"}), "--lr-decay-samples]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--lr-warmup-samples", "100"}), "--lr-warmup-samples]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--rampup-batch-size", "2", "2", "100", "--global-batch-size", "8"}),
                     "--rampup-batch-size]");
  // Megatron checks the value, not the presence: 0 warmup samples is fine.
  EXPECT_NO_THROW(parse(with(base_args(), {"--lr-warmup-samples", "0"})));
  EXPECT_ERROR_NAMES(with(base_args(), {"--lr-warmup-fraction", "0.1", "--lr-warmup-iters", "2"}),
                     "--lr-warmup-fraction/--lr-warmup-iters]");
}

Argv sample_args() {
  Argv a = without(base_args(), "--train-iters");
  return with(a, {"--train-samples", "1000", "--global-batch-size", "8"});
}

TEST(TrainArgs, SampleModeRejectsIterationFlags) {
  EXPECT_ERROR_NAMES(with(sample_args(), {"--lr-decay-iters", "100"}), "--lr-decay-iters]");
  EXPECT_ERROR_NAMES(with(sample_args(), {"--lr-warmup-iters", "5"}), "--lr-warmup-iters]");
  EXPECT_ERROR_NAMES(with(sample_args(), {"--lr-warmup-fraction", "0.1", "--lr-warmup-samples", "5"}),
                     "--lr-warmup-fraction/--lr-warmup-samples]");
}

TEST(TrainArgs, SampleModeWithRampup) {
  const TrainConfig c = parse(with(sample_args(), {"--rampup-batch-size", "2", "2", "100", "--lr-decay-samples", "900",
                                                   "--lr-warmup-samples", "50"}));
  ASSERT_TRUE(c.rampup_batch_size.has_value());
  EXPECT_EQ(c.rampup_batch_size->start, 2);
  EXPECT_EQ(c.rampup_batch_size->increment, 2);
  EXPECT_EQ(c.rampup_batch_size->ramp_samples, 100);
  EXPECT_EQ(c.lr_decay_samples, 900);
  EXPECT_EQ(c.lr_warmup_samples, 50);
  EXPECT_TRUE(c.sample_based());
  EXPECT_EQ(c.global_batch_size_at(0), 2);
  EXPECT_EQ(c.global_batch_size_at(1000), 8);
  // Megatron's wording for an increment that does not divide the interval.
  EXPECT_EQ(error_of(with(sample_args(), {"--rampup-batch-size", "2", "4", "100"})),
            "[--rampup-batch-size] expected global batch size interval (6) to be divisible by global batch size "
            "increment (4)");
}

TEST(TrainArgs, Fp16AndBf16AreExclusive) {
  EXPECT_ERROR_NAMES(with(base_args(), {"--fp16", "--bf16"}), "--fp16/--bf16]");
}

TEST(TrainArgs, Bf16ForcesFp32GradAccumulation) {
  std::ostringstream log;
  const TrainConfig c = parse(with(base_args(), {"--bf16", "--global-batch-size", "2"}), 1, &log);
  EXPECT_TRUE(c.accumulate_allreduce_grads_in_fp32);
  EXPECT_EQ(log.str(), "accumulate and all-reduce gradients in fp32 for bfloat16 data type.\n");
}

// Megatron's validate_args and DDP config: the gradient buffer holds the model dtype unless
// --accumulate-allreduce-grads-in-fp32 (grad_reduce_in_fp32), which --bf16 turns on unless
// --grad-reduce-in-bf16; fp32 models have fp32 gradients either way.
TEST(TrainArgs, GradientDtypeFollowsMegatronsRules) {
  const Argv b = with(base_args(), {"--global-batch-size", "2"});
  auto grad_dtype = [&](const Argv& extra, std::ostream* log = nullptr) {
    return train::data_parallel_flags(parse(with(b, extra), 1, log)).grad_dtype;
  };
  EXPECT_EQ(grad_dtype({}), DType::kF32);
  EXPECT_EQ(grad_dtype({"--fp16"}), DType::kF16);
  EXPECT_EQ(grad_dtype({"--fp16", "--accumulate-allreduce-grads-in-fp32"}), DType::kF32);
  EXPECT_EQ(grad_dtype({"--bf16"}), DType::kF32);
  EXPECT_EQ(grad_dtype({"--bf16", "--grad-reduce-in-bf16"}), DType::kBF16);
  EXPECT_EQ(grad_dtype({"--bf16", "--grad-reduce-in-bf16", "--accumulate-allreduce-grads-in-fp32"}), DType::kBF16);
  std::ostringstream quiet, ignored;
  EXPECT_EQ(grad_dtype({"--bf16", "--grad-reduce-in-bf16"}, &quiet), DType::kBF16);
  EXPECT_EQ(quiet.str().find("accumulate and all-reduce gradients in fp32"), std::string::npos) << quiet.str();
  EXPECT_EQ(grad_dtype({"--fp16", "--grad-reduce-in-bf16"}, &ignored),
            DType::kF16);  // Megatron reads it with bf16 only
  EXPECT_NE(ignored.str().find("warning: --grad-reduce-in-bf16 has no effect without --bf16\n"), std::string::npos)
      << ignored.str();
}

TEST(TrainArgs, PrecisionAndOptimizerValues) {
  const TrainConfig c =
      parse(with(base_args(), {"--fp16", "--loss-scale", "4096", "--initial-loss-scale", "65536", "--hysteresis", "3",
                               "--adam-beta2", "0.95", "--clip-grad", "0", "--weight-decay", "0.1", "--min-lr", "1e-5",
                               "--lr-decay-style", "cosine", "--lr-warmup-fraction", ".01"}));
  EXPECT_TRUE(c.fp16);
  EXPECT_EQ(c.loss_scale, 4096.0);
  EXPECT_EQ(c.initial_loss_scale, 65536.0);
  EXPECT_EQ(c.hysteresis, 3);
  EXPECT_EQ(c.adam_beta2, 0.95);
  EXPECT_EQ(c.clip_grad, 0.0);
  EXPECT_EQ(c.start_weight_decay, 0.1);
  EXPECT_EQ(c.end_weight_decay, 0.1);
  EXPECT_EQ(c.min_lr, 1e-5);
  EXPECT_EQ(c.lr_decay_style, optim::LrDecayStyle::kCosine);
  EXPECT_EQ(c.lr_warmup_fraction, 0.01);
  EXPECT_FALSE(c.accumulate_allreduce_grads_in_fp32);
  EXPECT_ERROR_NAMES(with(base_args(), {"--loss-scale", "4096"}), "--loss-scale]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--min-lr", "1e-3"}), "--min-lr]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--lr-decay-style", "exponential"}), "--lr-decay-style]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--weight-decay-incr-style", "linear"}), "--weight-decay-incr-style]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--start-weight-decay", "0.1"}), "--start-weight-decay]");
}

TEST(TrainArgs, WsdSchedule) {
  const TrainConfig c = parse(
      with(base_args(), {"--lr-decay-style", "WSD", "--lr-wsd-decay-iters", "3", "--lr-wsd-decay-style", "cosine"}));
  EXPECT_EQ(c.lr_decay_style, optim::LrDecayStyle::kWSD);
  EXPECT_EQ(c.lr_wsd_decay_iters, 3);
  EXPECT_EQ(c.lr_wsd_decay_style, optim::WsdDecayStyle::kCosine);
  EXPECT_ERROR_NAMES(with(base_args(), {"--lr-decay-style", "WSD"}), "--lr-decay-style]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--lr-wsd-decay-iters", "3"}), "--lr-wsd-decay-iters]");
}

TEST(TrainArgs, Recompute) {
  TrainConfig c = parse(with(base_args(), {"--recompute-activations"}));
  EXPECT_EQ(c.recompute_granularity, train::RecomputeGranularity::kSelective);
  c = parse(with(base_args(),
                 {"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "1"}));
  EXPECT_EQ(c.recompute_granularity, train::RecomputeGranularity::kFull);
  EXPECT_EQ(c.recompute_method, train::RecomputeMethod::kBlock);
  EXPECT_EQ(c.recompute_num_layers, 1);
  EXPECT_ERROR_NAMES(with(base_args(), {"--recompute-granularity", "full", "--recompute-num-layers", "1"}),
                     "--recompute-method]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--recompute-granularity", "full", "--recompute-method", "uniform"}),
                     "--recompute-num-layers]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--recompute-granularity", "full", "--recompute-method", "uniform",
                                        "--recompute-num-layers", "3"}),
                     "--recompute-num-layers]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--recompute-activations", "--recompute-method", "uniform"}),
                     "--recompute-method]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--recompute-method", "uniform"}), "--recompute-method]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--checkpoint-activations"}), "--checkpoint-activations]");
}

TEST(TrainArgs, UnsupportedFlagsSayNotSupportedYet) {
  // The layout comes first: a world that TP x PP does not divide is Megatron's error.
  EXPECT_EQ(error_of(with(base_args(), {"--tensor-model-parallel-size", "2"}), /*world_size=*/3),
            "[--tensor-model-parallel-size/--pipeline-model-parallel-size] world size (3) is not divisible by tensor "
            "parallel size (2) times pipeline parallel size (1); the world size comes from the launcher (torchrun, "
            "mpirun, srun or --nproc-per-node N); to check this layout on one machine: --dry-run --world-size N");
  EXPECT_EQ(error_of(with(base_args(), {"--use-dist-ckpt"})),
            "[--use-dist-ckpt] is not supported yet (checkpoints use one format: safetensors + metadata.json "
            "(--save/--load))");
  // Megatron's checkpoint formats are accepted (ours is written whatever they say); others are not.
  EXPECT_EQ(error_of(with(base_args(), {"--ckpt-format", "torch_dist"})), "(no error)");
  EXPECT_NE(error_of(with(base_args(), {"--ckpt-format", "zarr"})).find("[--ckpt-format] zarr is not supported yet"),
            std::string::npos);
  EXPECT_EQ(error_of(with(base_args(), {"--use-pytorch-profiler"})),
            "[--use-pytorch-profiler] is not supported yet (no PyTorch here: --profile starts and stops the CUDA "
            "profiler (nsys) instead)");
  for (const char* flag : {"--squared-relu", "--data-impl", "--tokenizer-type"}) {
    Argv a = base_args();
    a.push_back(flag);
    // Value-taking flags get a value that is not accepted.
    if (std::string(flag) == "--data-impl") a.push_back("lazy");
    if (std::string(flag) == "--tokenizer-type") a.push_back("BertWordPieceCase");
    const std::string msg = error_of(a);
    EXPECT_EQ(msg.rfind(std::string("[") + flag + "]", 0), 0u) << msg;
    EXPECT_NE(msg.find("is not supported yet ("), std::string::npos) << msg;
  }
}

TEST(TrainArgs, PipelineFlags) {
  // 4 layers over PP2, 2 chunks of 1 layer per stage; global batch 8 = 4 micro-batches of 2.
  const Argv four = with(without(base_args(), "--num-layers"), {"--num-layers", "4", "--global-batch-size", "8"});
  const TrainConfig c =
      parse(with(four, {"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1"}), 2);
  EXPECT_EQ(c.pipeline_model_parallel_size, 2);
  EXPECT_EQ(c.data_parallel_size, 1);
  EXPECT_EQ(c.virtual_pipeline_chunks(), 2);
  EXPECT_EQ(parse(with(four, {"--pipeline-model-parallel-size", "2"}), 4).virtual_pipeline_chunks(), 1);
  EXPECT_EQ(error_of(with(base_args(), {"--pipeline-model-parallel-size", "3"}), /*world_size=*/3),
            "[--num-layers] 2 is not divisible by --pipeline-model-parallel-size 3");
  EXPECT_EQ(
      error_of(with(four, {"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "3"}), 2),
      "[--num-layers-per-virtual-pipeline-stage] the layers per pipeline stage (2) are not divisible by 3");
  EXPECT_EQ(
      error_of(with(four, {"--num-layers-per-virtual-pipeline-stage", "1"})),
      "[--num-layers-per-virtual-pipeline-stage] the interleaved schedule needs --pipeline-model-parallel-size > 1");
  // 6 / 2 = 3 micro-batches do not go through 2 stages in groups of 2.
  EXPECT_EQ(
      error_of(with(without(four, "--global-batch-size"), {"--global-batch-size", "6", "--pipeline-model-parallel-size",
                                                           "2", "--num-layers-per-virtual-pipeline-stage", "1"}),
               2),
      "[--num-layers-per-virtual-pipeline-stage] number of microbatches (3) is not divisible by "
      "--pipeline-model-parallel-size (2) when using the interleaved schedule");
}

// Megatron HEAD: the pipeline exchanges overlap by default, with the interleaved schedule only
// (validate_args turns it off otherwise, warning on PP > 1); --no-overlap-p2p-communication
// turns it off; older Megatron's --overlap-p2p-communication is the default.
TEST(TrainArgs, P2POverlapIsOnByDefaultWithTheInterleavedSchedule) {
  const Argv four = with(without(base_args(), "--num-layers"), {"--num-layers", "4", "--global-batch-size", "8"});
  const Argv interleaved =
      with(four, {"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1"});
  EXPECT_TRUE(parse(interleaved, 2).overlap_p2p_communication);
  EXPECT_TRUE(parse(with(interleaved, {"--overlap-p2p-communication"}), 2).overlap_p2p_communication);
  EXPECT_FALSE(parse(with(interleaved, {"--no-overlap-p2p-communication"}), 2).overlap_p2p_communication);
  EXPECT_EQ(error_of(with(interleaved, {"--overlap-p2p-communication", "--no-overlap-p2p-communication"}), 2),
            "[--overlap-p2p-communication] contradicts --no-overlap-p2p-communication (give one)");
  const std::string warning =
      "warning: Setting args.overlap_p2p_comm and args.align_param_gather to False since non-interleaved schedule "
      "does not support overlapping p2p communication and aligned param AG\n";
  std::ostringstream log;
  EXPECT_FALSE(parse(with(four, {"--pipeline-model-parallel-size", "2"}), 2, &log).overlap_p2p_communication);
  EXPECT_NE(log.str().find(warning), std::string::npos) << log.str();
  std::ostringstream one_stage;
  EXPECT_FALSE(parse(with(four, {"--overlap-p2p-communication"}), 1, &one_stage).overlap_p2p_communication);
  EXPECT_EQ(one_stage.str().find("overlap_p2p_comm"), std::string::npos) << "Megatron warns only with PP > 1";
}

TEST(TrainArgs, DataParallelFlags) {
  const TrainConfig c = parse(with(base_args(), {"--use-distributed-optimizer", "--ddp-bucket-size", "1000"}), 2);
  EXPECT_TRUE(c.use_distributed_optimizer);
  EXPECT_EQ(c.ddp_bucket_size, 1000);
  EXPECT_EQ(c.data_parallel_size, 2);
  EXPECT_ERROR_NAMES(with(base_args(), {"--ddp-bucket-size", "0"}), "--ddp-bucket-size]");
  // --ddp-num-buckets N: this rank's parameters / N elements per bucket (Megatron's integer
  // division), never together with --ddp-bucket-size.
  const TrainConfig n = parse(with(base_args(), {"--ddp-num-buckets", "3", "--overlap-grad-reduce"}), 2);
  EXPECT_EQ(n.ddp_num_buckets, 3);
  EXPECT_EQ(parallel::ddp_bucket_size(train::data_parallel_flags(n), 2, 1000), 333)
      << "not max(40M, 1M x DP): the count wins";
  EXPECT_EQ(parallel::ddp_bucket_size(train::data_parallel_flags(n), 2, 2), 1) << "at least one element";
  EXPECT_EQ(parallel::ddp_bucket_size(train::data_parallel_flags(c), 2, 1000), 1000);
  EXPECT_EQ(parallel::ddp_bucket_size(train::data_parallel_flags(parse(base_args(), 2)), 2, 1000), 0) << "one bucket";
  EXPECT_ERROR_NAMES(with(base_args(), {"--ddp-num-buckets", "0"}), "--ddp-num-buckets]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--ddp-num-buckets", "2", "--ddp-bucket-size", "10"}), "--ddp-num-buckets]");
}

TEST(TrainArgs, ParallelAndAsyncSaveFlags) {
  EXPECT_TRUE(parse(base_args()).ckpt_fully_parallel_save) << "Megatron's default";
  EXPECT_FALSE(parse(base_args()).async_save);
  EXPECT_FALSE(parse(with(base_args(), {"--no-ckpt-fully-parallel-save"})).ckpt_fully_parallel_save);
  EXPECT_TRUE(parse(with(base_args(), {"--async-save"})).async_save);
  EXPECT_TRUE(parse(with(base_args(), {"--ckpt-fully-parallel-save"})).ckpt_fully_parallel_save) << "a no-op";
  EXPECT_ERROR_NAMES(with(base_args(), {"--async-save", "--no-ckpt-fully-parallel-save"}), "--async-save]");
}

TEST(TrainArgs, CheckpointAndTensorBoardFlags) {
  const TrainConfig c = parse(with(
      base_args(), {"--save", "/tmp/ck", "--load", "/tmp/ck", "--save-interval", "10", "--save-keep-last", "3",
                    "--no-load-optim", "--no-save-optim", "--exit-signal-handler", "--no-load-rng", "--tensorboard-dir",
                    "/tmp/tb", "--log-validation-ppl-to-tensorboard", "--log-jsonl", "/tmp/m.jsonl"}));
  EXPECT_EQ(c.save, "/tmp/ck");
  EXPECT_EQ(c.load, "/tmp/ck");
  EXPECT_EQ(c.save_interval, 10);
  EXPECT_EQ(c.save_keep_last, 3);
  EXPECT_FALSE(c.exit_samples.has_value());
  // A schedule (every 10 up to 100, every 18 up to 1000, then every 1500) and --exit-samples.
  const TrainConfig s = parse(
      with(base_args(), {"--save", "/tmp/ck", "--save-interval", "10:100,18:1000,1500", "--exit-samples", "4096"}));
  ASSERT_TRUE(s.save_interval.has_value());
  EXPECT_EQ(s.save_interval->to_string(), "10:100,18:1000,1500");
  EXPECT_TRUE(s.save_interval->due(90) && s.save_interval->due(108) && s.save_interval->due(3000));
  EXPECT_FALSE(s.save_interval->due(110) || s.save_interval->due(1008));
  EXPECT_EQ(s.exit_samples, 4096);
  EXPECT_EQ(error_of(with(base_args(), {"--save-interval", "10:100,50:80,7"})),
            "[--save-interval] '10:100,50:80,7': the last iterations must increase, got 100 then 80");
  EXPECT_ERROR_NAMES(with(base_args(), {"--save-interval", "0"}), "--save-interval]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--exit-samples", "0"}), "--exit-samples]");
  EXPECT_TRUE(c.no_load_optim && c.no_save_optim && c.exit_signal_handler && c.log_validation_ppl_to_tensorboard);
  EXPECT_FALSE(c.finetune);
  EXPECT_EQ(c.tensorboard_dir, "/tmp/tb");
  EXPECT_EQ(c.log_jsonl, "/tmp/m.jsonl");
  EXPECT_TRUE(c.log_learning_rate_to_tensorboard);
  EXPECT_ERROR_NAMES(with(base_args(), {"--finetune"}), "--load]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--save-keep-last", "-1"}), "--save-keep-last]");
}

// Tensor parallelism: what must divide, as one line naming the flag, before anything starts.
TEST(TrainArgs, TensorParallelConfigErrors) {
  // base: 4 heads, hidden 64 (ffn 256), seq 32, micro-batch 2.
  const TrainConfig ok = parse(with(base_args(), {"--tensor-model-parallel-size", "2", "--sequence-parallel"}), 4);
  EXPECT_EQ(ok.tensor_model_parallel_size, 2);
  EXPECT_EQ(ok.data_parallel_size, 2);
  EXPECT_TRUE(ok.sequence_parallel);
  EXPECT_EQ(error_of(with(base_args(), {"--tensor-model-parallel-size", "8"}), 8),
            "[--num-attention-heads] 4 is not divisible by --tensor-model-parallel-size 8");
  EXPECT_EQ(error_of(with(base_args(), {"--tensor-model-parallel-size", "2", "--ffn-hidden-size", "129"}), 2),
            "[--ffn-hidden-size] 129 is not divisible by --tensor-model-parallel-size 2");
  // Megatron's validate_args: at TP 1 sequence parallelism is disabled with a warning.
  std::ostringstream log;
  const TrainConfig tp1 = parse(with(base_args(), {"--sequence-parallel"}), 2, &log);
  EXPECT_FALSE(tp1.sequence_parallel);
  EXPECT_NE(log.str().find("warning: Disabling sequence parallelism because tensor model parallelism is disabled\n"),
            std::string::npos)
      << log.str();
  EXPECT_EQ(error_of(with(without(base_args(), "--seq-length"),
                          {"--seq-length", "31", "--tensor-model-parallel-size", "2", "--sequence-parallel"}),
                     2),
            "[--seq-length] 31 is not divisible by --tensor-model-parallel-size 2 (--sequence-parallel splits the "
            "sequence)");
  EXPECT_EQ(error_of(with(base_args(), {"--tensor-model-parallel-size", "2"}), 6 - 1),
            "[--tensor-model-parallel-size/--pipeline-model-parallel-size] world size (5) is not divisible by tensor "
            "parallel size (2) times pipeline parallel size (1); the world size comes from the launcher (torchrun, "
            "mpirun, srun or --nproc-per-node N); to check this layout on one machine: --dry-run --world-size N");
  // The global batch is split over dp = world / tp: 8 ranks at TP 2 are DP 4.
  EXPECT_EQ(error_of(with(base_args(), {"--tensor-model-parallel-size", "2", "--global-batch-size", "4"}), 8),
            "[--global-batch-size] global batch size (4) is not divisible by micro batch size (2) times data "
            "parallel size (4)");
}

TEST(TrainArgs, AcceptedValuesOfLimitedFlags) {
  const TrainConfig c =
      parse(with(base_args(), {"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1",
                               "--data-impl", "mmap", "--tokenizer-type", "GPT2BPETokenizer", "--distributed-backend",
                               "nccl", "--DDP-impl", "local", "--timing-log-level", "0", "--optimizer", "adam"}));
  EXPECT_EQ(c.tensor_model_parallel_size, 1);
  EXPECT_EQ(c.pipeline_model_parallel_size, 1);
}

TEST(TrainArgs, NoOpFlagsAreAccepted) {
  const TrainConfig c =
      parse(with(base_args(), {"--use-flash-attn", "--no-masked-softmax-fusion", "--no-bias-dropout-fusion",
                               "--num-workers", "8", "--use-mcore-models", "--attention-softmax-in-fp32",
                               "--local_rank", "0", "--use-cpu-initialization", "--override-opt_param-scheduler"}));
  EXPECT_TRUE(c.use_cpu_initialization);
  EXPECT_TRUE(c.override_opt_param_scheduler);
}

TEST(TrainArgs, GeluChoice) {
  EXPECT_EQ(parse(with(base_args(), {"--no-bias-gelu-fusion"})).model.gelu, model::Gelu::kExact);
  EXPECT_EQ(parse(with(base_args(), {"--no-bias-gelu-fusion", "--openai-gelu"})).model.gelu, model::Gelu::kTanh);
}

TEST(TrainArgs, UnknownFlagIsAnError) {
  EXPECT_EQ(error_of(with(base_args(), {"--deepspeed"})), "[--deepspeed] unknown flag for megatron train (see --help)");
}

TEST(TrainArgs, DataFilesRequiredWithoutDryRun) {
  const Argv a = without(base_args(), "--dry-run", 0);
  EXPECT_ERROR_NAMES(a, "--data-path]");
  EXPECT_ERROR_NAMES(with(a, {"--data-path", "x_text_document"}), "--vocab-file]");
  EXPECT_ERROR_NAMES(with(a, {"--data-path", "x_text_document", "--vocab-file", "v.json"}), "--merge-file]");
  // --mock-data stands in for --data-path (the tokenizer is still needed: its EOD ends each
  // mock document), but not beside it.
  EXPECT_ERROR_NAMES(with(a, {"--mock-data"}), "--vocab-file]");
  const TrainConfig mock = parse(with(a, {"--mock-data", "--vocab-file", "v.json", "--merge-file", "m.txt"}));
  EXPECT_TRUE(mock.mock_data);
  EXPECT_TRUE(mock.data_path.empty());
  EXPECT_ERROR_NAMES(with(a, {"--mock-data", "--data-path", "x_text_document"}), "--mock-data]");
}

// --train-data-path / --valid-data-path / --test-data-path stand in for --data-path; training
// data is still required, and mock data excludes them.
TEST(TrainArgs, SeparateDataPathsPerSplit) {
  const Argv a = with(without(base_args(), "--dry-run", 0), {"--vocab-file", "v.json", "--merge-file", "m.txt"});
  const TrainConfig c = parse(with(a, {"--train-data-path", "0.3", "x_text_document", "0.7", "y_text_document",
                                       "--test-data-path", "z_text_document"}));
  EXPECT_TRUE(c.data_path.empty());
  EXPECT_EQ(c.split_data_path[0], (std::vector<std::string>{"0.3", "x_text_document", "0.7", "y_text_document"}));
  EXPECT_TRUE(c.split_data_path[1].empty());
  EXPECT_EQ(c.split_data_path[2], std::vector<std::string>{"z_text_document"});
  EXPECT_ERROR_NAMES(with(a, {"--valid-data-path", "v_text_document"}), "--train-data-path]");
  EXPECT_ERROR_NAMES(with(a, {"--test-data-path", "v_text_document"}), "--train-data-path]");
  EXPECT_ERROR_NAMES(with(a, {"--mock-data", "--valid-data-path", "v_text_document"}), "--mock-data]");
  EXPECT_ERROR_NAMES(with(a, {"--train-data-path"}), "--train-data-path]");
}

TEST(TrainArgs, TimingFlags) {
  const TrainConfig c = parse(
      with(base_args(), {"--timing-log-level", "2", "--timing-log-option", "max", "--no-barrier-with-level-1-timing"}));
  EXPECT_EQ(c.timing_log_level, 2);
  EXPECT_EQ(c.timing_log_option, "max");
  EXPECT_FALSE(c.barrier_with_l1_time);
  const TrainConfig d = parse(base_args());
  EXPECT_EQ(d.timing_log_level, 0);
  EXPECT_EQ(d.timing_log_option, "minmax");
  EXPECT_TRUE(d.barrier_with_l1_time);
  EXPECT_ERROR_NAMES(with(base_args(), {"--timing-log-level", "3"}), "--timing-log-level]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--timing-log-option", "median"}), "--timing-log-option]");
}

// Megatron's document flags set the model's inputs; with --no-create-attention-mask-in-dataloader
// (under which Megatron builds no mask at all) a warning says that here documents are still masked.
TEST(TrainArgs, DocumentFlags) {
  const TrainConfig c = parse(with(base_args(), {"--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss"}));
  EXPECT_TRUE(c.model.reset_position_ids);
  EXPECT_TRUE(c.model.reset_attention_mask);
  EXPECT_TRUE(c.eod_mask_loss);
  EXPECT_FALSE(c.calculate_per_token_loss);
  EXPECT_TRUE(parse(with(base_args(), {"--calculate-per-token-loss"})).calculate_per_token_loss);
  const TrainConfig d = parse(base_args());
  EXPECT_FALSE(d.model.reset_position_ids);
  EXPECT_FALSE(d.model.reset_attention_mask);
  std::ostringstream log;
  parse(with(base_args(), {"--reset-attention-mask", "--no-create-attention-mask-in-dataloader"}), 1, &log);
  EXPECT_NE(log.str().find("warning: --reset-attention-mask with --no-create-attention-mask-in-dataloader"),
            std::string::npos)
      << log.str();
  std::ostringstream quiet;
  parse(with(base_args(), {"--reset-position-ids", "--no-create-attention-mask-in-dataloader"}), 1, &quiet);
  EXPECT_EQ(quiet.str().find("warning"), std::string::npos) << quiet.str();
}

TEST(TrainArgs, StragglerFlags) {
  const TrainConfig c = parse(with(base_args(), {"--log-straggler", "--disable-straggler-on-startup",
                                                 "--straggler-ctrlr-port", "7000", "--straggler-minmax-count", "4"}));
  EXPECT_TRUE(c.log_straggler);
  EXPECT_TRUE(c.disable_straggler_on_startup);
  EXPECT_EQ(c.straggler_ctrlr_port, 7000);
  EXPECT_EQ(c.straggler_minmax_count, 4);
  const TrainConfig d = parse(base_args());  // Megatron's defaults
  EXPECT_FALSE(d.log_straggler);
  EXPECT_FALSE(d.disable_straggler_on_startup);
  EXPECT_EQ(d.straggler_ctrlr_port, 65535);
  EXPECT_EQ(d.straggler_minmax_count, 1);
  EXPECT_ERROR_NAMES(with(base_args(), {"--straggler-ctrlr-port", "70000"}), "--straggler-ctrlr-port]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--straggler-minmax-count", "0"}), "--straggler-minmax-count");
}

TEST(TrainArgs, ProfileFlags) {
  const TrainConfig d = parse(base_args());  // Megatron's defaults
  EXPECT_FALSE(d.profile);
  EXPECT_EQ(d.profile_step_start, 10);
  EXPECT_EQ(d.profile_step_end, 12);
  EXPECT_EQ(d.profile_ranks, (std::vector<int64_t>{0}));
  const TrainConfig c = parse(with(base_args(), {"--profile", "--profile-step-start", "3", "--profile-step-end", "5",
                                                 "--profile-ranks", "0", "7"}),
                              /*world_size=*/8);
  EXPECT_TRUE(c.profile);
  EXPECT_EQ(c.profile_step_start, 3);
  EXPECT_EQ(c.profile_step_end, 5);
  EXPECT_EQ(c.profile_ranks, (std::vector<int64_t>{0, 7}));
  EXPECT_ERROR_NAMES(with(base_args(), {"--profile", "--profile-step-start", "5", "--profile-step-end", "5"}),
                     "--profile-step-end]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--profile", "--profile-ranks", "-1"}), "--profile-ranks]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--profile", "--profile-ranks", "0", "1"}), "--profile-ranks]");  // world 1
  // Without --profile the window is not looked at (Megatron's behaviour).
  EXPECT_FALSE(parse(with(base_args(), {"--profile-step-start", "20"})).profile);
  EXPECT_ERROR_NAMES(with(base_args(), {"--gpu", "b200"}), "--gpu]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--use-pytorch-profiler"}), "--use-pytorch-profiler]");
}

TEST(TrainArgs, WeightHashCheckInterval) {
  EXPECT_FALSE(parse(base_args()).check_weight_hash_interval.has_value());
  EXPECT_EQ(
      parse(with(base_args(), {"--check-weight-hash-across-dp-replicas-interval", "100"})).check_weight_hash_interval,
      std::optional<int64_t>(100));
  EXPECT_ERROR_NAMES(with(base_args(), {"--check-weight-hash-across-dp-replicas-interval", "0"}),
                     "--check-weight-hash-across-dp-replicas-interval");
}

// Flags of current (Megatron-Core era) scripts: those that change nothing here are accepted,
// --norm-epsilon is --layernorm-epsilon's newer name, and what would change the numerics or the
// layout without being implemented is refused by name.
TEST(TrainArgs, CurrentMegatronScriptFlags) {
  const TrainConfig c = parse(
      with(base_args(), {"--manual-gc-interval", "10", "--no-manual-gc-eval", "--rerun-mode", "disabled",
                         "--ddp-average-in-collective", "--ckpt-fully-parallel-save", "--ckpt-fully-parallel-load",
                         "--num-dataset-builder-threads", "4", "--no-mmap-bin-files", "--te-rng-tracker",
                         "--no-one-logger", "--norm-epsilon", "1e-6", "--no-query-key-layer-scaling"}));
  EXPECT_EQ(c.model.layernorm_epsilon, 1e-6f);
  EXPECT_ERROR_NAMES(with(base_args(), {"--norm-epsilon", "1e-6", "--layernorm-epsilon", "1e-5"}), "--norm-epsilon]");
  for (const auto& [flags, name] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--rerun-mode", "validate_results"}, "[--rerun-mode] validate_results is not supported yet ("},
           {{"--tp-comm-overlap"}, "[--tp-comm-overlap] is not supported yet ("}}) {
    Argv a = base_args();
    a.insert(a.end(), flags.begin(), flags.end());
    EXPECT_EQ(error_of(a).rfind(name, 0), 0u) << error_of(a);
  }
}

// --data-args-path and --per-split-data-args-path: the data paths from a file (Megatron:
// open().read().split(); a JSON object of per-split lists or strings).
TEST(TrainArgs, DataArgsFromFiles) {
  const std::string dir = test::scratch_dir("train_args_data_files");
  const Argv a = with(without(base_args(), "--dry-run", 0), {"--vocab-file", "v.json", "--merge-file", "m.txt"});
  std::ofstream(dir + "/blend.txt") << "0.3 x_text_document\n  0.7   y_text_document\n";
  const TrainConfig c = parse(with(a, {"--data-args-path", dir + "/blend.txt"}));
  EXPECT_EQ(c.data_path, (std::vector<std::string>{"0.3", "x_text_document", "0.7", "y_text_document"}));
  EXPECT_ERROR_NAMES(with(a, {"--data-args-path", dir + "/blend.txt", "--data-path", "z"}), "--data-args-path]");
  EXPECT_ERROR_NAMES(with(a, {"--data-args-path", dir + "/missing.txt"}), "--data-args-path]");

  std::ofstream(dir + "/splits.json")
      << R"({"train": ["1", "x_text_document"], "valid": "0.5 v1 0.5 v2", "test": null})";
  const TrainConfig p = parse(with(a, {"--per-split-data-args-path", dir + "/splits.json"}));
  EXPECT_TRUE(p.data_path.empty());
  EXPECT_EQ(p.split_data_path[0], (std::vector<std::string>{"1", "x_text_document"}));
  EXPECT_EQ(p.split_data_path[1], (std::vector<std::string>{"0.5", "v1", "0.5", "v2"}));
  EXPECT_TRUE(p.split_data_path[2].empty());
  std::ofstream(dir + "/no_test.json") << R"({"train": ["x"], "valid": null})";
  EXPECT_ERROR_NAMES(with(a, {"--per-split-data-args-path", dir + "/no_test.json"}), "--per-split-data-args-path]");
  std::ofstream(dir + "/bad.json") << R"({"train": 3, "valid": null, "test": null})";
  EXPECT_ERROR_NAMES(with(a, {"--per-split-data-args-path", dir + "/bad.json"}), "--per-split-data-args-path]");
  EXPECT_ERROR_NAMES(with(a, {"--per-split-data-args-path", dir + "/splits.json", "--train-data-path", "y"}),
                     "--per-split-data-args-path]");
}

TEST(TrainArgs, NullTokenizerNeedsVocabSizeAndNoVocabFiles) {
  const Argv a = with(without(base_args(), "--dry-run", 0), {"--mock-data", "--tokenizer-type", "NullTokenizer"});
  EXPECT_ERROR_NAMES(a, "--vocab-size]");
  EXPECT_ERROR_NAMES(with(a, {"--vocab-size", "0"}), "--vocab-size]");
  const TrainConfig c = parse(with(a, {"--vocab-size", "32000"}));
  EXPECT_EQ(c.tokenizer_type, "NullTokenizer");
  EXPECT_EQ(c.null_vocab_size, 32000);
  EXPECT_FALSE(c.vocab_file.has_value());
  // GPT2BPETokenizer's vocabulary comes from its files.
  EXPECT_ERROR_NAMES(with(base_args(), {"--vocab-size", "32000"}), "--vocab-size]");
}

// The tokenizer flags of Megatron's Llama 2 recipe and of examples/llama/train_llama3_8b_h100_fp8.sh
// (real data and mock data) parse unchanged; the options reach the tokenizer.
TEST(TrainArgs, TokenizerFlagsOfTheLlamaExamples) {
  const Argv data = with(without(base_args(), "--dry-run", 0), {"--data-path", "corpus_text_document"});
  TrainConfig c = parse(with(data, {"--tokenizer-type", "Llama2Tokenizer", "--tokenizer-model", "tokenizer.model"}));
  EXPECT_EQ(c.tokenizer_type, "Llama2Tokenizer");
  EXPECT_EQ(c.tokenizer_model, "tokenizer.model");
  c = parse(with(data, {"--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "meta-llama/Meta-Llama-3-8B",
                        "--split", "99,1,0", "--vocab-size", "128256"}));
  EXPECT_EQ(tokenizer_options(c).tokenizer_model, "meta-llama/Meta-Llama-3-8B");
  EXPECT_EQ(tokenizer_options(c).vocab_size, 128256);
  c = parse(with(without(base_args(), "--dry-run", 0), {"--mock-data", "--tokenizer-type", "NullTokenizer",
                                                        "--vocab-size", "128256", "--tiktoken-pattern", "v2"}));
  EXPECT_EQ(c.null_vocab_size, 128256);
  c = parse(with(data, {"--tokenizer-type", "TikTokenizer", "--tokenizer-model", "v.json", "--tiktoken-pattern", "v1",
                        "--tiktoken-num-special-tokens", "100", "--vocab-size", "30000"}));
  EXPECT_EQ(tokenizer_options(c).tiktoken_pattern, "v1");
  EXPECT_EQ(tokenizer_options(c).tiktoken_num_special_tokens, 100);
  EXPECT_EQ(tokenizer_options(c).vocab_size, 30000);
  // Without the files (and without --dry-run) each missing flag is named, all at once.
  EXPECT_EQ(error_of(with(data, {"--tokenizer-type", "Llama2Tokenizer", "--vocab-file", "v.json"})),
            "[--tokenizer-model] is required by --tokenizer-type Llama2Tokenizer (unless --dry-run); [--vocab-file] is "
            "not used by --tokenizer-type Llama2Tokenizer");
  EXPECT_ERROR_NAMES(
      with(data, {"--tokenizer-type", "TikTokenizer", "--tokenizer-model", "v.json", "--tiktoken-pattern", "v3"}),
      "--tiktoken-pattern]");
  EXPECT_ERROR_NAMES(with(base_args(), {"--tokenizer-special-tokens", "<a>"}), "--tokenizer-special-tokens]");
}

TEST(TrainArgs, MegatronJobScriptParses) {
  // The flags of Megatron's examples/pretrain_gpt_distributed_with_mp.sh with TP/PP 1, no
  // checkpointing and --recompute-activations for the removed --checkpoint-activations.
  const Argv a = {"--tensor-model-parallel-size",
                  "1",
                  "--pipeline-model-parallel-size",
                  "1",
                  "--num-layers",
                  "24",
                  "--hidden-size",
                  "1024",
                  "--num-attention-heads",
                  "16",
                  "--micro-batch-size",
                  "4",
                  "--global-batch-size",
                  "16",
                  "--seq-length",
                  "1024",
                  "--max-position-embeddings",
                  "1024",
                  "--train-iters",
                  "500000",
                  "--lr-decay-iters",
                  "320000",
                  "--data-path",
                  "my-gpt2_text_document",
                  "--vocab-file",
                  "gpt2-vocab.json",
                  "--merge-file",
                  "gpt2-merges.txt",
                  "--data-impl",
                  "mmap",
                  "--split",
                  "949,50,1",
                  "--distributed-backend",
                  "nccl",
                  "--lr",
                  "0.00015",
                  "--lr-decay-style",
                  "cosine",
                  "--min-lr",
                  "1.0e-5",
                  "--weight-decay",
                  "1e-2",
                  "--clip-grad",
                  "1.0",
                  "--lr-warmup-fraction",
                  ".01",
                  "--recompute-activations",
                  "--log-interval",
                  "100",
                  "--save-interval",
                  "10000",
                  "--eval-interval",
                  "1000",
                  "--eval-iters",
                  "10",
                  "--fp16"};
  const TrainConfig c = parse(a);
  EXPECT_EQ(c.model.num_layers, 24);
  EXPECT_EQ(c.global_batch_size, 16);
  EXPECT_EQ(c.num_microbatches(), 4);
  EXPECT_EQ(c.lr_decay_iters, 320000);
  EXPECT_EQ(c.split, "949,50,1");
  EXPECT_EQ(c.data_path, (std::vector<std::string>{"my-gpt2_text_document"}));
  EXPECT_EQ(c.save_interval, 10000);
  EXPECT_EQ(c.eval_iters, 10);
  EXPECT_TRUE(c.fp16);
  EXPECT_FALSE(c.dry_run);
}

// Numbers no flag means (nan, inf) and values past a flag's range are one line naming the flag
// given and the value, never a message about another flag, a wrapped number or an accepted NaN.
TEST(TrainArgs, OutOfRangeNumbersNameTheFlagAndValue) {
  const std::string p62 = "4611686018427387904";  // 2^62
  struct Case {
    Argv extra;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--lr", "inf"}, "[--lr] expected a finite number, got 'inf'"},
      {{"--lr", "1e300"}, "[--lr] must be in [0, 3.40282e+38], got '1e300'"},
      {{"--min-lr", "nan"}, "[--min-lr] expected a finite number, got 'nan'"},
      {{"--min-lr", "-1e-5"}, "[--min-lr] must be in [0, 3.40282e+38], got '-1e-5'"},
      {{"--weight-decay", "inf"}, "[--weight-decay] expected a finite number, got 'inf'"},
      {{"--layernorm-epsilon", "0"}, "[--layernorm-epsilon] must be in (0, 3.40282e+38], got '0'"},
      {{"--layernorm-epsilon", "inf"}, "[--layernorm-epsilon] expected a finite number, got 'inf'"},
      {{"--layernorm-epsilon", "1e-50"}, "[--layernorm-epsilon] 1e-50 is 0 in fp32 (expected (0, 3.40282e+38])"},
      {{"--adam-beta2", "0.999999999"}, "[--adam-beta2] 0.999999999 is 1 in fp32 (expected [0, 1))"},
      {{"--attention-dropout", "nan"}, "[--attention-dropout] expected a finite number, got 'nan'"},
      {{"--distributed-timeout-minutes", "inf"}, "[--distributed-timeout-minutes] expected a finite number, got 'inf'"},
      {{"--distributed-timeout-minutes", "1e300"},
       "[--distributed-timeout-minutes] must be in (0, 5.2704e+06], got '1e300'"},
      {{"--hidden-size", p62}, "[--hidden-size] must be between 1 and 2147483647, got " + p62},
      {{"--num-layers", p62}, "[--num-layers] must be between 1 and 2147483647, got " + p62},
      {{"--make-vocab-size-divisible-by", "9223372036854775807"},
       "[--make-vocab-size-divisible-by] must be between 1 and 2147483647, got 9223372036854775807"},
      {{"--micro-batch-size", "2147483648"}, "[--micro-batch-size] must be between 1 and 2147483647, got 2147483648"},
      {{"--swiglu", "--hidden-size", "16", "--num-attention-heads", "4"},
       "[--hidden-size] 16 is too small for --swiglu's default --ffn-hidden-size (int(8h/3/64)*64 = 0): give "
       "--ffn-hidden-size"},
      {{"--global-batch-size", p62},
       "[--global-batch-size] " + p62 +
           " samples per iteration make 2305843009213693952 micro-batches per "
           "data-parallel rank (--micro-batch-size 2, data-parallel size 1); at most 1048576 are supported"},
      {{"--train-iters", p62, "--global-batch-size", "8"},
       "[--train-iters] the training samples (--train-iters x --global-batch-size): " + p62 +
           " x 8 does not fit in "
           "64 bits"},
      {{"--eval-iters", p62, "--eval-interval", "1"},
       "[--eval-iters] the validation iterations ((train iterations / --eval-interval + 1) x --eval-iters): 11 x " +
           p62 + " does not fit in 64 bits"},
      {{"--lr-decay-iters", p62},
       "[--lr-decay-iters] the decay samples (x --global-batch-size): " + p62 + " x 2 does not fit in 64 bits"},
      {{"--tensor-model-parallel-size", "-1"},
       "[--tensor-model-parallel-size] must be between 1 and 2147483647, got -1"},
      {{"--eval-iters", "-1"}, "[--eval-iters] must not be negative, got -1"},
      // Megatron asserts warmup steps < decay steps: a whole decay of warmup never passes.
      {{"--lr-warmup-fraction", "1"}, "[--lr-warmup-fraction] must be in [0, 1), got '1'"},
      {{"--log-interval", "0"}, "[--log-interval] must be positive, got 0"},
  };
  for (const Case& c : cases) EXPECT_EQ(error_of(with(base_args(), c.extra)), c.message);
  const Argv null_tokenizer = {"--tokenizer-type", "NullTokenizer", "--vocab-size", "2147483648"};
  EXPECT_EQ(error_of(with(base_args(), null_tokenizer)),
            "[--vocab-size] must be between 1 and 2147483647, got 2147483648");  // ids 0..N-1 are int32
}

// Unusual values Megatron accepts stay accepted: zeros that switch a feature off, the largest
// seed, tiny learning rates, huge intervals, the largest dimensions.
TEST(TrainArgs, UnusualValidValuesStayAccepted) {
  const TrainConfig c = parse(with(base_args(), {"--seed",
                                                 "0",
                                                 "--clip-grad",
                                                 "0",
                                                 "--min-lr",
                                                 "0",
                                                 "--lr",
                                                 "0",
                                                 "--attention-dropout",
                                                 "0",
                                                 "--hidden-dropout",
                                                 "0",
                                                 "--weight-decay",
                                                 "0",
                                                 "--eval-iters",
                                                 "0",
                                                 "--lr-warmup-init",
                                                 "0",
                                                 "--exit-duration-in-mins",
                                                 "1",
                                                 "--save-interval",
                                                 "9223372036854775807",
                                                 "--log-interval",
                                                 "9223372036854775807",
                                                 "--distributed-timeout-minutes",
                                                 "0.001"}));
  EXPECT_EQ(c.clip_grad, 0.0);
  EXPECT_EQ(c.seed, 0);
  EXPECT_EQ(parse(with(base_args(), {"--seed", "4294967295"})).seed, 4294967295);
  // numpy.random.RandomState(seed), which shuffles the datasets, takes [0, 2^32 - 1] only.
  EXPECT_EQ(error_of(with(base_args(), {"--seed", "-5"})),
            "[--seed] seed must be in [0, 4294967295] (numpy.random.RandomState), got -5");
  EXPECT_EQ(parse(with(base_args(), {"--lr", "1e-400"})).lr, 0.0);                 // Python's float(): 0.0
  EXPECT_EQ(parse(with(base_args(), {"--clip-grad", "1e300"})).clip_grad, 1e300);  // a double: no clipping
  EXPECT_EQ(parse(with(base_args(), {"--num-layers", "2147483646"})).model.num_layers, 2147483646);
  EXPECT_EQ(parse(with(base_args(), {"--distributed-timeout-minutes", "5270400"})).distributed_timeout_minutes,
            5270400);
}

TEST(TrainArgs, WorldSizeSetsDataParallelSize) {
  EXPECT_EQ(parse(base_args(), 3).data_parallel_size, 3);
  EXPECT_EQ(parse(base_args(), 3).global_batch_size, 6);
}

// --help names --rampup-batch-size's three values as Megatron's help describes them.
TEST(TrainArgs, HelpNamesTheRampUpValues) {
  Args a("train");
  declare_train_flags(a);
  EXPECT_NE(a.usage().find("\n  --rampup-batch-size START INCR SAMPLES the global batch from START, growing by INCR"),
            std::string::npos)
      << a.usage();
}

}  // namespace
}  // namespace megatron::cli
