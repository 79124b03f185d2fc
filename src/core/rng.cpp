#include "core/rng.h"

#include "core/normal_math.h"

namespace megatron {

PhiloxBlock philox4x32_10(PhiloxBlock c, PhiloxKey k) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;    // round multipliers
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule increments
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t block = index >> 2;
  const PhiloxBlock out = philox4x32_10({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                         static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)},
                                        {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return static_cast<float>(out[index & 3] >> 8) * (1.0f / 16777216.0f);
}

float philox_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t block = index >> 1;
  const PhiloxBlock out = philox4x32_10({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                         static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)},
                                        {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  const size_t w = 2 * static_cast<size_t>(index & 1);
  return normal_math::normal_from_words_host(out[w], out[w + 1]);
}

}  // namespace megatron
