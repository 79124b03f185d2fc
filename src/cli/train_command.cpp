// megatron train: Megatron-LM's pretrain_gpt.py on this process (CPU backend for now).
#include <iostream>
#include <optional>

#include "backend/ops.h"
#include "cli/args.h"
#include "cli/backend_choice.h"
#include "cli/commands.h"
#include "cli/train_args.h"
#include "core/error.h"
#include "data/tokenizer/gpt2_bpe_tokenizer.h"
#include "model/memory_plan.h"
#include "train/config.h"
#include "train/flops.h"
#include "train/trainer.h"

namespace megatron::cli {

namespace {
// GPT-2's vocabulary size, used by --dry-run when no --vocab-file is given.
constexpr int64_t kGpt2VocabSize = 50257;
}  // namespace

int run_train(const CommandArgs& argv) {
  Args args("train", "pretrain a GPT with Megatron-LM's pretrain_gpt.py flags");
  declare_train_flags(args);
  declare_device_flag(args);
  if (!args.parse(argv)) {
    std::cout << args.usage();
    return 0;
  }
  train::TrainConfig config = parse_train_config(args, /*world_size=*/1, &std::cout);

  // The tokenizer fixes the vocabulary (GPT2BPETokenizer: len(encoder) = 50257).
  if (config.vocab_file && config.merge_file) {
    data::GPT2BPETokenizer tokenizer(*config.vocab_file, *config.merge_file);
    config.model.vocab_size = tokenizer.vocab_size();
  } else if (config.dry_run) {
    config.model.vocab_size = kGpt2VocabSize;
  } else {
    throw_error("[--vocab-file] and [--merge-file] are required by --tokenizer-type GPT2BPETokenizer");
  }
  config.model.padded_vocab_size = train::padded_vocab_size(
      config.model.vocab_size, config.make_vocab_size_divisible_by, config.tensor_model_parallel_size, &std::cout);

  const DType dtype = config.bf16 ? DType::kBF16 : config.fp16 ? DType::kF16 : DType::kF32;
  if (config.dry_run) {
    const model::MemoryPlan plan = model::plan_memory(config.model, dtype, config.micro_batch_size);
    std::cout << model::format_memory_plan(plan);
    std::cout << train::flops_formula_text(config.model, config.global_batch_size, config.flops_convention);
    return 0;
  }
  if (config.data_path.empty()) throw_error("[--data-path] is required (a dataset prefix or weight/prefix pairs)");

  std::unique_ptr<backend::Backend> backend = make_backend(args, std::cout);
  train::Trainer trainer(config, *backend, std::cout);
  trainer.run();
  return 0;
}

}  // namespace megatron::cli
