// The flags `megatron train` reads (declare_supported_flags) and the presets of --model; the
// no-op and unsupported flags are in cli/train_flag_table.cpp.
#include <string>
#include <vector>

#include "cli/train_args.h"
#include "cli/train_flag_table.h"
#include "plan/gpu_spec.h"

namespace megatron::cli {
namespace {

// ---------------------------------------------------------------------------------------------
// Presets of --model.
// ---------------------------------------------------------------------------------------------
const std::vector<ModelPreset> kPresets = {
    {"gpt2-124m", 12, 768, 12, 1024},
    {"gpt2-350m", 24, 1024, 16, 1024},
    {"gpt2-774m", 36, 1280, 20, 1024},
    {"gpt2-1558m", 48, 1600, 25, 1024},
    {"gpt3-1.3b", 24, 2048, 16, 2048},
    {"gpt3-2.7b", 32, 2560, 32, 2048},
    {"gpt3-13b", 40, 5120, 32, 2048},
    {"gpt3-175b", 96, 12288, 96, 2048},
    {"gpt-1.7b", 24, 2304, 24, 2048},
    {"gpt-3.6b", 30, 3072, 32, 2048},
    {"gpt-7.5b", 36, 4096, 32, 2048},
    {"gpt-18.4b", 40, 6144, 48, 2048},
    {"gpt-39.1b", 48, 8192, 64, 2048},
    {"gpt-76.1b", 60, 10240, 80, 2048},
    {"gpt-145.6b", 80, 12288, 96, 2048},
    {"gpt-310.1b", 96, 16384, 128, 2048},
    // Llama (Megatron's docs/llama_mistral.md and examples/llama flags; Hugging Face configs).
    {"llama2-7b", 32, 4096, 32, 4096, 11008, 0, 32000, true, false, 10000.0f},
    {"llama2-13b", 40, 5120, 40, 4096, 13824, 0, 32000, true, false, 10000.0f},
    {"llama2-70b", 80, 8192, 64, 4096, 28672, 8, 32000, true, false, 10000.0f},
    {"llama2-1.3b", 24, 2048, 16, 4096, 5504, 0, 32000, true, false, 10000.0f},  // Llama 2's layout at 1.3B
    {"llama3-8b", 32, 4096, 32, 8192, 14336, 8, 128256, true, false, 500000.0f},
    {"llama3-70b", 80, 8192, 64, 8192, 28672, 8, 128256, true, false, 500000.0f},
    {"llama3.2-1b", 16, 2048, 32, 8192, 8192, 8, 128256, true, true, 500000.0f, 32.0f},
    {"llama3.2-3b", 28, 3072, 24, 8192, 8192, 8, 128256, true, true, 500000.0f, 32.0f},
};

// The supported flags whose names are not current Megatron-LM's (tests/cli/fixtures/megatron_flags.txt).
constexpr NamedOrigin kSupportedOrigins[] = {
    {"--model", FlagOrigin::kOurs},
    {"--dry-run", FlagOrigin::kOurs},
    {"--world-size", FlagOrigin::kOurs},
    {"--gpus-per-node", FlagOrigin::kOurs},
    {"--gpu", FlagOrigin::kOurs},
    {"--flops-convention", FlagOrigin::kOurs},
    {"--log-jsonl", FlagOrigin::kOurs},
    {"--nproc-per-node", FlagOrigin::kOurs},  // torchrun's
    {"--save-keep-last", FlagOrigin::kOurs},
    {"--device", FlagOrigin::kOurs},  // with --deterministic, cli/backend_choice.h
    {"--deterministic", FlagOrigin::kOurs},
    {"--log-learning-rate-to-tensorboard", FlagOrigin::kOurs},  // the default made explicit
    {"--no-log-learning-rate-to-tensorboard", FlagOrigin::kOurs},
    {"--log-loss-scale-to-tensorboard", FlagOrigin::kOurs},
    {"--layernorm-epsilon", FlagOrigin::kOlderMegatron},
    {"--log-batch-size-to-tensorboard", FlagOrigin::kOlderMegatron},
    {"--overlap-p2p-communication", FlagOrigin::kOlderMegatron},
    {"--classic-split", FlagOrigin::kOurs},            // older Megatron-LM's split rule (data::SplitRule::kClassic)
    {"--exit-samples", FlagOrigin::kOurs},             // asked for by the BigScience plan; no Megatron has it
    {"--codecarbon-dir", FlagOrigin::kOlderMegatron},  // BigScience's Megatron-DeepSpeed
    {"--carbon-intensity-g-per-kwh", FlagOrigin::kOurs},
};

void declare_supported_flags(Args& a) {
  // Model shape.
  a.option("--model", "NAME", "shape preset (" + model_preset_names() + "); explicit flags override it")
      .option("--num-layers", "L", "transformer layers")
      .option("--hidden-size", "H", "hidden size")
      .option("--num-attention-heads", "N", "attention heads")
      .option("--ffn-hidden-size", "F", "MLP hidden size (default 4 * hidden)")
      .option("--kv-channels", "D", "head size (default hidden / heads)")
      .option("--seq-length", "S", "tokens per sample")
      .option("--max-position-embeddings", "P", "learned positions (default: --seq-length)")
      .option("--make-vocab-size-divisible-by", "N", "pad the vocabulary to a multiple of N * TP", "128")
      .option("--init-method-std", "X", "std of the normal initialisation", "0.02")
      .option("--attention-dropout", "P", "attention dropout", "0.1")
      .option("--hidden-dropout", "P", "hidden dropout", "0.1")
      .option("--layernorm-epsilon", "E", "LayerNorm epsilon", "1e-05")
      .option("--norm-epsilon", "E", "LayerNorm epsilon (Megatron-Core's name for --layernorm-epsilon)")
      .flag("--untie-embeddings-and-output-weights", "separate output layer weights")
      .flag("--openai-gelu", "tanh-approximated GELU (the default fused bias-GELU is tanh too)")
      .flag("--no-bias-gelu-fusion", "exact (erf) GELU, as Megatron's unfused path (unless --openai-gelu)")
      .flag("--disable-bias-linear", "no biases in the linear layers")
      .flag("--swiglu",
            "SwiGLU MLP: linear_fc1 gives gate and up halves, silu(gate) * up replaces GELU "
            "(--ffn-hidden-size then defaults to int(8h/3/64)*64)")
      .flag("--use-rotary-position-embeddings",
            "rotary position embeddings (the older spelling of "
            "--position-embedding-type rope)")
      .flag("--no-position-embedding", "no learned positions (with rotary embeddings: already so)")
      .option("--rotary-base", "B", "rotary embeddings' frequency base (Llama 2: 10000, Llama 3: 500000)", "10000")
      .option("--rotary-percent", "P", "fraction of each head's dimensions that rotate", "1.0")
      .option("--rotary-seq-len-interpolation-factor", "F", "positions divided by F (linear interpolation)")
      .flag("--use-rope-scaling", "Llama 3.1's rotary frequency scaling")
      .option("--rope-scaling-factor", "F", "Llama 3.1's scaling factor", "8.0")
      .flag("--apply-layernorm-1p", "norms scale by (1 + weight), the weight initialised to zeros")
      .flag("--qk-layernorm",
            "normalise each query and key head over --kv-channels (--normalization) before rotary embeddings "
            "(q_layernorm, k_layernorm)")
      .flag("--group-query-attention", "grouped-query attention (--num-query-groups key/value heads)")
      .option("--num-query-groups", "G", "key/value heads with --group-query-attention", "1");
  // Data.
  a.list("--data-path", "PATH",
         "a prefix, or weight/prefix pairs (required unless --dry-run, --mock-data or --train-data-path)")
      .list("--train-data-path", "PATH",
            "the training data on its own: all sequences of a prefix, or weight/prefix pairs")
      .list("--valid-data-path", "PATH", "the validation data on its own (as --train-data-path; none: no validation)")
      .list("--test-data-path", "PATH", "the test data on its own (as --train-data-path)")
      .option("--data-args-path", "FILE", "a file holding --data-path's values (whitespace-separated)")
      .option("--per-split-data-args-path", "FILE",
              "a JSON file {\"train\": ..., \"valid\": ..., \"test\": ...} of per-split data paths (lists or strings)")
      .flag("--mock-data", "Megatron-Core's mock data (100000 synthetic documents) instead of --data-path")
      .flag("--eod-mask-loss", "no loss at positions whose input token is the end of document")
      .flag("--calculate-per-token-loss",
            "the loss is the global batch's sum over its counted tokens divided by their number (not a mean of "
            "micro-batch means)")
      .flag("--reset-position-ids", "position ids restart at 0 after each end-of-document token")
      .flag("--reset-attention-mask",
            "tokens attend only within their document (keys after the last end-of-document token before them)")
      .option("--split", "A,B,C",
              "train/valid/test proportions of each dataset's sequences (every number in the text is a weight, as "
              "in Megatron-Core)",
              "969, 30, 1")
      .flag("--classic-split",
            "--split's sequence ranges by older Megatron-LM's rule (megatron/data get_train_valid_test_split_), "
            "reproducing its ranges; default: Megatron-Core's rule")
      .option("--vocab-file", "FILE", "GPT-2 vocab.json (required unless --dry-run)")
      .option("--vocab-size", "N",
              "NullTokenizer: vocabulary N, ids 0..N-1, the end of document N - 1 (Megatron-Core's); TikTokenizer: its "
              "vocabulary "
              "(default 131072); HuggingFaceTokenizer: not used (as in Megatron)")
      .option("--merge-file", "FILE", "GPT-2 merges.txt (required unless --dry-run)")
      .option("--tokenizer-model", "PATH",
              "SentencePiece .model, Hugging Face tokenizer.json (or its directory), "
              "or TikTokenizer's vocabulary (docs/tokenizers.md)")
      .option("--tiktoken-pattern", "v1|v2", "TikTokenizer's pre-tokenizer regex (default v2; others: not used)")
      .option("--tiktoken-num-special-tokens", "N", "TikTokenizer: ids 0..N-1 are special tokens", "1000")
      .option("--data-cache-path", "DIR", "where the sample index files are cached")
      .option("--seed", "N", "random seed", "1234");
  // Batch and length.
  a.option("--micro-batch-size", "N", "samples per forward pass per replica")
      .option("--global-batch-size", "N", "samples per iteration (default micro-batch * data-parallel)")
      .list("--rampup-batch-size", "START INCR SAMPLES",
            "the global batch from START, growing by INCR, over SAMPLES training samples (Megatron's ramp-up); needs "
            "--train-samples",
            3)
      .option("--step-batch-size-schedule", "S",
              "Megatron-Core's step schedule \"THRESHOLD:BS THRESHOLD:BS ...\": the global batch BS from THRESHOLD "
              "consumed tokens on (suffixes K, M, B, T; the first threshold 0); not with --global-batch-size")
      .option("--train-iters", "N", "iterations (or --train-samples)")
      .option("--train-samples", "N", "samples (or --train-iters)");
  // Learning rate.
  a.option("--lr", "LR", "peak learning rate")
      .option("--min-lr", "LR", "floor of the decay", "0.0")
      .option("--decoupled-lr", "LR", "peak learning rate of the word embedding and output layer (default --lr)")
      .option("--decoupled-min-lr", "LR", "floor of their decay, with --decoupled-lr (default --min-lr)")
      .flag("--apply-wd-to-qk-layernorm", "weight decay also on the q/k layernorm parameters (Qwen3-Next's rule)")
      .option("--no-weight-decay-cond-type", "apply_wd_to_qk_layernorm",
              "deprecated spelling of --apply-wd-to-qk-layernorm")
      .option("--lr-decay-style", "S", "constant, linear, cosine, inverse-square-root or WSD", "linear")
      .option("--lr-decay-iters", "N", "decay iterations (default: --train-iters)")
      .option("--lr-decay-samples", "N", "decay samples (default: --train-samples)")
      .option("--lr-warmup-iters", "N", "warmup iterations", "0")
      .option("--lr-warmup-samples", "N", "warmup samples", "0")
      .option("--lr-warmup-fraction", "X", "warmup as a fraction of the decay steps")
      .option("--lr-warmup-init", "LR", "learning rate at the start of warmup", "0.0")
      .option("--lr-wsd-decay-style", "S", "WSD decay: exponential, linear, cosine or minus_sqrt", "exponential")
      .option("--lr-wsd-decay-iters", "N", "WSD decay iterations")
      .option("--lr-wsd-decay-samples", "N", "WSD decay samples")
      .flag("--override-opt_param-scheduler", "take scheduler values from the flags, not the checkpoint")
      .flag("--override-opt-param-scheduler", "the same as --override-opt_param-scheduler")
      .flag("--use-checkpoint-opt_param-scheduler", "take scheduler values from the checkpoint")
      .flag("--use-checkpoint-opt-param-scheduler", "the same as --use-checkpoint-opt_param-scheduler");
  // Optimizer.
  a.option("--weight-decay", "X", "weight decay (constant style)", "0.01")
      .option("--start-weight-decay", "X", "initial weight decay (linear/cosine style)")
      .option("--end-weight-decay", "X", "final weight decay (linear/cosine style)")
      .option("--weight-decay-incr-style", "S", "constant, linear or cosine", "constant")
      .option("--adam-beta1", "X", "Adam beta1", "0.9")
      .option("--adam-beta2", "X", "Adam beta2", "0.999")
      .option("--adam-eps", "X", "Adam epsilon", "1e-08")
      .option("--clip-grad", "X", "clip the global gradient L2 norm (0: off)", "1.0");
  // Precision.
  a.flag("--fp16", "fp16 parameters, fp32 main weights, loss scaling")
      .flag("--bf16", "bf16 parameters, fp32 main weights")
      .option("--loss-scale", "X", "constant loss scale (default: dynamic with --fp16)")
      .option("--initial-loss-scale", "X", "initial dynamic loss scale", "4294967296")
      .option("--min-loss-scale", "X", "minimum dynamic loss scale", "1.0")
      .option("--loss-scale-window", "N", "iterations without overflow before doubling", "1000")
      .option("--hysteresis", "N", "overflows tolerated before halving", "2")
      .flag("--accumulate-allreduce-grads-in-fp32",
            "accumulate and reduce gradients in fp32 (the default with --bf16; --fp16 without it: in fp16)")
      .flag("--grad-reduce-in-bf16", "with --bf16: accumulate and reduce gradients in bf16")
      .option("--fp8-format", "e4m3|hybrid",
              "FP8 for the transformer layers' linear GEMMs (QKV, projection, FC1, FC2; forward, dgrad and wgrad) "
              "with per-tensor scales and fp32 accumulation (the forward's with Hopper's fast accumulation, as "
              "Transformer Engine); embeddings, the output layer, attention, norms and the "
              "optimizer stay in --bf16/--fp16 (or fp32). e4m3: every operand E4M3; hybrid: E5M2 for the output "
              "gradients (Transformer Engine's Format.HYBRID)")
      .option("--fp8-recipe", "R",
              "tensorwise (current scaling: each tensor's own amax) or delayed (scales from the amax history, "
              "updated every iteration after the amax all-reduce over TP x DP); mxfp8, blockwise, custom: refused",
              "delayed")
      .option("--fp8-margin", "N", "delayed: scale = fp8_max * 2^-N / amax", "0")
      .option("--fp8-amax-history-len", "L", "delayed: amaxes kept per tensor", "1")
      .option("--fp8-amax-compute-algo", "A", "delayed: the history's max, or its most_recent entry", "most_recent")
      .flag("--fp8-param-gather",
            "accepted with --fp8-format and --use-distributed-optimizer (as Megatron requires), with one difference "
            "printed at start-up: the FP8 linears' weights stay bf16/fp16 parameters, gathered so and cast by each "
            "GEMM, not FP8 parameters gathered in FP8");
  // Logging, evaluation, exit.
  a.option("--log-interval", "N", "iterations between log lines", "100")
      .option("--eval-interval", "N", "iterations between validations", "1000")
      .option("--eval-iters", "N", "iterations per validation", "100")
      .flag("--log-throughput", "print throughput per GPU (TFLOP/s/GPU)")
      .option("--timing-log-level", "0|1|2",
              "Megatron's timers: 0 set-up and checkpoints; 1 also forward-backward, gradient reductions and the "
              "optimizer (synchronises the device at each); 2 also batches, computes and pipeline exchanges",
              "0")
      .option("--timing-log-option", "minmax|max|all", "timer times across ranks: min and max, max, or every rank",
              "minmax")
      .flag("--no-barrier-with-level-1-timing", "level-1 timers start without a barrier over all ranks")
      .flag("--log-straggler",
            "at every log interval rank 0 names the slowest and fastest rank by compute time (communication "
            "waits left out), with each one's GPU power, temperature, utilisation and clock")
      .flag("--disable-straggler-on-startup", "--log-straggler starts off (--straggler-ctrlr-port turns it on)")
      .option("--straggler-ctrlr-port", "PORT",
              "rank 0 listens here; each connection (curl HOST:PORT) turns --log-straggler off or on", "65535")
      .option("--straggler-minmax-count", "N", "also list the N ranks of lowest and highest estimated TFLOP/s", "1")
      .option("--check-weight-hash-across-dp-replicas-interval", "N",
              "before training and every N iterations, check that data-parallel replicas hold the same weights "
              "bit for bit (stops every rank otherwise, naming the parameters)")
      .flag("--no-check-for-nan-in-loss-and-grad",
            "train on through a NaN or Inf loss and NaN gradients (default: stop the run, naming the rank)")
      .flag("--log-params-norm", "print the parameter norm")
      .flag("--profile",
            "start the CUDA profiler before iteration --profile-step-start + 1 and stop it after "
            "--profile-step-end, on --profile-ranks (nsys profile --capture-range=cudaProfilerApi), with NVTX "
            "ranges per iteration and phase")
      .option("--profile-step-start", "N", "--profile: the capture starts after N iterations", "10")
      .option("--profile-step-end", "N", "--profile: the capture stops after iteration N", "12")
      .list("--profile-ranks", "R", "--profile: the global ranks that capture (default 0)")
      .flag("--log-progress",
            "append the job's start and, at each checkpoint, its throughput, FLOPs and tokens to <--save>/progress.txt")
      .flag("--log-num-zeros-in-grad", "print the number of zero gradients")
      .option("--flops-convention", "YEAR", "TFLOP/s formula: 2025 (causal attention halved, Megatron HEAD) or 2024",
              "2025")
      .option("--exit-interval", "N", "exit when the iteration is a multiple of N")
      .option("--exit-samples", "N",
              "save (with --save) and exit once N training samples are consumed (ours; --exit-interval in samples)")
      .option("--exit-duration-in-mins", "M", "exit after M minutes")
      .option("--save-interval", "N",
              "iterations between checkpoints (with --save); or a schedule N1:U1,N2:U2,...,N: the multiples of N1 up "
              "to iteration U1, then of N2 up to U2, ..., then of N (ours; e.g. 10:100,18:1000,1500)")
      .flag("--dry-run", "print the configuration and memory plan, then exit")
      .option("--world-size", "N",
              "--dry-run: plan for N ranks (each pipeline stage's memory, NCCL's buffers, the prediction with --gpu) "
              "without a launcher; default: the launcher's world")
      .option("--gpus-per-node", "G", "--dry-run --world-size: ranks per node (default: at most 8)")
      .option("--gpu", "NAME",
              "the GPU kind megatron plan's prediction, printed before the first step, is for (" + plan::gpu_names() +
                  "; default: this CUDA device's kind; needed with --dry-run)");
  // Checkpoints (ckpt/checkpoint.h).
  a.option("--save", "DIR", "save checkpoints to DIR (DIR/iter_0000100/, latest_checkpointed_iteration.txt)")
      .option("--load", "DIR", "resume from the latest checkpoint in DIR")
      .option("--save-keep-last", "K", "keep only the K newest checkpoints (0: keep all)", "0")
      .flag("--no-save-optim", "save weights only (no fp32 main weights, no Adam state)")
      .flag("--async-save",
            "write checkpoints in the background: each rank copies what it holds to host memory, "
            "training goes on while a thread writes it")
      .flag("--no-ckpt-fully-parallel-save",
            "rank 0 writes the whole checkpoint (default: every rank writes what it holds, "
            "when all ranks see the --save directory)")
      .flag("--no-save-rng", "accepted: dropout masks are a function of (seed, iteration), no RNG state exists")
      .flag("--no-load-optim", "load weights only; the optimizer starts fresh from them")
      .flag("--no-load-rng", "accepted: dropout masks are a function of (seed, iteration), no RNG state exists")
      .flag("--finetune", "load weights only and start at iteration 0 with 0 consumed samples")
      .flag("--exit-on-missing-checkpoint", "with --load: exit if no checkpoint is found")
      .option("--ckpt-step", "N", "with --load: load iteration N instead of the latest")
      .flag("--use-checkpoint-args", "take the model's shape flags not given here from --load's checkpoint")
      .flag("--skip-train", "no training: evaluate on the validation and test sets (of --load's model) and exit")
      .flag("--exit-signal-handler", "on SIGTERM finish the iteration, save and exit 0");
  // TensorBoard and the JSONL metrics log.
  a.option("--tensorboard-dir", "DIR", "write TensorBoard event files to DIR")
      .option("--tensorboard-queue-size", "N", "events buffered before a flush", "1000")
      .option("--tensorboard-log-interval", "N", "iterations between TensorBoard scalars", "1")
      .flag("--log-batch-size-to-tensorboard", "also log the global batch size")
      .flag("--log-memory-to-tensorboard", "also log the device memory in use (bytes, live allocations)")
      .flag("--log-world-size-to-tensorboard", "also log the number of ranks")
      .flag("--log-timers-to-tensorboard", "log iteration time, throughput and per-phase timers (adds syncs)")
      .flag("--log-validation-ppl-to-tensorboard", "also log validation perplexity")
      .flag("--log-learning-rate-to-tensorboard", "log the learning rate (default on)")
      .flag("--no-log-learning-rate-to-tensorboard", "do not log the learning rate")
      .flag("--log-loss-scale-to-tensorboard", "log the loss scale (default on)")
      .flag("--no-log-loss-scale-to-tensorboard", "do not log the loss scale")
      .flag("--disable-log-loss-scale-to-tensorboard", "the same as --no-log-loss-scale-to-tensorboard")
      .option("--log-jsonl", "FILE", "append one JSON object per logged iteration and validation to FILE");
  // Energy (obs/energy_monitor.h) and Weights & Biases (cli/wandb_sync.h).
  a.flag("--log-energy",
         "log the GPUs' energy (NVML's counter, summed over ranks): energy per GPU (J/iter/GPU) and power per GPU "
         "(W/GPU) in the log line and TensorBoard, the total at the end")
      .option("--codecarbon-dir", "DIR",
              "write the GPUs' energy (kWh, summed over ranks) to DIR/emissions.csv in codecarbon's columns at every "
              "log line and at the end (no codecarbon package needed)")
      .option("--carbon-intensity-g-per-kwh", "G",
              "the grid's carbon intensity (g CO2eq per kWh): --codecarbon-dir also writes the emissions (ours)")
      .option("--wandb-project", "P",
              "Weights & Biases project: the run writes TensorBoard events (--tensorboard-dir, else "
              "<--save>/tensorboard) and prints the `wandb sync --sync-tensorboard` command that uploads them (the "
              "trainer itself sends nothing)")
      .option("--wandb-exp-name", "NAME", "the W&B run (its id in the printed wandb sync command)")
      .option("--wandb-save-dir", "DIR", "W&B's local files (WANDB_DIR of the printed command; default <--save>/wandb)")
      .option("--wandb-entity", "E", "the W&B entity (team or user) of the printed command");
  // Parallelism and recompute.
  a.option("--tensor-model-parallel-size", "N", "tensor-parallel size (heads, FFN and vocabulary split over N ranks)",
           "1")
      .option("--pipeline-model-parallel-size", "N",
              "pipeline-parallel size (the layers split over N stages, 1F1B schedule)", "1")
      .option("--num-layers-per-virtual-pipeline-stage", "N",
              "layers per virtual pipeline stage: each stage holds several chunks (interleaved 1F1B schedule)")
      .flag("--use-distributed-optimizer", "shard the fp32 main weights and Adam moments over data-parallel ranks")
      .option("--ddp-bucket-size", "N",
              "gradient all-reduce / reduce-scatter bucket size in elements (default: one bucket; "
              "max(40M, 1M x DP) with --overlap-grad-reduce)")
      .option("--ddp-num-buckets", "N", "gradient buckets of (this rank's parameters / N) elements each")
      .flag("--overlap-grad-reduce", "start each gradient bucket's reduction during the last backward pass")
      .flag("--overlap-param-gather",
            "all-gather the distributed optimizer's parameters during the next forward pass "
            "(needs --use-distributed-optimizer and --overlap-grad-reduce)")
      .flag("--overlap-p2p-communication",
            "the default (older Megatron's spelling): with the interleaved schedule, start the pipeline stages' "
            "sends and receives and wait for them only where their buffers are used")
      .flag("--no-overlap-p2p-communication",
            "wait for each pipeline send and receive at once (the interleaved schedule; 1F1B always does, as "
            "Megatron)")
      .option("--nproc-per-node", "N", "start N local worker processes of this command (torchrun's flag)")
      .option("--distributed-backend", "B",
              "nccl: GPU ranks talk over NCCL (CPU ranks always use MPI); mpi or gloo: host-side collectives over "
              "MPI, GPU tensors staged through host memory (slow; lets several ranks share one GPU, which NCCL "
              "refuses; needs mpirun or --nproc-per-node)",
              "nccl")
      .option("--distributed-timeout-minutes", "M",
              "end the job when a collective has waited M minutes (a rank is stuck or dead)", "10")
      .flag("--sequence-parallel", "sequence parallelism in the LayerNorm/dropout regions (needs tensor parallelism)")
      .flag("--use-cpu-initialization", "initialise full matrices then split (TP-invariant)")
      .flag("--recompute-activations", "shorthand for --recompute-granularity selective")
      .option("--recompute-granularity", "G", "full or selective")
      .option("--recompute-method", "M", "uniform or block (with full granularity)")
      .option("--recompute-num-layers", "N", "layers per recompute chunk (full granularity)");
}

}  // namespace

const std::vector<ModelPreset>& model_presets() { return kPresets; }

std::span<const NamedOrigin> supported_flag_origins() { return kSupportedOrigins; }

std::string model_preset_names() {
  std::string names;
  for (const ModelPreset& p : kPresets) {
    if (!names.empty()) names += ", ";
    names += p.name;
  }
  return names;
}

void declare_train_flags(Args& args) {
  declare_supported_flags(args);
  declare_table_flags(args);
}

}  // namespace megatron::cli
