// The tokenizer every command uses (preprocess, train, generate, tokenize, dataset-info),
// chosen by Megatron's --tokenizer-type as megatron/core/tokenizers/utils/build_tokenizer.py
// does (docs/tokenizers.md):
//
//   --tokenizer-type           files                          end of document (--append-eod)
//   GPT2BPETokenizer           --vocab-file --merge-file      "<|endoftext|>"
//   SentencePieceTokenizer,    --tokenizer-model F.model      the model's eos_id (Llama 2: 2)
//   GPTSentencePieceTokenizer,
//   Llama2Tokenizer
//   HuggingFaceTokenizer       --tokenizer-model DIR or       tokenizer_config.json's eos_token
//                              tokenizer.json
//   TikTokenizer               --tokenizer-model F.json       "</s>" = 2
//                              --tiktoken-pattern v1|v2
//                              --tiktoken-num-special-tokens N
//
// NullTokenizer (no files) is train's and dataset-info's alone (train/config.h).
// vocab_size() is Megatron's tokenizer.vocab_size, before the model pads it to a multiple of
// --make-vocab-size-divisible-by x TP (model::padded_vocab_size).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace megatron::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Megatron's tokenizer.vocab_size (unpadded).
  virtual int64_t vocab_size() const = 0;
  // Megatron's tokenizer.eod. Throws megatron::Error naming the file when there is none.
  virtual int32_t eod() const = 0;
  // Megatron's tokenizer.tokenize(text): appends the ids of `text` to `out`. Safe to call
  // from many threads at once.
  virtual void encode(std::string_view text, std::vector<int32_t>* out) const = 0;
  // The text the ids stand for (Megatron's detokenize). Throws Error on an id out of range.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
};

// The tokenizer flags of Megatron (megatron/training/config/training_config.py, TokenizerConfig).
struct TokenizerOptions {
  std::string type = "GPT2BPETokenizer";        // --tokenizer-type
  std::optional<std::string> vocab_file;        // --vocab-file
  std::optional<std::string> merge_file;        // --merge-file
  std::optional<std::string> tokenizer_model;   // --tokenizer-model
  std::optional<int64_t> vocab_size;            // --vocab-size
  std::optional<std::string> tiktoken_pattern;  // --tiktoken-pattern (TikTokenizer: default v2)
  int64_t tiktoken_num_special_tokens = 1000;   // --tiktoken-num-special-tokens
};

// The --tokenizer-type values we build, in Megatron's spelling.
const std::vector<std::string>& supported_tokenizer_types();

// Every problem of the flag combination (a missing file flag, a flag the type does not
// use, an unknown type), one "[--flag] ..." line each; empty when the flags are usable.
std::vector<std::string> tokenizer_option_errors(const TokenizerOptions& options);

// Builds the tokenizer. Bad flags throw Error with all their problems at once; a file that
// cannot be read or parsed throws a one-line Error naming the flag and the file.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& options);

}  // namespace megatron::data
