// FP8 training on the CPU backend's emulation (--fp8-format with each recipe): a tiny GPT and a
// tiny Llama (RMSNorm, SwiGLU, no biases, rotary embeddings, query groups) train 10 iterations
// in --bf16 with FP8 linears, their losses finite, falling, and within 1% of the same run in
// plain bf16 at every iteration. The bound: the FP8 GEMMs round each operand to 3 (E4M3) or 2
// (E5M2) mantissa bits, errors of ~3% per element that average out over the GEMMs' sums; on
// this model FP8 moves the loss by ~2e-4 relative. A broken recipe (a scale not applied, the
// wrong scale_inv, a gradient in the wrong format) diverges or stalls the loss by far more, and
// identical losses would mean FP8 is not on: the test also checks that they differ.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/parity_runs.h"
#include "support/paths.h"
#include "support/walk_corpus.h"

namespace megatron::train {
namespace {

using test::read_jsonl;
using test::with;

const std::vector<std::string> kLlama = {"--normalization",
                                         "RMSNorm",
                                         "--swiglu",
                                         "--disable-bias-linear",
                                         "--untie-embeddings-and-output-weights",
                                         "--position-embedding-type",
                                         "rope",
                                         "--group-query-attention",
                                         "--num-query-groups",
                                         "2"};

void trains_close_to_bf16(const std::string& name, const std::vector<std::string>& model) {
  const std::string dir = test::scratch_dir(name);
  test::write_walk_corpus(dir);
  std::vector<std::string> base = with(test::tiny_train_flags(dir, 2, "0"), {"--bf16"});
  base.insert(base.end(), model.begin(), model.end());
  const test::CommandResult bf16 = test::run_ranks(with(base, {"--log-jsonl", dir + "/bf16.jsonl"}), 1);
  ASSERT_EQ(bf16.status, 0) << bf16.output;
  const auto ref = read_jsonl(dir + "/bf16.jsonl");
  ASSERT_EQ(ref.size(), 10u) << bf16.output;
  const std::vector<std::vector<std::string>> recipes = {
      {"--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"},
      {"--fp8-format", "e4m3", "--fp8-recipe", "tensorwise"},
      {"--fp8-format", "hybrid", "--fp8-recipe", "delayed"},
      {"--fp8-format", "hybrid", "--fp8-recipe", "delayed", "--fp8-amax-history-len", "4", "--fp8-amax-compute-algo",
       "max", "--fp8-margin", "1"}};
  for (size_t r = 0; r < recipes.size(); ++r) {
    const std::string log = dir + "/fp8_" + std::to_string(r) + ".jsonl";
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), recipes[r].begin(), recipes[r].end());
    const test::CommandResult run = test::run_ranks(with(argv, {"--log-jsonl", log}), 1);
    ASSERT_EQ(run.status, 0) << run.output;
    const auto got = read_jsonl(log);
    ASSERT_EQ(got.size(), 10u) << run.output;
    double worst = 0, differs = 0;
    for (int64_t i = 1; i <= 10; ++i) {
      const double a = ref.at(i).loss, b = got.at(i).loss;
      ASSERT_TRUE(std::isfinite(b)) << "recipe " << r << " iteration " << i;
      EXPECT_NEAR(b, a, 0.01 * a) << "recipe " << r << " iteration " << i;
      worst = std::max(worst, std::abs(b - a) / a);
      differs = std::max(differs, std::abs(b - a));
    }
    EXPECT_LT(got.at(10).loss, got.at(1).loss - 0.5) << "recipe " << r << " must learn";
    EXPECT_GT(differs, 0.0) << "recipe " << r << ": the same losses as bf16, FP8 is not on";
    std::printf("%s recipe %zu: max relative loss difference to bf16 %.2e\n", name.c_str(), r, worst);
  }
}

TEST(TrainerFp8, TinyGptTrainsCloseToBf16WithEachRecipe) { trains_close_to_bf16("trainer_fp8_gpt", {}); }

TEST(TrainerFp8, TinyLlamaTrainsCloseToBf16WithEachRecipe) { trains_close_to_bf16("trainer_fp8_llama", kLlama); }

}  // namespace
}  // namespace megatron::train
