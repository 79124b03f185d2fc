// --fp8-format and its recipe flags (Megatron-Core's TransformerConfig fp8 fields) parse into
// GPTConfig::fp8; bad values are one line each, all at once.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/train_args.h"
#include "core/error.h"

namespace megatron::cli {
namespace {

using Argv = std::vector<std::string>;

Argv base_with(const Argv& extra) {
  Argv a = {"--num-layers", "2",    "--hidden-size",      "64", "--num-attention-heads", "4",
            "--seq-length", "32",   "--micro-batch-size", "2",  "--train-iters",         "10",
            "--lr",         "1e-4", "--dry-run"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

train::TrainConfig parse(const Argv& argv, std::ostream* log = nullptr) {
  Args args("megatron train");
  declare_train_flags(args);
  EXPECT_TRUE(args.parse(argv));
  return parse_train_config(args, 1, log);
}

std::string error_of(const Argv& argv) {
  try {
    parse(argv);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TrainArgsFp8, OffByDefault) { EXPECT_FALSE(parse(base_with({})).model.fp8.has_value()); }

TEST(TrainArgsFp8, MegatronDefaults) {
  // Megatron-Core: fp8_recipe "delayed", margin 0, history 1, "most_recent".
  const auto c = parse(base_with({"--fp8-format", "hybrid"}));
  ASSERT_TRUE(c.model.fp8.has_value());
  EXPECT_EQ(c.model.fp8->format, backend::Fp8Mix::kHybrid);
  EXPECT_EQ(c.model.fp8->recipe, backend::Fp8Recipe::kDelayed);
  EXPECT_EQ(c.model.fp8->margin, 0);
  EXPECT_EQ(c.model.fp8->amax_history_len, 1);
  EXPECT_EQ(c.model.fp8->amax_compute_algo, backend::Fp8AmaxAlgo::kMostRecent);
}

TEST(TrainArgsFp8, EveryFlagIsRead) {
  const auto c = parse(base_with({"--fp8-format", "e4m3", "--fp8-recipe", "delayed", "--fp8-margin", "2",
                                  "--fp8-amax-history-len", "1024", "--fp8-amax-compute-algo", "max"}));
  ASSERT_TRUE(c.model.fp8.has_value());
  EXPECT_EQ(c.model.fp8->format, backend::Fp8Mix::kE4M3);
  EXPECT_EQ(c.model.fp8->margin, 2);
  EXPECT_EQ(c.model.fp8->amax_history_len, 1024);
  EXPECT_EQ(c.model.fp8->amax_compute_algo, backend::Fp8AmaxAlgo::kMax);
  const auto t = parse(base_with({"--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"}));
  EXPECT_EQ(t.model.fp8->recipe, backend::Fp8Recipe::kTensorwise);
}

TEST(TrainArgsFp8, AllErrorsAtOnceOneLineEach) {
  const std::string e = error_of(base_with({"--fp8-format", "e5m2", "--fp8-recipe", "mxfp8", "--fp8-margin", "-1",
                                            "--fp8-amax-history-len", "0", "--fp8-amax-compute-algo", "mean"}));
  std::vector<std::string> lines;
  std::istringstream in(e);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 5u) << e;
  EXPECT_EQ(lines[0], "[--fp8-format] invalid choice 'e5m2' (choose from e4m3, hybrid)");
  EXPECT_EQ(lines[1].rfind("[--fp8-recipe] mxfp8 is not supported (", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("[--fp8-margin] ", 0), 0u) << lines[2];
  EXPECT_EQ(lines[3].rfind("[--fp8-amax-history-len] ", 0), 0u) << lines[3];
  EXPECT_EQ(lines[4], "[--fp8-amax-compute-algo] invalid choice 'mean' (choose from max, most_recent)");
}

TEST(TrainArgsFp8, OtherRecipesAreRefusedWithAReason) {
  for (const char* r : {"blockwise", "custom"}) {
    const std::string e = error_of(base_with({"--fp8-format", "hybrid", "--fp8-recipe", r}));
    EXPECT_EQ(e.rfind(std::string("[--fp8-recipe] ") + r + " is not supported (", 0), 0u) << e;
    EXPECT_NE(e.find("use tensorwise or delayed"), std::string::npos) << e;
  }
}

// --fp8-param-gather: Megatron's requirement (the distributed optimizer) and FP8 itself, each
// its own line; accepted, it prints how it differs from Megatron's FP8 parameters.
TEST(TrainArgsFp8, ParamGatherNeedsTheDistributedOptimizerAndSaysHowItDiffers) {
  const std::string both = error_of(base_with({"--fp8-param-gather"}));
  EXPECT_NE(both.find("[--fp8-param-gather] is only supported with the distributed optimizer "
                      "(--use-distributed-optimizer), as in Megatron-LM"),
            std::string::npos)
      << both;
  EXPECT_NE(both.find("[--fp8-param-gather] needs --fp8-format"), std::string::npos) << both;
  const std::string one = error_of(base_with({"--fp8-format", "hybrid", "--fp8-param-gather"}));
  EXPECT_EQ(one.rfind("[--fp8-param-gather] is only supported with the distributed optimizer", 0), 0u) << one;
  EXPECT_EQ(one.find("needs --fp8-format"), std::string::npos) << one;

  std::ostringstream log;
  const train::TrainConfig c =
      parse(base_with({"--bf16", "--fp8-format", "hybrid", "--use-distributed-optimizer", "--fp8-param-gather"}), &log);
  EXPECT_TRUE(c.model.fp8.has_value());
  EXPECT_NE(log.str().find("note: --fp8-param-gather differs here: the FP8 linears' weights stay bf16 parameters, "
                           "all-gathered in bf16"),
            std::string::npos)
      << log.str();
  std::ostringstream quiet;
  parse(base_with({"--bf16", "--fp8-format", "hybrid", "--use-distributed-optimizer"}), &quiet);
  EXPECT_EQ(quiet.str().find("--fp8-param-gather"), std::string::npos) << quiet.str();
}

// Checkpoints hold both recipes' state (ckpt/checkpoint_fp8.h): --save and --load are accepted.
TEST(TrainArgsFp8, BothRecipesTakeCheckpoints) {
  for (const char* r : {"delayed", "tensorwise"}) {
    const train::TrainConfig c =
        parse(base_with({"--fp8-format", "hybrid", "--fp8-recipe", r, "--save", "/tmp/x", "--load", "/tmp/x"}));
    ASSERT_TRUE(c.model.fp8.has_value()) << r;
    EXPECT_EQ(backend::fp8_recipe_name(c.model.fp8->recipe), r);
  }
}

TEST(TrainArgsFp8, RecipeOptionsWithoutEffectAreNamed) {
  std::ostringstream log;
  parse(base_with({"--fp8-margin", "1"}), &log);
  EXPECT_NE(log.str().find("warning: --fp8-margin has no effect without --fp8-format"), std::string::npos);
  std::ostringstream log2;
  parse(base_with({"--fp8-format", "hybrid", "--fp8-recipe", "tensorwise", "--fp8-amax-history-len", "16"}), &log2);
  EXPECT_NE(log2.str().find("warning: --fp8-amax-history-len has no effect with --fp8-recipe tensorwise"),
            std::string::npos);
}

}  // namespace
}  // namespace megatron::cli
