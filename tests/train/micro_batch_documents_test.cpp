// train::mark_documents: each row of a micro-batch gets its own documents (Megatron computes
// the masks per sample), position ids and key starts only for the flags that are on.
#include "train/micro_batch_documents.h"

#include <gtest/gtest.h>

#include <vector>

namespace megatron::train {
namespace {

constexpr int32_t kEod = 9;

model::MicroBatch two_rows() {
  model::MicroBatch mb;
  mb.batch = 2;
  mb.seq = 5;
  mb.tokens = {1, kEod, 2, 3, kEod, /* row 1 */ 4, 5, 6, kEod, 7};
  return mb;
}

TEST(MarkDocuments, PositionIdsAndKeyStartsPerRow) {
  model::GPTConfig c;
  c.reset_position_ids = c.reset_attention_mask = true;
  model::MicroBatch mb = two_rows();
  mark_documents(c, kEod, &mb);
  // Row 0's documents: {1, eod}, {2, 3, eod}; row 1's: {4, 5, 6, eod}, {7} (a row's first
  // document does not continue the previous row's).
  EXPECT_EQ(mb.position_ids, (std::vector<int32_t>{0, 1, 0, 1, 2, 0, 1, 2, 3, 0}));
  EXPECT_EQ(mb.key_start, (std::vector<int32_t>{0, 0, 2, 2, 2, 0, 0, 0, 0, 4}));
}

TEST(MarkDocuments, OnlyTheFlagsThatAreOn) {
  model::GPTConfig c;
  model::MicroBatch mb = two_rows();
  mb.position_ids = {1, 2};  // stale values are cleared
  mark_documents(c, kEod, &mb);
  EXPECT_TRUE(mb.position_ids.empty());
  EXPECT_TRUE(mb.key_start.empty());
  c.reset_attention_mask = true;
  mark_documents(c, kEod, &mb);
  EXPECT_TRUE(mb.position_ids.empty());
  EXPECT_EQ(mb.key_start.size(), 10u);
}

}  // namespace
}  // namespace megatron::train
