// Megatron-Core's mock data (--mock-data; megatron/core/datasets/gpt_dataset.py
// MockGPTLowLevelDataset), token for token: 100000 sequences whose lengths are
// numpy.random.default_rng(0).integers(1, 4096, size=100000, dtype=np.int32) (numpy_pcg64.h);
// sequence i of length L holds the tokens (1, 2, ..., L-1) modulo the tokenizer's vocabulary V
// and then its end of document. Example: lengths start 3484, 2609, ...; sequence 0 is
// [1, 2, ..., 3483, eod] for GPT-2 (V = 50257), [1, ..., 999, 0, 1, ..., 483, eod] for V = 1000.
// Megatron-Core splits them evenly whatever --split says (BlendedMegatronDatasetConfig sets
// split = "1,1,1" when there is no blend: train [0, 33333), valid [33333, 66667), test
// [66667, 100000)) and builds its sample index over them exactly as over an indexed dataset,
// but keeps that index in memory (no cache files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/sequence_source.h"

namespace megatron::data {

class MockSequences final : public SequenceSource {
 public:
  static constexpr int64_t kSize = 100000;             // MockGPTLowLevelDataset.size
  static constexpr int32_t kMaxSequenceLength = 4096;  // .max_sequence_length (exclusive bound)
  static constexpr uint64_t kSeed = 0;                 // .seed
  static constexpr const char* kSplit = "1,1,1";       // the split Megatron-Core imposes

  // eod in [0, vocab_size).
  MockSequences(int64_t eod, int64_t vocab_size);

  const std::string& prefix() const override { return name_; }
  int64_t sequence_count() const override { return kSize; }
  int32_t sequence_length(int64_t i) const override;
  std::vector<int32_t> sequence_lengths() const override { return lengths_; }
  void get(int64_t i, int64_t offset, int64_t length, std::vector<int64_t>* out) const override;

  int64_t eod() const { return eod_; }
  int64_t vocab_size() const { return vocab_size_; }

 private:
  std::string name_ = "mock";
  int64_t eod_;
  int64_t vocab_size_;
  std::vector<int32_t> lengths_;
};

}  // namespace megatron::data
