// The byte-level BPE model shared by GPT2BPETokenizer and HuggingFaceTokenizer (tokenizer.json
// with "model": {"type": "BPE"} over the ByteLevel alphabet).
//
// Contract (implementation: byte_level_bpe.cpp):
//  - vocab: keys in the byte-character alphabet (byte_level.h) with their ids (distinct; not
//    necessarily dense); all 256 byte characters must be keys. A key that stands for no bytes
//    (e.g. "<|endoftext|>" written as text) is kept for decode only if it has a byte form.
//  - merges: (first, second) keys in rank order; first, second and first+second must be keys.
//  - encode_piece(): one pre-tokenized piece of bytes -> ids, lowest-rank merges first, all
//    occurrences of a pair in one round (Python's bpe() and Hugging Face's BPE model agree on
//    this). With ignore_merges (tokenizer.json "ignore_merges": true, Llama 3) a piece whose
//    whole key is in the vocab is that one id.
//  - Immutable after construction; encode_piece() is safe from many threads (each thread keeps
//    its own word cache per instance).
// Errors are megatron::Error naming the source file (and merge line).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer/bpe_files.h"

namespace megatron::data::detail {

class ByteLevelBpe {
 public:
  ByteLevelBpe(const std::vector<VocabEntry>& vocab, const std::vector<MergeRule>& merges,
               const std::string& vocab_source, const std::string& merge_source, bool ignore_merges);
  ~ByteLevelBpe();
  ByteLevelBpe(const ByteLevelBpe&) = delete;
  ByteLevelBpe& operator=(const ByteLevelBpe&) = delete;

  // Appends the ids of text[offset, offset + length) to `out`; `text` is the whole text the
  // piece lies in (the cache reads up to 16 bytes past a short piece, never past the text).
  void encode_piece(std::string_view text, int64_t offset, int64_t length, std::vector<int32_t>* out) const;
  // Appends the bytes of `id` to `out`; false when the id is not a key with a byte form.
  bool append_bytes(int32_t id, std::string* out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace megatron::data::detail
