// megatron convert: checkpoint <-> Hugging Face GPT-2 and Llama, and offline resharding
// (docs/checkpoints.md, "Converting").
//
//   megatron convert --load A --save B [--target-tensor-parallel-size T]
//                    [--target-pipeline-model-parallel-size P] [--make-vocab-size-divisible-by N]
//       our checkpoint for another layout (convert/reshard.h): re-padded vocabulary, layout recorded
//   megatron convert --load A --save-hf H [--max-shard-size 5GB] [tokenizer flags]
//       model weights -> HF: LlamaForCausalLM for checkpoints with rotary embeddings
//       (convert/hf_llama.h, with the tokenizer's files), else GPT2LMHeadModel (convert/hf_gpt2.h)
//   megatron convert --load-hf H --save B [--target-tensor-parallel-size T] [...]
//       HF GPT-2, Llama or Mistral (config.json's model_type) -> a release checkpoint (model only,
//       iteration 0); for Llama the tokenizer found in H is copied into it and recorded
// The output is always a new directory written atomically; the input is never modified.
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_io.h"
#include "cli/args.h"
#include "cli/checkpoint_tokenizer.h"
#include "cli/commands.h"
#include "cli/tokenizer_flags.h"
#include "convert/hf_common.h"
#include "convert/hf_gpt2.h"
#include "convert/hf_llama.h"
#include "convert/reshard.h"
#include "core/error.h"
#include "data/tokenizer/sentencepiece_tokenizer.h"

namespace megatron::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTokenizerFlags[] = {"--tokenizer-type", "--tokenizer-model", "--vocab-file",
                                           "--merge-file",     "--vocab-size",      "--tiktoken-pattern"};

std::optional<int64_t> opt_int(const Args& a, const std::string& flag) {
  if (!a.given(flag)) return std::nullopt;
  return a.get_int(flag);
}

void refuse(const Args& a, const std::string& flag, const std::string& why) {
  if (a.given(flag)) throw_error("[", flag, "] ", why);
}

bool any_tokenizer_flag(const Args& a) {
  for (const char* f : kTokenizerFlags) {
    if (a.given(f)) return true;
  }
  return false;
}

