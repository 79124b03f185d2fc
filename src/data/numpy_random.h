// NumPy's legacy RNG, bit for bit: numpy.random.RandomState(seed) and its shuffle().
//
// Megatron builds doc_idx and shuffle_idx with np.random.RandomState(seed).shuffle
// (C23 megatron/data/gpt_dataset.py _build_doc_idx / _build_shuffle_idx), so the
// training order is only reproducible with the same generator and the same draws:
//  - seeding: MT19937 init_genrand(seed) (numpy _legacy_seeding -> mt19937_seed),
//    for integer seeds 0 <= seed < 2^32;
//  - genrand_int32: the standard MT19937 tempered output;
//  - shuffle of a 1-D array (mtrand.pyx RandomState.shuffle -> _shuffle_raw):
//    for i = n-1 down to 1: j = random_interval(i); swap(x[i], x[j]);
//  - random_interval(max) (numpy distributions.c): mask = smallest 2^k-1 >= max;
//    draw (32-bit draw & mask) until <= max; when max > 0xffffffff the draw is
//    64-bit, made of two 32-bit outputs, the first one the high word.
// Example: RandomState(1234).shuffle(arange(10)) == [7, 2, 9, 1, 0, 8, 4, 5, 6, 3].
#pragma once

#include <cstdint>
#include <span>
#include <utility>

namespace megatron::data {

class NumpyRandomState {
 public:
  // seed must be in [0, 2^32); callers validate user input (see check_numpy_seed).
  explicit NumpyRandomState(uint32_t seed);

  uint32_t next_uint32();                  // genrand_int32
  uint64_t next_uint64();                  // (first << 32) | second, as numpy's mt19937_next64
  uint64_t random_interval(uint64_t max);  // uniform in [0, max], numpy's rejection sampling

  // In-place Fisher-Yates exactly as RandomState.shuffle on a 1-D array.
  template <class T>
  void shuffle(std::span<T> x) {
    for (int64_t i = static_cast<int64_t>(x.size()) - 1; i > 0; --i) {
      const auto j = static_cast<int64_t>(random_interval(static_cast<uint64_t>(i)));
      std::swap(x[i], x[j]);
    }
  }

 private:
  void reload();

  static constexpr int kN = 624;
  uint32_t mt_[kN];
  int pos_ = kN;
};

// Throws "[what] seed must be in [0, 2^32 - 1] (numpy.random.RandomState), got N".
uint32_t check_numpy_seed(int64_t seed, const char* what);

}  // namespace megatron::data
