#include "cli/checkpoint_tokenizer.h"

#include <simdjson.h>

#include <algorithm>
#include <filesystem>

#include "ckpt/checkpoint_contents.h"
#include "ckpt/checkpoint_metadata.h"
#include "cli/tokenizer_flags.h"
#include "core/error.h"
#include "data/tokenizer/sentencepiece_tokenizer.h"

namespace megatron::cli {

namespace fs = std::filesystem;

namespace {

ckpt::CheckpointMetadata metadata_of(const ckpt::LoadedCheckpoint& ck) {
  return ckpt::CheckpointMetadata(ck.directory + "/" + ckpt::kMetadataFileName, ck.metadata_json);
}

}  // namespace

data::TokenizerOptions checkpoint_tokenizer_options(const Args& args, const ckpt::LoadedCheckpoint& ck) {
  const ckpt::CheckpointMetadata meta = metadata_of(ck);
  const std::vector<std::string>& types = data::supported_tokenizer_types();
  std::optional<std::string> recorded_type = meta.optional_arg_string("--tokenizer-type");
  if (recorded_type && std::find(types.begin(), types.end(), *recorded_type) == types.end()) recorded_type.reset();

  data::TokenizerOptions o = tokenizer_options(args);  // --tokenizer-type absent: o.type is set below
  const bool type_given = args.given("--tokenizer-type");
  if (!type_given) o.type = recorded_type.value_or("GPT2BPETokenizer");
  // The recorded model file goes with the recorded type only.
  const bool same_type = recorded_type && *recorded_type == o.type;
  if (!args.given("--tokenizer-model") && same_type) {
    if (std::optional<std::string> model = meta.optional_arg_string("--tokenizer-model")) {
      std::error_code ec;
      if (!fs::exists(*model, ec)) {
        // A moved checkpoint: its own copy of the files (convert --load-hf puts them beside
        // model.safetensors), the directory itself for a tokenizer.json directory.
        const fs::path name = fs::path(*model).filename();
        if (o.type == "HuggingFaceTokenizer" && fs::exists(fs::path(ck.directory) / "tokenizer.json", ec)) {
          *model = ck.directory;
        } else if (!name.empty() && fs::exists(fs::path(ck.directory) / name, ec)) {
          *model = (fs::path(ck.directory) / name).string();
        } else {
          throw_error("[--tokenizer-model] the checkpoint in ", ck.directory, " records ", *model,
                      ", which does not exist; give --tokenizer-model");
        }
      }
      o.tokenizer_model = *model;
    }
  }
  return o;
}

bool GenerationTokens::stops(int32_t id) const { return std::find(stop.begin(), stop.end(), id) != stop.end(); }

GenerationTokens generation_tokens(const data::TokenizerOptions& options, const data::Tokenizer* tokenizer,
                                   const ckpt::LoadedCheckpoint& ck) {
  GenerationTokens g;
  if (tokenizer != nullptr && options.type == "Llama2Tokenizer") {
    const auto* sp = dynamic_cast<const data::SentencePieceTokenizer*>(tokenizer);
    if (sp != nullptr && sp->bos() >= 0) g.prefix.push_back(sp->bos());
  }
  if (tokenizer != nullptr) {
    try {
      g.stop.push_back(tokenizer->eod());
    } catch (const Error&) {
      // No end-of-document token (a tokenizer.json without eos_token): only the length stops.
    }
  }
  const int64_t vocab = ckpt::read_checkpoint_model(ck).config.vocab_size;
  // hf_eos_token_id: config.json's eos_token_id as JSON text, an id or a list of ids.
  if (std::optional<std::string> eos = metadata_of(ck).optional_arg_string("hf_eos_token_id")) {
    simdjson::dom::parser parser;
    simdjson::dom::element e;
    if (parser.parse(*eos).get(e) == simdjson::SUCCESS) {
      auto add = [&](simdjson::dom::element v) {
        int64_t id = 0;
        if (v.get_int64().get(id) == simdjson::SUCCESS && id >= 0 && id < vocab && !g.stops(static_cast<int32_t>(id))) {
          g.stop.push_back(static_cast<int32_t>(id));
        }
      };
      simdjson::dom::array list;
      if (e.get_array().get(list) == simdjson::SUCCESS) {
        for (simdjson::dom::element v : list) add(v);
      } else {
        add(e);
      }
    }
  }
  return g;
}

}  // namespace megatron::cli
