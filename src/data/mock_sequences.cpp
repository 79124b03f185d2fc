#include "data/mock_sequences.h"

#include "core/error.h"
#include "data/numpy_pcg64.h"

namespace megatron::data {

MockSequences::MockSequences(int64_t eod, int64_t vocab_size) : eod_(eod), vocab_size_(vocab_size) {
  MT_CHECK(vocab_size >= 1 && eod >= 0 && eod < vocab_size) << "eod " << eod << " of a vocabulary of " << vocab_size;
  NumpyPcg64 rng(kSeed);
  lengths_.resize(static_cast<size_t>(kSize));
  for (int32_t& len : lengths_) len = rng.integers_int32(1, kMaxSequenceLength);
}

int32_t MockSequences::sequence_length(int64_t i) const {
  MT_CHECK(i >= 0 && i < kSize) << "mock sequence " << i << " of " << kSize;
  return lengths_[static_cast<size_t>(i)];
}

void MockSequences::get(int64_t i, int64_t offset, int64_t length, std::vector<int64_t>* out) const {
  const int64_t len = sequence_length(i);
  if (length < 0) length = len - offset;
  MT_CHECK(offset >= 0 && length >= 0 && offset + length <= len)
      << "mock sequence " << i << ": [" << offset << ", " << offset + length << ") of " << len;
  // Token k of the sequence is (k + 1) % V, except the last, which is the end of document.
  for (int64_t k = offset; k < offset + length; ++k) out->push_back(k == len - 1 ? eod_ : (k + 1) % vocab_size_);
}

}  // namespace megatron::data
