#include "support/micro_batches.h"

#include <random>

namespace megatron::test {

model::MicroBatch random_micro_batch(int64_t b, int64_t s, int64_t vocab, uint32_t seed, bool partial_mask) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab) - 1);
  model::MicroBatch mb;
  mb.batch = b;
  mb.seq = s;
  for (int64_t i = 0; i < b * s; ++i) {
    mb.tokens.push_back(tok(rng));
    mb.labels.push_back(tok(rng));
    mb.loss_mask.push_back(partial_mask && i % 3 == 1 ? 0.0f : 1.0f);
  }
  return mb;
}

}  // namespace megatron::test