void refuse_tokenizer_flags(const Args& a, const std::string& why) {
  for (const char* f : kTokenizerFlags) refuse(a, f, why);
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// `name` in dir as a file to write beside the weights, when it is there.
void add_if_present(std::vector<convert::HfExtraFile>* files, const fs::path& dir, const std::string& name) {
  if (is_file(dir / name)) files->push_back({name, (dir / name).string(), ""});
}

// The tokenizer of --save-hf: the flags', else the checkpoint's (cli/checkpoint_tokenizer.h);
// its files as transformers' AutoTokenizer reads them, and its BOS / EOS ids for config.json.
struct ExportTokenizer {
  std::vector<convert::HfExtraFile> files;
  std::optional<std::string> bos, eos;
  std::string note;  // why no files were written, when none were
};

ExportTokenizer export_tokenizer(const Args& args, const ckpt::LoadedCheckpoint& ck, const model::GPTConfig& g) {
  ExportTokenizer out;
  const data::TokenizerOptions o = checkpoint_tokenizer_options(args, ck);
  const bool sentencepiece =
      o.type == "Llama2Tokenizer" || o.type == "SentencePieceTokenizer" || o.type == "GPTSentencePieceTokenizer";
  const bool has_files = o.type == "GPT2BPETokenizer" ? o.vocab_file && o.merge_file : o.tokenizer_model.has_value();
  if (!any_tokenizer_flag(args) && !has_files) {
    out.note =
        "no tokenizer files written (the checkpoint records none; give --tokenizer-model, or --vocab-file and "
        "--merge-file)";
    return out;
  }
  if (o.type == "TikTokenizer") {
    throw_error(
        "[--tokenizer-type] TikTokenizer has no Hugging Face tokenizer files (export without the tokenizer flags)");
  }
  const std::unique_ptr<data::Tokenizer> tok = data::make_tokenizer(o);
  if (tok->vocab_size() != g.vocab_size) {
    throw_error("[--tokenizer-type] ", o.type, " has ", tok->vocab_size(),
                " tokens but the checkpoint's vocabulary is ", g.vocab_size);
  }
  try {
    out.eos = std::to_string(tok->eod());
  } catch (const Error&) {
  }
  if (o.type == "GPT2BPETokenizer") {
    out.files.push_back({"vocab.json", *o.vocab_file, ""});
    out.files.push_back({"merges.txt", *o.merge_file, ""});
    // transformers' GPT2Tokenizer reads these two files; tokenizer_config.json names it (config.json
    // says llama, whose default tokenizer is another).
    out.files.push_back({"tokenizer_config.json", "",
                         "{\n  \"add_bos_token\": false,\n  \"bos_token\": \"<|endoftext|>\",\n  \"eos_token\": "
                         "\"<|endoftext|>\",\n  \"model_max_length\": " +
                             std::to_string(g.max_position_embeddings) +
                             ",\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"unk_token\": \"<|endoftext|>\"\n}\n"});
    out.bos = out.eos;
    return out;
  }
  const fs::path model(*o.tokenizer_model);
  if (o.type == "HuggingFaceTokenizer") {
    std::error_code ec;
    const bool dir = fs::is_directory(model, ec);
    const fs::path home = dir ? model : model.parent_path();
    out.files.push_back({"tokenizer.json", dir ? (model / "tokenizer.json").string() : model.string(), ""});
    add_if_present(&out.files, home, "tokenizer_config.json");
    add_if_present(&out.files, home, "special_tokens_map.json");
    std::vector<int32_t> empty;  // the post-processor's template alone: its first id is the BOS
    tok->encode("", &empty);
    if (!empty.empty()) out.bos = std::to_string(empty.front());
    return out;
  }
  if (sentencepiece) {
    out.files.push_back({"tokenizer.model", model.string(), ""});
    if (model.filename() == "tokenizer.model") {  // a Hugging Face directory's copy: its configuration too
      add_if_present(&out.files, model.parent_path(), "tokenizer_config.json");
      add_if_present(&out.files, model.parent_path(), "special_tokens_map.json");
    }
    const auto* sp = dynamic_cast<const data::SentencePieceTokenizer*>(tok.get());
    if (sp != nullptr && sp->bos() >= 0) out.bos = std::to_string(sp->bos());
  }
  return out;
}

// The tokenizer of --load-hf: the flags' (recorded as given), else the one H holds
// (tokenizer.json that HuggingFaceTokenizer reads, else tokenizer.model for Llama2Tokenizer),
// copied into the checkpoint's directory and recorded there.
struct ImportTokenizer {
  std::string type, model;
  std::vector<convert::HfExtraFile> files;
  std::string note;
};

ImportTokenizer import_tokenizer(const Args& args, const std::string& hf_dir, const std::string& save_dir,
                                 int64_t vocab_size) {
  ImportTokenizer out;
  const fs::path release = fs::absolute(save_dir).lexically_normal() / ckpt::kReleaseDirName;
  std::unique_ptr<data::Tokenizer> tok;
  if (any_tokenizer_flag(args)) {
    data::TokenizerOptions o = tokenizer_options(args);
    if (!args.given("--tokenizer-type") && o.tokenizer_model) {
      std::error_code ec;
      const fs::path m(*o.tokenizer_model);
      o.type = fs::is_directory(m, ec) || m.extension() == ".json" ? "HuggingFaceTokenizer" : "Llama2Tokenizer";
    }
    if (o.tokenizer_model) o.tokenizer_model = fs::absolute(*o.tokenizer_model).lexically_normal().string();
    if (o.type == "GPT2BPETokenizer" || o.type == "TikTokenizer") {
      throw_error("[--tokenizer-type] ", o.type,
                  " cannot be recorded for a Llama checkpoint (its files are not "
                  "recorded); use HuggingFaceTokenizer or a SentencePiece type, or give the files to generate");
    }
    tok = data::make_tokenizer(o);
    out.type = o.type;
    out.model = o.tokenizer_model.value_or("");
  } else {
    const fs::path dir(hf_dir);
    std::string why;
    for (const auto& [file, type] : {std::pair<const char*, const char*>{"tokenizer.json", "HuggingFaceTokenizer"},
                                     {"tokenizer.model", "Llama2Tokenizer"}}) {
      if (!is_file(dir / file)) continue;
      data::TokenizerOptions o;
      o.type = type;
      o.tokenizer_model = std::string(file) == "tokenizer.json" ? dir.string() : (dir / file).string();
      try {
        tok = data::make_tokenizer(o);
      } catch (const Error& e) {
        why += std::string(why.empty() ? "" : "; ") + e.what();
        continue;
      }
      out.type = type;
      out.model = std::string(file) == "tokenizer.json" ? release.string() : (release / file).string();
      break;
    }
    if (!tok) {
      out.note = "no tokenizer recorded (" +
                 (why.empty() ? hf_dir + " holds no tokenizer.json or tokenizer.model" : why) +
                 "); give generate the tokenizer flags";
      return out;
    }
    for (const char* f : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"}) {
      add_if_present(&out.files, dir, f);
    }
  }
  if (tok->vocab_size() != vocab_size) {
    out.note = "the tokenizer has " + std::to_string(tok->vocab_size()) + " tokens, config.json's vocab_size is " +
               std::to_string(vocab_size) + ": generate needs them equal";
  }
  return out;
}

}  // namespace

