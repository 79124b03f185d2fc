// Everything `megatron train` needs to know before it builds a model: the flags of Megatron-LM's
// pretrain_gpt.py, parsed and validated by cli/train_args.h.
//
// Defaults are classic Megatron's (C23 megatron/arguments.py; docs/megatron-formats.md §3.1). Where
// Megatron's default is None the field is std::optional and stays empty. Derived values
// (ffn = 4h, kv_channels = h / heads, global batch = mbs * dp, data-parallel size) are filled
// by parse_train_config(), so a TrainConfig that comes back from it is complete.
// The tokenizer's vocabulary size is not known here: the caller loads the tokenizer, sets
// model.vocab_size and calls model::padded_vocab_size() (model/vocab_padding.h) for model.padded_vocab_size.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "model/gpt_config.h"
#include "model/memory_plan.h"
#include "model/vocab_padding.h"
#include "optim/lr_scheduler.h"
#include "train/microbatches.h"
#include "train/save_schedule.h"

namespace megatron::train {

// The schedule enums (LrDecayStyle, WsdDecayStyle, WdIncrStyle) come from optim/lr_scheduler.h.
using WeightDecayIncrStyle = optim::WdIncrStyle;
enum class RecomputeGranularity { kNone, kFull, kSelective };
enum class RecomputeMethod { kNone, kUniform, kBlock };

// Which upstream FLOPs formula the TFLOP/s figure uses (train/flops.h,
// docs/megatron-formats.md §5).
//  k2025: HEAD and Megatron since 2025-03: causal core attention counted half.
//  k2024: Megatron 2024-04 .. 2025-03 (equal to the 2023-11 formula for GPT-2-style MHA).
enum class FlopsConvention { k2025, k2024 };

// --rampup-batch-size <start> <increment> <ramp samples> (docs/megatron-formats.md §3.3).
struct RampupBatchSizeFlags {
  int64_t start = 0;
  int64_t increment = 0;
  int64_t ramp_samples = 0;
};

struct TrainConfig {
  // Model shape (--num-layers ... or a --model preset); vocab sizes filled by the caller.
  model::GPTConfig model;
  std::string model_preset;  // --model, empty when not given
  // The --model preset's vocabulary where it has one (Llama's), used without tokenizer files.
  std::optional<int64_t> preset_vocab_size;

  // Data.
  std::vector<std::string> data_path;  // --data-path (prefix, or weight/prefix pairs)
  // --train-data-path, --valid-data-path, --test-data-path: each split from its own prefix or
  // blend (used when data_path is empty; see data::GPTDataConfig::split_data_path).
  std::array<std::vector<std::string>, 3> split_data_path;
  bool mock_data = false;                           // --mock-data (Megatron-Core's mock sequences instead)
  int64_t eod_token = 50256;                        // the tokenizer's end of document (set with the vocabulary)
  bool eod_mask_loss = false;                       // --eod-mask-loss
  bool calculate_per_token_loss = false;            // --calculate-per-token-loss
  std::string split = "969, 30, 1";                 // --split
  std::optional<std::string> vocab_file;            // --vocab-file
  bool classic_split = false;                       // --classic-split (older Megatron-LM's split ranges)
  std::optional<std::string> merge_file;            // --merge-file
  std::string tokenizer_type = "GPT2BPETokenizer";  // --tokenizer-type (data/tokenizer/tokenizer.h, or NullTokenizer)
  std::optional<int64_t> null_vocab_size;           // --vocab-size, NullTokenizer's vocabulary N (EOD N - 1)
  std::optional<std::string> tokenizer_model;       // --tokenizer-model
  std::optional<int64_t> tokenizer_vocab_size;      // --vocab-size of the other types (TikTokenizer's vocabulary)
  std::optional<std::string> tiktoken_pattern;      // --tiktoken-pattern
  int64_t tiktoken_num_special_tokens = 1000;       // --tiktoken-num-special-tokens
  std::optional<std::string> data_cache_path;       // --data-cache-path
  int64_t seed = 1234;                              // --seed

  // Batch.
  int64_t micro_batch_size = 0;                           // --micro-batch-size (required)
  int64_t global_batch_size = 0;                          // --global-batch-size (default mbs * dp)
  std::optional<RampupBatchSizeFlags> rampup_batch_size;  // --rampup-batch-size
  // --step-batch-size-schedule (train/microbatches.h); global_batch_size is then mbs * dp, as
  // Megatron's, for what reads it (evaluation, the valid and test sample counts).
  std::optional<StepBatchSizeSchedule> step_batch_size_schedule;

