// NumPy's default generator, bit for bit: numpy.random.default_rng(seed) (PCG64 seeded through
// SeedSequence) and Generator.integers(low, high, dtype=np.int32).
//
// Megatron-Core's mock dataset (megatron/core/datasets/gpt_dataset.py MockGPTLowLevelDataset)
// draws its 100000 document lengths with default_rng(0).integers(1, 4096, dtype=int32), so
// --mock-data reads the same tokens as Megatron only with the same generator:
//  - SeedSequence(entropy) (numpy bit_generator.pyx): the entropy as 32-bit words (low word
//    first; 0 is one word 0), mixed into a pool of 4 words by hashmix/mix; generate_state(4,
//    uint64) hashes the pool cyclically into 8 words, read pairwise as little-endian uint64;
//  - PCG64 (XSL-RR 128/64): state s and increment from those words (s = w0:w1, inc = w2:w3,
//    high word first); seeding steps state = 0, inc = 2*inc + 1, step, state += s, step; each
//    draw steps state = state * M + inc, then outputs rotr64(hi ^ lo, state >> 122);
//  - 32-bit draws split one 64-bit output, the low half first, the high half kept for the next;
//  - integers(low, high) for int32 (numpy _bounded_integers, Lemire's method without the
//    masked path): r = high - 1 - low, m = draw32 * (r + 1); while (m mod 2^32) <
//    (2^32 - (r + 1)) mod (r + 1), draw again; the value is low + m / 2^32.
// Example: default_rng(0).integers(1, 4096, size=4, dtype=np.int32) == [3484, 2609, 2094, 1105].
#pragma once

#include <array>
#include <cstdint>

namespace megatron::data {

// SeedSequence(entropy).generate_state(4, np.uint64).
std::array<uint64_t, 4> numpy_seed_sequence_words(uint64_t entropy);

class NumpyPcg64 {
 public:
  // numpy.random.default_rng(seed) for an integer seed >= 0.
  explicit NumpyPcg64(uint64_t seed);

  uint64_t next_uint64();  // bit_generator.random_raw()
  uint32_t next_uint32();  // the buffered 32-bit draw
  // Generator.integers(low, high, dtype=np.int32): uniform in [low, high); needs low < high <=
  // 2^31 (high is exclusive, so the full int32 range is (-2^31, 2^31)).
  int32_t integers_int32(int32_t low, int64_t high);

  // The 128-bit state and increment (numpy's bit_generator.state), for tests.
  unsigned __int128 state() const { return state_; }
  unsigned __int128 increment() const { return inc_; }

 private:
  void step();

  unsigned __int128 state_ = 0;
  unsigned __int128 inc_ = 0;
  bool has_uint32_ = false;
  uint32_t uinteger_ = 0;
};

}  // namespace megatron::data
