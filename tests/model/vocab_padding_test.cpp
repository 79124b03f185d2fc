#include "model/vocab_padding.h"

#include <gtest/gtest.h>

#include <limits>
#include <sstream>

#include "core/error.h"

namespace megatron::model {
namespace {

TEST(PaddedVocab, Gpt2AtTensorParallelSizes) {
  // docs/megatron-formats.md, "Tensor-parallel layers and vocabulary padding": 50257 padded to a
  // multiple of 128 * TP.
  EXPECT_EQ(padded_vocab_size(50257, 128, 1), 50304);
  EXPECT_EQ(padded_vocab_size(50257, 128, 2), 50432);
  EXPECT_EQ(padded_vocab_size(50257, 128, 4), 50688);
  EXPECT_EQ(padded_vocab_size(50257, 128, 8), 51200);
  EXPECT_EQ(padded_vocab_size(50257, 1024, 1), 51200);
  EXPECT_EQ(padded_vocab_size(50304, 128, 1), 50304);  // already a multiple: unchanged
  EXPECT_EQ(padded_vocab_size(1, 1, 1), 1);
}

TEST(PaddedVocab, MegatronMessage) {
  std::ostringstream os;
  EXPECT_EQ(padded_vocab_size(50257, 128, 1, &os), 50304);
  EXPECT_EQ(os.str(), " > padded vocab (size: 50257) with 47 dummy tokens (new size: 50304)\n");
  EXPECT_EQ(padded_vocab_message(50257, padded_vocab_size(50257, 128, 8)),
            " > padded vocab (size: 50257) with 943 dummy tokens (new size: 51200)");
}

TEST(PaddedVocab, BadInputNamesTheFlag) {
  try {
    padded_vocab_size(50257, 0, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[--make-vocab-size-divisible-by]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(padded_vocab_size(0, 128, 1), Error);
  EXPECT_THROW(padded_vocab_size(50257, 128, 0), Error);
}

// A multiple past int64 is an error naming the flag, not a wrapped (negative) vocabulary that
// aborted later in the FLOPs formula.
TEST(PaddedVocab, MultiplesBeyond64BitsNameTheFlag) {
  for (const auto& [divisible_by, tp] : {std::pair<int64_t, int64_t>{std::numeric_limits<int64_t>::max(), 1},
                                         {int64_t{1} << 62, 4},
                                         {int64_t{1} << 62, 2}}) {
    try {
      const int64_t padded = padded_vocab_size(50257, divisible_by, tp);
      ADD_FAILURE() << divisible_by << " x " << tp << " padded to " << padded;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind("[--make-vocab-size-divisible-by] the vocabulary (50257) padded to a multiple of ", 0),
                0u)
          << message;
    }
  }
  EXPECT_EQ(padded_vocab_size(50257, int64_t{1} << 40, 1), int64_t{1} << 40);
}

}  // namespace
}  // namespace megatron::model