  // Length of training: exactly one of the two.
  std::optional<int64_t> train_iters;    // --train-iters
  std::optional<int64_t> train_samples;  // --train-samples

  // Learning rate (optimizer_param_scheduler.py).
  double lr = 0.0;      // --lr (required; Megatron's default None fails later)
  double min_lr = 0.0;  // --min-lr
  // The embedding and output layer's own max and min (Megatron-Core's decoupled_lr; the
  // parameters model::Parameter::embedding_or_output marks); the min defaults to --min-lr.
  std::optional<double> decoupled_lr;      // --decoupled-lr
  std::optional<double> decoupled_min_lr;  // --decoupled-min-lr (read only with --decoupled-lr)
  // --apply-wd-to-qk-layernorm (or the deprecated --no-weight-decay-cond-type
  // apply_wd_to_qk_layernorm): the q_layernorm and k_layernorm parameters get weight decay
  // (Megatron-Core's Qwen3-Next group rule; model::ParameterSet::apply_weight_decay_to_qk_layernorm).
  bool apply_wd_to_qk_layernorm = false;
  optim::LrDecayStyle lr_decay_style = optim::LrDecayStyle::kLinear;  // --lr-decay-style
  std::optional<int64_t> lr_decay_iters;                              // --lr-decay-iters (None: train_iters)
  std::optional<int64_t> lr_decay_samples;                            // --lr-decay-samples (None: train_samples)
  int64_t lr_warmup_iters = 0;                                        // --lr-warmup-iters
  int64_t lr_warmup_samples = 0;                                      // --lr-warmup-samples
  std::optional<double> lr_warmup_fraction;                           // --lr-warmup-fraction (of the decay steps)
  double lr_warmup_init = 0.0;                                        // --lr-warmup-init
  optim::WsdDecayStyle lr_wsd_decay_style = optim::WsdDecayStyle::kExponential;  // --lr-wsd-decay-style
  std::optional<int64_t> lr_wsd_decay_iters;                                     // --lr-wsd-decay-iters
  std::optional<int64_t> lr_wsd_decay_samples;                                   // --lr-wsd-decay-samples
  bool override_opt_param_scheduler = false;                                     // --override-opt_param-scheduler
  bool use_checkpoint_opt_param_scheduler = false;                               // --use-checkpoint-opt_param-scheduler

  // Weight decay (start == end == weight_decay with the constant style).
  double weight_decay = 0.01;                // --weight-decay
  std::optional<double> start_weight_decay;  // --start-weight-decay
  std::optional<double> end_weight_decay;    // --end-weight-decay
  WeightDecayIncrStyle weight_decay_incr_style = WeightDecayIncrStyle::kConstant;

  // Adam(W) and clipping.
  double adam_beta1 = 0.9;    // --adam-beta1
  double adam_beta2 = 0.999;  // --adam-beta2
  double adam_eps = 1e-8;     // --adam-eps
  double clip_grad = 1.0;     // --clip-grad (0 disables clipping)

  // Precision and loss scaling (fp32 when neither fp16 nor bf16).
  bool fp16 = false;                         // --fp16
  bool bf16 = false;                         // --bf16
  std::optional<double> loss_scale;          // --loss-scale: constant scaler; None: dynamic (fp16)
  double initial_loss_scale = 4294967296.0;  // --initial-loss-scale (2**32)
  double min_loss_scale = 1.0;               // --min-loss-scale
  int64_t loss_scale_window = 1000;          // --loss-scale-window
  int64_t hysteresis = 2;                    // --hysteresis
  // The gradient buffer's dtype (parallel/grad_buffer.h, "Gradient dtype"): fp32 when set, else
  // the model dtype. Megatron's validate_args sets it with --bf16 unless --grad-reduce-in-bf16.
  bool accumulate_allreduce_grads_in_fp32 = false;  // --accumulate-allreduce-grads-in-fp32
  bool grad_reduce_in_bf16 = false;                 // --grad-reduce-in-bf16