int run_convert(const CommandArgs& argv) {
  Args args("convert", "checkpoint <-> Hugging Face GPT-2 / Llama safetensors, reshard for another TP/PP layout");
  args.option("--load", "DIR", "our checkpoint directory to read (its latest iteration)")
      .option(
          "--load-hf", "DIR",
          "a Hugging Face GPT-2, Llama or Mistral directory to read (config.json + model.safetensors or its shards)")
      .option("--save", "DIR", "write our checkpoint here (a new directory)")
      .option("--save-hf", "DIR",
              "write Hugging Face files here (a new directory): Llama for rotary checkpoints, else GPT-2")
      .option("--iteration", "N", "read this iteration of --load instead of the latest")
      .option("--target-tensor-parallel-size", "T", "tensor-parallel size the output is padded and recorded for")
      .option("--target-pipeline-model-parallel-size", "P", "pipeline-parallel size the output is recorded for")
      .option("--make-vocab-size-divisible-by", "N",
              "pad the vocabulary to a multiple of N * T (default: the checkpoint's; 128 for --load-hf)")
      .option("--seq-length", "S", "--load-hf: the sequence length recorded (default the model's positions)")
      .option("--max-shard-size", "SIZE",
              "--save-hf Llama: largest weight file, as transformers' save_pretrained (5GB, 500MB, 2GiB)", "5GB");
  declare_tokenizer_flags(args, "");
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
  if (!save_hf) refuse(args, "--max-shard-size", "applies to --save-hf only");

  if (load && save) {
    refuse_tokenizer_flags(args, "does not apply to resharding (the checkpoint's records are kept)");
    convert::ReshardOptions o;
    o.tensor_model_parallel_size = tp;
    o.pipeline_model_parallel_size = pp;
    o.make_vocab_size_divisible_by = divisible;
    o.iteration = opt_int(args, "--iteration");
    const convert::ReshardResult r =
        convert::reshard_checkpoint(args.get_string("--load"), args.get_string("--save"), o);
    std::cout << "converted "
              << (r.release ? std::string("the release checkpoint") : "iteration " + std::to_string(r.iteration))
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
    const std::string load_dir = args.get_string("--load"), hf_dir = args.get_string("--save-hf");
    const std::optional<int64_t> iteration = opt_int(args, "--iteration");
    const ckpt::LoadedCheckpoint ck = ckpt::load_checkpoint_dir(load_dir, iteration);
    if (!ck.found) throw_error("[--load] no checkpoint in ", load_dir, " (", ck.tracker_path, " is missing)");
    const ckpt::CheckpointModel cm = ckpt::read_checkpoint_model(ck);
    if (!cm.config.rope()) {
      refuse(args, "--max-shard-size", "applies to Llama exports (Hugging Face GPT-2 is one model.safetensors)");
      refuse_tokenizer_flags(args, "applies to Llama exports (Hugging Face GPT-2 export writes no tokenizer files)");
      const convert::HfExportResult r = convert::export_hf_gpt2(load_dir, iteration, hf_dir);
      std::cout << "exported iteration " << r.iteration << " as Hugging Face GPT-2: " << r.tensors << " tensors, vocab "
                << r.vocab_size << " (" << r.padded_vocab_size - r.vocab_size << " dummy rows dropped)\n"
                << "saved to " << hf_dir << "\n";
      return 0;
    }
    convert::HfLlamaExportOptions o;
    o.max_shard_bytes = convert::parse_shard_size(args.get_string("--max-shard-size"), "--max-shard-size");
    ExportTokenizer tok = export_tokenizer(args, ck, cm.config);
    o.tokenizer_files = std::move(tok.files);
    o.bos_token_id = tok.bos;
    o.eos_token_id = tok.eos;
    const convert::HfLlamaExportResult r = convert::export_hf_llama(load_dir, iteration, hf_dir, o);
    std::cout << "exported iteration " << r.iteration << " as Hugging Face LlamaForCausalLM: " << r.tensors
              << " tensors in " << r.shards << (r.shards == 1 ? " file" : " shards") << ", vocab " << r.vocab_size
              << " (" << r.padded_vocab_size - r.vocab_size << " dummy rows dropped)"
              << (o.tokenizer_files.empty() ? "" : ", " + std::to_string(o.tokenizer_files.size()) + " tokenizer files")
              << "\n";
    if (!tok.note.empty()) std::cout << "note: " << tok.note << "\n";
    std::cout << "saved to " << hf_dir << "\n";
    return 0;
  }

  const std::string hf_dir = args.get_string("--load-hf"), save_dir = args.get_string("--save");
  const std::string model_type = convert::hf_model_type(hf_dir);
  if (model_type == "llama" || model_type == "mistral" || model_type == "qwen2") {
    convert::HfLlamaImportOptions o;
    if (tp) o.tensor_model_parallel_size = *tp;
    if (pp) o.pipeline_model_parallel_size = *pp;
    if (divisible) {
      if (*divisible <= 0) throw_error("[--make-vocab-size-divisible-by] must be positive, got ", *divisible);
      o.make_vocab_size_divisible_by = *divisible;
    }
    o.seq_length = opt_int(args, "--seq-length");
    // The config is checked (and the vocabulary read) before the tokenizer is looked for.
    const int64_t vocab = convert::HfJson::read_file((fs::path(hf_dir) / convert::kHfConfigName).string(), "--load-hf")
                              .positive_int("vocab_size");
    ImportTokenizer tok = model_type == "qwen2" ? ImportTokenizer{} : import_tokenizer(args, hf_dir, save_dir, vocab);
    o.tokenizer_type = tok.type;
    o.tokenizer_model = tok.model;
    o.tokenizer_files = std::move(tok.files);
    const convert::HfLlamaImportResult r = convert::import_hf_llama(hf_dir, save_dir, o);
    std::cout << "imported Hugging Face " << r.architecture << " (" << r.num_layers << " layers, hidden "
              << r.hidden_size << ", " << r.num_attention_heads << " heads, " << r.num_query_groups
              << " key/value heads, " << r.rope << "): " << r.tensors << " tensors, padded vocab " << r.vocab_size
              << " -> " << r.padded_vocab_size << "\n";
    if (!tok.type.empty()) std::cout << "tokenizer: " << tok.type << " " << tok.model << "\n";
    if (!tok.note.empty()) std::cout << "note: " << tok.note << "\n";
    std::cout << "saved to " << save_dir << " (a release checkpoint: model only, iteration 0)\n";
    return 0;
  }
  if (!model_type.empty() && model_type != "gpt2") {
    throw_error("[--load-hf] ", (fs::path(hf_dir) / convert::kHfConfigName).string(), ": model_type \"", model_type,
                "\" is not supported (gpt2, llama, mistral)");
  }
  refuse_tokenizer_flags(args, "applies to Llama imports (a GPT-2 import records GPT2BPETokenizer)");
  convert::HfImportOptions o;
  if (tp) o.tensor_model_parallel_size = *tp;
  if (pp) o.pipeline_model_parallel_size = *pp;
  if (divisible) {
    if (*divisible <= 0) throw_error("[--make-vocab-size-divisible-by] must be positive, got ", *divisible);
    o.make_vocab_size_divisible_by = *divisible;
  }
  o.seq_length = opt_int(args, "--seq-length");
  const convert::HfImportResult r = convert::import_hf_gpt2(hf_dir, save_dir, o);
  std::cout << "imported Hugging Face GPT-2 (" << r.num_layers << " layers, hidden " << r.hidden_size << ", "
            << r.num_attention_heads << " heads): " << r.tensors << " tensors, padded vocab " << r.vocab_size << " -> "
            << r.padded_vocab_size << "\n"
            << "saved to " << save_dir << " (a release checkpoint: model only, iteration 0)\n";
  return 0;
}

}  // namespace megatron::cli
