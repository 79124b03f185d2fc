#include "cli/train_args.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>

#include <simdjson.h>

#include "backend/cuda/attention_impl.h"
#include "comm/rank_layout.h"
#include "comm/watchdog.h"
#include "core/error.h"
#include "data/dataset_config.h"
#include "data/numpy_random.h"
#include "plan/gpu_spec.h"
#include "train/checkpoint_io.h"
#include "train/checkpoint_metadata.h"
#include "train/timers.h"

namespace megatron::cli {
namespace {

using train::TrainConfig;

// ---------------------------------------------------------------------------------------------
// The flags that are accepted without effect, or not supported yet. ONE table: to enable a
// feature, delete its row (or widen its accepted values) and read the flag in
// parse_train_config(). Supported flags are declared in declare_supported_flags().
// ---------------------------------------------------------------------------------------------
enum class FlagType { kSwitch, kValue, kList };
enum class FlagState {
  kNoOp,         // accepted with any value; changes nothing here (the note says why)
  kValues,       // accepted with the listed values (the first is the default); others: not supported yet
  kUnsupported,  // "[--flag] is not supported yet (note)"
  kRemoved,      // Megatron itself rejects it; the note says what to use instead
};

struct FlagRow {
  const char* name;
  FlagType type;
  FlagState state;
  const char* values;  // kValues: accepted values separated by '|', the first is the default
  const char* note;
};

constexpr const char* kCkpt = "checkpoints use one format: safetensors + metadata.json (--save/--load)";
constexpr const char* kVariant = "this model variant is not implemented yet";

constexpr FlagRow kFlagTable[] = {
    // Parallelism: later issues widen these.
    {"--context-parallel-size", FlagType::kValue, FlagState::kValues, "1", "context parallelism"},
    {"--expert-model-parallel-size", FlagType::kValue, FlagState::kValues, "1", "mixture of experts"},
    {"--num-experts", FlagType::kValue, FlagState::kUnsupported, "", "mixture of experts"},
    {"--distribute-saved-activations", FlagType::kSwitch, FlagState::kUnsupported, "", "activation partitioning over tensor-parallel ranks"},
    {"--data-parallel-random-init", FlagType::kSwitch, FlagState::kUnsupported, "", "per-replica initialisation"},
    {"--decrease-batch-size-if-needed", FlagType::kSwitch, FlagState::kUnsupported, "", "global batch must divide exactly"},
    {"--step-batch-size-schedule", FlagType::kValue, FlagState::kUnsupported, "", "use --rampup-batch-size"},
    // Checkpoints.
    {"--pretrained-checkpoint", FlagType::kValue, FlagState::kUnsupported, "", kCkpt},
    {"--ckpt-format", FlagType::kValue, FlagState::kUnsupported, "", kCkpt},
    {"--use-dist-ckpt", FlagType::kSwitch, FlagState::kUnsupported, "", kCkpt},
    {"--auto-detect-ckpt-format", FlagType::kSwitch, FlagState::kUnsupported, "", kCkpt},
    {"--non-persistent-save-interval", FlagType::kValue, FlagState::kUnsupported, "", kCkpt},
    // TensorBoard and other loggers.
    {"--wandb-project", FlagType::kValue, FlagState::kUnsupported, "", "Weights & Biases logging"},
    {"--wandb-exp-name", FlagType::kValue, FlagState::kUnsupported, "", "Weights & Biases logging"},
    {"--wandb-save-dir", FlagType::kValue, FlagState::kUnsupported, "", "Weights & Biases logging"},
    // Model variants.
    {"--group-query-attention", FlagType::kSwitch, FlagState::kUnsupported, "", kVariant},
    {"--num-query-groups", FlagType::kValue, FlagState::kUnsupported, "", kVariant},
    {"--normalization", FlagType::kValue, FlagState::kValues, "LayerNorm|RMSNorm", "LayerNorm or RMSNorm"},
    {"--position-embedding-type", FlagType::kValue, FlagState::kValues, "learned_absolute", kVariant},
    {"--use-rotary-position-embeddings", FlagType::kSwitch, FlagState::kUnsupported, "", kVariant},
    {"--no-position-embedding", FlagType::kSwitch, FlagState::kUnsupported, "", kVariant},
    {"--squared-relu", FlagType::kSwitch, FlagState::kUnsupported, "", kVariant},
    {"--qk-layernorm", FlagType::kSwitch, FlagState::kUnsupported, "", kVariant},
    {"--apply-residual-connection-post-layernorm", FlagType::kSwitch, FlagState::kUnsupported, "", kVariant},
    {"--apply-query-key-layer-scaling", FlagType::kSwitch, FlagState::kUnsupported, "", kVariant},
    {"--fp32-residual-connection", FlagType::kSwitch, FlagState::kUnsupported, "", kVariant},
    {"--fp16-lm-cross-entropy", FlagType::kSwitch, FlagState::kUnsupported, "", "the cross-entropy runs in fp32"},
    {"--fp8-format", FlagType::kValue, FlagState::kUnsupported, "", "FP8 training"},
    {"--recompute-modules", FlagType::kList, FlagState::kUnsupported, "", "selective recompute covers core attention only"},
    {"--checkpoint-activations", FlagType::kSwitch, FlagState::kRemoved, "",
     "Megatron no longer accepts it; use --recompute-activations, or --recompute-granularity full "
     "--recompute-method uniform --recompute-num-layers 1"},
    // Data.
    {"--tokenizer-type", FlagType::kValue, FlagState::kValues,
     "GPT2BPETokenizer|NullTokenizer|SentencePieceTokenizer|GPTSentencePieceTokenizer|Llama2Tokenizer|"
     "HuggingFaceTokenizer|TikTokenizer",
     "docs/tokenizers.md; NullTokenizer with --vocab-size"},
    {"--tokenizer-special-tokens", FlagType::kList, FlagState::kUnsupported, "",
     "the tokenizer files' own special tokens only (docs/tokenizers.md)"},
    {"--tokenizer-sentencepiece-legacy", FlagType::kSwitch, FlagState::kUnsupported, "",
     "Megatron-Core's default SentencePiece wrapper only (encode_as_ids)"},
    {"--tokenizer-hf-no-include-special-tokens", FlagType::kSwitch, FlagState::kUnsupported, "",
     "tokenizer(text).input_ids only, template included"},
    {"--tokenizer-metadata", FlagType::kValue, FlagState::kUnsupported, "", "the tokenizer comes from its flags"},
    {"--tokenizer-hf-no-use-fast", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: one implementation of tokenizer.json (byte-level BPE ids do not depend on it)"},
    {"--data-impl", FlagType::kValue, FlagState::kValues, "mmap|infer", "only the mmap indexed format (MMIDIDX)"},
    {"--dataloader-type", FlagType::kValue, FlagState::kValues, "single", "only the 'single' sampler"},
    {"--optimizer", FlagType::kValue, FlagState::kValues, "adam", "only Adam(W)"},
    // Accepted, no effect here.
    {"--num-workers", FlagType::kValue, FlagState::kNoOp, "", "no-op: samples come from memory-mapped files in the trainer"},
    {"--DDP-impl", FlagType::kValue, FlagState::kValues, "local|torch", "no-op: gradient reduction is our own"},
    {"--use-contiguous-buffers-in-local-ddp", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: gradients always live in one buffer"},
    {"--no-contiguous-buffers-in-local-ddp", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: gradients always live in one buffer"},
    {"--use-flash-attn", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: the backend picks its fused attention kernel"},
    {"--attention-backend", FlagType::kValue, FlagState::kValues, "auto|flash|fused|unfused|local",
     "no-op: the backend picks its fused attention kernel"},
    {"--transformer-impl", FlagType::kValue, FlagState::kValues, "local|transformer_engine", "no-op: one implementation"},
    {"--use-mcore-models", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: one implementation"},
    {"--use-legacy-models", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: one implementation"},
    {"--no-masked-softmax-fusion", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: kernel fusion does not change results"},
    {"--no-bias-dropout-fusion", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: kernel fusion does not change results"},
    {"--no-persist-layer-norm", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: kernel choice"},
    {"--no-gradient-accumulation-fusion", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: kernel choice"},
    {"--no-async-tensor-model-parallel-allreduce", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: overlap is automatic"},
    {"--cross-entropy-loss-fusion", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: the cross-entropy is always fused"},
    {"--attention-softmax-in-fp32", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: softmax always runs in fp32"},
    {"--no-create-attention-mask-in-dataloader", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: the causal mask is implicit"},
    {"--empty-unused-memory-level", FlagType::kValue, FlagState::kValues, "0|1|2", "no-op: memory is planned up front"},
    {"--manual-gc", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: no garbage collector"},
    {"--local-rank", FlagType::kValue, FlagState::kNoOp, "", "no-op: ranks come from the environment"},
    // Megatron-Core-era flags of current scripts (megatron/training/arguments.py).
    {"--manual-gc-interval", FlagType::kValue, FlagState::kNoOp, "", "no-op: no garbage collector"},
    {"--manual-gc-eval", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: no garbage collector"},
    {"--no-manual-gc-eval", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: no garbage collector"},
    {"--rerun-mode", FlagType::kValue, FlagState::kValues, "disabled",
     "the rerun state machine (validate_results, report_stats); NaN losses stop the run instead"},
    {"--num-dataset-builder-threads", FlagType::kValue, FlagState::kNoOp, "", "no-op: the sample indices are built in one pass"},
    {"--mmap-bin-files", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: the .bin files are always memory-mapped"},
    {"--no-mmap-bin-files", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: the .bin files are always memory-mapped"},
    {"--enable-one-logger", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: no telemetry is sent anywhere"},
    {"--no-one-logger", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: no telemetry is sent anywhere"},
    {"--te-rng-tracker", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: dropout masks come from a stateless Philox stream"},
    {"--ckpt-fully-parallel-save", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op, as in Megatron: the parallel save is the default (--no-ckpt-fully-parallel-save turns it off)"},
    {"--ckpt-fully-parallel-load", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: every rank always reads only its own part of a checkpoint"},
    {"--ckpt-assume-constant-structure", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: a torch_dist option; checkpoints here are safetensors"},
    {"--dist-ckpt-strictness", FlagType::kValue, FlagState::kNoOp, "", "no-op: a torch_dist option; checkpoints here are safetensors"},
    {"--ddp-average-in-collective", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: gradients are scaled by 1/DP before the sum, which differs only in rounding"},
    {"--align-grad-reduce", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: when buckets start changes no value"},
    {"--no-align-grad-reduce", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: when buckets start changes no value"},
    {"--align-param-gather", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: when gathers start changes no value"},
    {"--no-align-param-gather", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: when gathers start changes no value"},
    {"--overlap-param-gather-with-optimizer-step", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: parameters gather as with --overlap-param-gather"},
    {"--defer-embedding-wgrad-compute", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: a scheduling choice, the same gradients"},
    {"--async-tensor-model-parallel-allreduce", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: overlap is automatic"},
    {"--use-ring-exchange-p2p", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: pipeline messages go point to point"},
    {"--no-initialization", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: initialisation on the device takes milliseconds"},
    {"--memory-efficient-layer-norm", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: kernel choice"},
    {"--gradient-accumulation-fusion", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: kernel choice"},
    {"--no-rope-fusion", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: kernel choice"},
    {"--bias-swiglu-fusion", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: kernel choice"},
    {"--no-bias-swiglu-fusion", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: kernel choice"},
    {"--no-query-key-layer-scaling", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: query-key layer scaling is off"},
    {"--tp-comm-overlap", FlagType::kSwitch, FlagState::kUnsupported, "", "TP communication overlap (Transformer Engine userbuffers)"},
    {"--grad-reduce-in-bf16", FlagType::kSwitch, FlagState::kUnsupported, "", "gradients are reduced in fp32"},
    {"--use-tp-pp-dp-mapping", FlagType::kSwitch, FlagState::kUnsupported, "", "ranks follow Megatron's default tp-cp-dp-pp order"},
    {"--microbatch-group-size-per-virtual-pipeline-stage", FlagType::kValue, FlagState::kUnsupported, "",
     "the interleaved schedule groups pipeline-size micro-batches"},
    {"--head-lr-mult", FlagType::kValue, FlagState::kUnsupported, "", "one learning rate for all parameters"},
    {"--decoupled-lr", FlagType::kValue, FlagState::kUnsupported, "", "one learning rate for all parameters"},
    {"--decoupled-min-lr", FlagType::kValue, FlagState::kUnsupported, "", "one learning rate for all parameters"},
    {"--init-method-xavier-uniform", FlagType::kSwitch, FlagState::kUnsupported, "", "normal initialisation only"},
    {"--apply-layernorm-1p", FlagType::kSwitch, FlagState::kUnsupported, "", kVariant},
    {"--full-validation", FlagType::kSwitch, FlagState::kUnsupported, "", "validation runs --eval-iters iterations"},
    {"--multiple-validation-sets", FlagType::kSwitch, FlagState::kUnsupported, "", "one validation set"},
    {"--use-pytorch-profiler", FlagType::kSwitch, FlagState::kUnsupported, "",
     "no PyTorch here: --profile starts and stops the CUDA profiler (nsys) instead"},
    {"--record-memory-history", FlagType::kSwitch, FlagState::kUnsupported, "",
     "no caching allocator to record: --dry-run prints every byte the engine allocates"},
    {"--no-shared-storage", FlagType::kSwitch, FlagState::kUnsupported, "",
     "rank 0 builds the sample indices for all ranks on shared storage"},
    {"--local_rank", FlagType::kValue, FlagState::kNoOp, "", "no-op: ranks come from the environment"},
};

std::vector<std::string> split_values(const char* values) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = values; *p != '\0'; ++p) {
    if (*p == '|') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(*p);
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// The whitespace-separated words of a text file (Megatron: open(path).read().split()).
std::vector<std::string> read_words(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) throw_error("[", flag, "] ", path, ": cannot open");
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// --per-split-data-args-path: {"train": L, "valid": L, "test": L}, each L a list of strings or
// one string of whitespace-separated words (Megatron splits it), or null for no data.
std::array<std::vector<std::string>, 3> read_per_split_data_args(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error("[--per-split-data-args-path] ", path, ": cannot open");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(simdjson::padded_string(text)).get(doc) != simdjson::SUCCESS || !doc.is_object()) {
    throw_error("[--per-split-data-args-path] ", path, ": not a JSON object");
  }
  std::array<std::vector<std::string>, 3> out;
  for (int s = 0; s < 3; ++s) {
    const char* key = data::kSplitNames[s];
    simdjson::dom::element e;
    if (doc[key].get(e) != simdjson::SUCCESS) {
      throw_error("[--per-split-data-args-path] ", path, ": missing \"", key, "\" (null for no ", key, " data)");
    }
    if (e.is_null()) continue;
    std::string_view str;
    simdjson::dom::array list;
    if (e.get_string().get(str) == simdjson::SUCCESS) {
      std::istringstream words{std::string(str)};
      for (std::string w; words >> w;) out[s].push_back(w);
    } else if (e.get_array().get(list) == simdjson::SUCCESS) {
      for (simdjson::dom::element item : list) {
        if (item.get_string().get(str) != simdjson::SUCCESS) {
          throw_error("[--per-split-data-args-path] ", path, ": \"", key, "\" holds a non-string");
        }
        out[s].emplace_back(str);
      }
    } else {
      throw_error("[--per-split-data-args-path] ", path, ": \"", key, "\" must be a list, a string or null");
    }
  }
  return out;
}

bool is_integer_text(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

bool value_accepted(const FlagRow& row, const std::string& value) {
  for (const std::string& a : split_values(row.values)) {
    if (a == value) return true;
    if (is_integer_text(a)) {
      try {
        if (parse_int(value, row.name) == std::stoll(a)) return true;
      } catch (const Error&) {
      }
    }
  }
  return false;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

void declare_table_flags(Args& a) {
  for (const FlagRow& row : kFlagTable) {
    std::string help;
    switch (row.state) {
      case FlagState::kNoOp: help = row.note; break;
      case FlagState::kValues: help = str_cat("only ", join(split_values(row.values), ", "), " (", row.note, ")"); break;
      case FlagState::kUnsupported: help = str_cat("not supported yet (", row.note, ")"); break;
      case FlagState::kRemoved: help = "rejected (as in Megatron)"; break;
    }
    switch (row.type) {
      case FlagType::kSwitch: a.flag(row.name, help); break;
      case FlagType::kValue: {
        std::optional<std::string> def;
        if (row.state == FlagState::kValues) def = split_values(row.values).front();
        a.option(row.name, "X", help, def);
        break;
      }
      case FlagType::kList: a.list(row.name, "X", help); break;
    }
  }
}

void check_table_flags(const Args& a) {
  for (const FlagRow& row : kFlagTable) {
    if (!a.given(row.name)) continue;
    switch (row.state) {
      case FlagState::kNoOp: break;
      case FlagState::kUnsupported: throw_error("[", row.name, "] is not supported yet (", row.note, ")");
      case FlagState::kRemoved: throw_error("[", row.name, "] is not accepted: ", row.note);
      case FlagState::kValues: {
        const std::string v = a.get_string(row.name);
        if (!value_accepted(row, v)) {
          throw_error("[", row.name, "] ", v, " is not supported yet (", row.note, "; accepted: ",
                      join(split_values(row.values), ", "), ")");
        }
        break;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Presets of --model.
// ---------------------------------------------------------------------------------------------
const std::vector<ModelPreset> kPresets = {
    {"gpt2-124m", 12, 768, 12, 1024},      {"gpt2-350m", 24, 1024, 16, 1024},
    {"gpt2-774m", 36, 1280, 20, 1024},     {"gpt2-1558m", 48, 1600, 25, 1024},
    {"gpt3-1.3b", 24, 2048, 16, 2048},     {"gpt3-2.7b", 32, 2560, 32, 2048},
    {"gpt3-13b", 40, 5120, 32, 2048},      {"gpt3-175b", 96, 12288, 96, 2048},
    {"gpt-1.7b", 24, 2304, 24, 2048},      {"gpt-3.6b", 30, 3072, 32, 2048},
    {"gpt-7.5b", 36, 4096, 32, 2048},      {"gpt-18.4b", 40, 6144, 48, 2048},
    {"gpt-39.1b", 48, 8192, 64, 2048},     {"gpt-76.1b", 60, 10240, 80, 2048},
    {"gpt-145.6b", 80, 12288, 96, 2048},   {"gpt-310.1b", 96, 16384, 128, 2048},
};

std::string preset_names() {
  std::vector<std::string> names;
  for (const ModelPreset& p : kPresets) names.push_back(p.name);
  return join(names, ", ");
}

void declare_supported_flags(Args& a) {
  // Model shape.
  a.option("--model", "NAME", "shape preset (" + preset_names() + "); explicit flags override it")
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
      .flag("--swiglu", "SwiGLU MLP: linear_fc1 gives gate and up halves, silu(gate) * up replaces GELU "
                        "(--ffn-hidden-size then defaults to int(8h/3/64)*64)");
  // Data.
  a.list("--data-path", "PATH", "a prefix, or weight/prefix pairs (required unless --dry-run, --mock-data or --train-data-path)")
      .list("--train-data-path", "PATH", "the training data on its own: all sequences of a prefix, or weight/prefix pairs")
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
      .option("--split", "A,B,C", "train/valid/test proportions", "969, 30, 1")
      .option("--vocab-file", "FILE", "GPT-2 vocab.json (required unless --dry-run)")
      .option("--vocab-size", "N",
              "NullTokenizer: ids 0..N-1 and the end of document N (vocabulary N + 1); TikTokenizer: its vocabulary "
              "(default 131072); HuggingFaceTokenizer: not used (as in Megatron)")
      .option("--merge-file", "FILE", "GPT-2 merges.txt (required unless --dry-run)")
      .option("--tokenizer-model", "PATH", "SentencePiece .model, Hugging Face tokenizer.json (or its directory), "
              "or TikTokenizer's vocabulary (docs/tokenizers.md)")
      .option("--tiktoken-pattern", "v1|v2", "TikTokenizer's pre-tokenizer regex (default v2; others: not used)")
      .option("--tiktoken-num-special-tokens", "N", "TikTokenizer: ids 0..N-1 are special tokens", "1000")
      .option("--data-cache-path", "DIR", "where the sample index files are cached")
      .option("--seed", "N", "random seed", "1234");
  // Batch and length.
  a.option("--micro-batch-size", "N", "samples per forward pass per replica")
      .option("--global-batch-size", "N", "samples per iteration (default micro-batch * data-parallel)")
      .list("--rampup-batch-size", "N", "<start> <increment> <ramp samples>; needs --train-samples", 3)
      .option("--train-iters", "N", "iterations (or --train-samples)")
      .option("--train-samples", "N", "samples (or --train-iters)");
  // Learning rate.
  a.option("--lr", "LR", "peak learning rate")
      .option("--min-lr", "LR", "floor of the decay", "0.0")
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
      .flag("--use-checkpoint-opt_param-scheduler", "take scheduler values from the checkpoint");
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
      .flag("--accumulate-allreduce-grads-in-fp32", "fp32 gradient accumulation (forced with --bf16)");
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
      .option("--exit-duration-in-mins", "M", "exit after M minutes")
      .option("--save-interval", "N", "iterations between checkpoints (with --save)")
      .flag("--dry-run", "print the configuration and memory plan, then exit")
      .option("--gpu", "NAME",
              "the GPU kind megatron plan's prediction, printed before the first step, is for (" + plan::gpu_names() +
                  "; default: this CUDA device's kind; needed with --dry-run)");
  // Checkpoints (train/checkpoint.h).
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
      .option("--log-jsonl", "FILE", "append one JSON object per logged iteration and validation to FILE");
  // Parallelism and recompute.
  a.option("--tensor-model-parallel-size", "N", "tensor-parallel size (heads, FFN and vocabulary split over N ranks)", "1")
      .option("--pipeline-model-parallel-size", "N", "pipeline-parallel size (the layers split over N stages, 1F1B schedule)", "1")
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
            "start the pipeline stages' sends and receives and wait for them only where their buffers are used, "
            "so that a stage computes on while its peer catches up (1F1B and interleaved)")
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

// ---------------------------------------------------------------------------------------------
// Helpers for parse_train_config.
// ---------------------------------------------------------------------------------------------
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();
// Positive reals the engine computes with in fp32: (0, float max].
constexpr RealRange kPositiveFp32{0.0, kMaxFp32, true, false};
// Non-negative reals in fp32: [0, float max].
constexpr RealRange kNonNegativeFp32{0.0, kMaxFp32, false, false};
// Dropouts and Adam's betas: [0, 1).
constexpr RealRange kProbability{0.0, 1.0, false, true};

// The flag's value in [lo, hi] when given.
std::optional<int64_t> opt_int(const Args& a, const std::string& name, int64_t lo, int64_t hi = kMaxInt64) {
  if (!a.given(name)) return std::nullopt;
  return a.get_int(name, lo, hi);
}

// The flag's value when given, its range checked by the caller.
std::optional<int64_t> opt_int(const Args& a, const std::string& name) {
  if (!a.given(name)) return std::nullopt;
  return a.get_int(name);
}

std::optional<double> opt_double(const Args& a, const std::string& name, const RealRange& range) {
  if (!a.given(name)) return std::nullopt;
  return a.get_double(name, range);
}

void require_positive(const std::string& name, int64_t v) { check_int_range(name, v, 1); }

// A real flag the engine uses in fp32: in `range`, and still in it once rounded to float (a
// positive 1e-50 is 0 there, 0.99999999 is 1).
double fp32_flag(const Args& a, const std::string& name, const RealRange& range) {
  const double v = a.get_double(name, range);
  const float f = static_cast<float>(v);
  const bool above = range.lo_open ? f > range.lo : f >= range.lo;
  const bool below = range.hi_open ? f < range.hi : f <= range.hi;
  if (!above || !below) {
    throw_error("[", name, "] ", a.get_string(name), " is ", f, " in fp32 (expected ", to_string(range), ")");
  }
  return v;
}

std::optional<double> opt_fp32_flag(const Args& a, const std::string& name, const RealRange& range) {
  if (!a.given(name)) return std::nullopt;
  return fp32_flag(a, name, range);
}

// a * b for a product of flags that must fit in int64: Error "<what>: a x b does not fit in 64 bits".
int64_t product(int64_t a, int64_t b, const std::string& what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw_error(what, ": ", a, " x ", b, " does not fit in 64 bits");
  return r;
}

// The sample counts Megatron derives from the flags (the data's train/valid/test targets and
// the scheduler's steps, data/dataset_config.h and train/lr_scheduler.h) must fit in int64.
void check_sample_counts(const TrainConfig& c) {
  const int64_t g = c.global_batch_size;
  const int64_t iters = c.total_train_iters();
  if (c.train_iters) product(iters, g, "[--train-iters] the training samples (--train-iters x --global-batch-size)");
  product(product(iters / c.eval_interval + 1, c.eval_iters,
                  "[--eval-iters] the validation iterations ((train iterations / --eval-interval + 1) x --eval-iters)"),
          g, "[--eval-iters] the validation samples (validation iterations x --global-batch-size)");
  if (c.lr_decay_iters) product(*c.lr_decay_iters, g, "[--lr-decay-iters] the decay samples (x --global-batch-size)");
  product(c.lr_warmup_iters, g, "[--lr-warmup-iters] the warmup samples (x --global-batch-size)");
  if (c.lr_wsd_decay_iters) {
    product(*c.lr_wsd_decay_iters, g, "[--lr-wsd-decay-iters] the WSD decay samples (x --global-batch-size)");
  }
}

template <class E>
E parse_choice(const Args& a, const std::string& name, const std::vector<std::pair<const char*, E>>& choices) {
  const std::string v = a.get_string(name);
  std::vector<std::string> names;
  for (const auto& [text, value] : choices) {
    if (v == text) return value;
    names.push_back(text);
  }
  throw_error("[", name, "] invalid choice '", v, "' (choose from ", join(names, ", "), ")");
}

void fill_model(const Args& a, TrainConfig& c) {
  model::GPTConfig& m = c.model;
  if (a.given("--model")) {
    c.model_preset = a.get_string("--model");
    const ModelPreset* found = nullptr;
    for (const ModelPreset& p : kPresets) {
      if (c.model_preset == p.name) found = &p;
    }
    if (found == nullptr) throw_error("[--model] unknown preset '", c.model_preset, "' (choose from ", preset_names(), ")");
    m.num_layers = found->num_layers;
    m.hidden_size = found->hidden_size;
    m.num_attention_heads = found->num_attention_heads;
    m.seq_length = found->seq_length;
  }
  auto shape = [&](const char* name, int64_t& field) {
    if (a.given(name)) field = a.get_int(name, 1, kMaxDimension);
    if (field == 0) throw_error("[", name, "] is required (or give --model)");
  };
  shape("--num-layers", m.num_layers);
  shape("--hidden-size", m.hidden_size);
  shape("--num-attention-heads", m.num_attention_heads);
  shape("--seq-length", m.seq_length);

  if (a.given("--kv-channels")) {
    m.kv_channels = a.get_int("--kv-channels", 1, kMaxDimension);
  } else {
    if (m.hidden_size % m.num_attention_heads != 0) {
      throw_error("[--num-attention-heads] ", m.num_attention_heads, " does not divide --hidden-size ",
                  m.hidden_size, " (or give --kv-channels)");
    }
    m.kv_channels = m.hidden_size / m.num_attention_heads;
  }
  m.swiglu = a.get_flag("--swiglu");
  // Megatron: int(4h * 2/3 / 64) * 64 with SwiGLU (two projections share the MLP's width), else 4h.
  const int64_t default_ffn = m.swiglu ? m.hidden_size / 24 * 64 : 4 * m.hidden_size;
  m.ffn_hidden_size = a.given("--ffn-hidden-size") ? a.get_int("--ffn-hidden-size", 1, kMaxDimension) : default_ffn;
  if (m.ffn_hidden_size == 0) {
    throw_error("[--hidden-size] ", m.hidden_size, " is too small for --swiglu's default --ffn-hidden-size ",
                "(int(8h/3/64)*64 = 0): give --ffn-hidden-size");
  }
  m.max_position_embeddings =
      a.given("--max-position-embeddings") ? a.get_int("--max-position-embeddings", 1, kMaxDimension) : m.seq_length;
  if (m.seq_length > m.max_position_embeddings) {
    throw_error("[--seq-length] ", m.seq_length, " is larger than --max-position-embeddings ",
                m.max_position_embeddings);
  }
  m.init_method_std = static_cast<float>(fp32_flag(a, "--init-method-std", kPositiveFp32));
  m.attention_dropout = static_cast<float>(fp32_flag(a, "--attention-dropout", kProbability));
  m.hidden_dropout = static_cast<float>(fp32_flag(a, "--hidden-dropout", kProbability));
  if (a.given("--norm-epsilon") && a.given("--layernorm-epsilon")) {
    throw_error("[--norm-epsilon] and --layernorm-epsilon name the same value: give one");
  }
  const char* epsilon = a.given("--norm-epsilon") ? "--norm-epsilon" : "--layernorm-epsilon";
  m.layernorm_epsilon = static_cast<float>(fp32_flag(a, epsilon, kPositiveFp32));
  m.untie_embeddings_and_output_weights = a.get_flag("--untie-embeddings-and-output-weights");
  m.add_bias_linear = !a.get_flag("--disable-bias-linear");
  m.normalization =
      a.get_string("--normalization") == "RMSNorm" ? model::Normalization::kRMSNorm : model::Normalization::kLayerNorm;
  // Megatron: --openai-gelu is the tanh form; the default fused bias-GELU is the tanh form too;
  // --no-bias-gelu-fusion falls back to torch's exact erf GELU.
  m.gelu = (a.get_flag("--no-bias-gelu-fusion") && !a.get_flag("--openai-gelu")) ? model::Gelu::kExact
                                                                                  : model::Gelu::kTanh;
  c.make_vocab_size_divisible_by = a.get_int("--make-vocab-size-divisible-by", 1, kMaxDimension);
}

void fill_parallel_and_batch(const Args& a, TrainConfig& c, int64_t world_size, std::ostream* log) {
  c.world_size = world_size;
  require_positive("world size", world_size);
  c.tensor_model_parallel_size = a.get_int("--tensor-model-parallel-size", 1, kMaxDimension);
  c.pipeline_model_parallel_size = a.get_int("--pipeline-model-parallel-size", 1, kMaxDimension);
  // Megatron's layout check first (megatron-facts §7): dp = world / (tp * pp).
  c.data_parallel_size = comm::parallel_sizes(world_size, c.tensor_model_parallel_size,
                                              c.pipeline_model_parallel_size).dp;
  if (c.model.num_attention_heads % c.tensor_model_parallel_size != 0) {
    throw_error("[--num-attention-heads] ", c.model.num_attention_heads,
                " is not divisible by --tensor-model-parallel-size ", c.tensor_model_parallel_size);
  }
  if (c.model.num_layers % c.pipeline_model_parallel_size != 0) {
    throw_error("[--num-layers] ", c.model.num_layers, " is not divisible by --pipeline-model-parallel-size ",
                c.pipeline_model_parallel_size);
  }
  c.num_layers_per_virtual_pipeline_stage = opt_int(a, "--num-layers-per-virtual-pipeline-stage", 1, kMaxDimension);
  if (c.num_layers_per_virtual_pipeline_stage) {
    const int64_t per_stage = c.model.num_layers / c.pipeline_model_parallel_size;
    if (c.pipeline_model_parallel_size == 1) {
      throw_error("[--num-layers-per-virtual-pipeline-stage] the interleaved schedule needs "
                  "--pipeline-model-parallel-size > 1");
    }
    if (per_stage % *c.num_layers_per_virtual_pipeline_stage != 0) {
      throw_error("[--num-layers-per-virtual-pipeline-stage] the layers per pipeline stage (", per_stage,
                  ") are not divisible by ", *c.num_layers_per_virtual_pipeline_stage);
    }
  }
  // Tensor parallelism splits heads, FFN columns and (with --sequence-parallel) the sequence
  // (model/gpt_model.h); the vocabulary is padded to a multiple of T (train/config.h).
  const int64_t tp = c.tensor_model_parallel_size;
  if (c.model.ffn_hidden_size % tp != 0) {
    throw_error("[--ffn-hidden-size] ", c.model.ffn_hidden_size, " is not divisible by --tensor-model-parallel-size ",
                tp);
  }
  // Megatron silently turns sequence parallelism off at TP 1; a contradictory flag is an
  // error here (DESIGN.md: never silently ignored).
  c.sequence_parallel = a.get_flag("--sequence-parallel");
  if (c.sequence_parallel && tp == 1) {
    throw_error("[--sequence-parallel] needs --tensor-model-parallel-size > 1 (it splits the sequence over the "
                "tensor-parallel ranks)");
  }
  if (c.sequence_parallel && c.model.seq_length % tp != 0) {
    throw_error("[--seq-length] ", c.model.seq_length, " is not divisible by --tensor-model-parallel-size ", tp,
                " (--sequence-parallel splits the sequence)");
  }
  c.use_distributed_optimizer = a.get_flag("--use-distributed-optimizer");
  c.ddp_bucket_size = opt_int(a, "--ddp-bucket-size", 1);
  c.ddp_num_buckets = opt_int(a, "--ddp-num-buckets", 1);
  if (c.ddp_num_buckets && c.ddp_bucket_size) {
    throw_error("[--ddp-num-buckets] cannot be given with --ddp-bucket-size (as in Megatron-LM)");
  }
  c.overlap_grad_reduce = a.get_flag("--overlap-grad-reduce");
  c.overlap_param_gather = a.get_flag("--overlap-param-gather");
  c.overlap_p2p_communication = a.get_flag("--overlap-p2p-communication");
  if (c.overlap_param_gather && !c.use_distributed_optimizer) {
    throw_error("[--overlap-param-gather] needs --use-distributed-optimizer (only its parameters are gathered)");
  }
  if (c.overlap_param_gather && !c.overlap_grad_reduce) {
    throw_error("[--overlap-param-gather] needs --overlap-grad-reduce (as in Megatron-LM)");
  }
  c.distributed_timeout_minutes = a.get_double("--distributed-timeout-minutes", {0.0, comm::kMaxTimeoutMinutes, true});
  c.use_cpu_initialization = a.get_flag("--use-cpu-initialization");

  if (!a.given("--micro-batch-size")) throw_error("[--micro-batch-size] is required");
  c.micro_batch_size = a.get_int("--micro-batch-size", 1, kMaxDimension);
  const int64_t per_step = product(c.micro_batch_size, c.data_parallel_size,
                                   "[--micro-batch-size] the micro-batch times the data-parallel size");
  if (a.given("--global-batch-size")) {
    c.global_batch_size = a.get_int("--global-batch-size", 1);
  } else {
    c.global_batch_size = per_step;
    if (log != nullptr) *log << "setting global batch size to " << c.global_batch_size << "\n";
  }
  if (c.global_batch_size % per_step != 0) {
    throw_error("[--global-batch-size] global batch size (", c.global_batch_size,
                ") is not divisible by micro batch size (", c.micro_batch_size, ") times data parallel size (",
                c.data_parallel_size, ")");
  }
  if (a.given("--rampup-batch-size")) {
    const std::vector<int64_t> r = a.get_int_list("--rampup-batch-size");
    train::RampupBatchSizeFlags ramp{r[0], r[1], r[2]};
    require_positive("--rampup-batch-size", ramp.start);
    require_positive("--rampup-batch-size", ramp.increment);
    require_positive("--rampup-batch-size", ramp.ramp_samples);
    if (ramp.start >= c.global_batch_size) {
      throw_error("[--rampup-batch-size] start batch size ", ramp.start, " must be smaller than --global-batch-size ",
                  c.global_batch_size);
    }
    if ((c.global_batch_size - ramp.start) % ramp.increment != 0) {
      throw_error("[--rampup-batch-size] expected global batch size interval (", c.global_batch_size - ramp.start,
                  ") to be divisible by global batch size increment (", ramp.increment, ")");
    }
    if (ramp.start % per_step != 0 || ramp.increment % per_step != 0) {
      throw_error("[--rampup-batch-size] start (", ramp.start, ") and increment (", ramp.increment,
                  ") must be multiples of micro batch size (", c.micro_batch_size, ") times data parallel size (",
                  c.data_parallel_size, ")");
    }
    c.rampup_batch_size = ramp;
  }
  c.microbatch_calculator();  // the rest of the batch arithmetic: micro-batches per iteration, the ramp's end
  // The interleaved schedule runs micro-batches in groups of pp (parallel/pipeline_schedule.h).
  if (c.virtual_pipeline_chunks() > 1) {
    if (c.rampup_batch_size) {
      throw_error("[--rampup-batch-size] is not supported with --num-layers-per-virtual-pipeline-stage");
    }
    const int64_t m = c.global_batch_size / per_step;
    if (m % c.pipeline_model_parallel_size != 0) {
      throw_error("[--num-layers-per-virtual-pipeline-stage] number of microbatches (", m,
                  ") is not divisible by --pipeline-model-parallel-size (", c.pipeline_model_parallel_size,
                  ") when using the interleaved schedule");
    }
  }
}

void fill_schedule(const Args& a, TrainConfig& c) {
  c.train_iters = opt_int(a, "--train-iters", 1);
  c.train_samples = opt_int(a, "--train-samples", 1);
  if (c.train_iters && c.train_samples) {
    throw_error("[--train-iters/--train-samples] give exactly one of them, got both");
  }
  if (!c.train_iters && !c.train_samples) {
    throw_error("[--train-iters/--train-samples] give exactly one of them, got neither");
  }

  if (!a.given("--lr")) throw_error("[--lr] is required");
  c.lr = fp32_flag(a, "--lr", kNonNegativeFp32);
  c.min_lr = fp32_flag(a, "--min-lr", kNonNegativeFp32);  // Megatron asserts min_lr >= 0
  if (c.min_lr > c.lr) {
    throw_error("[--min-lr] ", a.get_string("--min-lr"), " is larger than --lr ", a.get_string("--lr"));
  }
  c.lr_decay_style = parse_choice<train::LrDecayStyle>(a, "--lr-decay-style",
                                                      {{"constant", train::LrDecayStyle::kConstant},
                                                       {"linear", train::LrDecayStyle::kLinear},
                                                       {"cosine", train::LrDecayStyle::kCosine},
                                                       {"inverse-square-root", train::LrDecayStyle::kInverseSquareRoot},
                                                       {"WSD", train::LrDecayStyle::kWSD}});
  c.lr_decay_iters = opt_int(a, "--lr-decay-iters", 1);
  c.lr_decay_samples = opt_int(a, "--lr-decay-samples", 1);
  c.lr_warmup_iters = a.get_int("--lr-warmup-iters", 0);
  c.lr_warmup_samples = a.get_int("--lr-warmup-samples", 0);
  // Megatron asserts warmup steps (fraction x decay steps) < decay steps.
  c.lr_warmup_fraction = opt_double(a, "--lr-warmup-fraction", {0.0, 1.0, false, true});
  c.lr_warmup_init = fp32_flag(a, "--lr-warmup-init", kNonNegativeFp32);
  c.lr_wsd_decay_style = parse_choice<train::WsdDecayStyle>(a, "--lr-wsd-decay-style",
                                                           {{"exponential", train::WsdDecayStyle::kExponential},
                                                            {"linear", train::WsdDecayStyle::kLinear},
                                                            {"cosine", train::WsdDecayStyle::kCosine},
                                                            {"minus_sqrt", train::WsdDecayStyle::kMinusSqrt}});
  c.lr_wsd_decay_iters = opt_int(a, "--lr-wsd-decay-iters", 1);
  c.lr_wsd_decay_samples = opt_int(a, "--lr-wsd-decay-samples", 1);

  // Megatron's validate_args: each mode forbids the other mode's flags.
  if (c.train_iters) {
    if (c.lr_decay_samples) {
      throw_error("[--lr-decay-samples] needs --train-samples; with --train-iters use --lr-decay-iters "
                  "(expected iteration-based learning rate decay)");
    }
    if (c.lr_warmup_samples != 0) {
      throw_error("[--lr-warmup-samples] needs --train-samples; with --train-iters use --lr-warmup-iters "
                  "(expected iteration-based learning rate warmup)");
    }
    if (a.given("--rampup-batch-size")) {
      throw_error("[--rampup-batch-size] needs --train-samples "
                  "(expected no batch-size rampup for iteration-based training)");
    }
    if (c.lr_wsd_decay_samples) throw_error("[--lr-wsd-decay-samples] needs --train-samples; use --lr-wsd-decay-iters");
    if (c.lr_warmup_fraction && c.lr_warmup_iters != 0) {
      throw_error("[--lr-warmup-fraction/--lr-warmup-iters] can only specify one of lr-warmup-fraction and "
                  "lr-warmup-iters");
    }
  } else {
    if (c.lr_decay_iters) {
      throw_error("[--lr-decay-iters] needs --train-iters; with --train-samples use --lr-decay-samples "
                  "(expected sample-based learning rate decay)");
    }
    if (c.lr_warmup_iters != 0) {
      throw_error("[--lr-warmup-iters] needs --train-iters; with --train-samples use --lr-warmup-samples "
                  "(expected sample-based learning rate warmup)");
    }
    if (c.lr_wsd_decay_iters) throw_error("[--lr-wsd-decay-iters] needs --train-iters; use --lr-wsd-decay-samples");
    if (c.lr_warmup_fraction && c.lr_warmup_samples != 0) {
      throw_error("[--lr-warmup-fraction/--lr-warmup-samples] can only specify one of lr-warmup-fraction and "
                  "lr-warmup-samples");
    }
  }
  if (c.lr_decay_style == train::LrDecayStyle::kWSD) {
    if (!c.lr_wsd_decay_iters && !c.lr_wsd_decay_samples) {
      throw_error("[--lr-decay-style] WSD needs ", c.train_iters ? "--lr-wsd-decay-iters" : "--lr-wsd-decay-samples");
    }
  } else if (c.lr_wsd_decay_iters || c.lr_wsd_decay_samples || a.given("--lr-wsd-decay-style")) {
    const char* name = c.lr_wsd_decay_iters    ? "--lr-wsd-decay-iters"
                       : c.lr_wsd_decay_samples ? "--lr-wsd-decay-samples"
                                                : "--lr-wsd-decay-style";
    throw_error("[", name, "] only applies with --lr-decay-style WSD");
  }
  c.override_opt_param_scheduler = a.get_flag("--override-opt_param-scheduler");
  c.use_checkpoint_opt_param_scheduler = a.get_flag("--use-checkpoint-opt_param-scheduler");
  if (c.override_opt_param_scheduler && c.use_checkpoint_opt_param_scheduler) {
    throw_error("[--override-opt_param-scheduler/--use-checkpoint-opt_param-scheduler] both override and "
                "use-checkpoint are set");
  }
}

void fill_optimizer_and_precision(const Args& a, TrainConfig& c, std::ostream* log) {
  c.weight_decay = fp32_flag(a, "--weight-decay", kNonNegativeFp32);
  c.weight_decay_incr_style = parse_choice<train::WeightDecayIncrStyle>(
      a, "--weight-decay-incr-style",
      {{"constant", train::WeightDecayIncrStyle::kConstant},
       {"linear", train::WeightDecayIncrStyle::kLinear},
       {"cosine", train::WeightDecayIncrStyle::kCosine}});
  c.start_weight_decay = opt_fp32_flag(a, "--start-weight-decay", kNonNegativeFp32);
  c.end_weight_decay = opt_fp32_flag(a, "--end-weight-decay", kNonNegativeFp32);
  if (c.weight_decay_incr_style == train::WeightDecayIncrStyle::kConstant) {
    if (c.start_weight_decay || c.end_weight_decay) {
      throw_error("[", c.start_weight_decay ? "--start-weight-decay" : "--end-weight-decay",
                  "] needs --weight-decay-incr-style linear or cosine (constant uses --weight-decay)");
    }
    c.start_weight_decay = c.weight_decay;
    c.end_weight_decay = c.weight_decay;
  } else if (!c.start_weight_decay || !c.end_weight_decay) {
    throw_error("[--weight-decay-incr-style] ", a.get_string("--weight-decay-incr-style"),
                " needs --start-weight-decay and --end-weight-decay");
  }
  c.adam_beta1 = fp32_flag(a, "--adam-beta1", kProbability);
  c.adam_beta2 = fp32_flag(a, "--adam-beta2", kProbability);
  c.adam_eps = fp32_flag(a, "--adam-eps", kPositiveFp32);
  c.clip_grad = a.get_double("--clip-grad", {0.0, std::numeric_limits<double>::max()});

  c.fp16 = a.get_flag("--fp16");
  c.bf16 = a.get_flag("--bf16");
  if (c.fp16 && c.bf16) throw_error("[--fp16/--bf16] give at most one of them");
  // The scales are fp32 (optim/loss_scaler.h).
  c.loss_scale = opt_fp32_flag(a, "--loss-scale", kPositiveFp32);
  if (c.loss_scale && !c.fp16 && !c.bf16) throw_error("[--loss-scale] needs --fp16 or --bf16");
  c.initial_loss_scale = fp32_flag(a, "--initial-loss-scale", kPositiveFp32);
  c.min_loss_scale = fp32_flag(a, "--min-loss-scale", kPositiveFp32);
  c.loss_scale_window = a.get_int("--loss-scale-window", 1);
  c.hysteresis = a.get_int("--hysteresis", 1);
  c.accumulate_allreduce_grads_in_fp32 = a.get_flag("--accumulate-allreduce-grads-in-fp32");
  if (c.bf16 && !c.accumulate_allreduce_grads_in_fp32) {
    c.accumulate_allreduce_grads_in_fp32 = true;
    if (log != nullptr) *log << "accumulate and all-reduce gradients in fp32 for bfloat16 data type.\n";
  }
}

void fill_recompute(const Args& a, TrainConfig& c) {
  using train::RecomputeGranularity;
  using train::RecomputeMethod;
  if (a.given("--recompute-granularity")) {
    c.recompute_granularity = parse_choice<RecomputeGranularity>(
        a, "--recompute-granularity", {{"full", RecomputeGranularity::kFull}, {"selective", RecomputeGranularity::kSelective}});
  }
  // Megatron: --recompute-activations sets selective granularity.
  if (a.get_flag("--recompute-activations")) c.recompute_granularity = RecomputeGranularity::kSelective;
  if (a.given("--recompute-method")) {
    c.recompute_method = parse_choice<RecomputeMethod>(
        a, "--recompute-method", {{"uniform", RecomputeMethod::kUniform}, {"block", RecomputeMethod::kBlock}});
  }
  c.recompute_num_layers = opt_int(a, "--recompute-num-layers");
  switch (c.recompute_granularity) {
    case RecomputeGranularity::kNone:
      if (a.given("--recompute-method")) throw_error("[--recompute-method] needs --recompute-granularity full");
      if (a.given("--recompute-num-layers")) throw_error("[--recompute-num-layers] needs --recompute-granularity full");
      break;
    case RecomputeGranularity::kSelective:
      if (a.given("--recompute-method") || a.given("--recompute-num-layers")) {
        throw_error("[", a.given("--recompute-method") ? "--recompute-method" : "--recompute-num-layers",
                    "] is not supported with selective recompute granularity (only with full)");
      }
      break;
    case RecomputeGranularity::kFull: {
      if (!a.given("--recompute-method")) {
        throw_error("[--recompute-method] is required with --recompute-granularity full (uniform or block)");
      }
      if (!c.recompute_num_layers) {
        throw_error("[--recompute-num-layers] is required with --recompute-granularity full");
      }
      const int64_t per_stage = c.model.num_layers / c.pipeline_model_parallel_size;
      if (*c.recompute_num_layers < 1 || *c.recompute_num_layers > per_stage) {
        throw_error("[--recompute-num-layers] must be between 1 and the layers per pipeline stage (", per_stage,
                    "), got ", *c.recompute_num_layers);
      }
      c.model.recompute =
          c.recompute_method == RecomputeMethod::kUniform ? model::Recompute::kUniform : model::Recompute::kBlock;
      c.model.recompute_num_layers = *c.recompute_num_layers;
      break;
    }
  }
}

void fill_logging_and_data(const Args& a, TrainConfig& c) {
  c.log_interval = a.get_int("--log-interval", 1);
  c.eval_interval = a.get_int("--eval-interval", 1);
  c.eval_iters = a.get_int("--eval-iters", 0);
  c.log_throughput = a.get_flag("--log-throughput");
  c.log_params_norm = a.get_flag("--log-params-norm");
  c.log_progress = a.get_flag("--log-progress");
  c.profile = a.get_flag("--profile");
  c.profile_step_start = a.get_int("--profile-step-start");
  c.profile_step_end = a.get_int("--profile-step-end");
  if (a.given("--profile-ranks")) c.profile_ranks = a.get_int_list("--profile-ranks");
  if (c.profile) {  // as Megatron, the window and ranks matter only with --profile
    if (c.profile_step_start < 0) throw_error("[--profile-step-start] must not be negative, got ", c.profile_step_start);
    if (c.profile_step_end <= c.profile_step_start) {
      throw_error("[--profile-step-end] must be greater than --profile-step-start (", c.profile_step_start, "), got ",
                  c.profile_step_end);
    }
    for (int64_t r : c.profile_ranks) {
      if (r < 0 || r >= c.world_size) {
        throw_error("[--profile-ranks] rank ", r, " is not in the world of ", c.world_size, " ranks");
      }
    }
  }
  if (a.given("--gpu")) plan::find_gpu(a.get_string("--gpu"));  // an unknown kind fails here, naming --gpu
  c.log_num_zeros_in_grad = a.get_flag("--log-num-zeros-in-grad");
  c.check_for_nan_in_loss_and_grad = !a.get_flag("--no-check-for-nan-in-loss-and-grad");
  c.flops_convention = parse_choice<train::FlopsConvention>(
      a, "--flops-convention", {{"2025", train::FlopsConvention::k2025}, {"2024", train::FlopsConvention::k2024}});
  c.timing_log_level = a.get_int("--timing-log-level");
  if (c.timing_log_level < 0 || c.timing_log_level > 2) {
    throw_error("[--timing-log-level] must be 0, 1 or 2, got ", c.timing_log_level);
  }
  c.timing_log_option = a.get_string("--timing-log-option");
  train::parse_timing_log_option(c.timing_log_option);  // a bad value fails here, naming the flag
  c.barrier_with_l1_time = !a.get_flag("--no-barrier-with-level-1-timing");
  c.log_straggler = a.get_flag("--log-straggler");
  c.disable_straggler_on_startup = a.get_flag("--disable-straggler-on-startup");
  c.straggler_ctrlr_port = a.get_int("--straggler-ctrlr-port");
  if (c.straggler_ctrlr_port < 0 || c.straggler_ctrlr_port > 65535) {
    throw_error("[--straggler-ctrlr-port] must be a TCP port (0-65535; 0: any free one), got ", c.straggler_ctrlr_port);
  }
  c.straggler_minmax_count = a.get_int("--straggler-minmax-count", 1);
  c.check_weight_hash_interval = opt_int(a, "--check-weight-hash-across-dp-replicas-interval", 1);
  c.exit_interval = opt_int(a, "--exit-interval", 1);
  c.exit_duration_in_mins = opt_int(a, "--exit-duration-in-mins", 1);
  c.save_interval = opt_int(a, "--save-interval", 1);
  c.dry_run = a.get_flag("--dry-run");
  if (a.given("--save")) c.save = a.get_string("--save");
  if (a.given("--load")) c.load = a.get_string("--load");
  c.save_keep_last = a.get_int("--save-keep-last", 0);
  c.no_save_optim = a.get_flag("--no-save-optim");
  c.ckpt_fully_parallel_save = !a.get_flag("--no-ckpt-fully-parallel-save");
  c.async_save = a.get_flag("--async-save");
  if (c.async_save && !c.ckpt_fully_parallel_save) {
    throw_error("[--async-save] needs the parallel save (it cannot be given with --no-ckpt-fully-parallel-save)");
  }
  c.no_load_optim = a.get_flag("--no-load-optim");
  c.finetune = a.get_flag("--finetune");
  c.exit_on_missing_checkpoint = a.get_flag("--exit-on-missing-checkpoint");
  c.exit_signal_handler = a.get_flag("--exit-signal-handler");
  c.ckpt_step = opt_int(a, "--ckpt-step", 1);
  c.skip_train = a.get_flag("--skip-train");
  if ((c.finetune || c.no_load_optim || c.exit_on_missing_checkpoint || c.ckpt_step) && !c.load) {
    throw_error("[--load] is required by ", c.finetune ? "--finetune" : c.no_load_optim ? "--no-load-optim"
                                            : c.ckpt_step ? "--ckpt-step" : "--exit-on-missing-checkpoint");
  }
  if (a.given("--tensorboard-dir")) c.tensorboard_dir = a.get_string("--tensorboard-dir");
  c.tensorboard_queue_size = a.get_int("--tensorboard-queue-size", 1);
  c.tensorboard_log_interval = a.get_int("--tensorboard-log-interval", 1);
  c.log_batch_size_to_tensorboard = a.get_flag("--log-batch-size-to-tensorboard");
  c.log_memory_to_tensorboard = a.get_flag("--log-memory-to-tensorboard");
  c.log_world_size_to_tensorboard = a.get_flag("--log-world-size-to-tensorboard");
  c.log_timers_to_tensorboard = a.get_flag("--log-timers-to-tensorboard");
  c.log_validation_ppl_to_tensorboard = a.get_flag("--log-validation-ppl-to-tensorboard");
  c.log_learning_rate_to_tensorboard = !a.get_flag("--no-log-learning-rate-to-tensorboard");
  c.log_loss_scale_to_tensorboard = !a.get_flag("--no-log-loss-scale-to-tensorboard");
  if (a.given("--log-jsonl")) c.log_jsonl = a.get_string("--log-jsonl");

  c.data_path = a.get_list("--data-path");
  if (a.given("--data-args-path")) {
    if (a.given("--data-path")) throw_error("[--data-args-path] cannot be combined with --data-path (give one)");
    c.data_path = read_words(a.get_string("--data-args-path"), "--data-args-path");
    if (c.data_path.empty()) throw_error("[--data-args-path] ", a.get_string("--data-args-path"), " holds no data path");
  }
  c.mock_data = a.get_flag("--mock-data");
  c.eod_mask_loss = a.get_flag("--eod-mask-loss");
  c.calculate_per_token_loss = a.get_flag("--calculate-per-token-loss");
  c.model.reset_position_ids = a.get_flag("--reset-position-ids");
  c.model.reset_attention_mask = a.get_flag("--reset-attention-mask");
  if (c.mock_data && !c.data_path.empty()) {
    throw_error("[--mock-data] cannot be combined with ", a.given("--data-args-path") ? "--data-args-path" : "--data-path",
                " (give one)");
  }
  for (int s = 0; s < 3; ++s) {
    const char* flag = data::kSplitDataPathFlags[s];
    c.split_data_path[s] = a.get_list(flag);
    if (c.mock_data && a.given(flag)) throw_error("[--mock-data] cannot be combined with ", flag, " (give one)");
    if (a.given(flag) && c.split_data_path[s].empty()) throw_error("[", flag, "] no dataset prefix given");
  }
  if (a.given("--per-split-data-args-path")) {
    for (const char* flag : data::kSplitDataPathFlags) {
      if (a.given(flag)) throw_error("[--per-split-data-args-path] cannot be combined with ", flag, " (give one)");
    }
    c.split_data_path = read_per_split_data_args(a.get_string("--per-split-data-args-path"));
    if (c.mock_data) throw_error("[--mock-data] cannot be combined with --per-split-data-args-path (give one)");
  }
  c.split = a.get_string("--split");
  if (a.given("--vocab-file")) c.vocab_file = a.get_string("--vocab-file");
  if (a.given("--merge-file")) c.merge_file = a.get_string("--merge-file");
  if (a.given("--data-cache-path")) c.data_cache_path = a.get_string("--data-cache-path");
  c.tokenizer_type = a.get_string("--tokenizer-type");
  c.seed = a.get_int("--seed");
  data::check_numpy_seed(c.seed, "--seed");  // the datasets shuffle with numpy.random.RandomState(seed)
  const bool null_tokenizer = c.tokenizer_type == "NullTokenizer";
  if (null_tokenizer) {
    // Megatron's _NullTokenizer(vocab_size): the EOD is the id after the vocabulary.
    if (!a.given("--vocab-size")) throw_error("[--vocab-size] is required by --tokenizer-type NullTokenizer");
    // Token ids 0..N are int32.
    c.null_vocab_size = a.get_int("--vocab-size", 1, kMaxDimension - 1);
  } else if (a.given("--vocab-size")) {
    if (c.tokenizer_type != "TikTokenizer" && c.tokenizer_type != "HuggingFaceTokenizer") {
      throw_error("[--vocab-size] is not used by --tokenizer-type ", c.tokenizer_type,
                  " (its vocabulary is its files'); it applies to NullTokenizer and TikTokenizer");
    }
    c.tokenizer_vocab_size = a.get_int("--vocab-size", 1, kMaxDimension - 1);
  }
  if (a.given("--tokenizer-model")) c.tokenizer_model = a.get_string("--tokenizer-model");
  if (a.given("--tiktoken-pattern")) {
    c.tiktoken_pattern = a.get_string("--tiktoken-pattern");
    if (*c.tiktoken_pattern != "v1" && *c.tiktoken_pattern != "v2") {
      throw_error("[--tiktoken-pattern] expected v1 or v2, got '", *c.tiktoken_pattern, "'");
    }
  }
  c.tiktoken_num_special_tokens = a.get_int("--tiktoken-num-special-tokens", 0, kMaxDimension - 1);
  if (!c.dry_run) {
    if (c.data_path.empty() && !c.mock_data && c.split_data_path[0].empty()) {
      if (!c.split_data_path[1].empty() || !c.split_data_path[2].empty()) {
        throw_error("[--train-data-path] is required with --valid-data-path or --test-data-path (no training data)");
      }
      throw_error("[--data-path] is required (unless --dry-run, --mock-data or --train-data-path)");
    }
    if (!null_tokenizer) {
      std::string problems;
      for (const std::string& e : data::tokenizer_option_errors(tokenizer_options(c))) {
        const bool missing = e.find("is required") != std::string::npos;
        problems += str_cat(problems.empty() ? "" : "; ", e, missing ? " (unless --dry-run)" : "");
      }
      if (!problems.empty()) throw Error(problems);
    }
  }
}

}  // namespace

const std::vector<ModelPreset>& model_presets() { return kPresets; }

void declare_train_flags(Args& args) {
  declare_supported_flags(args);
  declare_table_flags(args);
}

train::TrainConfig parse_train_config(const Args& args, int64_t world_size, std::ostream* log) {
  // Not-supported-yet flags first: their message is the most useful one.
  check_table_flags(args);
  TrainConfig c;
  fill_model(args, c);
  fill_parallel_and_batch(args, c, world_size, log);
  fill_schedule(args, c);
  fill_optimizer_and_precision(args, c, log);
  fill_recompute(args, c);
  fill_logging_and_data(args, c);
  check_sample_counts(c);
  if (c.log_progress && !c.save && log != nullptr) {
    *log << "warning: --log-progress writes <--save>/progress.txt; without --save nothing is written\n";
  }
  if (c.model.reset_attention_mask && args.get_flag("--no-create-attention-mask-in-dataloader") && log != nullptr) {
    *log << "warning: --reset-attention-mask with --no-create-attention-mask-in-dataloader: Megatron then builds no "
            "mask and attends across documents; here attention stays within each document\n";
  }
  if (!c.log_straggler && log != nullptr) {
    for (const char* flag : {"--disable-straggler-on-startup", "--straggler-ctrlr-port", "--straggler-minmax-count"}) {
      if (args.given(flag)) *log << "warning: " << flag << " has no effect without --log-straggler\n";
    }
  }
  return c;
}

int64_t vocab_size_without_files(const train::TrainConfig& c) {
  constexpr int64_t kGpt2VocabSize = 50257;  // len(encoder) of GPT-2's vocab.json
  return c.null_vocab_size ? *c.null_vocab_size + 1 : kGpt2VocabSize;
}

data::TokenizerOptions tokenizer_options(const train::TrainConfig& c) {
  data::TokenizerOptions o;
  o.type = c.tokenizer_type;
  o.vocab_file = c.vocab_file;
  o.merge_file = c.merge_file;
  o.tokenizer_model = c.tokenizer_model;
  o.vocab_size = c.tokenizer_vocab_size;
  o.tiktoken_pattern = c.tiktoken_pattern;
  o.tiktoken_num_special_tokens = c.tiktoken_num_special_tokens;
  return o;
}

std::string cuda_attention_problem(const train::TrainConfig& c) {
  const int64_t d = c.model.kv_channels;
  if (d <= backend::kOwnAttentionMaxHeadDim) return "";
  const std::string what = str_cat("[--hidden-size / --num-attention-heads / --kv-channels] head_dim ", d,
                                   " runs on CUDA only on cuDNN's fused attention (our kernels take up to ",
                                   backend::kOwnAttentionMaxHeadDim, "), ");
  if (!c.bf16 && !c.fp16) return what + "which needs --bf16 or --fp16";
  if (c.tensor_model_parallel_size > 1 && c.model.attention_dropout > 0.0f) {
    return what + "which cannot apply attention dropout over a tensor-parallel share of the heads: give "
                  "--attention-dropout 0 or --tensor-model-parallel-size 1";
  }
  return "";
}

std::vector<std::string> checkpoint_model_args(const Args& a, std::ostream* log) {
  std::vector<std::string> extra;
  if (!a.get_flag("--use-checkpoint-args")) return extra;
  if (!a.given("--load")) throw_error("[--load] is required by --use-checkpoint-args");
  std::optional<int64_t> step;
  if (a.given("--ckpt-step")) step = a.get_int("--ckpt-step");
  const std::string load = a.get_string("--load");
  const train::LoadedCheckpoint ck = train::load_checkpoint_dir(load, step);
  if (!ck.found) throw_error("[--use-checkpoint-args] no checkpoint in ", load, " (", ck.tracker_path, " is missing)");
  const train::CheckpointMetadata meta(ck.directory + "/" + train::kMetadataFileName, ck.metadata_json);
  auto report = [&](const std::string& flag, const std::string& value) {
    if (log == nullptr) return;
    std::string name = flag.substr(2);
    std::replace(name.begin(), name.end(), '-', '_');
    *log << "Setting " << name << " to " << value << " from checkpoint\n";
  };
  auto take = [&](const std::string& flag, const std::string& value) {
    if (a.given(flag)) return;
    extra.push_back(flag);
    extra.push_back(value);
    report(flag, value);
  };
  for (const char* flag : {"--num-layers", "--hidden-size", "--num-attention-heads", "--kv-channels",
                           "--ffn-hidden-size", "--seq-length", "--max-position-embeddings",
                           "--make-vocab-size-divisible-by"}) {
    take(flag, std::to_string(meta.arg_int(flag)));
  }
  char eps[64];
  const auto written = std::to_chars(eps, eps + sizeof eps, meta.arg_double("--layernorm-epsilon"));  // shortest
  if (!a.given("--norm-epsilon")) take("--layernorm-epsilon", std::string(eps, written.ptr));
  const std::string tokenizer = meta.arg_string("--tokenizer-type");
  take("--tokenizer-type", tokenizer);
  if (tokenizer == "NullTokenizer" && !a.given("--tokenizer-type")) {
    take("--vocab-size", std::to_string(meta.arg_int("vocab_size") - 1));  // NullTokenizer: N + 1 ids
  }
  auto take_switch = [&](const std::string& flag, bool on) {
    if (!on || a.given(flag)) return;
    extra.push_back(flag);
    report(flag, "True");
  };
  take_switch("--untie-embeddings-and-output-weights", meta.arg_bool("--untie-embeddings-and-output-weights"));
  take_switch("--disable-bias-linear", meta.arg_bool("--disable-bias-linear"));
  take_switch("--swiglu", meta.optional_arg_bool("--swiglu").value_or(false));
  take("--normalization", meta.optional_arg_string("--normalization").value_or("LayerNorm"));
  take_switch("--no-bias-gelu-fusion", meta.arg_string("gelu") == "exact" && !a.given("--openai-gelu"));
  return extra;
}

}  // namespace megatron::cli