  // Logging and evaluation.
  int64_t log_interval = 100;    // --log-interval
  int64_t eval_interval = 1000;  // --eval-interval (C23 default; HEAD has None)
  int64_t eval_iters = 100;      // --eval-iters
  bool log_throughput = false;   // --log-throughput
  bool log_params_norm = false;  // --log-params-norm
  bool log_progress = false;     // --log-progress: <--save>/progress.txt (obs/progress_log.h)
  // --profile: the CUDA profiler captures iterations profile_step_start + 1 .. profile_step_end
  // on these ranks (backend/profiler_marks.h).
  bool profile = false;
  int64_t profile_step_start = 10;
  int64_t profile_step_end = 12;
  std::vector<int64_t> profile_ranks = {0};
  bool log_num_zeros_in_grad = false;                         // --log-num-zeros-in-grad
  bool check_for_nan_in_loss_and_grad = true;                 // false: --no-check-for-nan-in-loss-and-grad
  FlopsConvention flops_convention = FlopsConvention::k2025;  // --flops-convention (ours)
  int64_t timing_log_level = 0;                               // --timing-log-level: 0, 1 or 2 (obs/timers.h)
  std::string timing_log_option = "minmax";                   // --timing-log-option: minmax, max or all
  bool barrier_with_l1_time = true;                           // false: --no-barrier-with-level-1-timing
  // --log-straggler and its options (obs/straggler_detector.h).
  bool log_straggler = false;                 // --log-straggler
  bool disable_straggler_on_startup = false;  // --disable-straggler-on-startup
  int64_t straggler_ctrlr_port = 65535;       // --straggler-ctrlr-port
  int64_t straggler_minmax_count = 1;         // --straggler-minmax-count
  // --log-energy and --codecarbon-dir (obs/energy_monitor.h): the GPUs' energy in the log line
  // and TensorBoard, and in <codecarbon_dir>/emissions.csv with CO2 at the given grid intensity.
  bool log_energy = false;
  std::optional<std::string> codecarbon_dir;
  std::optional<double> carbon_intensity_g_per_kwh;  // --carbon-intensity-g-per-kwh (ours)
  // --check-weight-hash-across-dp-replicas-interval (obs/weight_hash.h): unset, no check.
  std::optional<int64_t> check_weight_hash_interval;

  // Exit.
  std::optional<int64_t> exit_interval;  // --exit-interval
  // --exit-samples N (ours): save and exit after the first iteration that brings the consumed
  // training samples to N or more, as --exit-interval does with iterations.
  std::optional<int64_t> exit_samples;
  std::optional<int64_t> exit_duration_in_mins;  // --exit-duration-in-mins
  bool dry_run = false;                          // --dry-run (ours): print the plan and exit
  // megatron plan's time per iteration for this layout (cli/train_prediction.h), set by
  // `megatron train` before the run; 0: none. The run prints the measured time against it.
  double predicted_iteration_ms = 0.0;

  // Checkpoints (ckpt/checkpoint.h).
  std::optional<SaveSchedule> save_interval;  // --save-interval (N, or a schedule N1:U1,...,N)
  std::optional<std::string> save;            // --save
  std::optional<std::string> load;            // --load
  int64_t save_keep_last = 0;                 // --save-keep-last (ours; 0 keeps all)
  bool no_save_optim = false;                 // --no-save-optim
  // Every rank writes the tensors it holds straight into the checkpoint's files (Megatron's
  // default fully parallel save); false (--no-ckpt-fully-parallel-save): rank 0 writes them all.
  bool ckpt_fully_parallel_save = true;
  // --async-save: the parallel save's writes go on in the background while training continues.
  bool async_save = false;
  bool no_load_optim = false;               // --no-load-optim
  bool finetune = false;                    // --finetune
  bool exit_on_missing_checkpoint = false;  // --exit-on-missing-checkpoint
  std::optional<int64_t> ckpt_step;         // --ckpt-step: the iteration --load reads (else the latest)
  bool skip_train = false;                  // --skip-train: evaluate only
  bool exit_signal_handler = false;         // --exit-signal-handler
  // TensorBoard and the JSONL metrics log.
  std::optional<std::string> tensorboard_dir;      // --tensorboard-dir
  int64_t tensorboard_queue_size = 1000;           // --tensorboard-queue-size
  int64_t tensorboard_log_interval = 1;            // --tensorboard-log-interval
  bool log_batch_size_to_tensorboard = false;      // --log-batch-size-to-tensorboard
  bool log_memory_to_tensorboard = false;          // --log-memory-to-tensorboard
  bool log_world_size_to_tensorboard = false;      // --log-world-size-to-tensorboard
  bool log_timers_to_tensorboard = false;          // --log-timers-to-tensorboard
  bool log_validation_ppl_to_tensorboard = false;  // --log-validation-ppl-to-tensorboard
  bool log_learning_rate_to_tensorboard = true;    // --no-log-learning-rate-to-tensorboard turns off
  bool log_loss_scale_to_tensorboard = true;       // --no-log-loss-scale-to-tensorboard turns off
  std::optional<std::string> log_jsonl;            // --log-jsonl (ours)

