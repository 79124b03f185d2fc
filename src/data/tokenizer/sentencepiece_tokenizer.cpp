// SentencePieceTokenizer (see the header). SentencePieceProcessor's Encode and Decode are
// const and read only the loaded model, so one processor serves every thread.
#include "data/tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include "core/error.h"

namespace megatron::data {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_file, const std::string& flag)
    : model_file_(model_file), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const auto status = sp_->Load(model_file);
  if (!status.ok()) {
    throw_error("[", flag, "] ", model_file, " is not a SentencePiece model: ", status.ToString());
  }
  if (sp_->GetPieceSize() <= 0) throw_error("[", flag, "] ", model_file, " has no pieces");
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

int64_t SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

int32_t SentencePieceTokenizer::eod() const {
  const int id = sp_->eos_id();
  if (id < 0) throw_error(model_file_, ": the SentencePiece model has no eos piece (Megatron's end of document)");
  return id;
}

int32_t SentencePieceTokenizer::bos() const { return sp_->bos_id(); }

void SentencePieceTokenizer::encode(std::string_view text, std::vector<int32_t>* out) const {
  thread_local std::vector<int> ids;
  ids.clear();
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) throw_error(model_file_, ": SentencePiece cannot encode the text: ", status.ToString());
  out->insert(out->end(), ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  const int64_t n = vocab_size();
  std::vector<int> v;
  v.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id < 0 || id >= n) throw_error("decode: token id ", id, " is not in ", model_file_, " (", n, " pieces)");
    v.push_back(id);
  }
  std::string text;
  const auto status = sp_->Decode(v, &text);
  if (!status.ok()) throw_error(model_file_, ": SentencePiece cannot decode: ", status.ToString());
  return text;
}

}  // namespace megatron::data
