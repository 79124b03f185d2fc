// The flags of `megatron train`: Megatron-LM's pretrain_gpt.py flags, same spelling, classic
// (C23) defaults, plus a few of ours (--model, --flops-convention, --dry-run).
//
// Every option of current Megatron-LM's arguments.py (tests/cli/fixtures/megatron_flags.txt) is
// declared, and so are older Megatron flags that job scripts still pass, in one of three states:
//  - supported: read into TrainConfig;
//  - a documented no-op: accepted because it changes nothing here (e.g. --data-impl mmap,
//    --use-flash-attn: the attention kernel is chosen by the backend); parse_train_config prints
//    one note per no-op given;
//  - not supported yet: a one-line error "[--flag] is not supported yet (reason)".
// The last two live in the flag table (train_flag_table.h): enabling a feature means deleting
// its row and reading the flag in parse_train_config(). The supported flags are declared in
// train_flags.cpp and read here, in train_args.cpp. Other flags are "unknown flag" errors that
// name the nearest known flag.
//
// --model NAME presets the shape (layers, hidden, heads, seq length); explicit flags override.
//   gpt2-124m 12/768/12, gpt2-350m 24/1024/16, gpt2-774m 36/1280/20, gpt2-1558m 48/1600/25
//     (seq 1024); gpt3-1.3b 24/2048/16, gpt3-2.7b 32/2560/32, gpt3-13b 40/5120/32 (the
//     benchmark's 13B evaluation shape), gpt3-175b 96/12288/96 (seq 2048);
//   the cloud test case's table (docs/performance-references.md §2.2), seq 2048:
//     gpt-1.7b 24/2304/24, gpt-3.6b 30/3072/32, gpt-7.5b 36/4096/32, gpt-18.4b 40/6144/48,
//     gpt-39.1b 48/8192/64, gpt-76.1b 60/10240/80, gpt-145.6b 80/12288/96, gpt-310.1b 96/16384/128
//   (layers/hidden/heads).
// --max-position-embeddings: classic Megatron requires it; here it defaults to --seq-length.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "data/tokenizer/tokenizer.h"
#include "train/config.h"

namespace megatron::cli {

// --nproc-per-node: the most worker processes one launcher forks on its node.
constexpr int64_t kMaxLocalWorkers = 1024;

// Declares every flag of `megatron train` on `args` (Args' constructor names the command).
void declare_train_flags(Args& args);

// Builds and validates the configuration from parsed `args`. world_size is the number of
// processes (dp = world_size / (tp * pp)). Megatron's start-up notes ("setting global batch size
// to N", "accumulate and all-reduce gradients in fp32 for bfloat16 data type.") go to `log`
// when it is not null, then one "note: --flag has no effect here (...)" line per no-op flag
// given. Throws megatron::Error holding every problem found, one line each naming the flag(s):
// the table's refusals, then the first error of each family of flags (model, layout and batch,
// schedule, optimizer and precision, recompute, logging and data; the layout and recompute
// checks are skipped when the model's shape is in error).
train::TrainConfig parse_train_config(const Args& args, int64_t world_size = 1, std::ostream* log = nullptr);

// The tokenizer's vocabulary when no tokenizer file is read (benchmarks, --dry-run):
// NullTokenizer's --vocab-size N (its end of document being N - 1), else GPT-2's 50257 (end of
// document 50256). Either way the end of document is the last id.
int64_t vocab_size_without_files(const train::TrainConfig& c);

// The tokenizer flags of `c` for data::make_tokenizer (not for NullTokenizer, which has no files).
data::TokenizerOptions tokenizer_options(const train::TrainConfig& c);

// What CUDA attention cannot run in `c`, or "": past our kernels' head_dim
// (backend::kOwnAttentionMaxHeadDim, 128) only cuDNN's fused attention runs, which needs bf16 or
// fp16 and cannot draw attention dropout over a tensor-parallel share of the heads. A one-line
// message naming the flags; the train and bench commands throw it on CUDA before allocating.
std::string cuda_attention_problem(const train::TrainConfig& c);

// --use-checkpoint-args (Megatron's load_args_from_checkpoint): the model's shape flags read
// from the metadata of --load's checkpoint (the latest, or --ckpt-step's), as extra argv for
// the flags not given on the command line (given ones win; a --model preset does not):
// --num-layers --hidden-size --num-attention-heads --kv-channels --ffn-hidden-size
// --seq-length --max-position-embeddings --make-vocab-size-divisible-by --layernorm-epsilon
// --tokenizer-type (NullTokenizer: also --vocab-size), and the switches
// --untie-embeddings-and-output-weights, --disable-bias-linear, --no-bias-gelu-fusion when the
// checkpoint has them. Each value taken is reported to `log` ("Setting num_layers to 24 from
// checkpoint"). Empty without the flag; Error without --load or without a checkpoint there.
std::vector<std::string> checkpoint_model_args(const Args& args, std::ostream* log = nullptr);

// A shape preset of --model.
// Explicit flags override each field. A Llama preset also implies Megatron's Llama flags:
// --normalization RMSNorm --swiglu --disable-bias-linear --position-embedding-type rope
// (and --untie-embeddings-and-output-weights unless tied).
struct ModelPreset {
  const char* name;
  int64_t num_layers;
  int64_t hidden_size;
  int64_t num_attention_heads;
  int64_t seq_length;
  int64_t ffn_hidden_size = 0;   // 0: the default (4h, or SwiGLU's int(8h/3/64)*64)
  int64_t num_query_groups = 0;  // > 0: --group-query-attention --num-query-groups
  // The vocabulary without tokenizer files (bench, --dry-run; 0: GPT-2's 50257).
  int64_t vocab_size = 0;
  bool llama = false;
  bool tied = true;  // Llama only: false adds --untie-embeddings-and-output-weights
  float rotary_base = 10000.0f;
  float rope_scaling_factor = 0.0f;  // > 0: --use-rope-scaling --rope-scaling-factor
};
const std::vector<ModelPreset>& model_presets();
// Their names, comma separated, in the table's order (for help and error texts).
std::string model_preset_names();

}  // namespace megatron::cli
