// GPT-2's pre-tokenizer without a regex engine: splits text into the pieces that
// Megatron's pattern (Python `regex` module, megatron/tokenizer/gpt2_tokenization.py)
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// finds, leftmost alternative first. At a piece start i the scanner tries, in order:
//   1. a contraction 's 't 're 've 'm 'll 'd (case-sensitive);
//   2-4. an optional U+0020 (only that space) then a maximal run of one class
//        Letter, Number or Other ("'''s" is the Other run "'''" then "s");
//   5. a whitespace run: all of it at the end of the text; otherwise, if it has two
//      or more code points, all but the last one (that one then starts the next
//      piece, where it may prefix a word); a single whitespace code point followed by
//      non-space is a piece on its own (the final `\s+`).
// Example: "a  b\t\n c  " -> "a", " ", " b", "\t\n", " c", "  ".
//
// Input is bytes. Valid UTF-8 is classified by code point; each byte that is not part
// of a valid (strict: no overlong, no surrogate, <= U+10FFFF) sequence counts as one
// Other code point, so every byte string splits into pieces that concatenate to it.
//
// Whitespace follows Python `regex` (Megatron), whose \s is Unicode's White_Space:
// U+0009-000D, U+0020, U+0085, U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F,
// U+205F, U+3000. JavaScript's \s (gpt-3-encoder, our test reference) differs on two
// code points: it adds U+FEFF and lacks U+0085. Here U+0085 is Space and U+FEFF is
// Other. Letter/Number come from unicode_tables.cpp (Unicode 17.0).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace megatron::data::detail {

enum class CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// Class of every code point: a 128-entry ASCII table, then a two-level table
// (256-code-point blocks, identical blocks shared), built once from the ranges.
class CharClassTable {
 public:
  static const CharClassTable& get();

  CharClass of(uint32_t cp) const {
    if (cp < 128) return ascii_[cp];
    return static_cast<CharClass>(blocks_[(static_cast<uint32_t>(stage1_[cp >> 8]) << 8) | (cp & 0xFF)]);
  }

  // Class of the code point starting at p (p < end) and its byte length.
  // A byte that does not start a valid UTF-8 sequence is Other, length 1.
  CharClass at(const uint8_t* p, const uint8_t* end, int* length) const {
    const uint8_t b0 = p[0];
    if (b0 < 0x80) {
      *length = 1;
      return ascii_[b0];
    }
    return at_multibyte(p, end, length);
  }

 private:
  CharClassTable();
  CharClass at_multibyte(const uint8_t* p, const uint8_t* end, int* length) const;

  CharClass ascii_[128];
  std::vector<uint16_t> stage1_;  // cp >> 8 -> block index
  std::vector<uint8_t> blocks_;   // 256 classes per block
};

// Calls on_piece(offset, length) for each piece of `text`, in order.
template <class OnPiece>
void split_pieces(std::string_view text, const CharClassTable& table, OnPiece&& on_piece) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const int64_t n = static_cast<int64_t>(text.size());
  const uint8_t* end = p + n;
  int64_t i = 0;
  while (i < n) {
    const uint8_t b = p[i];
    if (b == '\'' && i + 1 < n) {
      const uint8_t c = p[i + 1];
      int64_t len = 0;
      if (c == 's' || c == 't' || c == 'm' || c == 'd') {
        len = 2;
      } else if (i + 2 < n) {
        const uint8_t d = p[i + 2];
        if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) len = 3;
      }
      if (len != 0) {
        on_piece(i, len);
        i += len;
        continue;
      }
    }
    int l0;
    const CharClass c0 = table.at(p + i, end, &l0);
    CharClass run = c0;
    int64_t j = i + l0;
    if (b == ' ' && i + 1 < n) {
      int l1;
      const CharClass c1 = table.at(p + i + 1, end, &l1);
      if (c1 != CharClass::kSpace) {
        run = c1;
        j = i + 1 + l1;
      }
    }
    if (run != CharClass::kSpace) {
      while (j < n) {
        int l;
        if (table.at(p + j, end, &l) != run) break;
        j += l;
      }
      on_piece(i, j - i);
      i = j;
      continue;
    }
    int64_t last = i;  // start of the run's last code point
    while (j < n) {
      int l;
      if (table.at(p + j, end, &l) != CharClass::kSpace) break;
      last = j;
      j += l;
    }
    const int64_t stop = (j < n && last > i) ? last : j;
    on_piece(i, stop - i);
    i = stop;
  }
}

}  // namespace megatron::data::detail
