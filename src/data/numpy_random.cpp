#include "data/numpy_random.h"

#include "core/error.h"

namespace megatron::data {

NumpyRandomState::NumpyRandomState(uint32_t seed) {
  // init_genrand: the Knuth multiplier recurrence over 624 words.
  mt_[0] = seed;
  for (int i = 1; i < kN; ++i) {
    mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  }
  pos_ = kN;
}

void NumpyRandomState::reload() {
  constexpr int kM = 397;
  constexpr uint32_t kMatrixA = 0x9908b0dfu, kUpper = 0x80000000u, kLower = 0x7fffffffu;
  for (int i = 0; i < kN; ++i) {
    uint32_t y = (mt_[i] & kUpper) | (mt_[(i + 1) % kN] & kLower);
    mt_[i] = mt_[(i + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
  }
  pos_ = 0;
}

uint32_t NumpyRandomState::next_uint32() {
  if (pos_ >= kN) reload();
  uint32_t y = mt_[pos_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint64_t NumpyRandomState::next_uint64() {
  const uint64_t hi = next_uint32();
  const uint64_t lo = next_uint32();
  return (hi << 32) | lo;
}

uint64_t NumpyRandomState::random_interval(uint64_t max) {
  if (max == 0) return 0;  // numpy draws nothing here
  uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  uint64_t value;
  if (max <= 0xffffffffull) {
    while ((value = (next_uint32() & mask)) > max) {
    }
  } else {
    while ((value = (next_uint64() & mask)) > max) {
    }
  }
  return value;
}

uint32_t check_numpy_seed(int64_t seed, const char* what) {
  if (seed < 0 || seed > 0xffffffffll) {
    throw_error("[", what, "] seed must be in [0, 4294967295] (numpy.random.RandomState), got ", seed);
  }
  return static_cast<uint32_t>(seed);
}

}  // namespace megatron::data
