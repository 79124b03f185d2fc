// MD5 message digest (RFC 1321), our own implementation.
//
// Used for classic Megatron's index-cache file names: C23 gpt_dataset.py
// _build_index_mappings names its files hashlib.md5(desc).hexdigest() + suffix,
// so reproducing that hash lets us read and write caches Megatron shares.
// Not for security. Example: md5_hex("abc") == "900150983cd24fb0d6963f7d28e17f72".
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace megatron {

// Incremental MD5: update() any number of times, then digest() once.
class Md5 {
 public:
  Md5();
  void update(const void* data, int64_t bytes);
  void update(std::string_view s) { update(s.data(), static_cast<int64_t>(s.size())); }
  std::array<uint8_t, 16> digest();  // finalises; the object must not be updated afterwards
  std::string hex_digest();          // 32 lowercase hex digits (Python's hexdigest())

 private:
  void transform(const uint8_t block[64]);

  uint32_t state_[4];
  uint64_t length_ = 0;  // bytes seen
  uint8_t buffer_[64];
  bool finished_ = false;
};

std::string md5_hex(std::string_view data);

}  // namespace megatron
