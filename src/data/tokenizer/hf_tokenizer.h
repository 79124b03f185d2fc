// Megatron's HuggingFaceTokenizer (megatron/core/tokenizers/text/libraries/
// huggingface_tokenizer.py: AutoTokenizer.from_pretrained) for byte-level BPE tokenizer.json
// files (GPT-2, Llama 3, Qwen 2, DeepSeek, ...), read directly (docs/tokenizers.md):
//  - --tokenizer-model DIR reads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json
//    (eos_token, bos_token; LlamaTokenizerFast's add_bos_token / add_eos_token) and
//    DIR/special_tokens_map.json; --tokenizer-model FILE.json reads the file and the two
//    configuration files beside it (AutoTokenizer itself takes only a directory).
//  - encode(text) = tokenizer(text).input_ids (Megatron's include_special_tokens=True): added
//    tokens written in the text are their ids (a literal "<|endoftext|>" or
//    "<|begin_of_text|>" in a document is that special token); each other segment is
//    pre-tokenized (Split regexes through PCRE2, ByteLevel), BPE-merged, and the
//    post-processor's template wraps the whole (Llama 3: <|begin_of_text|> first). An empty
//    text is the template alone.
//  - vocab_size() = len(tokenizer): the distinct tokens of the model's vocab and added_tokens
//    (Llama 3: 128256). eod() = the id of eos_token (sep_token when there is no eos_token);
//    no eos_token at all is an Error when eod() is asked for (--append-eod, train).
//  - decode(ids): the bytes of each token; added tokens as their content.
// Supported: normalizer NFC, NFD, NFKC, NFKD, Replace, Prepend, Sequence (hf_normalizer.h),
// applied to each segment between added tokens; pre_tokenizer ByteLevel, Split (Isolated, Removed,
// MergedWithPrevious, MergedWithNext; invert) and Sequence of those, with one ByteLevel;
// model BPE (ignore_merges, merges as "a b" or ["a", "b"]); post_processor ByteLevel,
// TemplateProcessing, BertProcessing, RobertaProcessing, Sequence. Anything else is an Error
// naming the file and the field.
#pragma once

#include <memory>
#include <string>

#include "data/tokenizer/tokenizer.h"

namespace megatron::data {

class HuggingFaceTokenizer final : public Tokenizer {
 public:
  explicit HuggingFaceTokenizer(const std::string& path);
  ~HuggingFaceTokenizer() override;

  int64_t vocab_size() const override;
  int32_t eod() const override;
  void encode(std::string_view text, std::vector<int32_t>* out) const override;
  std::string decode(std::span<const int32_t> ids) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace megatron::data
