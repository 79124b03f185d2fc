// Inputs of the model tests: a tiny GPT config, and random micro-batches (tokens and labels
// uniform over [0, vocab), drawn alternately from std::mt19937(seed); every position counted,
// or with partial_mask every third one (i % 3 == 1) masked out).
#pragma once

#include <cstdint>

#include "model/gpt_model.h"

namespace megatron::test {

// The 2-layer GPT of the model tests (h 8, 2 heads of 4, FFN 16, s 5, vocabulary 13 padded to
// 16), init std 0.3 (larger than 0.02 so every path carries gradient well above finite-
// difference noise), no dropout.
model::GPTConfig tiny_gpt_config();

model::MicroBatch random_micro_batch(int64_t b, int64_t s, int64_t vocab, uint32_t seed, bool partial_mask);

}  // namespace megatron::test
