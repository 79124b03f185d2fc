// Tokenizer flags shared by the text commands (see the header).
#include "cli/tokenizer_flags.h"

#include "core/error.h"

namespace megatron::cli {

void declare_tokenizer_flags(Args& args, const std::string& default_type, bool required) {
  std::string types;
  for (const std::string& t : data::supported_tokenizer_types()) types += (types.empty() ? "" : "|") + t;
  if (required || default_type.empty()) {
    args.option("--tokenizer-type", "TYPE", types, std::nullopt, required);
  } else {
    args.option("--tokenizer-type", "TYPE", types, default_type);
  }
  args.option("--vocab-file", "FILE", "GPT2BPETokenizer: GPT-2 vocab.json (encoder.json)")
      .option("--merge-file", "FILE", "GPT2BPETokenizer: GPT-2 merges.txt (vocab.bpe)")
      .option("--tokenizer-model", "PATH",
              "SentencePiece tokenizer.model; HuggingFaceTokenizer: a directory with tokenizer.json, or the file; "
              "TikTokenizer: its JSON vocabulary")
      .option("--vocab-size", "N", "TikTokenizer: the vocabulary, special tokens included (default 131072)")
      .option("--tiktoken-pattern", "v1|v2", "TikTokenizer's pre-tokenizer regex (default v2)")
      .option("--tiktoken-num-special-tokens", "N", "TikTokenizer: ids 0..N-1 are special tokens", "1000");
}

data::TokenizerOptions tokenizer_options(const Args& args) {
  data::TokenizerOptions o;
  if (args.has("--tokenizer-type")) o.type = args.get_string("--tokenizer-type");  // else the struct's default
  if (args.given("--vocab-file")) o.vocab_file = args.get_string("--vocab-file");
  if (args.given("--merge-file")) o.merge_file = args.get_string("--merge-file");
  if (args.given("--tokenizer-model")) o.tokenizer_model = args.get_string("--tokenizer-model");
  if (args.given("--vocab-size")) o.vocab_size = args.get_int("--vocab-size", 1, int64_t{1} << 31);
  if (args.given("--tiktoken-pattern")) {
    o.tiktoken_pattern = args.get_string("--tiktoken-pattern");
    if (*o.tiktoken_pattern != "v1" && *o.tiktoken_pattern != "v2") {
      throw_error("[--tiktoken-pattern] expected v1 or v2, got '", *o.tiktoken_pattern, "'");
    }
  }
  o.tiktoken_num_special_tokens = args.get_int("--tiktoken-num-special-tokens", 0, int64_t{1} << 31);
  return o;
}

}  // namespace megatron::cli
