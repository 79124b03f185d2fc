// `megatron generate` from a checkpoint that `megatron train --save` wrote: a model trained on
// a repeating sentence continues it greedily; sampling is reproducible by seed; bad input is a
// one-line error.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli/bounded_run.h"
#include "cli/commands.h"
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
    std::string out = tool("preprocess",
                           "--input " + dir + "/corpus.jsonl --output-prefix " + dir +
                               "/c --tokenizer-type GPT2BPETokenizer --append-eod" + vocab,
                           &status);
    ASSERT_EQ(status, 0) << out;
    out = tool("train",
               "--num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 4 "
               "--global-batch-size 4 --train-iters 200 --lr 0.01 --attention-dropout 0 --hidden-dropout 0 "
               "--log-interval 20 --eval-interval 1000 --eval-iters 1 --split 100,0,0 --make-vocab-size-divisible-by 1 "
               "--data-path " +
                   dir + "/c_text_document --data-cache-path " + dir + "/cache --save " + dir + "/ckpt" + vocab,
               &status);
    ASSERT_EQ(status, 0) << out;
  }
  static std::string gen(const std::string& flags, int* status) {
    return tool("generate",
                "--load " + *dir_ + "/ckpt --vocab-file " + test::gpt2_vocab_file() + " --merge-file " +
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

// The model has 16 positions (--seq-length 16): a 4-token prompt gets 12 new tokens of the 50
// asked for, and the run says why; a request that fits says nothing.
TEST_F(GenerateCommand, SaysWhenItStopsAtTheModelsContext) {
  int status = 0;
  const std::string out = gen("--prompt 'the cat sat on' --max-new-tokens 50 --temperature 0", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("note: prompt 1 stopped at the model's context: 16 positions (4 prompt tokens + 12 generated) "
                     "before --max-new-tokens 50\n"),
            std::string::npos)
      << out;
  // 12 tokens: " the", " mat", ".", " the", " cat", " sat", " on", " the", " mat", ".", " the", " cat".
  EXPECT_EQ(out.substr(0, out.find('\n') + 1), "the cat sat on the mat. the cat sat on the mat. the cat\n") << out;
  const std::string fits = gen("--prompt 'the cat sat on' --max-new-tokens 6 --temperature 0", &status);
  EXPECT_EQ(fits.find("note:"), std::string::npos) << fits;
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
  out = tool("generate",
             "--load /nonexistent --prompt x --vocab-file " + test::gpt2_vocab_file() + " --merge-file " +
                 test::gpt2_merge_file(),
             &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("error: [--load] no checkpoint"), std::string::npos) << out;
}

// A prompt file that is a directory, missing or empty is named as such (a directory once read
// as "no prompt: give --prompt TEXT"); an --iteration the checkpoint directory lacks names
// --iteration.
TEST_F(GenerateCommand, PromptFileAndIterationErrorsSayWhatIsWrong) {
  int status = 0;
  std::string out = gen("--prompt-file " + *dir_, &status);
  EXPECT_EQ(status, 1);
  EXPECT_EQ(out, "error: [--prompt-file] " + *dir_ + " is a directory (expected a file of prompts, one per line)\n");
  out = gen("--prompt-file " + *dir_ + "/missing.txt", &status);
  EXPECT_EQ(out, "error: [--prompt-file] cannot open " + *dir_ + "/missing.txt: No such file or directory\n");
  std::ofstream(*dir_ + "/empty.txt") << "\n\n";
  out = gen("--prompt-file " + *dir_ + "/empty.txt", &status);
  EXPECT_EQ(out, "error: [--prompt-file] " + *dir_ + "/empty.txt holds no prompt (every line is empty)\n");
  out = gen("--prompt x --iteration 7", &status);
  EXPECT_EQ(status, 1);
  EXPECT_EQ(out, "error: [--iteration] no checkpoint of iteration 7 in " + *dir_ + "/ckpt (it holds iterations 200)\n");
  std::ofstream(*dir_ + "/prompts.txt") << "the cat\n\nthe mat\n";
  out = gen("--prompt-file " + *dir_ + "/prompts.txt --max-new-tokens 2 --temperature 0 --iteration 200", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out.rfind("the cat", 0), 0u) << out;
}

// Every flag of `megatron generate` that takes a value, given each hostile number, ends in
// acceptance or one line naming that flag (or, for a file, the file), run bounded
// (cli/bounded_run.h); non-finite numbers and values outside each number's range are refused.
TEST_F(GenerateCommand, EveryFlagEndsInAcceptanceOrOneLineNamingIt) {
  const std::vector<std::string> hostile = {"nan",
                                            "inf",
                                            "-inf",
                                            "1e300",
                                            "1e400",
                                            "-1",
                                            "0",
                                            "2147483648",
                                            "4611686018427387904",
                                            "9223372036854775807",
                                            "99999999999999999999"};
  const std::vector<std::string> base = {"--load",           *dir_ + "/ckpt",
                                         "--vocab-file",     test::gpt2_vocab_file(),
                                         "--merge-file",     test::gpt2_merge_file(),
                                         "--prompt",         "the cat",
                                         "--max-new-tokens", "2"};
  // Refused whatever the flag: nan, +-inf and 1e400 for every number; the rest per flag.
  const std::map<std::string, std::set<std::string>> refused = {
      {"--temperature", {"nan", "inf", "-inf", "1e300", "1e400", "-1"}},
      {"--top-p",
       {"nan", "inf", "-inf", "1e300", "1e400", "-1", "2147483648", "4611686018427387904", "9223372036854775807",
        "99999999999999999999"}},
      {"--top-k", {"nan", "inf", "-inf", "1e300", "1e400", "-1", "99999999999999999999"}},
      {"--max-new-tokens", {"nan", "inf", "-inf", "1e300", "1e400", "-1", "99999999999999999999"}},
      {"--seed", {"nan", "inf", "-inf", "1e300", "1e400", "99999999999999999999"}},
      {"--iteration",
       {"nan", "inf", "-inf", "1e300", "1e400", "-1", "0", "2147483648", "4611686018427387904", "9223372036854775807",
        "99999999999999999999"}},
  };
  const std::set<std::string> files = {"--load", "--prompt-file", "--vocab-file", "--merge-file"};
  // The flags as `megatron generate --help` lists them.
  const test::CommandResult help = test::run_command(test::megatron_binary() + " generate --help");
  std::set<std::string> flags;
  for (size_t at = help.output.find("\n  --"); at != std::string::npos; at = help.output.find("\n  --", at + 1)) {
    const size_t start = at + 3, end = help.output.find_first_of(" \n", start);
    const std::string flag = help.output.substr(start, end - start);
    // Switches are listed without a metavar.
    if (help.output[end] == ' ' && help.output[end + 1] != ' ') flags.insert(flag);
  }
  for (const char* f : {"--temperature", "--top-p", "--top-k", "--max-new-tokens", "--seed", "--iteration", "--load",
                        "--prompt-file", "--device"}) {
    EXPECT_TRUE(flags.count(f)) << f << " not found in --help:\n" << help.output;
  }
  for (const std::string& flag : flags) {
    if (flag == "--dump-logits") continue;  // an output file: any name is written (tested below)
    for (const std::string& v : hostile) {
      std::vector<std::string> argv = base;
      argv.insert(argv.end(), {flag, v});
      const test::BoundedRun r = test::run_bounded(cli::run_generate, argv);
      const std::string what = flag + " " + v + ": " + test::ending(r) + "\n" + r.output;
      // A file's error may name the file instead of the flag (the tokenizer's "<path>: cannot open").
      EXPECT_EQ(test::defect_of(r, flag, files.count(flag) ? v + ":" : ""), "") << what;
      if (refused.count(flag) && refused.at(flag).count(v)) EXPECT_EQ(r.status, 1) << what;
    }
  }
}

}  // namespace
}  // namespace megatron
