#include "data/numpy_pcg64.h"

#include <vector>

#include "core/error.h"

namespace megatron::data {
namespace {

// SeedSequence's constants (numpy bit_generator.pyx).
constexpr uint32_t kInitA = 0x43b0d7e5u, kMultA = 0x931e8875u;
constexpr uint32_t kInitB = 0x8b51f9ddu, kMultB = 0x58f38dedu;
constexpr uint32_t kMixMultL = 0xca01f9ddu, kMixMultR = 0x4973f715u;
constexpr int kXShift = 16;
constexpr int kPoolSize = 4;

uint32_t hashmix(uint32_t value, uint32_t* hash_const) {
  value ^= *hash_const;
  *hash_const *= kMultA;
  value *= *hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  result ^= result >> kXShift;
  return result;
}

constexpr unsigned __int128 u128(uint64_t hi, uint64_t lo) { return (static_cast<unsigned __int128>(hi) << 64) | lo; }
constexpr unsigned __int128 kPcgMultiplier = u128(2549297995355413924ULL, 4865540595714422341ULL);

}  // namespace

std::array<uint64_t, 4> numpy_seed_sequence_words(uint64_t entropy) {
  std::vector<uint32_t> words;  // _int_to_uint32_array: low word first, 0 -> [0]
  do {
    words.push_back(static_cast<uint32_t>(entropy & 0xffffffffu));
    entropy >>= 32;
  } while (entropy != 0);

  std::array<uint32_t, kPoolSize> pool{};
  uint32_t hash_const = kInitA;
  for (int i = 0; i < kPoolSize; ++i) {
    pool[i] = hashmix(i < static_cast<int>(words.size()) ? words[static_cast<size_t>(i)] : 0u, &hash_const);
  }
  for (int src = 0; src < kPoolSize; ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], &hash_const));
    }
  }
  for (size_t src = kPoolSize; src < words.size(); ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) pool[dst] = mix(pool[dst], hashmix(words[src], &hash_const));
  }

  std::array<uint32_t, 8> state32{};
  uint32_t hash_b = kInitB;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = pool[static_cast<size_t>(i % kPoolSize)];
    v ^= hash_b;
    hash_b *= kMultB;
    v *= hash_b;
    v ^= v >> kXShift;
    state32[static_cast<size_t>(i)] = v;
  }
  std::array<uint64_t, 4> out{};
  for (int i = 0; i < 4; ++i) {
    out[static_cast<size_t>(i)] =
        static_cast<uint64_t>(state32[2 * i]) | (static_cast<uint64_t>(state32[2 * i + 1]) << 32);
  }
  return out;
}

NumpyPcg64::NumpyPcg64(uint64_t seed) {
  const std::array<uint64_t, 4> w = numpy_seed_sequence_words(seed);
  const unsigned __int128 initstate = u128(w[0], w[1]);
  const unsigned __int128 initseq = u128(w[2], w[3]);
  state_ = 0;
  inc_ = (initseq << 1) | 1u;
  step();
  state_ += initstate;
  step();
}

void NumpyPcg64::step() { state_ = state_ * kPcgMultiplier + inc_; }

uint64_t NumpyPcg64::next_uint64() {
  step();
  const uint64_t hi = static_cast<uint64_t>(state_ >> 64);
  const uint64_t lo = static_cast<uint64_t>(state_);
  const unsigned rot = static_cast<unsigned>(state_ >> 122);
  const uint64_t x = hi ^ lo;
  return rot == 0 ? x : (x >> rot) | (x << (64 - rot));
}

uint32_t NumpyPcg64::next_uint32() {
  if (has_uint32_) {
    has_uint32_ = false;
    return uinteger_;
  }
  const uint64_t next = next_uint64();
  has_uint32_ = true;
  uinteger_ = static_cast<uint32_t>(next >> 32);
  return static_cast<uint32_t>(next & 0xffffffffu);
}

int32_t NumpyPcg64::integers_int32(int32_t low, int64_t high) {
  MT_CHECK(low < high && high <= (int64_t{1} << 31)) << "integers(" << low << ", " << high << ")";
  const uint32_t rng = static_cast<uint32_t>(high - 1 - low);  // the inclusive range, < 2^32
  uint32_t value = 0;
  if (rng == 0) {
    value = 0;  // one possible value: numpy draws nothing
  } else if (rng == 0xffffffffu) {
    value = next_uint32();
  } else {
    const uint32_t rng_excl = rng + 1;
    uint64_t m = static_cast<uint64_t>(next_uint32()) * rng_excl;
    uint32_t leftover = static_cast<uint32_t>(m);
    if (leftover < rng_excl) {
      const uint32_t threshold = (0xffffffffu - rng) % rng_excl;
      while (leftover < threshold) {
        m = static_cast<uint64_t>(next_uint32()) * rng_excl;
        leftover = static_cast<uint32_t>(m);
      }
    }
    value = static_cast<uint32_t>(m >> 32);
  }
  return static_cast<int32_t>(static_cast<uint32_t>(low) + value);
}

}  // namespace megatron::data
