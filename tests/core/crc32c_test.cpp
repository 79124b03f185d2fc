#include "core/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace megatron {
namespace {

// The CRC catalogue's check value for CRC-32C (CRC-32/ISCSI).
TEST(Crc32c, CheckValue) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0x00000000u);
}

// RFC 3720 (iSCSI) appendix B.4 test vectors.
TEST(Crc32c, Rfc3720Vectors) {
  std::vector<uint8_t> buf(32, 0x00);
  EXPECT_EQ(crc32c(buf.data(), buf.size()), 0x8A9136AAu);
  std::fill(buf.begin(), buf.end(), 0xFF);
  EXPECT_EQ(crc32c(buf.data(), buf.size()), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(crc32c(buf.data(), buf.size()), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(crc32c(buf.data(), buf.size()), 0x113FDB5Cu);
  // An iSCSI SCSI Read (10) command PDU.
  const std::vector<uint8_t> pdu = {0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                    0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
                                    0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
                                    0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  EXPECT_EQ(crc32c(pdu.data(), pdu.size()), 0xD9963A56u);
}

TEST(Crc32c, ExtendEqualsWhole) {
  std::string s;
  for (int i = 0; i < 1000; ++i) s.push_back(static_cast<char>((i * 37 + 11) & 0xFF));
  const uint32_t whole = crc32c(s);
  for (size_t cut : {0u, 1u, 7u, 8u, 500u, 999u, 1000u}) {
    const uint32_t head = crc32c(s.data(), cut);
    EXPECT_EQ(crc32c_extend(head, s.data() + cut, s.size() - cut), whole) << "cut " << cut;
  }
  // One flipped bit changes the CRC.
  std::string t = s;
  t[123] ^= 0x10;
  EXPECT_NE(crc32c(t), whole);
}

// TFRecord masking: the masked CRCs of the record in docs/megatron-formats.md, "TensorBoard event
// files" (uint64 length 29 -> masked 0x23df2f60), and mask/unmask are inverse.
TEST(Crc32c, TfRecordMask) {
  const uint8_t length29[8] = {0x1d, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(crc32c_mask(crc32c(length29, 8)), 0x23df2f60u);
  // ((crc >> 15) | (crc << 17)) + 0xa282ead8 by hand for crc = 1: rotr15(1) = 0x00020000.
  EXPECT_EQ(crc32c_mask(1u), 0x00020000u + 0xa282ead8u);
  // Wrap-around of the addition.
  EXPECT_EQ(crc32c_mask(0xFFFFFFFFu), 0xa282ead7u);
  for (uint32_t c : {0u, 1u, 0xE3069283u, 0x80000000u, 0xFFFFFFFFu}) EXPECT_EQ(crc32c_unmask(crc32c_mask(c)), c);
}

}  // namespace
}  // namespace megatron
