// Choosing the next token from logits: greedy (temperature 0), or sampling from
// softmax(logits / temperature) restricted to the top-k tokens and/or the smallest set whose
// probability reaches top-p (nucleus), as Megatron's text generation does (top-k first, then
// top-p). The random draw is Philox(seed, step), so a (seed, prompt) pair always gives the
// same text.
#pragma once

#include <cstdint>
#include <span>

namespace megatron::model {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int64_t top_k = 0;         // 0: no top-k
  float top_p = 0.0f;        // 0: no top-p; else in (0, 1]
  uint64_t seed = 1234;
};

// Only ids [0, vocab) are candidates (the padded dummy tokens never are). `step` numbers the
// draw. Throws megatron::Error naming the flag for a negative temperature, top-p outside
// [0, 1] or a negative top-k.
int32_t sample_token(std::span<const float> logits, int64_t vocab, const SamplingParams& params, uint64_t step);

}  // namespace megatron::model
