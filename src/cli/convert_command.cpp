// megatron convert: checkpoint <-> Hugging Face GPT-2, and offline resharding
// (docs/checkpoints.md, "Converting").
//
//   megatron convert --load A --save B [--target-tensor-parallel-size T]
//                    [--target-pipeline-model-parallel-size P] [--make-vocab-size-divisible-by N]
//       our checkpoint for another layout (convert/reshard.h): re-padded vocabulary, layout recorded
//   megatron convert --load A --save-hf H        model weights -> HF GPT-2 (convert/hf_gpt2.h)
//   megatron convert --load-hf H --save B [--target-tensor-parallel-size T] [...]
//       HF GPT-2 -> a release checkpoint (model only, iteration 0)
// The output is always a new directory written atomically; the input is never modified.
#include <iostream>
#include <optional>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "convert/hf_gpt2.h"
#include "convert/reshard.h"

namespace megatron::cli {
namespace {

std::optional<int64_t> opt_int(const Args& a, const std::string& flag) {
  if (!a.given(flag)) return std::nullopt;
  return a.get_int(flag);
}

void refuse(const Args& a, const std::string& flag, const std::string& why) {
  if (a.given(flag)) throw_error("[", flag, "] ", why);
}

}  // namespace

int run_convert(const CommandArgs& argv) {
  Args args("convert", "checkpoint <-> Hugging Face GPT-2 safetensors, reshard for another TP/PP layout");
  args.option("--load", "DIR", "our checkpoint directory to read (its latest iteration)")
      .option("--load-hf", "DIR", "a Hugging Face GPT-2 directory to read (config.json + model.safetensors)")
      .option("--save", "DIR", "write our checkpoint here (a new directory)")
      .option("--save-hf", "DIR", "write Hugging Face GPT-2 files here (a new directory)")
      .option("--iteration", "N", "read this iteration of --load instead of the latest")
      .option("--target-tensor-parallel-size", "T", "tensor-parallel size the output is padded and recorded for")
      .option("--target-pipeline-model-parallel-size", "P", "pipeline-parallel size the output is recorded for")
      .option("--make-vocab-size-divisible-by", "N",
              "pad the vocabulary to a multiple of N * T (default: the checkpoint's; 128 for --load-hf)")
      .option("--seq-length", "S", "--load-hf: the sequence length recorded (default n_positions)");
  if (!args.parse(argv)) {
    std::cout << args.usage();
    return 0;
  }
  const bool load = args.given("--load"), load_hf = args.given("--load-hf");
  const bool save = args.given("--save"), save_hf = args.given("--save-hf");
  if (load == load_hf) throw_error("[--load] give exactly one of --load DIR and --load-hf DIR");
  if (save == save_hf) throw_error("[--save] give exactly one of --save DIR and --save-hf DIR");
  if (load_hf && save_hf) throw_error("[--save-hf] --load-hf reads Hugging Face files; write ours with --save DIR");
  const std::optional<int64_t> tp = opt_int(args, "--target-tensor-parallel-size");
  const std::optional<int64_t> pp = opt_int(args, "--target-pipeline-model-parallel-size");
  const std::optional<int64_t> divisible = opt_int(args, "--make-vocab-size-divisible-by");
  if (!load_hf) refuse(args, "--seq-length", "applies to --load-hf only (a checkpoint keeps its own)");
  if (load_hf) refuse(args, "--iteration", "applies to --load only");

  if (load && save) {
    convert::ReshardOptions o;
    o.tensor_model_parallel_size = tp;
    o.pipeline_model_parallel_size = pp;
    o.make_vocab_size_divisible_by = divisible;
    o.iteration = opt_int(args, "--iteration");
    const convert::ReshardResult r = convert::reshard_checkpoint(args.get_string("--load"), args.get_string("--save"), o);
    std::cout << "converted " << (r.release ? std::string("the release checkpoint") : "iteration " + std::to_string(r.iteration))
              << ": tensor-model-parallel size " << r.old_tp << " -> " << r.new_tp << ", pipeline-model-parallel size "
              << r.old_pp << " -> " << r.new_pp << ", padded vocab " << r.old_padded_vocab_size << " -> "
              << r.new_padded_vocab_size << " (size " << r.vocab_size << ", " << r.repadded.size()
              << " tensors re-padded)\n"
              << "saved to " << args.get_string("--save") << "\n";
    return 0;
  }
  if (load && save_hf) {
    const char* why = "does not apply to --save-hf (Hugging Face files hold the unpadded vocabulary)";
    refuse(args, "--target-tensor-parallel-size", why);
    refuse(args, "--target-pipeline-model-parallel-size", why);
    refuse(args, "--make-vocab-size-divisible-by", why);
    const convert::HfExportResult r =
        convert::export_hf_gpt2(args.get_string("--load"), opt_int(args, "--iteration"), args.get_string("--save-hf"));
    std::cout << "exported iteration " << r.iteration << " as Hugging Face GPT-2: " << r.tensors << " tensors, vocab "
              << r.vocab_size << " (" << r.padded_vocab_size - r.vocab_size << " dummy rows dropped)\n"
              << "saved to " << args.get_string("--save-hf") << "\n";
    return 0;
  }
  convert::HfImportOptions o;
  if (tp) o.tensor_model_parallel_size = *tp;
  if (pp) o.pipeline_model_parallel_size = *pp;
  if (divisible) {
    if (*divisible <= 0) throw_error("[--make-vocab-size-divisible-by] must be positive, got ", *divisible);
    o.make_vocab_size_divisible_by = *divisible;
  }
  o.seq_length = opt_int(args, "--seq-length");
  const convert::HfImportResult r = convert::import_hf_gpt2(args.get_string("--load-hf"), args.get_string("--save"), o);
  std::cout << "imported Hugging Face GPT-2 (" << r.num_layers << " layers, hidden " << r.hidden_size << ", "
            << r.num_attention_heads << " heads): " << r.tensors << " tensors, padded vocab " << r.vocab_size << " -> "
            << r.padded_vocab_size << "\n"
            << "saved to " << args.get_string("--save") << " (a release checkpoint: model only, iteration 0)\n";
  return 0;
}

}  // namespace megatron::cli
