// The normalizers of Hugging Face tokenizer.json files that byte-level BPE models use, applied
// to each text segment between added tokens before pre-tokenization (tokenizers' normalizers/):
//   NFC, NFD, NFKC, NFKD   Unicode normalization through utf8proc (Unicode 15.0)
//   Replace                every match of {"String": s} or {"Regex": r} becomes "content"
//   Prepend                "prepend" before a non-empty text
//   Sequence               the steps in order (parsed by hf_tokenizer.cpp into a list)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer/regex_splitter.h"

namespace megatron::data::detail {

struct NormalizerStep {
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kReplace, kPrepend };
  Kind kind = Kind::kNfc;
  std::unique_ptr<RegexSplitter> pattern;  // kReplace
  std::string content;                     // kReplace: the replacement; kPrepend: the prefix
};

// Applies the steps to `text` in place. `source` names the file for errors.
void normalize(const std::vector<NormalizerStep>& steps, std::string* text, const std::string& source);

}  // namespace megatron::data::detail
