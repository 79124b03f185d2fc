// Megatron's TikTokenizer (megatron/core/tokenizers/text/libraries/tiktoken_tokenizer.py:
// TikTokenTokenizer), with tiktoken's algorithm (docs/tokenizers.md):
//  - --tokenizer-model F.json: a JSON list of {"rank": i, "token_bytes": base64, "token_str": s}
//    with rank == index and entry i < 256 the single byte i (Megatron's reload_mergeable_ranks).
//    The first vocab_size - num_special_tokens entries are kept; token id = rank +
//    num_special_tokens.
//  - Ids 0..N-1 (N = --tiktoken-num-special-tokens, default 1000) are the special tokens
//    "<unk>" "<s>" "</s>" "<mask>" "<pad>" "<cls>" "<sep>" then "<SPECIAL_7>" ... "<SPECIAL_{N-1}>".
//  - vocab_size() = --vocab-size (default 131072 = 2^17); the file must fill it: it needs at least
//    vocab_size - N entries. eod() = 2 ("</s>"); Megatron's text_to_ids adds no BOS.
//  - encode(text) = tiktoken encode(text, allowed_special="all"): special-token text written in a
//    document ("</s>", "<SPECIAL_12>") is that id; the rest is split by the --tiktoken-pattern
//    regex (v1 or v2, through PCRE2; text no match covers is dropped, as tiktoken does) and each
//    piece is its id when it is a token, else merged by tiktoken's byte_pair_merge: repeatedly
//    join the adjacent pair whose concatenation has the lowest rank (leftmost on ties).
//  - decode(ids): special ids as their text, others as their bytes.
#pragma once

#include <memory>
#include <string>

#include "data/tokenizer/tokenizer.h"

namespace megatron::data {

class TikTokenizer final : public Tokenizer {
 public:
  static constexpr int64_t kDefaultVocabSize = int64_t{1} << 17;

  // pattern: "v1" or "v2". Errors name the file (and the flag for sizes).
  TikTokenizer(const std::string& path, const std::string& pattern, int64_t num_special_tokens, int64_t vocab_size);
  ~TikTokenizer() override;

  int64_t vocab_size() const override;
  int32_t eod() const override;
  void encode(std::string_view text, std::vector<int32_t>* out) const override;
  std::string decode(std::span<const int32_t> ids) const override;

  // Megatron's _PATTERN_TIKTOKEN_V1 / _V2.
  static const char* pattern_v1();
  static const char* pattern_v2();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace megatron::data
