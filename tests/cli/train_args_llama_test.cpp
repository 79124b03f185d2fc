// The Llama flags: rotary embeddings and grouped-query attention as Megatron spells them (the
// Llama-3 8B example's model flags), the Llama presets, and the one-line errors for what cannot
// run (tensor parallelism across a key/value group, switches without the flag they modify).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/train_args.h"
#include "core/error.h"

namespace megatron::cli {
namespace {

using Argv = std::vector<std::string>;

train::TrainConfig parse(const Argv& argv, int64_t world_size = 1) {
  Args args("megatron train");
  declare_train_flags(args);
  EXPECT_TRUE(args.parse(argv));
  return parse_train_config(args, world_size, nullptr);
}

// The one-line error parsing `argv` gives, or "" when it parses.
std::string error_of(const Argv& argv, int64_t world_size = 1) {
  try {
    parse(argv, world_size);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Argv run_flags(Argv model) {
  Argv a = {"--micro-batch-size", "1", "--train-iters", "2", "--lr", "1e-4", "--dry-run"};
  a.insert(a.end(), model.begin(), model.end());
  return a;
}

// examples/llama/train_llama3_8b_h100_fp8.sh's model flags at 2 layers.
const Argv kLlama3Example = {"--num-layers",
                             "2",
                             "--hidden-size",
                             "4096",
                             "--ffn-hidden-size",
                             "14336",
                             "--num-attention-heads",
                             "32",
                             "--group-query-attention",
                             "--num-query-groups",
                             "8",
                             "--kv-channels",
                             "128",
                             "--seq-length",
                             "8192",
                             "--max-position-embeddings",
                             "8192",
                             "--position-embedding-type",
                             "rope",
                             "--rotary-base",
                             "1000000",
                             "--rotary-percent",
                             "1.0",
                             "--attention-dropout",
                             "0.0",
                             "--hidden-dropout",
                             "0.0",
                             "--swiglu",
                             "--normalization",
                             "RMSNorm",
                             "--init-method-std",
                             "0.0134",
                             "--apply-layernorm-1p",
                             "--untie-embeddings-and-output-weights",
                             "--disable-bias-linear"};

TEST(TrainArgsLlama, TheLlama3ExampleModelFlags) {
  const model::GPTConfig m = parse(run_flags(kLlama3Example)).model;
  EXPECT_TRUE(m.rope());
  EXPECT_FALSE(m.learned_positions());
  EXPECT_EQ(m.query_groups(), 8);
  EXPECT_EQ(m.qkv_out_size(), (32 + 2 * 8) * 128);
  EXPECT_FLOAT_EQ(m.rotary.base, 1e6f);
  EXPECT_FLOAT_EQ(m.rotary.percent, 1.0f);
  EXPECT_TRUE(m.swiglu);
  EXPECT_EQ(m.normalization, model::Normalization::kRMSNorm);
  EXPECT_FALSE(m.add_bias_linear);
  EXPECT_TRUE(m.untie_embeddings_and_output_weights);
  EXPECT_TRUE(m.apply_layernorm_1p);
  EXPECT_FALSE(m.qk_layernorm);
}

// --qk-layernorm (Qwen3-style and OLMo-style attention) reaches the model config.
TEST(TrainArgsLlama, QkLayernorm) {
  Argv flags = kLlama3Example;
  flags.push_back("--qk-layernorm");
  EXPECT_TRUE(parse(run_flags(flags)).model.qk_layernorm);
}

// --apply-wd-to-qk-layernorm, and Megatron's deprecated spelling of it, which takes only that value.
TEST(TrainArgsLlama, WeightDecayOnQkLayernorm) {
  Argv flags = kLlama3Example;
  flags.push_back("--qk-layernorm");
  EXPECT_FALSE(parse(run_flags(flags)).apply_wd_to_qk_layernorm);
  Argv on = flags;
  on.push_back("--apply-wd-to-qk-layernorm");
  EXPECT_TRUE(parse(run_flags(on)).apply_wd_to_qk_layernorm);
  Argv old = flags;
  old.insert(old.end(), {"--no-weight-decay-cond-type", "apply_wd_to_qk_layernorm"});
  EXPECT_TRUE(parse(run_flags(old)).apply_wd_to_qk_layernorm);
  old.back() = "qk";
  const std::string msg = error_of(run_flags(old));
  EXPECT_EQ(msg.rfind("[--no-weight-decay-cond-type] qk", 0), 0u) << msg;
}

TEST(TrainArgsLlama, OlderSpellingsOfRotaryEmbeddings) {
  Argv base = {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32"};
  Argv old = base;
  old.insert(old.end(), {"--use-rotary-position-embeddings", "--no-position-embedding"});
  EXPECT_TRUE(parse(run_flags(old)).model.rope());
  Argv none = base;
  none.insert(none.end(), {"--position-embedding-type", "none"});
  EXPECT_EQ(parse(run_flags(none)).model.position_embedding, model::PositionEmbedding::kNone);
  // Megatron refuses the deprecated switch unless rotary embeddings make it moot.
  Argv alone = base;
  alone.push_back("--no-position-embedding");
  EXPECT_EQ(error_of(run_flags(alone)).rfind("[--no-position-embedding]", 0), 0u) << error_of(run_flags(alone));
}

TEST(TrainArgsLlama, PresetsImplyLlamasFlagsAndFlagsStillWin) {
  model::GPTConfig m = parse(run_flags({"--model", "llama3.2-1b"})).model;
  EXPECT_EQ(m.num_layers, 16);
  EXPECT_EQ(m.ffn_hidden_size, 8192);
  EXPECT_EQ(m.query_groups(), 8);
  EXPECT_FLOAT_EQ(m.rotary.base, 500000.0f);
  EXPECT_TRUE(m.rotary.use_rope_scaling);
  EXPECT_FLOAT_EQ(m.rotary.rope_scaling_factor, 32.0f);
  EXPECT_FALSE(m.untie_embeddings_and_output_weights);  // Llama 3.2 ties them
  EXPECT_FALSE(m.add_bias_linear);
  EXPECT_TRUE(m.swiglu);
  m = parse(run_flags({"--model", "llama2-7b"})).model;
  EXPECT_EQ(m.query_groups(), 32);
  EXPECT_TRUE(m.untie_embeddings_and_output_weights);
  EXPECT_FALSE(m.rotary.use_rope_scaling);
  m = parse(run_flags({"--model", "llama3-8b", "--num-layers", "2", "--rotary-base", "10000", "--normalization",
                       "LayerNorm", "--group-query-attention", "--num-query-groups", "4"}))
          .model;
  EXPECT_EQ(m.num_layers, 2);
  EXPECT_FLOAT_EQ(m.rotary.base, 10000.0f);
  EXPECT_EQ(m.normalization, model::Normalization::kLayerNorm);
  EXPECT_EQ(m.query_groups(), 4);
}

TEST(TrainArgsLlama, BadGroupsAreOneLineNamingTheFlag) {
  const Argv shape = {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32"};
  auto expect_names = [&](Argv extra, const std::string& flag, int64_t world = 1) {
    Argv a = shape;
    a.insert(a.end(), extra.begin(), extra.end());
    const std::string msg = error_of(run_flags(a), world);
    EXPECT_EQ(msg.rfind("[" + flag + "]", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  };
  expect_names({"--group-query-attention", "--num-query-groups", "3"}, "--num-query-groups");
  expect_names({"--num-query-groups", "2"}, "--num-query-groups");
  // TP 4 over 2 groups would split a key/value head.
  expect_names({"--group-query-attention", "--num-query-groups", "2", "--tensor-model-parallel-size", "4"},
               "--num-query-groups", 4);
  expect_names({"--use-rope-scaling"}, "--use-rope-scaling");
  expect_names({"--position-embedding-type", "rope", "--rotary-percent", "0"}, "--rotary-percent");
  expect_names({"--position-embedding-type", "rope", "--kv-channels", "16", "--rotary-percent", "0.05"},
               "--rotary-percent");
  EXPECT_EQ(error_of(run_flags({"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                                "--seq-length", "32", "--group-query-attention", "--num-query-groups", "2",
                                "--tensor-model-parallel-size", "2"}),
                     2),
            "");
}

}  // namespace
}  // namespace megatron::cli
