#include "data/numpy_pcg64.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace megatron::data {
namespace {

unsigned __int128 u128(uint64_t hi, uint64_t lo) { return (static_cast<unsigned __int128>(hi) << 64) | lo; }

struct SeedCase {
  uint64_t seed;
  std::array<uint64_t, 4> words;      // np.random.SeedSequence(seed).generate_state(4, np.uint64)
  std::array<uint64_t, 4> state_inc;  // np.random.PCG64(seed).state: state (hi, lo), inc (hi, lo)
  std::array<uint64_t, 3> raw;        // np.random.default_rng(seed).bit_generator.random_raw(3)
};

// Expected values from /usr/bin/python3 with Debian's numpy 1.24 (the commands above each field).
const SeedCase kSeeds[] = {
    {0,
     {0xdb2cd7e7b0f478beULL, 0xabf4641a2c71ba49ULL, 0x20c6ed6d9d7b8d41ULL, 0x2c4099de223c39d4ULL},
     {0x1aa1b5345996452dULL, 0x09585eb7a69561e3ULL, 0x418ddadb3af71a82ULL, 0x588133bc447873a9ULL},
     {0xa30febcfd9c2825fULL, 0x4510bdf882d9d721ULL, 0x0a7d3da94ecde8b8ULL}},
    {1,
     {0x672d8ee56d6791ffULL, 0x8ae19ca14eb1072cULL, 0x4915796d1322fc4aULL, 0xd0cc2bdcaba049bdULL},
     {0x9c5b484bfedb756cULL, 0x2a6e7d6f320fbc7eULL, 0x922af2da2645f895ULL, 0xa19857b95740937bULL},
     {0x8306bdf37922e4ffULL, 0xf35196bbc152a866ULL, 0x24e7a4f608ec18cdULL}},
    {1234,
     {0x5f83044cad3f26a6ULL, 0xa0d9b3700cea3a6fULL, 0xa8647d8b1e3e7527ULL, 0x687a8e7300372192ULL},
     {0x160ad84006fe21eaULL, 0xf69b873d9fe45409ULL, 0x50c8fb163c7cea4eULL, 0xd0f51ce6006e4325ULL},
     {0xfa08fef3fab6bbbaULL, 0x615481f7fce9ac81ULL, 0xec59dd7c2bde3cb4ULL}},
    // 2^40 + 5: two entropy words.
    {1099511627781ULL,
     {0xdae41755e08a170bULL, 0x8415abe87ecdcb2cULL, 0x2525c5b44b9118d0ULL, 0x42c2793f3392bed3ULL},
     {0xd972711564fcbcf2ULL, 0xa1511cb73ed6e086ULL, 0x4a4b8b68972231a0ULL, 0x8584f27e67257da7ULL},
     {0x01369aef039fedebULL, 0x5f61b40473314316ULL, 0x9654aaeeea6ebe77ULL}},
};

TEST(NumpyPcg64, SeedSequenceStateAndRawDrawsMatchNumpy) {
  for (const SeedCase& c : kSeeds) {
    EXPECT_EQ(numpy_seed_sequence_words(c.seed), c.words) << c.seed;
    NumpyPcg64 g(c.seed);
    EXPECT_TRUE(g.state() == u128(c.state_inc[0], c.state_inc[1])) << c.seed;
    EXPECT_TRUE(g.increment() == u128(c.state_inc[2], c.state_inc[3])) << c.seed;
    for (size_t i = 0; i < c.raw.size(); ++i) EXPECT_EQ(g.next_uint64(), c.raw[i]) << c.seed << " #" << i;
  }
}

// g = np.random.default_rng(7); three scalar integers(1, 4096), integers(5, 6) (no draw),
// integers(-2**31, 2**30, size=8) (rejections are likely: the threshold is 2^30 of 3 * 2^30),
// integers(-2**31, 2**31 - 1, size=3), integers(0, 10, size=5); all dtype=np.int32.
TEST(NumpyPcg64, Int32IntegersMatchNumpyIncludingRejectionsAndTheHalfWordBuffer) {
  NumpyPcg64 g(7);
  std::vector<int32_t> got;
  for (int i = 0; i < 3; ++i) got.push_back(g.integers_int32(1, 4096));
  got.push_back(g.integers_int32(5, 6));
  for (int i = 0; i < 8; ++i) got.push_back(g.integers_int32(INT32_MIN, 1 << 30));
  for (int i = 0; i < 3; ++i) got.push_back(g.integers_int32(INT32_MIN, INT32_MAX));
  for (int i = 0; i < 5; ++i) got.push_back(g.integers_int32(0, 10));
  const std::vector<int32_t> want = {3870,      2560,        2802,        5,           -284673271,
                                     351174855, 537894257,   -1422040512, -1968603917, -1180580366,
                                     666428961, -2130522916, -915748,     1379665550,  -1582950051,
                                     7,         1,           4,           8,           3};
  EXPECT_EQ(got, want);
}

// The full int32 range takes a 32-bit draw as it is: g = np.random.default_rng(11);
// g.integers(-2**31, 2**31, size=5, dtype=np.int32), then g.integers(0, 2, dtype=np.int32).
TEST(NumpyPcg64, FullInt32RangeMatchesNumpy) {
  NumpyPcg64 g(11);
  std::vector<int32_t> got;
  for (int i = 0; i < 5; ++i) got.push_back(g.integers_int32(INT32_MIN, int64_t{1} << 31));
  got.push_back(g.integers_int32(0, 2));
  EXPECT_EQ(got, (std::vector<int32_t>{-1572811698, -1595278832, 1275951719, -3101558, 386688124, 1}));
}

// Megatron-Core's mock document lengths: r = np.random.default_rng(0).integers(1, 4096,
// size=100000, dtype=np.int32): r[:4], r[50000], r[-3:], r.sum().
TEST(NumpyPcg64, MockDatasetLengthsMatchNumpy) {
  NumpyPcg64 g(0);
  std::vector<int32_t> r;
  int64_t sum = 0;
  for (int i = 0; i < 100000; ++i) {
    r.push_back(g.integers_int32(1, 4096));
    sum += r.back();
  }
  EXPECT_EQ(std::vector<int32_t>(r.begin(), r.begin() + 4), (std::vector<int32_t>{3484, 2609, 2094, 1105}));
  EXPECT_EQ(r[50000], 3515);
  EXPECT_EQ(std::vector<int32_t>(r.end() - 3, r.end()), (std::vector<int32_t>{61, 100, 769}));
  EXPECT_EQ(sum, 204637097);
}

}  // namespace
}  // namespace megatron::data
