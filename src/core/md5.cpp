#include "core/md5.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace megatron {
namespace {

// Per-round shift amounts (RFC 1321 §3.4).
constexpr uint32_t kShift[64] = {7,  12, 17, 22, 7,  12, 17, 22, 7,  12, 17, 22, 7,  12, 17, 22, 5,  9,  14, 20, 5,  9,
                                 14, 20, 5,  9,  14, 20, 5,  9,  14, 20, 4,  11, 16, 23, 4,  11, 16, 23, 4,  11, 16, 23,
                                 4,  11, 16, 23, 6,  10, 15, 21, 6,  10, 15, 21, 6,  10, 15, 21, 6,  10, 15, 21};

// T[i] = floor(2^32 * |sin(i + 1)|), tabulated to avoid depending on libm's sin.
constexpr uint32_t kSine[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391};

inline uint32_t rotl(uint32_t x, uint32_t c) { return (x << c) | (x >> (32 - c)); }

}  // namespace

Md5::Md5() : state_{0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476}, buffer_{} {}

void Md5::transform(const uint8_t block[64]) {
  uint32_t m[16];
  for (int i = 0; i < 16; ++i) {  // little-endian words, independent of host byte order
    m[i] = uint32_t(block[4 * i]) | uint32_t(block[4 * i + 1]) << 8 | uint32_t(block[4 * i + 2]) << 16 |
           uint32_t(block[4 * i + 3]) << 24;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  for (int i = 0; i < 64; ++i) {
    uint32_t f;
    int g;
    if (i < 16) {
      f = (b & c) | (~b & d);
      g = i;
    } else if (i < 32) {
      f = (d & b) | (~d & c);
      g = (5 * i + 1) % 16;
    } else if (i < 48) {
      f = b ^ c ^ d;
      g = (3 * i + 5) % 16;
    } else {
      f = c ^ (b | ~d);
      g = (7 * i) % 16;
    }
    uint32_t next = b + rotl(a + f + kSine[i] + m[g], kShift[i]);
    a = d;
    d = c;
    c = b;
    b = next;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
}

void Md5::update(const void* data, int64_t bytes) {
  MT_CHECK(!finished_) << "Md5::update after digest()";
  const auto* p = static_cast<const uint8_t*>(data);
  int64_t used = static_cast<int64_t>(length_ % 64);
  length_ += static_cast<uint64_t>(bytes);
  if (used > 0) {
    int64_t take = std::min<int64_t>(64 - used, bytes);
    std::memcpy(buffer_ + used, p, static_cast<size_t>(take));
    p += take;
    bytes -= take;
    if (used + take < 64) return;
    transform(buffer_);
  }
  for (; bytes >= 64; bytes -= 64, p += 64) transform(p);
  if (bytes > 0) std::memcpy(buffer_, p, static_cast<size_t>(bytes));
}

std::array<uint8_t, 16> Md5::digest() {
  MT_CHECK(!finished_) << "Md5::digest called twice";
  // Padding: 0x80, zeros to 56 mod 64, then the bit length as a little-endian u64.
  const uint64_t bit_length = length_ * 8;
  uint8_t pad[72] = {0x80};
  int64_t used = static_cast<int64_t>(length_ % 64);
  int64_t pad_bytes = used < 56 ? 56 - used : 120 - used;
  update(pad, pad_bytes);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(bit_length >> (8 * i));
  update(len, 8);
  finished_ = true;
  std::array<uint8_t, 16> out{};
  for (int i = 0; i < 4; ++i) {
    for (int k = 0; k < 4; ++k) out[4 * i + k] = static_cast<uint8_t>(state_[i] >> (8 * k));
  }
  return out;
}

std::string Md5::hex_digest() {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t byte : digest()) {
    s.push_back(kHex[byte >> 4]);
    s.push_back(kHex[byte & 15]);
  }
  return s;
}

std::string md5_hex(std::string_view data) {
  Md5 h;
  h.update(data);
  return h.hex_digest();
}

}  // namespace megatron
