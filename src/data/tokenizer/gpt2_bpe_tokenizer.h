// GPT-2 byte-level BPE, exactly as Megatron-LM's GPT2BPETokenizer
// (megatron/tokenizer/gpt2_tokenization.py; docs/megatron-formats.md, "The GPT-2 BPE tokenizer").
//
// Contract (implementation: gpt2_bpe_tokenizer.cpp):
//  - vocab_file: JSON object token -> id (GPT-2's vocab.json / encoder.json);
//    merge_file: "#version" line then one "a b" merge per line (merges.txt / vocab.bpe).
//    Bad files throw megatron::Error naming the file and line.
//  - encode(): pre-tokenizes with GPT-2's regex, maps bytes through byte_encoder,
//    applies lowest-rank merges. Any bytes are accepted: valid UTF-8 tokenizes as
//    GPT-2 does, and decode(encode(x)) == x for every byte string x.
//  - The tokenizer is immutable after construction; encode()/decode() are safe to
//    call from many threads at once (each thread keeps its own word cache).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer/tokenizer.h"

namespace megatron::data {

class GPT2BPETokenizer final : public Tokenizer {
 public:
  GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file);
  ~GPT2BPETokenizer() override;
  GPT2BPETokenizer(const GPT2BPETokenizer&) = delete;
  GPT2BPETokenizer& operator=(const GPT2BPETokenizer&) = delete;

  // Unpadded vocabulary size: len(encoder) = 50257 for GPT-2.
  int64_t vocab_size() const override;
  // Id of "<|endoftext|>" (50256 for GPT-2): the EOD appended by --append-eod.
  int32_t eod() const override;

  // Appends the token ids of `text` to `out`.
  void encode(std::string_view text, std::vector<int32_t>* out) const override;
  // The bytes the ids stand for (no UTF-8 repair: the caller decides).
  std::string decode(std::span<const int32_t> ids) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace megatron::data
