#include "core/crc32c.h"

#include <array>

namespace megatron {
namespace {

constexpr uint32_t kCastagnoliReflected = 0x82F63B78u;

// table[b] = CRC register after shifting byte b through 8 rounds of the reflected division.
constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t r = b;
    for (int bit = 0; bit < 8; ++bit) r = (r & 1u) ? (r >> 1) ^ kCastagnoliReflected : (r >> 1);
    table[b] = r;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t r = ~crc;  // undo the previous final xor, i.e. resume the register
  for (size_t i = 0; i < bytes; ++i) r = kTable[(r ^ p[i]) & 0xFFu] ^ (r >> 8);
  return ~r;
}

uint32_t crc32c(const void* data, size_t bytes) { return crc32c_extend(0, data, bytes); }

}  // namespace megatron
