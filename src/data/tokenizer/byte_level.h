// GPT-2's bytes_to_unicode() (megatron/tokenizer/gpt2_tokenization.py;
// docs/megatron-formats.md, "The GPT-2 BPE tokenizer"): a bijection between the 256 byte
// values and 256 printable code points, so that BPE tokens are strings without whitespace or
// control codes.
//   bytes 33-126, 161-172, 174-255 -> the same code point;
//   the other 68 bytes (0-32, 127-160, 173), in increasing order -> U+0100 + n.
// e.g. ' ' -> U+0120 'Ġ', '\n' -> U+010A, 0x00 -> U+0100, 0x7F -> U+0121, 0xAD -> U+0143.
#pragma once

#include <array>
#include <cstdint>

namespace megatron::data::detail {

constexpr bool is_printable_byte(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174); }

// byte -> code point.
constexpr std::array<uint16_t, 256> make_byte_encoder() {
  std::array<uint16_t, 256> table{};
  int n = 0;
  for (int b = 0; b < 256; ++b)
    table[b] = is_printable_byte(b) ? static_cast<uint16_t>(b) : static_cast<uint16_t>(256 + n++);
  return table;
}
inline constexpr std::array<uint16_t, 256> kByteEncoder = make_byte_encoder();

// code point (< 0x144) -> byte, or -1 for code points that stand for no byte.
constexpr std::array<int16_t, 0x144> make_byte_decoder() {
  std::array<int16_t, 0x144> table{};
  for (auto& v : table) v = -1;
  for (int b = 0; b < 256; ++b) table[kByteEncoder[b]] = static_cast<int16_t>(b);
  return table;
}
inline constexpr std::array<int16_t, 0x144> kByteDecoder = make_byte_decoder();

static_assert(kByteEncoder[' '] == 0x120 && kByteEncoder['\n'] == 0x10A && kByteEncoder[0] == 0x100);
static_assert(kByteEncoder[0x7F] == 0x121 && kByteEncoder[0xAD] == 0x143 && kByteEncoder[0xFF] == 0xFF);

}  // namespace megatron::data::detail
