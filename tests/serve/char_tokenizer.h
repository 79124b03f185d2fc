// For the serve tests: a tokenizer of single characters (ids 4..29 'a'..'z', 30 ' ') with the
// special spellings the batch engine looks for: 0 the end of a document, 1 "\n", 2 "\n\n", 3 ":".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "data/tokenizer/tokenizer.h"

namespace megatron::test {

class CharTokenizer : public data::Tokenizer {
 public:
  static constexpr int64_t kVocab = 31;
  int64_t vocab_size() const override { return kVocab; }
  int32_t eod() const override { return 0; }
  void encode(std::string_view text, std::vector<int32_t>* out) const override {
    for (size_t i = 0; i < text.size(); ++i) {
      const char c = text[i];
      if (c == '\n' && i + 1 < text.size() && text[i + 1] == '\n') {
        out->push_back(2);
        ++i;
      } else if (c == '\n') {
        out->push_back(1);
      } else if (c == ':') {
        out->push_back(3);
      } else if (c >= 'a' && c <= 'z') {
        out->push_back(4 + (c - 'a'));
      } else {
        out->push_back(30);  // everything else reads as a space
      }
    }
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string s;
    for (int32_t id : ids) {
      if (id < 0 || id >= kVocab) throw_error("id ", id, " out of range");
      static const char* const kSpecial[] = {"<eod>", "\n", "\n\n", ":"};
      if (id < 4) {
        s += kSpecial[id];
      } else if (id < 30) {
        s += static_cast<char>('a' + (id - 4));
      } else {
        s += ' ';
      }
    }
    return s;
  }
};

}  // namespace megatron::test
