// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011, as in Random123 and
// cuRAND): a pure function of (key, counter), so dropout masks are reproducible on any
// backend and cheap to regenerate in backward or recompute instead of being stored.
#pragma once

#include <array>
#include <cstdint>

namespace megatron {

using PhiloxBlock = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Ten rounds of Philox4x32 on `counter` under `key`.
PhiloxBlock philox4x32_10(PhiloxBlock counter, PhiloxKey key);

// Uniform float in [0, 1) for element `index` of the stream (seed, stream): key = seed
// (low, high words), counter = (index / 4 low, index / 4 high, stream low, stream high);
// word index % 4 of the block, top 24 bits, times 2^-24. Every backend must produce the
// same value for the same arguments.
float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index);

// Standard normal number `index` of the stream (seed, stream), the parameter initialisation's
// (Backend::init_normal): Box-Muller over the uniforms 2 index and 2 index + 1 of
// philox_uniform's numbering (both in Philox block index / 2), u1 = 1 - the first (in (0, 1]),
// u2 = the second; sqrt(-2 ln u1) cos(2 pi u2) evaluated in double by core/normal_math.h (the
// same bits on the GPU) and rounded once to float.
float philox_normal(uint64_t seed, uint64_t stream, uint64_t index);

// Dropout keeps element `index` when philox_uniform(seed, stream, index) >= p; kept values
// are scaled by 1 / (1 - p).
inline bool dropout_keep(uint64_t seed, uint64_t stream, uint64_t index, float p) {
  return philox_uniform(seed, stream, index) >= p;
}

}  // namespace megatron
