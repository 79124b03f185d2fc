// Megatron's SentencePieceTokenizer (megatron/core/tokenizers/text/libraries/
// sentencepiece_tokenizer.py), which --tokenizer-type SentencePieceTokenizer,
// GPTSentencePieceTokenizer and Llama2Tokenizer all build, over the SentencePiece library
// itself (Debian's libsentencepiece):
//  - encode(text) = SentencePieceProcessor.encode_as_ids(text): no BOS, no EOS (Megatron's
//    defaults: legacy=False, ignore_extra_whitespaces=True). Megatron-LM's older
//    megatron/training/tokenizer.py prepended BOS for Llama2Tokenizer; the current one does not.
//  - vocab_size() = get_piece_size() (Llama 2: 32000); eod() = eos_id() (Llama 2: 2).
//  - Control-symbol text inside a document ("<s>", "</s>") is ordinary text: SentencePiece
//    never matches control symbols in the input; user-defined symbols it does match.
//  - decode(ids) = decode_ids(ids): control ids decode to nothing; byte-fallback pieces to bytes.
#pragma once

#include <memory>
#include <string>

#include "data/tokenizer/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace megatron::data {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // `model_file` is a serialized ModelProto (tokenizer.model). Errors name `flag` and the file.
  SentencePieceTokenizer(const std::string& model_file, const std::string& flag = "--tokenizer-model");
  ~SentencePieceTokenizer() override;

  int64_t vocab_size() const override;
  int32_t eod() const override;
  void encode(std::string_view text, std::vector<int32_t>* out) const override;
  std::string decode(std::span<const int32_t> ids) const override;

  int32_t bos() const;  // the model's bos_id (-1 when it has none)

 private:
  std::string model_file_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace megatron::data
