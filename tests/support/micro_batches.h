// Random micro-batches for the model tests: tokens and labels uniform over [0, vocab), drawn
// alternately from std::mt19937(seed); every position counted, or with partial_mask every
// third one (i % 3 == 1) masked out.
#pragma once

#include <cstdint>

#include "model/gpt_model.h"

namespace megatron::test {

model::MicroBatch random_micro_batch(int64_t b, int64_t s, int64_t vocab, uint32_t seed, bool partial_mask);

}  // namespace megatron::test
