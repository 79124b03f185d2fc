// `megatron generate` from a checkpoint that `megatron train --save` wrote: a model trained on
// a repeating sentence continues it greedily; sampling is reproducible by seed; bad input is a
// one-line error.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "support/paths.h"

namespace megatron {
namespace {

std::string tool(const std::string& command, const std::string& flags, int* status) {
  const test::CommandResult r = test::run_command(test::megatron_binary() + " " + command + " " + flags, true);
  *status = r.status;
  return r.output;
}

class GenerateCommand : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test::scratch_dir("generate_command"));
    const std::string& dir = *dir_;
    {
      std::ofstream jsonl(dir + "/corpus.jsonl");
      for (int d = 0; d < 60; ++d) {
        std::string text;
        for (int r = 0; r < 6; ++r) text += "the cat sat on the mat. ";
        jsonl << "{\"text\": \"" << text << "\"}\n";
      }
    }
    const std::string vocab = " --vocab-file " + test::gpt2_vocab_file() + " --merge-file " + test::gpt2_merge_file();
    int status = 0;
    std::string out = tool("preprocess", "--input " + dir + "/corpus.jsonl --output-prefix " + dir +
                                              "/c --tokenizer-type GPT2BPETokenizer --append-eod" + vocab,
                           &status);
    ASSERT_EQ(status, 0) << out;
    out = tool("train",
               "--num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 4 "
               "--global-batch-size 4 --train-iters 200 --lr 0.01 --attention-dropout 0 --hidden-dropout 0 "
               "--log-interval 20 --eval-interval 1000 --eval-iters 1 --split 100,0,0 --make-vocab-size-divisible-by 1 "
               "--data-path " + dir + "/c_text_document --data-cache-path " + dir + "/cache --save " + dir + "/ckpt" +
                   vocab,
               &status);
    ASSERT_EQ(status, 0) << out;
  }
  static std::string gen(const std::string& flags, int* status) {
    return tool("generate", "--load " + *dir_ + "/ckpt --vocab-file " + test::gpt2_vocab_file() + " --merge-file " +
                                test::gpt2_merge_file() + " " + flags,
                status);
  }
  static std::string* dir_;
};
std::string* GenerateCommand::dir_ = nullptr;

TEST_F(GenerateCommand, GreedyContinuesWhatItLearned) {
  int status = 0;
  const std::string out = gen("--prompt 'the cat sat on' --max-new-tokens 6 --temperature 0", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(out, "the cat sat on the mat. the cat sat\n");  // 6 tokens: " the", " mat", ".", " the", " cat", " sat"
}

TEST_F(GenerateCommand, SamplingIsReproducibleBySeed) {
  int status = 0;
  const std::string flags = "--prompt 'the' --max-new-tokens 8 --temperature 1.5 --top-k 5 --seed ";
  const std::string a = gen(flags + "7", &status);
  ASSERT_EQ(status, 0) << a;
  EXPECT_EQ(a, gen(flags + "7", &status));
  EXPECT_EQ(a.rfind("the", 0), 0u);
}

TEST_F(GenerateCommand, BadInputIsOneLine) {
  int status = 0;
  std::string out = gen("--max-new-tokens 3", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("error: [--prompt]"), std::string::npos) << out;
  out = gen("--prompt x --top-p 2", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("error: [--top-p]"), std::string::npos) << out;
  out = tool("generate", "--load /nonexistent --prompt x --vocab-file " + test::gpt2_vocab_file() + " --merge-file " +
                             test::gpt2_merge_file(),
             &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("error: [--load] no checkpoint"), std::string::npos) << out;
}

}  // namespace
}  // namespace megatron
