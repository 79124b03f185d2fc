// Character classes of GPT-2's pre-tokenizer (see pretokenizer.h for the rules).
#include "data/tokenizer/pretokenizer.h"

#include <string>
#include <unordered_map>

#include "data/tokenizer/unicode_tables.h"

namespace megatron::data::detail {

namespace {

// Python `regex` \s (Unicode White_Space), not JavaScript's: see pretokenizer.h.
constexpr CodePointRange kSpaceRanges[] = {
    {0x0009, 0x000D}, {0x0020, 0x0020}, {0x0085, 0x0085}, {0x00A0, 0x00A0}, {0x1680, 0x1680},
    {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
};

constexpr uint32_t kCodePointCount = 0x110000;

}  // namespace

const CharClassTable& CharClassTable::get() {
  static const CharClassTable table;
  return table;
}

CharClassTable::CharClassTable() {
  std::vector<uint8_t> flat(kCodePointCount, static_cast<uint8_t>(CharClass::kOther));
  auto fill = [&](const CodePointRange* ranges, int64_t count, CharClass c) {
    for (int64_t k = 0; k < count; ++k) {
      for (uint32_t cp = ranges[k].first; cp <= ranges[k].last; ++cp) flat[cp] = static_cast<uint8_t>(c);
    }
  };
  fill(kLetterRanges, kLetterRangesCount, CharClass::kLetter);
  fill(kNumberRanges, kNumberRangesCount, CharClass::kNumber);
  fill(kSpaceRanges, static_cast<int64_t>(std::size(kSpaceRanges)), CharClass::kSpace);
  for (uint32_t cp = 0; cp < 128; ++cp) ascii_[cp] = static_cast<CharClass>(flat[cp]);

  // Most 256-code-point blocks are all-Other or all-Letter: share identical blocks.
  std::unordered_map<std::string, uint16_t> seen;
  stage1_.resize(kCodePointCount >> 8);
  for (uint32_t block = 0; block < (kCodePointCount >> 8); ++block) {
    const std::string content(reinterpret_cast<const char*>(flat.data()) + (block << 8), 256);
    auto [it, inserted] = seen.emplace(content, static_cast<uint16_t>(seen.size()));
    if (inserted) blocks_.insert(blocks_.end(), content.begin(), content.end());
    stage1_[block] = it->second;
  }
}

CharClass CharClassTable::at_multibyte(const uint8_t* p, const uint8_t* end, int* length) const {
  // Strict UTF-8 (RFC 3629): the second byte's allowed range depends on the lead byte
  // so that overlong forms, surrogates and values above U+10FFFF are rejected.
  const uint8_t b0 = p[0];
  const int64_t avail = end - p;
  auto cont = [](uint8_t b) { return (b & 0xC0) == 0x80; };
  *length = 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (avail >= 2 && cont(p[1])) {
      *length = 2;
      return of(((b0 & 0x1Fu) << 6) | (p[1] & 0x3Fu));
    }
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (avail >= 3) {
      const uint8_t lo = b0 == 0xE0 ? 0xA0 : 0x80;
      const uint8_t hi = b0 == 0xED ? 0x9F : 0xBF;
      if (p[1] >= lo && p[1] <= hi && cont(p[2])) {
        *length = 3;
        return of(((b0 & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu));
      }
    }
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (avail >= 4) {
      const uint8_t lo = b0 == 0xF0 ? 0x90 : 0x80;
      const uint8_t hi = b0 == 0xF4 ? 0x8F : 0xBF;
      if (p[1] >= lo && p[1] <= hi && cont(p[2]) && cont(p[3])) {
        *length = 4;
        return of(((b0 & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu));
      }
    }
  }
  return CharClass::kOther;
}

}  // namespace megatron::data::detail
