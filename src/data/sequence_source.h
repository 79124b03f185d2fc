// What a GPTDataset indexes: a numbered list of token sequences of known lengths. The
// on-disk indexed dataset (indexed_dataset.h) is one; Megatron-Core's mock data
// (mock_sequences.h) is the other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace megatron::data {

class SequenceSource {
 public:
  virtual ~SequenceSource() = default;
  // Names the source in messages and in the sample-index description: the data prefix, or "mock".
  virtual const std::string& prefix() const = 0;
  virtual int64_t sequence_count() const = 0;
  virtual int32_t sequence_length(int64_t i) const = 0;
  // All sequence lengths, in order.
  virtual std::vector<int32_t> sequence_lengths() const = 0;
  // Appends tokens [offset, offset+length) of sequence `i` to `out`.
  // length < 0 means "to the end of the sequence". Range errors are invariants (MT_CHECK).
  virtual void get(int64_t i, int64_t offset, int64_t length, std::vector<int64_t>* out) const = 0;
};

}  // namespace megatron::data
