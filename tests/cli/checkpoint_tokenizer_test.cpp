// cli/checkpoint_tokenizer.h on checkpoints that `megatron convert --load-hf` made from random
// Llamas with a SentencePiece tokenizer.model (cli/hf_llama_fixture.h): the recorded tokenizer is
// used when no flag is given, flags win, a moved checkpoint finds its own copy, a missing one is a
// one-line error; Llama2Tokenizer prepends <s> and SentencePieceTokenizer does not; generation
// stops at the tokenizer's </s> and at config.json's eos_token_id list.
#include "cli/checkpoint_tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli/hf_llama_fixture.h"
#include "cli/tokenizer_flags.h"
#include "core/error.h"
#include "support/paths.h"

namespace megatron::cli {
namespace {

namespace fs = std::filesystem;

class CheckpointTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test::scratch_dir("checkpoint_tokenizer"));
    for (const char* variant : {"llama2", "stop"}) {
      ASSERT_EQ(test::make_hf_llama(*dir_, variant, variant), "");
      const test::CommandResult r =
          test::run_command(test::megatron_binary() + " convert --load-hf " + *dir_ + "/" + variant + "/hf_in --save " +
                                *dir_ + "/" + variant + "/ck --make-vocab-size-divisible-by 16",
                            true);
      ASSERT_EQ(r.status, 0) << r.output;
    }
  }
  static data::TokenizerOptions options(const std::string& ck, const std::vector<std::string>& flags) {
    Args args("generate");
    declare_tokenizer_flags(args, "");
    args.parse(flags);
    return checkpoint_tokenizer_options(args, ckpt::load_checkpoint_dir(ck));
  }
  static std::string* dir_;
};
std::string* CheckpointTokenizer::dir_ = nullptr;

TEST_F(CheckpointTokenizer, TheRecordedTokenizerUnlessFlagsSayOtherwise) {
  const std::string ck = *dir_ + "/llama2/ck";
  data::TokenizerOptions o = options(ck, {});
  EXPECT_EQ(o.type, "Llama2Tokenizer");
  EXPECT_EQ(o.tokenizer_model, fs::absolute(ck).lexically_normal().string() + "/release/tokenizer.model");
  o = options(ck, {"--tokenizer-model", *dir_ + "/sp.model"});
  EXPECT_EQ(o.type, "Llama2Tokenizer");
  EXPECT_EQ(o.tokenizer_model, *dir_ + "/sp.model");
  // Another type takes nothing recorded: its files come from the flags.
  o = options(ck, {"--tokenizer-type", "SentencePieceTokenizer"});
  EXPECT_EQ(o.type, "SentencePieceTokenizer");
  EXPECT_FALSE(o.tokenizer_model.has_value());
}

TEST_F(CheckpointTokenizer, AMovedCheckpointUsesItsOwnCopy) {
  const test::CommandResult r = test::run_command(
      test::megatron_binary() + " convert --load-hf " + *dir_ + "/llama2/hf_in --save " + *dir_ + "/before_move", true);
  ASSERT_EQ(r.status, 0) << r.output;
  fs::rename(*dir_ + "/before_move", *dir_ + "/moved");
  EXPECT_EQ(options(*dir_ + "/moved", {}).tokenizer_model, *dir_ + "/moved/release/tokenizer.model");
  fs::remove(*dir_ + "/moved/release/tokenizer.model");
  try {
    options(*dir_ + "/moved", {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "[--tokenizer-model] the checkpoint in " + *dir_ + "/moved/release records " +
                                         fs::absolute(*dir_).lexically_normal().string() +
                                         "/before_move/release/tokenizer.model, which does not exist; give "
                                         "--tokenizer-model");
  }
}

TEST_F(CheckpointTokenizer, BosAndStopTokensAsTheTokenizerAndConfigDefineThem) {
  for (const char* variant : {"llama2", "stop"}) {
    const std::string ck = *dir_ + "/" + variant + "/ck";
    const ckpt::LoadedCheckpoint loaded = ckpt::load_checkpoint_dir(ck);
    data::TokenizerOptions o = options(ck, {});
    GenerationTokens g = generation_tokens(o, data::make_tokenizer(o).get(), loaded);
    EXPECT_EQ(g.prefix, std::vector<int32_t>({1})) << variant;  // <s>
    // </s> = 2, and config.json's eos_token_id: 2 (llama2) or [5] (stop).
    EXPECT_EQ(g.stop, std::string(variant) == "stop" ? std::vector<int32_t>({2, 5}) : std::vector<int32_t>({2}));
    EXPECT_TRUE(g.stops(2));
    EXPECT_FALSE(g.stops(3));
    o = options(ck, {"--tokenizer-type", "SentencePieceTokenizer", "--tokenizer-model", *dir_ + "/sp.model"});
    g = generation_tokens(o, data::make_tokenizer(o).get(), loaded);
    EXPECT_TRUE(g.prefix.empty()) << variant;  // Megatron's SentencePieceTokenizer adds no BOS
  }
}

}  // namespace
}  // namespace megatron::cli
