// CRC-32C (Castagnoli), our own table-driven implementation.
//
// Used for TFRecord framing in TensorBoard event files (obs/tensorboard_writer.h):
// TensorFlow's record_writer.cc stores a *masked* CRC-32C of the 8 length bytes and of the
// payload. Parameters: reflected polynomial 0x82F63B78, init 0xFFFFFFFF, final xor
// 0xFFFFFFFF (the iSCSI CRC of RFC 3720). Check value: crc32c("123456789") == 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace megatron {

// CRC-32C of `bytes` bytes at `data`.
uint32_t crc32c(const void* data, size_t bytes);
inline uint32_t crc32c(std::string_view s) { return crc32c(s.data(), s.size()); }

// Continues a CRC: crc32c_extend(crc32c(a), b) == crc32c(a + b); crc32c_extend(0, x) == crc32c(x).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t bytes);

// TFRecord's mask, so that a CRC stored next to the data it covers is not itself a valid CRC:
// rotate right by 15 bits, then add 0xa282ead8 (uint32 arithmetic, wrapping).
constexpr uint32_t kCrc32cMaskDelta = 0xa282ead8u;
constexpr uint32_t crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kCrc32cMaskDelta; }
constexpr uint32_t crc32c_unmask(uint32_t masked) {
  const uint32_t rot = masked - kCrc32cMaskDelta;
  return (rot >> 17) | (rot << 15);
}

}  // namespace megatron
