// data::document_starts against Megatron's get_ltor_masks_and_position_ids, worked by hand:
// for every end-of-document token at position i, the positions after it restart at 0 and no
// token after it attends to positions <= i.
#include "data/document_starts.h"

#include <gtest/gtest.h>

#include <vector>

namespace megatron::data {
namespace {

constexpr int32_t kEod = 50256;

std::vector<int32_t> starts_of(const std::vector<int32_t>& tokens) {
  std::vector<int32_t> out(tokens.size());
  document_starts(tokens, kEod, out);
  return out;
}

TEST(DocumentStarts, FollowMegatronsLoopOverEndOfDocumentTokens) {
  // No eod: one document, Megatron's arange positions and causal mask.
  EXPECT_EQ(starts_of({5, 6, 7, 8}), (std::vector<int32_t>{0, 0, 0, 0}));
  // An eod belongs to the document it ends: mask[(i+1):, :(i+1)] = 0 with i = 2 makes
  // position 3 the next document's first; Megatron's positions become 0 1 2 0 1.
  EXPECT_EQ(starts_of({5, 6, kEod, 7, 8}), (std::vector<int32_t>{0, 0, 0, 3, 3}));
  // Consecutive eods: each is a one-token document (positions 0 1 0 0 0 1).
  EXPECT_EQ(starts_of({5, kEod, kEod, kEod, 7, 8}), (std::vector<int32_t>{0, 0, 2, 3, 4, 4}));
  // An eod first and last: the first token is a document of its own; the last eod starts
  // nothing inside this sample.
  EXPECT_EQ(starts_of({kEod, 5, 6, kEod}), (std::vector<int32_t>{0, 1, 1, 1}));
}

TEST(DocumentStarts, OutputOfAnotherLengthIsACallersBug) {
  std::vector<int32_t> out(2);
  const std::vector<int32_t> tokens = {1, 2, 3};
  EXPECT_DEATH(document_starts(tokens, kEod, out), "2 outputs for 3 tokens");
}

}  // namespace
}  // namespace megatron::data
