// GPT2BPETokenizer (see the header; Megatron's megatron/tokenizer/gpt2_tokenization.py):
// GPT-2's files, its pre-tokenizer (pretokenizer.h) and the byte-level BPE model
// (byte_level_bpe.h).
#include "data/tokenizer/gpt2_bpe_tokenizer.h"

#include "core/error.h"
#include "data/tokenizer/bpe_files.h"
#include "data/tokenizer/byte_level_bpe.h"
#include "data/tokenizer/pretokenizer.h"

namespace megatron::data {

struct GPT2BPETokenizer::Impl {
  std::string vocab_file;
  int64_t vocab_size = 0;
  int32_t eod = -1;  // -1: the vocab has no "<|endoftext|>"
  std::unique_ptr<detail::ByteLevelBpe> bpe;
};

GPT2BPETokenizer::GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.vocab_file = vocab_file;
  // read_vocab_json makes the ids 0..n-1, each once (decoder = {v: k for k, v in encoder.items()}).
  const std::vector<detail::VocabEntry> vocab = detail::read_vocab_json(vocab_file);
  m.vocab_size = static_cast<int64_t>(vocab.size());
  for (const auto& e : vocab) {
    if (e.token == "<|endoftext|>") m.eod = e.id;
  }
  const std::vector<detail::MergeRule> merges = detail::read_merges(merge_file);
  m.bpe = std::make_unique<detail::ByteLevelBpe>(vocab, merges, vocab_file, merge_file, /*ignore_merges=*/false);
}

GPT2BPETokenizer::~GPT2BPETokenizer() = default;

int64_t GPT2BPETokenizer::vocab_size() const { return impl_->vocab_size; }

int32_t GPT2BPETokenizer::eod() const {
  if (impl_->eod < 0) throw_error(impl_->vocab_file, ": the vocab has no \"<|endoftext|>\" token (the EOD)");
  return impl_->eod;
}

void GPT2BPETokenizer::encode(std::string_view text, std::vector<int32_t>* out) const {
  const detail::ByteLevelBpe& bpe = *impl_->bpe;
  detail::split_pieces(text, detail::CharClassTable::get(),
                       [&](int64_t offset, int64_t length) { bpe.encode_piece(text, offset, length, out); });
}

std::string GPT2BPETokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (const int32_t id : ids) {
    if (!impl_->bpe->append_bytes(id, &text)) {
      throw_error("decode: token id ", id, " is not in the vocab file ", impl_->vocab_file,
                  " (or stands for no bytes)");
    }
  }
  return text;
}

}  // namespace megatron::data
