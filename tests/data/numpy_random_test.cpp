#include "data/numpy_random.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/error.h"

namespace megatron::data {
namespace {

// Expected values come from /usr/bin/python3 with numpy 1.24:
//   np.random.RandomState(seed).randint(0, 2**32, size=5, dtype=np.uint64)
TEST(NumpyRandomState, FirstOutputsMatchNumpy) {
  struct Case {
    uint32_t seed;
    std::vector<uint32_t> first;
  };
  for (const Case& c : {Case{5489, {3499211612u, 581869302u, 3890346734u, 3586334585u, 545404204u}},
                        Case{1234, {822569775u, 2137449171u, 2671936806u, 3512589365u, 1880026316u}},
                        Case{0, {2357136044u, 2546248239u, 3071714933u, 3626093760u, 2588848963u}}}) {
    NumpyRandomState rng(c.seed);
    for (size_t i = 0; i < c.first.size(); ++i) EXPECT_EQ(rng.next_uint32(), c.first[i]) << c.seed << " #" << i;
  }
}

std::vector<int64_t> shuffled_arange(int64_t n, uint32_t seed) {
  std::vector<int64_t> a(static_cast<size_t>(n));
  std::iota(a.begin(), a.end(), 0);
  NumpyRandomState rng(seed);
  rng.shuffle(std::span<int64_t>(a));
  return a;
}

// a = np.arange(n); np.random.RandomState(seed).shuffle(a)
TEST(NumpyRandomState, ShuffleMatchesNumpy) {
  EXPECT_EQ(shuffled_arange(10, 1234), (std::vector<int64_t>{7, 2, 9, 1, 0, 8, 4, 5, 6, 3}));
  EXPECT_EQ(shuffled_arange(10, 0), (std::vector<int64_t>{2, 8, 4, 9, 1, 6, 7, 3, 0, 5}));
  EXPECT_EQ(shuffled_arange(10, 42), (std::vector<int64_t>{8, 1, 5, 0, 7, 2, 9, 4, 3, 6}));
  struct Case {
    uint32_t seed;
    std::vector<int64_t> head, tail;
    int64_t weighted;  // sum(a[i] * i), a checksum of the whole permutation
  };
  for (const Case& c :
       {Case{1234, {681, 990, 155, 768, 438, 363, 688, 555, 620, 99}, {204, 53, 294, 723, 815}, 251398022},
        Case{7, {778, 334, 271, 802, 216, 408, 812, 94, 487, 170}, {579, 502, 537, 196, 175}, 246202311}}) {
    const auto a = shuffled_arange(1000, c.seed);
    EXPECT_EQ(std::vector<int64_t>(a.begin(), a.begin() + 10), c.head) << c.seed;
    EXPECT_EQ(std::vector<int64_t>(a.end() - 5, a.end()), c.tail) << c.seed;
    int64_t weighted = 0;
    for (int64_t i = 0; i < 1000; ++i) weighted += a[static_cast<size_t>(i)] * i;
    EXPECT_EQ(weighted, c.weighted) << c.seed;
  }
}

// Two shuffles from one RandomState continue one stream (Megatron's doc_idx then shuffle_idx).
TEST(NumpyRandomState, SuccessiveShufflesShareTheStream) {
  NumpyRandomState rng(1234);
  std::vector<int32_t> a(10), b(5);
  std::iota(a.begin(), a.end(), 0);
  std::iota(b.begin(), b.end(), 0);
  rng.shuffle(std::span<int32_t>(a));
  rng.shuffle(std::span<int32_t>(b));
  EXPECT_EQ(b, (std::vector<int32_t>{0, 4, 3, 2, 1}));
}

// Hand computation of the 64-bit path, seed 1234 (outputs 822569775, 2137449171, 2671936806,
// 3512589365, 1880026316): max = 2^32 gives mask 2^33-1; the first 64-bit draw has an odd
// high word (822569775), so its masked value 2^32 + 2137449171 > max is rejected; the second
// has an even high word, so the value is its low word 3512589365. Four 32-bit outputs are used.
// numpy agrees: RandomState(1234).randint(0, 2**32 + 1, dtype=np.uint64) == 3512589365.
TEST(NumpyRandomState, RandomIntervalAbove32Bits) {
  NumpyRandomState rng(1234);
  EXPECT_EQ(rng.random_interval(uint64_t{1} << 32), 3512589365u);
  EXPECT_EQ(rng.next_uint32(), 1880026316u);
  NumpyRandomState r7(7);  // [int(RandomState(7).randint(0, 2**40 + 5, dtype=np.uint64)) for 3 draws]
  EXPECT_EQ(r7.random_interval((uint64_t{1} << 40) + 4), 752595690692u);
  EXPECT_EQ(r7.random_interval((uint64_t{1} << 40) + 4), 108744157686u);
  EXPECT_EQ(r7.random_interval((uint64_t{1} << 40) + 4), 291964244179u);
}

TEST(NumpyRandomState, RandomIntervalZeroDrawsNothing) {
  NumpyRandomState rng(5489);
  EXPECT_EQ(rng.random_interval(0), 0u);
  EXPECT_EQ(rng.next_uint32(), 3499211612u);
}

TEST(NumpyRandomState, SeedRange) {
  EXPECT_EQ(check_numpy_seed(0, "--seed"), 0u);
  EXPECT_EQ(check_numpy_seed(4294967295, "--seed"), 4294967295u);
  EXPECT_THROW(check_numpy_seed(-1, "--seed"), Error);
  EXPECT_THROW(check_numpy_seed(4294967296, "--seed"), Error);
}

}  // namespace
}  // namespace megatron::data
