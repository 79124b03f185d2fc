#include "core/md5.h"

#include <gtest/gtest.h>

#include <string>

namespace megatron {
namespace {

// RFC 1321 appendix A.5 test suite.
TEST(Md5, Rfc1321TestVectors) {
  EXPECT_EQ(md5_hex(""), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(md5_hex("a"), "0cc175b9c0f1b6a831c399e269772661");
  EXPECT_EQ(md5_hex("abc"), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(md5_hex("message digest"), "f96b697d7cb7938d525a2f31aaf161d0");
  EXPECT_EQ(md5_hex("abcdefghijklmnopqrstuvwxyz"), "c3fcd3d76192e4007dfb496cca67e13b");
  EXPECT_EQ(md5_hex("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"),
            "d174ab98d277d9f5a5611c2c9f419d9f");
  EXPECT_EQ(md5_hex("12345678901234567890123456789012345678901234567890123456789012345678901234567890"),
            "57edf4a22be3c955ac49da2e2107b67a");
}

// Lengths around the 56/64-byte padding boundaries, fed in uneven pieces; the expected value
// is Python's hashlib.md5(b"a" * 200).hexdigest().
TEST(Md5, IncrementalUpdatesAcrossBlockBoundaries) {
  const std::string a200(200, 'a');
  for (size_t piece : {1u, 3u, 55u, 56u, 63u, 64u, 65u, 200u}) {
    Md5 h;
    for (size_t at = 0; at < a200.size(); at += piece) h.update(std::string_view(a200).substr(at, piece));
    EXPECT_EQ(h.hex_digest(), "887f30b43b2867f4a9accceee7d16e6c") << "piece " << piece;
  }
  for (size_t n : {55u, 56u, 57u, 63u, 64u, 65u}) {
    // Same digest whether fed at once or byte by byte.
    const std::string s(n, 'x');
    Md5 h;
    for (char c : s) h.update(std::string_view(&c, 1));
    EXPECT_EQ(h.hex_digest(), md5_hex(s)) << n;
  }
}

// The C23 cache description of a GPT dataset (hashlib.md5(desc.encode()).hexdigest()).
TEST(Md5, MegatronCacheDescription) {
  EXPECT_EQ(md5_hex("GPT Dataset\n\nData prefix data/x\nDataset name train\nNumber of samples 100\n"
                    "Sequence length 1024\nRandom seed 1234\nSplit 969, 30, 1\n"),
            "b69022b8d9c7d147d83b212efb40ff0d");
}

}  // namespace
}  // namespace megatron
