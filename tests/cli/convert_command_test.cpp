// `megatron convert` from the command line: a checkpoint written by `megatron train` goes to
// Hugging Face GPT-2 files and back, and `megatron generate` continues a prompt the same way
// from the original and from the re-imported checkpoint (greedy); resharding prints what
// changed; wrong flag combinations are one-line errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/paths.h"

namespace megatron {
namespace {

test::CommandResult tool(const std::string& command, const std::string& flags) {
  return test::run_command(test::megatron_binary() + " " + command + " " + flags, true);
}

TEST(ConvertCommand, HuggingFaceRoundTripGeneratesTheSameText) {
  const std::string dir = test::scratch_dir("convert_command");
  {
    std::ofstream jsonl(dir + "/corpus.jsonl");
    for (int d = 0; d < 20; ++d) jsonl << "{\"text\": \"the cat sat on the mat. the dog sat on the log.\"}\n";
  }
  const std::string vocab = " --vocab-file " + test::gpt2_vocab_file() + " --merge-file " + test::gpt2_merge_file();
  test::CommandResult r = tool("preprocess", "--input " + dir + "/corpus.jsonl --output-prefix " + dir +
                                                 "/c --tokenizer-type GPT2BPETokenizer --append-eod" + vocab);
  ASSERT_EQ(r.status, 0) << r.output;
  r = tool("train",
           "--num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 4 "
           "--global-batch-size 4 --train-iters 20 --lr 0.01 --log-interval 10 --eval-interval 1000 "
           "--eval-iters 1 --split 100,0,0 --data-path " +
               dir + "/c_text_document --data-cache-path " + dir + "/cache --save " + dir + "/ckpt" + vocab);
  ASSERT_EQ(r.status, 0) << r.output;

  r = tool("convert", "--load " + dir + "/ckpt --save-hf " + dir + "/hf");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(
      r.output.find("exported iteration 20 as Hugging Face GPT-2: 16 tensors, vocab 50257 (47 dummy rows dropped)"),
      std::string::npos)
      << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir + "/hf/config.json"));
  r = tool("convert", "--load-hf " + dir + "/hf --save " + dir + "/imported --target-tensor-parallel-size 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("imported Hugging Face GPT-2 (1 layers, hidden 32, 2 heads): 16 tensors, padded vocab 50257 "
                          "-> 50432"),
            std::string::npos)
      << r.output;

  const std::string prompt = " --prompt 'the cat sat' --max-new-tokens 8 --temperature 0" + vocab;
  const test::CommandResult a = tool("generate", "--load " + dir + "/ckpt" + prompt);
  const test::CommandResult b = tool("generate", "--load " + dir + "/imported" + prompt);
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_EQ(a.output, b.output);

  r = tool("convert", "--load " + dir + "/ckpt --save " + dir + "/tp2 --target-tensor-parallel-size 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output,
            "converted iteration 20: tensor-model-parallel size 1 -> 2, pipeline-model-parallel size 1 -> 1, "
            "padded vocab 50304 -> 50432 (size 50257, 3 tensors re-padded)\nsaved to " +
                dir + "/tp2\n");
}

TEST(ConvertCommand, WrongFlagsAreOneLineErrors) {
  const std::string dir = test::scratch_dir("convert_command_errors");
  const auto error = [&](const std::string& flags) {
    const test::CommandResult r = tool("convert", flags);
    EXPECT_EQ(r.status, 1) << flags;
    return r.output;
  };
  EXPECT_EQ(error("--save " + dir + "/o"), "error: [--load] give exactly one of --load DIR and --load-hf DIR\n");
  EXPECT_EQ(error("--load a --load-hf b --save c"),
            "error: [--load] give exactly one of --load DIR and --load-hf DIR\n");
  EXPECT_EQ(error("--load a"), "error: [--save] give exactly one of --save DIR and --save-hf DIR\n");
  EXPECT_EQ(error("--load-hf a --save-hf b"),
            "error: [--save-hf] --load-hf reads Hugging Face files; write ours with --save DIR\n");
  EXPECT_EQ(error("--load a --save b --seq-length 8"),
            "error: [--seq-length] applies to --load-hf only (a checkpoint keeps its own)\n");
  EXPECT_EQ(error("--load a --save-hf b --target-tensor-parallel-size 2"),
            "error: [--target-tensor-parallel-size] does not apply to --save-hf (Hugging Face files hold the "
            "unpadded vocabulary)\n");
  EXPECT_EQ(error("--load " + dir + "/none --save " + dir + "/o"),
            "error: [--load] no checkpoint in " + dir + "/none (" + dir +
                "/none/latest_checkpointed_iteration.txt is missing)\n");
  EXPECT_EQ(error("--load a --save b --target-tensor-parallel-size x"),
            "error: [--target-tensor-parallel-size] expected an integer, got 'x'\n");
  EXPECT_FALSE(std::filesystem::exists(dir + "/o"));
}

}  // namespace
}  // namespace megatron
