#include "cli/train_flag_table.h"

#include <cctype>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace megatron::cli {
namespace {

// ---------------------------------------------------------------------------------------------
// The flags that are accepted without effect, or not supported yet (train_flag_families.cpp holds
// the rows of current Megatron's features by family). To enable a feature, delete its row (or
// widen its accepted values) and read the flag in parse_train_config() (cli/train_args.cpp, whose
// declare_supported_flags() declares the supported flags). A row whose name is not current
// Megatron's says where it comes from in its last field (FlagOrigin).
// ---------------------------------------------------------------------------------------------
constexpr FlagOrigin kOlder = FlagOrigin::kOlderMegatron;
constexpr FlagOrigin kOurs = FlagOrigin::kOurs;

constexpr const char* kCkpt = "checkpoints use one format: safetensors + metadata.json (--save/--load)";
constexpr const char* kVariant = "this model variant is not implemented yet";

constexpr FlagRow kFlagTable[] = {
    // Parallelism: only the listed values run here.
    {"--context-parallel-size", FlagType::kValue, FlagState::kValues, "1", "context parallelism"},
    {"--expert-model-parallel-size", FlagType::kValue, FlagState::kValues, "1", "mixture of experts"},
    {"--num-experts", FlagType::kValue, FlagState::kUnsupported, "", "mixture of experts"},
    {"--distribute-saved-activations", FlagType::kSwitch, FlagState::kUnsupported, "",
     "activation partitioning over tensor-parallel ranks"},
    {"--data-parallel-random-init", FlagType::kSwitch, FlagState::kUnsupported, "", "per-replica initialisation"},
    {"--decrease-batch-size-if-needed", FlagType::kSwitch, FlagState::kUnsupported, "",
     "global batch must divide exactly"},
    // Checkpoints.
    {"--pretrained-checkpoint", FlagType::kValue, FlagState::kUnsupported, "", kCkpt},
    {"--ckpt-format", FlagType::kValue, FlagState::kValues, "torch_dist|torch|torch_dcp|fsdp_dtensor",
     "no-op: checkpoints are written and read in one format here, safetensors + metadata.json (Megatron's "
     "checkpoint files are not read; Hugging Face ones through megatron convert)"},
    {"--use-dist-ckpt", FlagType::kSwitch, FlagState::kUnsupported, "", kCkpt},
    {"--auto-detect-ckpt-format", FlagType::kSwitch, FlagState::kUnsupported, "", kCkpt},
    {"--non-persistent-save-interval", FlagType::kValue, FlagState::kUnsupported, "", kCkpt},
    // Model variants.
    {"--normalization", FlagType::kValue, FlagState::kValues, "LayerNorm|RMSNorm", "LayerNorm or RMSNorm"},
    {"--position-embedding-type", FlagType::kValue, FlagState::kValues, "learned_absolute|rope|none",
     "learned_absolute, rope or none"},
    {"--squared-relu", FlagType::kSwitch, FlagState::kUnsupported, "", kVariant},
    {"--apply-residual-connection-post-layernorm", FlagType::kSwitch, FlagState::kUnsupported, "", kVariant},
    {"--apply-query-key-layer-scaling", FlagType::kSwitch, FlagState::kUnsupported, "", kVariant},
    {"--fp32-residual-connection", FlagType::kSwitch, FlagState::kUnsupported, "", kVariant},
    {"--fp16-lm-cross-entropy", FlagType::kSwitch, FlagState::kUnsupported, "", "the cross-entropy runs in fp32"},
    {"--recompute-modules", FlagType::kList, FlagState::kUnsupported, "",
     "selective recompute covers core attention only"},
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
    {"--data-impl", FlagType::kValue, FlagState::kValues, "mmap|infer", "only the mmap indexed format (MMIDIDX)",
     kOlder},
    {"--dataloader-type", FlagType::kValue, FlagState::kValues, "single", "only the 'single' sampler"},
    {"--optimizer", FlagType::kValue, FlagState::kValues, "adam", "only Adam(W)"},
    // Accepted, no effect here.
    {"--num-workers", FlagType::kValue, FlagState::kNoOp, "",
     "no-op: samples come from memory-mapped files in the trainer"},
    {"--DDP-impl", FlagType::kValue, FlagState::kValues, "local|torch", "no-op: gradient reduction is our own", kOlder},
    {"--use-contiguous-buffers-in-local-ddp", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: gradients always live in one buffer", kOurs},
    {"--no-contiguous-buffers-in-local-ddp", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: gradients always live in one buffer", kOlder},
    {"--use-flash-attn", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: the backend picks its fused attention kernel"},
    {"--attention-backend", FlagType::kValue, FlagState::kValues, "auto|flash|fused|unfused|local",
     "no-op: the backend picks its fused attention kernel"},
    {"--transformer-impl", FlagType::kValue, FlagState::kValues, "local|transformer_engine",
     "no-op: one implementation"},
    {"--use-mcore-models", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: one implementation"},
    {"--use-legacy-models", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: one implementation", kOlder},
    {"--no-masked-softmax-fusion", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: kernel fusion does not change results"},
    {"--no-bias-dropout-fusion", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: kernel fusion does not change results"},
    {"--no-persist-layer-norm", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: kernel choice"},
    {"--no-gradient-accumulation-fusion", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: kernel choice"},
    {"--no-async-tensor-model-parallel-allreduce", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: overlap is automatic", kOlder},
    {"--cross-entropy-loss-fusion", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: the cross-entropy is always fused"},
    {"--attention-softmax-in-fp32", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: softmax always runs in fp32"},
    {"--no-create-attention-mask-in-dataloader", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: the causal mask is implicit"},
    {"--empty-unused-memory-level", FlagType::kValue, FlagState::kValues, "0|1|2", "no-op: memory is planned up front"},
    {"--manual-gc", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: no garbage collector"},
    {"--local-rank", FlagType::kValue, FlagState::kNoOp, "", "no-op: ranks come from the environment"},
    // Megatron-Core-era flags of current scripts (megatron/training/arguments.py).
    {"--manual-gc-interval", FlagType::kValue, FlagState::kNoOp, "", "no-op: no garbage collector"},
    {"--manual-gc-eval", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: no garbage collector", kOurs},
    {"--no-manual-gc-eval", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: no garbage collector"},
    {"--rerun-mode", FlagType::kValue, FlagState::kValues, "disabled",
     "the rerun state machine (validate_results, report_stats); NaN losses stop the run instead"},
    {"--num-dataset-builder-threads", FlagType::kValue, FlagState::kNoOp, "",
     "no-op: the sample indices are built in one pass"},
    {"--mmap-bin-files", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: the .bin files are always memory-mapped",
     kOurs},
    {"--no-mmap-bin-files", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: the .bin files are always memory-mapped"},
    {"--enable-one-logger", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: no telemetry is sent anywhere", kOlder},
    {"--no-one-logger", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: no telemetry is sent anywhere"},
    {"--te-rng-tracker", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: dropout masks come from a stateless Philox stream"},
    {"--ckpt-fully-parallel-save", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op, as in Megatron: the parallel save is the default (--no-ckpt-fully-parallel-save turns it off)"},
    {"--ckpt-fully-parallel-load", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: every rank always reads only its own part of a checkpoint"},
    {"--ckpt-assume-constant-structure", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: a torch_dist option; checkpoints here are safetensors"},
    {"--dist-ckpt-strictness", FlagType::kValue, FlagState::kNoOp, "",
     "no-op: a torch_dist option; checkpoints here are safetensors"},
    {"--ddp-average-in-collective", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: data-parallel gradients are always averaged inside the collective"},
    {"--align-grad-reduce", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: when buckets start changes no value",
     kOurs},
    {"--no-align-grad-reduce", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: when buckets start changes no value"},
    {"--align-param-gather", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: when gathers start changes no value",
     kOlder},
    {"--no-align-param-gather", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: when gathers start changes no value"},
    {"--overlap-param-gather-with-optimizer-step", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: parameters gather as with --overlap-param-gather"},
    {"--defer-embedding-wgrad-compute", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: a scheduling choice, the same gradients"},
    {"--async-tensor-model-parallel-allreduce", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: overlap is automatic",
     kOlder},
    {"--use-ring-exchange-p2p", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: pipeline messages go point to point"},
    {"--no-initialization", FlagType::kSwitch, FlagState::kNoOp, "",
     "no-op: initialisation on the device takes milliseconds"},
    {"--memory-efficient-layer-norm", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: kernel choice", kOurs},
    {"--gradient-accumulation-fusion", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: kernel choice", kOurs},
    {"--no-rope-fusion", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: kernel choice"},
    {"--bias-swiglu-fusion", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: kernel choice", kOlder},
    {"--no-bias-swiglu-fusion", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: kernel choice"},
    {"--no-query-key-layer-scaling", FlagType::kSwitch, FlagState::kNoOp, "", "no-op: query-key layer scaling is off",
     kOlder},
    {"--tp-comm-overlap", FlagType::kSwitch, FlagState::kUnsupported, "",
     "TP communication overlap (Transformer Engine userbuffers)"},
    {"--use-tp-pp-dp-mapping", FlagType::kSwitch, FlagState::kUnsupported, "",
     "ranks follow Megatron's default tp-cp-dp-pp order"},
    {"--microbatch-group-size-per-virtual-pipeline-stage", FlagType::kValue, FlagState::kUnsupported, "",
     "the interleaved schedule groups pipeline-size micro-batches"},
    {"--head-lr-mult", FlagType::kValue, FlagState::kUnsupported, "", "one learning rate for all parameters"},
    {"--init-method-xavier-uniform", FlagType::kSwitch, FlagState::kUnsupported, "", "normal initialisation only"},
    {"--full-validation", FlagType::kSwitch, FlagState::kUnsupported, "", "validation runs --eval-iters iterations"},
    {"--multiple-validation-sets", FlagType::kSwitch, FlagState::kUnsupported, "", "one validation set"},
    {"--use-pytorch-profiler", FlagType::kSwitch, FlagState::kUnsupported, "",
     "no PyTorch here: --profile starts and stops the CUDA profiler (nsys) instead"},
    {"--record-memory-history", FlagType::kSwitch, FlagState::kUnsupported, "",
     "no caching allocator to record: --dry-run prints every byte the engine allocates"},
    {"--no-shared-storage", FlagType::kSwitch, FlagState::kUnsupported, "",
     "rank 0 builds the sample indices for all ranks on shared storage", kOurs},
    {"--local_rank", FlagType::kValue, FlagState::kNoOp, "", "no-op: ranks come from the environment", kOlder},
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

bool is_integer_text(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

bool value_accepted(const FlagRow& row, const std::string& name, const std::string& value) {
  for (const std::string& a : split_values(row.values)) {
    if (a == value) return true;
    if (is_integer_text(a)) {
      try {
        if (parse_int(value, name) == std::stoll(a)) return true;
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

bool is_no_op(const FlagRow& row) {
  return row.state == FlagState::kNoOp ||
         (row.state == FlagState::kValues && std::string_view(row.note).starts_with("no-op"));
}

}  // namespace

std::vector<FlagRow> train_flag_rows() {
  std::vector<FlagRow> rows(std::begin(kFlagTable), std::end(kFlagTable));
  const std::span<const FlagRow> families = family_flag_rows();
  rows.insert(rows.end(), families.begin(), families.end());
  return rows;
}

FlagOrigin train_flag_origin(const std::string& name) {
  for (const FlagRow& row : train_flag_rows()) {
    for (const std::string& n : split_values(row.name)) {
      if (n == name) return row.origin;
    }
  }
  for (const NamedOrigin& o : supported_flag_origins()) {
    if (name == o.name) return o.origin;
  }
  return FlagOrigin::kMegatron;
}

void declare_table_flags(Args& a) {
  for (const FlagRow& row : train_flag_rows()) {
    std::string help;
    switch (row.state) {
      case FlagState::kNoOp:
        help = row.note;
        break;
      case FlagState::kValues:
        help = str_cat("only ", join(split_values(row.values), ", "), " (", row.note, ")");
        break;
      case FlagState::kUnsupported:
        help = str_cat("not supported yet (", row.note, ")");
        break;
      case FlagState::kRemoved:
        help = "rejected (as in Megatron)";
        break;
    }
    if (row.origin == FlagOrigin::kOlderMegatron) help += " [older Megatron-LM's flag]";
    for (const std::string& name : split_values(row.name)) {
      switch (row.type) {
        case FlagType::kSwitch:
          a.flag(name, help);
          break;
        case FlagType::kValue: {
          std::optional<std::string> def;
          if (row.state == FlagState::kValues) def = split_values(row.values).front();
          a.option(name, "X", help, def);
          break;
        }
        case FlagType::kList:
          a.list(name, "X", help);
          break;
      }
    }
  }
}

std::vector<std::string> table_flag_errors(const Args& a) {
  std::vector<std::string> errors;
  for (const FlagRow& row : train_flag_rows()) {
    for (const std::string& name : split_values(row.name)) {
      if (!a.given(name)) continue;
      switch (row.state) {
        case FlagState::kNoOp:
          break;
        case FlagState::kUnsupported:
          errors.push_back(str_cat("[", name, "] is not supported yet (", row.note, ")"));
          break;
        case FlagState::kRemoved:
          errors.push_back(str_cat("[", name, "] is not accepted: ", row.note));
          break;
        case FlagState::kValues: {
          const std::string v = a.get_string(name);
          if (!value_accepted(row, name, v)) {
            errors.push_back(str_cat("[", name, "] ", v, " is not supported yet (", row.note,
                                     "; accepted: ", join(split_values(row.values), ", "), ")"));
          }
          break;
        }
      }
    }
  }
  return errors;
}

void print_table_notes(const Args& a, std::ostream& log) {
  for (const FlagRow& row : train_flag_rows()) {
    if (!is_no_op(row)) continue;
    for (const std::string& name : split_values(row.name)) {
      if (!a.given(name)) continue;
      std::string_view why = row.note;
      if (why.starts_with("no-op: ")) why.remove_prefix(7);
      if (why.starts_with("no-op, ")) why.remove_prefix(7);
      log << "note: " << name << " has no effect here (" << why << ")\n";
    }
  }
}

}  // namespace megatron::cli
