// Megatron-Core's mock data: the sequences, its split rule, and the sample index kept in memory.
// (tests/data/mock_dataset_reference_test.py checks the training samples against numpy.)
#include "data/mock_sequences.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "core/error.h"
#include "data/dataset_config.h"
#include "data/gpt_dataset.h"
#include "support/error_of.h"
#include "support/paths.h"

namespace megatron::data {
namespace {

using test::error_of;

TEST(MockSequences, DocumentsCountUpAndEndWithTheEod) {
  const MockSequences m(50256, 50257);
  ASSERT_EQ(m.sequence_count(), 100000);
  // default_rng(0).integers(1, 4096, dtype=np.int32)[:2] == [3484, 2609] (numpy_pcg64_test.cpp).
  EXPECT_EQ(m.sequence_length(0), 3484);
  EXPECT_EQ(m.sequence_length(1), 2609);
  std::vector<int64_t> t;
  m.get(0, 0, -1, &t);
  ASSERT_EQ(t.size(), 3484u);
  for (int64_t k = 0; k < 3483; ++k) ASSERT_EQ(t[static_cast<size_t>(k)], k + 1) << k;
  EXPECT_EQ(t.back(), 50256);
  t.clear();
  m.get(1, 2606, -1, &t);  // the tail: two counted tokens, then the EOD
  EXPECT_EQ(t, (std::vector<int64_t>{2607, 2608, 50256}));
  m.get(0, 5, 2, &t);  // appends
  EXPECT_EQ(t, (std::vector<int64_t>{2607, 2608, 50256, 6, 7}));
  int64_t tokens = 0;
  for (int32_t len : m.sequence_lengths()) tokens += len;
  EXPECT_EQ(tokens, 204637097);
}

// MockGPTLowLevelDataset.__getitem__: (numpy.arange(length - 1) + 1) % vocab_size, then the EOD
// (Megatron-Core's NullTokenizer(1000): vocabulary 1000, EOD 999).
TEST(MockSequences, IdsAreTakenModuloTheVocabulary) {
  const MockSequences m(999, 1000);
  std::vector<int64_t> t;
  m.get(0, 0, -1, &t);  // 3484 tokens: 1..999, 0..999, 0..999, 0..482, then the EOD
  ASSERT_EQ(t.size(), 3484u);
  for (int64_t k = 0; k < 3483; ++k) ASSERT_EQ(t[static_cast<size_t>(k)], (k + 1) % 1000) << k;
  EXPECT_EQ(t[998], 999);
  EXPECT_EQ(t[999], 0);
  EXPECT_EQ(t[3482], 483);
  EXPECT_EQ(t.back(), 999);
  t.clear();
  m.get(1, 1998, 3, &t);
  EXPECT_EQ(t, (std::vector<int64_t>{999, 0, 1}));
}

TEST(MockSequences, McoreSplitRoundsTheCumulatedWeights) {
  using B = std::array<int64_t, 4>;
  EXPECT_EQ(mcore_split_bounds("969, 30, 1", 100000), (B{0, 96900, 99900, 100000}));
  EXPECT_EQ(mcore_split_bounds("98,2,0", 100000), (B{0, 98000, 100000, 100000}));
  EXPECT_EQ(mcore_split_bounds("1", 100000), (B{0, 100000, 100000, 100000}));
  // Where the rules differ: C23 rounds each part (3333.33.. -> 3333 three times, then shifts all
  // by the missing 1); Megatron-Core rounds the bookends 1/3 and 2/3.
  EXPECT_EQ(train_valid_test_split("1,1,1", 10000), (B{0, 3334, 6667, 10000}));
  EXPECT_EQ(mcore_split_bounds("1,1,1", 10000), (B{0, 3333, 6667, 10000}));
  EXPECT_NE(error_of([] { mcore_split_bounds("0,0,0", 10); }).find("[--split]"), std::string::npos);
}

TEST(MockSequences, TheSampleIndexStaysInMemory) {
  const std::string dir = test::scratch_dir("mock_sequences_in_memory");
  GPTDataConfig c;
  c.mock = true;
  c.eod = 50256;
  c.vocab_size = 50257;
  c.seq_length = 4096;  // samples span documents
  c.seed = 1234;
  c.split = "969, 30, 1";   // Megatron-Core splits mock data 1,1,1 whatever --split says
  c.data_cache_path = dir;  // ignored by the mock data, as by Megatron-Core
  c.targets = {64, 8, 8};
  const GPTDatasets sets = build_gpt_datasets(c);
  ASSERT_TRUE(sets.train() && sets.valid() && sets.test());
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  EXPECT_EQ(sets.bounds[0], (std::array<int64_t, 4>{0, 33333, 66667, 100000}));
  const auto& train = *sets.parts[0][0];
  EXPECT_FALSE(train.options().cache);
  EXPECT_TRUE(train.cache().directory.empty());
  EXPECT_EQ(train.sample_idx().path(), "mock train sample_idx");
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < 64; ++i) {
    sets.train()->sample(i, &tokens);
    ASSERT_EQ(tokens.size(), 4097u);
    // Within a document each token is one more than the last; after the EOD a document
    // starts again at 1.
    for (size_t k = 1; k < tokens.size(); ++k) {
      if (tokens[k - 1] == 50256) {
        ASSERT_EQ(tokens[k], 1) << i << " " << k;
      } else {
        ASSERT_TRUE(tokens[k] == tokens[k - 1] + 1 || tokens[k] == 50256) << i << " " << k;
      }
    }
  }
  c.data_path = {"x_text_document"};
  EXPECT_NE(error_of([&] { build_gpt_datasets(c); }).find("[--mock-data]"), std::string::npos);
}

}  // namespace
}  // namespace megatron::data
