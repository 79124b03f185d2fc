#include "serve/utf8.h"

namespace megatron::serve {

std::string utf8_replace_invalid(std::string_view s) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    // The sequence length and the range of the second byte (Unicode Table 3-7).
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    if (len == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    size_t j = 1;
    for (; j < len && i + j < n; ++j) {
      const unsigned char d = static_cast<unsigned char>(s[i + j]);
      const bool ok = j == 1 ? (d >= lo && d <= hi) : (d >= 0x80 && d <= 0xBF);
      if (!ok) break;
    }
    if (j == len) {
      out.append(s.substr(i, len));
    } else {
      out += kReplacement;  // the valid prefix, as one replacement; the byte that broke it is read again
    }
    i += j;
  }
  return out;
}

size_t utf8_length(std::string_view text) {
  size_t count = 0;
  for (char ch : text) {
    if ((static_cast<unsigned char>(ch) & 0xC0) != 0x80) ++count;
  }
  return count;
}

}  // namespace megatron::serve