  // Parallelism. dp = world_size / (tp * pp).
  int64_t world_size = 1;
  int64_t tensor_model_parallel_size = 1;                        // --tensor-model-parallel-size
  int64_t pipeline_model_parallel_size = 1;                      // --pipeline-model-parallel-size
  std::optional<int64_t> num_layers_per_virtual_pipeline_stage;  // --num-layers-per-virtual-pipeline-stage
  // vp: model chunks per pipeline stage (1 without interleaving).
  int64_t virtual_pipeline_chunks() const {
    return num_layers_per_virtual_pipeline_stage
               ? model.num_layers / pipeline_model_parallel_size / *num_layers_per_virtual_pipeline_stage
               : 1;
  }
  int64_t data_parallel_size = 1;
  bool sequence_parallel = false;          // --sequence-parallel (turned off at TP 1, as Megatron)
  bool use_distributed_optimizer = false;  // --use-distributed-optimizer
  std::optional<int64_t> ddp_bucket_size;  // --ddp-bucket-size (elements; None: the default below)
  std::optional<int64_t> ddp_num_buckets;  // --ddp-num-buckets (bucket size: this rank's parameters / N)
  bool overlap_grad_reduce = false;        // --overlap-grad-reduce
  bool overlap_param_gather = false;       // --overlap-param-gather (needs the two above)
  // Pipeline exchanges started, waited for late: on unless --no-overlap-p2p-communication, with
  // the interleaved schedule only (Megatron HEAD).
  bool overlap_p2p_communication = false;
  // The collectives run on NCCL (CUDA ranks without --distributed-backend mpi / gloo): set by
  // the command that connects the ranks; the copy engines need it.
  bool nccl_collectives = false;
  double distributed_timeout_minutes = 10;  // --distributed-timeout-minutes (fractions allowed)
  bool use_cpu_initialization = false;      // --use-cpu-initialization (TP-invariant init)

  // Activation recomputation (docs/megatron-formats.md §11).
  RecomputeGranularity recompute_granularity = RecomputeGranularity::kNone;
  RecomputeMethod recompute_method = RecomputeMethod::kNone;
  std::optional<int64_t> recompute_num_layers;

  int64_t make_vocab_size_divisible_by = 128;  // --make-vocab-size-divisible-by

  // Derived.
  bool sample_based() const { return train_samples.has_value(); }
  // Micro-batches per iteration at the full global batch, gbs / (mbs * dp): the calculator's
  // (microbatch_calculator() below; throws as it does on batch flags that do not divide).
  int64_t num_microbatches() const;
  // Megatron's train_iters: --train-iters, or in sample mode train_samples // gbs, counting the
  // ramp-up iterations one by one when --rampup-batch-size is given (C23 update_train_iters).
  int64_t total_train_iters() const;
  // The global batch at `consumed_samples` (the ramp-up rule of §3.3; gbs without ramp-up).
  int64_t global_batch_size_at(int64_t consumed_samples) const;
  // The calculator of train/microbatches.h for these batch flags (the one source of those rules).
  NumMicroBatchesCalculator microbatch_calculator() const;
};

// Names as Megatron's flags spell them ("cosine", "inverse-square-root", "WSD", ...).
// The per-rank memory plan of this configuration (model/memory_plan.h): the tensor-parallel
// rank's shards and activations (with --sequence-parallel, its sequence rows) on pipeline
// stage `stage` (its layers, and one activation set per micro-batch its schedule holds in
// flight at the final global batch size), the optimizer state divided over data-parallel
// ranks under --use-distributed-optimizer.
model::MemoryPlan train_memory_plan(const TrainConfig& config, int64_t stage = 0);
// The parameters' dtype: bf16 with --bf16, fp16 with --fp16, else fp32.
DType model_dtype(const TrainConfig& config);
// The gradient buffer's dtype (parallel/grad_buffer.h, "Gradient dtype"): fp32 with
// --accumulate-allreduce-grads-in-fp32 (cli/train_args.cpp sets it for --bf16 unless
// --grad-reduce-in-bf16), else the model dtype.
DType grad_dtype(const TrainConfig& config);
// What GPTModel needs to build stage `stage` (layers, chunks, activation sets).
model::PipelineStageOptions pipeline_stage(const TrainConfig& config, int64_t stage);

const char* to_string(RecomputeGranularity s);
const char* to_string(RecomputeMethod s);
const char* to_string(FlopsConvention c);

}  // namespace megatron::train
