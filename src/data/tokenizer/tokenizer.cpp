// make_tokenizer: --tokenizer-type -> the tokenizer class, with Megatron's flag use
// (megatron/core/tokenizers/utils/build_tokenizer.py). See tokenizer.h.
#include "data/tokenizer/tokenizer.h"

#include <unistd.h>
#include <algorithm>

#include <filesystem>

#include "core/error.h"
#include "core/file.h"
#include "data/tokenizer/gpt2_bpe_tokenizer.h"
#include "data/tokenizer/hf_tokenizer.h"
#include "data/tokenizer/sentencepiece_tokenizer.h"
#include "data/tokenizer/tiktoken_tokenizer.h"

namespace megatron::data {

namespace {

// A file the flag names must be a readable regular file (a FIFO would block every reader): the
// one-line error names the flag and the file.
void check_readable(const std::string& flag, const std::string& path) {
  try {
    int64_t size = 0;
    ::close(open_regular_file(path, &size));
  } catch (const Error& e) {
    throw Error(str_cat("[", flag, "] ", e.what()));
  }
}

// Prefixes a file reader's "<file>:<line>: reason" with the flag that named the file.
template <class Make>
auto with_flag(const std::string& flag, Make&& make) {
  try {
    return make();
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.rfind("[", 0) == 0) throw;
    throw Error(str_cat("[", flag, "] ", what));
  }
}

}  // namespace

const std::vector<std::string>& supported_tokenizer_types() {
  static const std::vector<std::string> types = {"GPT2BPETokenizer",          "SentencePieceTokenizer",
                                                 "GPTSentencePieceTokenizer", "Llama2Tokenizer",
                                                 "HuggingFaceTokenizer",      "TikTokenizer"};
  return types;
}

std::vector<std::string> tokenizer_option_errors(const TokenizerOptions& o) {
  std::vector<std::string> errors;
  const auto& types = supported_tokenizer_types();
  if (std::find(types.begin(), types.end(), o.type) == types.end()) {
    std::string list;
    for (const std::string& t : types) list += (list.empty() ? "" : "|") + t;
    errors.push_back(str_cat("[--tokenizer-type] '", o.type, "' is not supported (expected ", list, ")"));
    return errors;
  }
  auto needs = [&](bool given, const char* flag) {
    if (!given) errors.push_back(str_cat("[", flag, "] is required by --tokenizer-type ", o.type));
  };
  auto unused = [&](bool given, const char* flag) {
    if (given) errors.push_back(str_cat("[", flag, "] is not used by --tokenizer-type ", o.type));
  };
  if (o.type == "GPT2BPETokenizer") {
    needs(o.vocab_file.has_value(), "--vocab-file");
    needs(o.merge_file.has_value(), "--merge-file");
    unused(o.tokenizer_model.has_value(), "--tokenizer-model");
    unused(o.vocab_size.has_value(), "--vocab-size");
  } else {
    needs(o.tokenizer_model.has_value(), "--tokenizer-model");
    unused(o.vocab_file.has_value(), "--vocab-file");
    unused(o.merge_file.has_value(), "--merge-file");
    if (o.type != "HuggingFaceTokenizer" && o.type != "TikTokenizer") unused(o.vocab_size.has_value(), "--vocab-size");
  }
  return errors;
}

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& o) {
  const std::vector<std::string> errors = tokenizer_option_errors(o);
  if (!errors.empty()) {
    std::string message;
    for (const std::string& e : errors) message += (message.empty() ? "" : "; ") + e;
    throw Error(message);
  }
  if (o.type == "GPT2BPETokenizer") {
    check_readable("--vocab-file", *o.vocab_file);
    check_readable("--merge-file", *o.merge_file);
    try {
      return std::make_unique<GPT2BPETokenizer>(*o.vocab_file, *o.merge_file);
    } catch (const Error& e) {
      const std::string what = e.what();
      const bool merges = what.rfind(*o.merge_file, 0) == 0 && what.rfind(*o.vocab_file, 0) != 0;
      throw Error(str_cat(merges ? "[--merge-file] " : "[--vocab-file] ", what));
    }
  }
  if (o.type == "HuggingFaceTokenizer") {
    std::error_code ec;
    const bool dir = std::filesystem::is_directory(*o.tokenizer_model, ec);
    const std::string json = dir ? (std::filesystem::path(*o.tokenizer_model) / "tokenizer.json").string() : "";
    if (!dir || std::filesystem::exists(json, ec)) check_readable("--tokenizer-model", dir ? json : *o.tokenizer_model);
    return with_flag("--tokenizer-model", [&]() -> std::unique_ptr<Tokenizer> {
      return std::make_unique<HuggingFaceTokenizer>(*o.tokenizer_model);
    });
  }
  check_readable("--tokenizer-model", *o.tokenizer_model);
  if (o.type == "TikTokenizer") {
    return with_flag("--tokenizer-model", [&]() -> std::unique_ptr<Tokenizer> {
      return std::make_unique<TikTokenizer>(*o.tokenizer_model, o.tiktoken_pattern.value_or("v2"),
                                            o.tiktoken_num_special_tokens,
                                            o.vocab_size.value_or(TikTokenizer::kDefaultVocabSize));
    });
  }
  return with_flag("--tokenizer-model", [&]() -> std::unique_ptr<Tokenizer> {
    return std::make_unique<SentencePieceTokenizer>(*o.tokenizer_model);
  });
}

}  // namespace megatron::data
