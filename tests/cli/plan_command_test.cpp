// `megatron plan` as users run it: the table, a fixed layout, --json, the smallest node
// count for 175B, and one-line errors naming the flag.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/bounded_run.h"
#include "cli/commands.h"
#include "cli/plan_args.h"
#include "comm/nccl_communicator.h"
#include "support/paths.h"

namespace megatron {
namespace {

test::CommandResult plan(const std::string& flags) {
  return test::run_command(test::megatron_binary() + " plan " + flags, true);
}

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(PlanCommand, SearchesLayoutsFor175B) {
  const test::CommandResult r = plan("--model gpt3-175b --gpu h100-80gb --gpus-per-node 8 --nodes 16 --top 5");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("96 layers, hidden 12288, 96 heads, seq 2048"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("16 nodes = 128 GPUs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the 5 best:"), std::string::npos) << r.output;
  // The best layout fits and shards the model (TP x PP > 1).
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(r.output, m, std::regex("\n +([0-9]+) +([0-9]+) +[0-9]+ +[0-9]+ +[0-9]+ +1536 .* yes ")))
      << r.output;
  EXPECT_GT(std::stoi(m[1]) * std::stoi(m[2]), 8);
}

TEST(PlanCommand, FixedLayoutIsEvaluatedAlone) {
  const test::CommandResult r = plan(
      "--num-layers 40 --hidden-size 5120 --num-attention-heads 32 --seq-length 2048 --gpu h100-80gb --nodes 2 "
      "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 512 "
      "--use-distributed-optimizer --sequence-parallel --json");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("\"layouts_evaluated\": 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"tensor_model_parallel_size\": 4"), std::string::npos);
  EXPECT_NE(r.output.find("\"pipeline_model_parallel_size\": 2"), std::string::npos);
  EXPECT_NE(r.output.find("\"data_parallel_size\": 2"), std::string::npos);
  EXPECT_NE(r.output.find("\"use_distributed_optimizer\": true"), std::string::npos);
  EXPECT_NE(r.output.find("\"sequence_parallel\": true"), std::string::npos);
  EXPECT_NE(r.output.find("\"fits\": true"), std::string::npos);
  EXPECT_NE(r.output.find("\"report_time_s\": "), std::string::npos);
}

// A chosen layout whose TP groups straddle nodes is priced over the network and says so; one
// whose groups divide the node does not.
TEST(PlanCommand, FixedLayoutAcrossNodesSaysWhy) {
  const std::string base =
      "--model gpt3-175b --gpu h100-80gb --gpus-per-node 8 --micro-batch-size 1 "
      "--global-batch-size 1536 ";
  const test::CommandResult tp6 =
      plan(base + "--nodes 9 --tensor-model-parallel-size 6 --pipeline-model-parallel-size 12");
  ASSERT_EQ(tp6.status, 0) << tp6.output;
  EXPECT_NE(tp6.output.find("note: TP 6 does not divide 8 GPUs per node"), std::string::npos) << tp6.output;
  const test::CommandResult tp4 =
      plan(base + "--nodes 8 --tensor-model-parallel-size 4 --pipeline-model-parallel-size 16");
  ASSERT_EQ(tp4.status, 0) << tp4.output;
  EXPECT_EQ(tp4.output.find("note:"), std::string::npos) << tp4.output;
  const test::CommandResult dp3 =
      plan(base + "--nodes 12 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 16");
  ASSERT_EQ(dp3.status, 0) << dp3.output;
  EXPECT_NE(dp3.output.find("note: TP x DP = 6 does not divide 8 GPUs per node"), std::string::npos) << dp3.output;
}

TEST(PlanCommand, SmallestNodeCountFor175B) {
  const test::CommandResult r =
      plan("--model gpt3-175b --gpu h100-80gb --nodes-range 1..64 --target-report-time 560 --json");
  ASSERT_EQ(r.status, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("\"smallest_nodes\": ([0-9]+)"))) << r.output;
  const int nodes = std::stoi(m[1]);
  EXPECT_GT(nodes, 2);  // 175B's 18 bytes/parameter alone exceed 2 x 8 x 80 GB
  EXPECT_LE(nodes, 64);
  const test::CommandResult text =
      plan("--model gpt3-175b --gpu h100-80gb --nodes-range 1..64 --target-report-time 560");
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("> answer: " + std::to_string(nodes) + " nodes (" + std::to_string(8 * nodes) + " GPUs)"),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("no layout fits"), std::string::npos);
  // Every "no layout fits" row says why (no row with nothing after it).
  EXPECT_EQ(text.output.find("no layout fits\n"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("no layout fits: does not fit: the smallest layout"), std::string::npos) << text.output;
}

// TP 8 on 4-GPU nodes: its groups fill two nodes, and the note says they span nodes.
TEST(PlanCommand, NotesTensorParallelGroupsSpanningWholeNodes) {
  const test::CommandResult r = plan(
      "--model gpt3-175b --gpu a100-40gb --gpus-per-node 4 --nodes 16 --tensor-model-parallel-size 8 "
      "--pipeline-model-parallel-size 8 --micro-batch-size 1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("note: TP 8 spans 2 nodes of 4 GPUs, so its TP groups span nodes"), std::string::npos)
      << r.output;
}

// Narayanan et al. 2021's 145.6B row (A100, fp16, full recompute, vp 2): the megatron-2021
// engine profile (materialised attention, exposed TP all-reduces, ...) is slower than ours.
// MEGATRON_DP_COPY_ENGINE=1 plans as `megatron train` would run in that environment (a build
// with NCCL 2.28+): the header says so, and a DP4 layout with the distributed optimizer inside a
// node counts the receive buffer and runs faster; without the variable neither.
TEST(PlanCommand, CopyEnginesWhenTheEnvironmentAsks) {
  const std::string flags =
      "--model gpt3-1.3b --gpu h200-141gb --gpus-per-node 4 --tensor-model-parallel-size 1 "
      "--pipeline-model-parallel-size 1 --micro-batch-size 4 --global-batch-size 16 --use-distributed-optimizer --json";
  const test::CommandResult sm = plan(flags);
  const test::CommandResult ce =
      test::run_command("MEGATRON_DP_COPY_ENGINE=1 " + test::megatron_binary() + " plan " + flags, true);
  ASSERT_EQ(sm.status, 0) << sm.output;
  ASSERT_EQ(ce.status, 0) << ce.output;
  EXPECT_NE(sm.output.find("\"dp_copy_engine\": false"), std::string::npos) << sm.output;
  EXPECT_NE(sm.output.find("\"copy_engine\": 0,"), std::string::npos) << sm.output;
  if (!comm::copy_engine_supported()) return;
  EXPECT_EQ(ce.output.find("\"dp_copy_engine\": false"), std::string::npos) << ce.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(ce.output, m, std::regex("\"copy_engine\": ([0-9]+),"))) << ce.output;
  EXPECT_EQ(std::stoll(m[1]), 201433088) << "192 MiB, what the engine's log named on 4 x H200";
  auto seconds = [](const std::string& out) {
    std::smatch s;
    EXPECT_TRUE(std::regex_search(out, s, std::regex("\"seconds_per_iteration\": ([0-9.e-]+)"))) << out;
    return s.empty() ? 0.0 : std::stod(s[1]);
  };
  EXPECT_LT(seconds(ce.output), seconds(sm.output));
  const test::CommandResult table = test::run_command(
      "MEGATRON_DP_COPY_ENGINE=1 " + test::megatron_binary() +
          " plan --model gpt3-1.3b --gpu h200-141gb --gpus-per-node 4 "
          "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 4 --global-batch-size 16 "
          "--use-distributed-optimizer",
      true);
  EXPECT_NE(table.output.find(" > MEGATRON_DP_COPY_ENGINE=1: layouts with the distributed optimizer"),
            std::string::npos)
      << table.output;
}

TEST(PlanCommand, EngineProfileChangesThePrediction) {
  const std::string layout =
      "--model gpt-145.6b --gpu a100-80gb --fp16 --nodes 192 --tensor-model-parallel-size 8 "
      "--pipeline-model-parallel-size 8 --num-layers-per-virtual-pipeline-stage 5 --micro-batch-size 2 "
      "--global-batch-size 2304 --recompute-granularity full --json";
  // Ours without dropout (with it, attention dropout over a TP share of the heads runs our own
  // kernels, kOwnDropoutAttentionFactor slower); megatron-2021 at the defaults 0.1, as SC21 ran.
  const test::CommandResult ours = plan(layout + " --attention-dropout 0 --hidden-dropout 0");
  const test::CommandResult old = plan(layout + " --engine megatron-2021");
  ASSERT_EQ(ours.status, 0) << ours.output;
  ASSERT_EQ(old.status, 0) << old.output;
  EXPECT_NE(ours.output.find("\"attention_backend\": \"flash\""), std::string::npos) << ours.output;
  EXPECT_NE(old.output.find("\"attention_backend\": \"local\""), std::string::npos) << old.output;
  EXPECT_NE(old.output.find("\"async_tp_allreduce\": false"), std::string::npos) << old.output;
  auto tokens = [](const std::string& out) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(out, m, std::regex("\"tokens_per_s\": ([0-9.e+]+)"))) << out;
    return std::stod(m[1]);
  };
  EXPECT_LT(tokens(old.output), 0.95 * tokens(ours.output));
}

// --reset-attention-mask: our engine reads the documents' bias on cuDNN (slower) and holds it
// (more memory); a profile whose flash attention ignores the mask (Megatron-Core with
// Transformer Engine) is unchanged.
TEST(PlanCommand, DocumentsCostTheirBiasOnlyInOurEngine) {
  const std::string layout =
      "--model gpt3-1.3b --gpu h100-80gb --gpus-per-node 1 --nodes 1 --micro-batch-size 4 "
      "--global-batch-size 4 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 "
      "--json";
  auto number = [](const std::string& out, const char* key) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(out, m, std::regex(std::string("\"") + key + "\": ([0-9.e+]+)"))) << out;
    return std::stod(m[1]);
  };
  const test::CommandResult causal = plan(layout), docs = plan(layout + " --reset-attention-mask");
  ASSERT_EQ(causal.status, 0) << causal.output;
  ASSERT_EQ(docs.status, 0) << docs.output;
  EXPECT_NE(docs.output.find("\"document_bias\": true"), std::string::npos) << docs.output;
  EXPECT_LT(number(docs.output, "tokens_per_s"), 0.95 * number(causal.output, "tokens_per_s"));
  EXPECT_GT(number(docs.output, "memory_per_gpu_bytes"),
            number(causal.output, "memory_per_gpu_bytes") + 32.0 * 1024 * 1024);
  const std::string core = " --engine megatron-core-2024";
  const test::CommandResult core_causal = plan(layout + core),
                            core_docs = plan(layout + core + " --reset-attention-mask");
  ASSERT_EQ(core_docs.status, 0) << core_docs.output;
  EXPECT_EQ(number(core_docs.output, "tokens_per_s"), number(core_causal.output, "tokens_per_s"));
}

// --swiglu and --normalization as train takes them: the SwiGLU default --ffn-hidden-size is
// int(8h/3/64)*64 (1024 -> 2688); FC1 has 2f rows; RMSNorm has no biases. Hand counts for
// L 4, h 1024, V 50304 (padded), 2048 positions, biases on: per layer norms 2rh, QKV 3h^2 + 3h,
// proj h^2 + h, FC1 f1*h + f1, FC2 h*f + h; plus embeddings and the final norm.
TEST(PlanCommand, SwigluAndRmsNormShapeTheModel) {
  const std::string layout =
      "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
      "--gpu h100-80gb --gpus-per-node 1 --micro-batch-size 4 --global-batch-size 4 "
      "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --json";
  auto number = [](const std::string& out, const char* key) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(out, m, std::regex(std::string("\"") + key + "\": ([0-9.e+]+)"))) << out;
    return std::stod(m[1]);
  };
  const test::CommandResult gelu = plan(layout), swiglu = plan(layout + " --swiglu");
  const test::CommandResult both = plan(layout + " --swiglu --normalization RMSNorm");
  const test::CommandResult named = plan(layout + " --normalization LayerNorm");
  ASSERT_EQ(gelu.status, 0) << gelu.output;
  ASSERT_EQ(swiglu.status, 0) << swiglu.output;
  ASSERT_EQ(both.status, 0) << both.output;
  ASSERT_EQ(named.status, 0) << named.output;
  EXPECT_EQ(number(gelu.output, "ffn_hidden_size"), 4096);
  EXPECT_EQ(number(swiglu.output, "ffn_hidden_size"), 2688);
  EXPECT_EQ(number(gelu.output, "num_parameters"), 103995392);    // f 4096, LayerNorm
  EXPECT_EQ(number(swiglu.output, "num_parameters"), 103476224);  // f 2688, FC1 [5376, 1024]
  EXPECT_EQ(number(both.output, "num_parameters"), 103467008);    // 9 norm biases of 1024 fewer
  EXPECT_EQ(named.output, gelu.output);
  // An explicit width wins over the SwiGLU default.
  const test::CommandResult wide = plan(layout + " --swiglu --ffn-hidden-size 4096");
  ASSERT_EQ(wide.status, 0) << wide.output;
  EXPECT_EQ(number(wide.output, "ffn_hidden_size"), 4096);
  EXPECT_GT(number(wide.output, "memory_per_gpu_bytes"), number(gelu.output, "memory_per_gpu_bytes"));
  EXPECT_LT(number(wide.output, "tokens_per_s"), number(gelu.output, "tokens_per_s"));
}

// --fp8-format prices FP8 linears and plans their buffers: a fixed 2.7B layout on one H100 is
// faster with it and holds the FP8 bytes (model::fp8_memory_bytes: h 2560, n 8192, 32 layers:
// rows 8192 x 10240, weight 10240 x 2560, rows_t 8192 x 10240, cols_t 8192 x 10240, state
// (16 + 2) x 384 x 4 with --fp8-amax-history-len 16); the header and --json say which FP8.
TEST(PlanCommand, Fp8PricesTheLinearsAndPlansTheirBuffers) {
  const std::string layout =
      "--model gpt3-2.7b --gpu h100-80gb --gpus-per-node 1 --tensor-model-parallel-size 1 "
      "--pipeline-model-parallel-size 1 --micro-batch-size 4 --global-batch-size 8 --json";
  const test::CommandResult bf16 = plan(layout), fp8 = plan(layout + " --fp8-format hybrid --fp8-amax-history-len 16");
  ASSERT_EQ(bf16.status, 0) << bf16.output;
  ASSERT_EQ(fp8.status, 0) << fp8.output;
  const std::regex tokens(R"("tokens_per_s": ([0-9.e+]+))"), bytes(R"("fp8": ([0-9]+))");
  std::smatch tb, tf, fb, ff;
  ASSERT_TRUE(std::regex_search(bf16.output, tb, tokens)) << bf16.output;
  ASSERT_TRUE(std::regex_search(fp8.output, tf, tokens)) << fp8.output;
  EXPECT_GT(std::stod(tf[1]), std::stod(tb[1]));
  ASSERT_TRUE(std::regex_search(bf16.output, fb, bytes)) << bf16.output;
  ASSERT_TRUE(std::regex_search(fp8.output, ff, bytes)) << fp8.output;
  EXPECT_EQ(std::stoll(fb[1]), 0);
  const int64_t n = 8192, wide = 4 * 2560;
  // The four operand buffers, each layer's saved w^T codes (h x (3h + h + 4h + 4h)), the state.
  const int64_t saved_wt = 32 * 2560 * (3 * 2560 + 2560 + wide + wide);
  EXPECT_EQ(std::stoll(ff[1]), n * wide + wide * 2560 + n * wide + n * wide + saved_wt + 21 * 384 * 4);
  EXPECT_NE(fp8.output.find("\"fp8\": {\n      \"format\": \"hybrid\",\n      \"recipe\": \"delayed\",\n      "
                            "\"amax_history_len\": 16\n    }"),
            std::string::npos)
      << fp8.output;
  EXPECT_NE(bf16.output.find(R"("fp8": null)"), std::string::npos) << bf16.output;
  const test::CommandResult table = plan(
      "--model gpt3-1.3b --gpu h200-141gb --gpus-per-node 8 --nodes 1 --fp8-format e4m3 --fp8-recipe tensorwise "
      "--top 3");
  ASSERT_EQ(table.status, 0) << table.output;
  EXPECT_NE(table.output.find("bf16 with FP8 linears (e4m3, tensorwise); h200-141gb"), std::string::npos)
      << table.output;
}

TEST(PlanCommand, BadInputIsOneLineNamingTheFlag) {
  const struct {
    const char* flags;
    const char* message;
  } cases[] = {
      {"--model gpt3-175b --gpu b300", "error: [--gpu] unknown GPU 'b300'"},
      {"--model gpt3-175b", "error: [--gpu] is required"},
      {"--model gpt3-9b --gpu h100-80gb", "error: [--model] unknown preset 'gpt3-9b'"},
      {"--num-layers 4 --gpu h100-80gb", "error: [--hidden-size] is required"},
      {"--model gpt3-175b --gpu v100-32gb", "error: [--gpu] v100-32gb has no bf16 tensor cores"},
      {"--model gpt3-175b --gpu h100-80gb --nodes-range 4", "error: [--nodes-range] expected a..b, got '4'"},
      {"--model gpt3-175b --gpu h100-80gb --nodes-range 1..8", "error: [--nodes-range] needs --target-report-time"},
      {"--model gpt3-175b --gpu h100-80gb --target-report-time 560",
       "error: [--target-report-time] needs --nodes-range"},
      {"--model gpt3-175b --gpu h100-80gb --tensor-model-parallel-size 5 --pipeline-model-parallel-size 1 "
       "--micro-batch-size 1 --gpus-per-node 5",
       "error: [--num-attention-heads] 96 is not divisible by --tensor-model-parallel-size 5"},
      {"--model gpt3-175b --gpu h100-80gb --tensor-model-parallel-size 8 --pipeline-model-parallel-size 1 "
       "--micro-batch-size 2 --global-batch-size 3",
       "error: [--global-batch-size] global batch size (3) is not divisible by micro batch size (2) times data "
       "parallel size (1)"},
      {"--model gpt3-175b --gpu h100-80gb --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 "
       "--micro-batch-size 1 --num-layers-per-virtual-pipeline-stage 5",
       "error: [--num-layers-per-virtual-pipeline-stage] 5 does not divide the layers per stage (96 / 4)"},
      {"--model gpt3-175b --gpu h100-80gb --inter-node-bandwidth -3",
       "error: [--inter-node-bandwidth] must be in (0, 1e+06], got '-3'"},
      {"--model gpt3-175b --gpu h100-80gb --engine deepspeed", "error: [--engine] unknown engine 'deepspeed'"},
      {"--model gpt3-175b --gpu h100-80gb --attention-backend fused",
       "error: [--attention-backend] invalid choice 'fused' (choose from flash, local)"},
      {"--model gpt3-175b --gpu h100-80gb --hidden-dropout 1", "error: [--hidden-dropout] must be in [0, 1), got 1"},
      {"--model gpt3-175b --gpu h100-80gb --normalization rmsnorm",
       "error: [--normalization] invalid choice 'rmsnorm' (choose from LayerNorm, RMSNorm)"},
      {"--model gpt3-175b --gpu h100-80gb --fp8-format hybrid",
       "error: [--fp8-format] --model gpt3-175b is the NLP (Megatron-LM) benchmark's shape, whose rules fix the "
       "numerical accuracy"},
      {"--model gpt3-13b --gpu h200-141gb --fp8-format e4m3 --nodes-range 1..8 --target-report-time 560",
       "error: [--fp8-format] --model gpt3-13b is the NLP (Megatron-LM) benchmark's shape"},
      {"--model gpt3-1.3b --gpu a100-80gb --fp8-format hybrid",
       "error: [--fp8-format] a100-80gb has no FP8 tensor cores (FP8 needs Hopper: h100-80gb, h200-141gb)"},
      {"--model gpt3-1.3b --gpu h100-80gb --fp8-format e5m2",
       "error: [--fp8-format] invalid choice 'e5m2' (choose from e4m3, hybrid)"},
      {"--model gpt3-1.3b --gpu h100-80gb --fp8-format hybrid --fp8-recipe mxfp8",
       "error: [--fp8-recipe] invalid choice 'mxfp8' (choose from tensorwise, delayed)"},
      {"--model gpt3-1.3b --gpu h100-80gb --fp8-recipe tensorwise", "error: [--fp8-recipe] needs --fp8-format"},
      {"--num-layers 2 --hidden-size 16 --num-attention-heads 2 --seq-length 8 --gpu h100-80gb --swiglu",
       "error: [--hidden-size] 16 is too small for --swiglu's default --ffn-hidden-size (int(8h/3/64)*64 = 0): give "
       "--ffn-hidden-size"},
  };
  for (const auto& c : cases) {
    const test::CommandResult r = plan(c.flags);
    EXPECT_NE(r.status, 0) << c.flags;
    EXPECT_EQ(r.output.rfind(c.message, 0), 0u) << c.flags << "\n" << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << c.flags << "\n" << r.output;
  }
}

// Every flag of `megatron plan` that takes a value, given each hostile number on a small search
// (run bounded: cli/bounded_run.h), ends in acceptance or one line naming that flag; the numbers
// (those refusing "x" as not a number) refuse nan, inf, -inf and 1e400, and 2^62 GPUs is
// refused rather than searched.
TEST(PlanCommand, EveryFlagEndsInAcceptanceOrOneLineNamingIt) {
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
  const std::vector<std::string> base = {
      "--num-layers", "4",         "--hidden-size",   "64", "--num-attention-heads", "4", "--seq-length", "128",
      "--gpu",        "h100-80gb", "--gpus-per-node", "2",  "--global-batch-size",   "16"};
  // What a flag needs beside the base search for its value to be read.
  const std::map<std::string, std::vector<std::string>> context = {
      {"--target-report-time", {"--nodes-range", "1..2"}},
      {"--nodes-range", {"--target-report-time", "10"}},
      {"--num-layers-per-virtual-pipeline-stage", {"--pipeline-model-parallel-size", "2"}},
  };
  cli::Args args("plan");
  cli::declare_plan_flags(args);
  int64_t numeric = 0;
  for (const cli::Args::Setting& s : args.settings()) {
    if (s.arity == 0) continue;
    auto job = [&](const std::string& v) {
      std::vector<std::string> argv = base;
      if (context.count(s.name)) argv.insert(argv.end(), context.at(s.name).begin(), context.at(s.name).end());
      argv.insert(argv.end(), {s.name, v});
      return argv;
    };
    const test::BoundedRun probe = test::run_bounded(cli::run_plan, job("x"));
    const bool is_number = probe.output.find("expected an integer") != std::string::npos ||
                           probe.output.find("expected a number") != std::string::npos;
    numeric += is_number;
    for (const std::string& v : hostile) {
      const test::BoundedRun r = test::run_bounded(cli::run_plan, job(v));
      EXPECT_EQ(test::defect_of(r, s.name), "") << s.name << " " << v << "\n" << r.output;
      const bool must_refuse = v == "nan" || v == "inf" || v == "-inf" || v == "1e400" ||
                               ((s.name == "--nodes" || s.name == "--gpus-per-node") && v.size() > 10);
      if (is_number && must_refuse) EXPECT_EQ(r.status, 1) << s.name << " " << v << "\n" << r.output;
    }
  }
  EXPECT_GT(numeric, 15);
}

}  // namespace
}  // namespace megatron

namespace megatron {
namespace {

// Llama's flags as train takes them: grouped-query attention (fewer K/V parameters and less
// memory than the same shape with multi-head attention), rotary embeddings; --num-query-groups
// alone is refused naming the flag.
TEST(PlanCommand, LlamaFlags) {
  const std::string llama =
      "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --ffn-hidden-size 14336 "
      "--swiglu --normalization RMSNorm --disable-bias-linear --untie-embeddings-and-output-weights "
      "--vocab-size 128256 --gpu h100-80gb --gpus-per-node 8 --tensor-model-parallel-size 2 "
      "--pipeline-model-parallel-size 1 --micro-batch-size 1 --global-batch-size 64 --json";
  const test::CommandResult gqa =
      plan(llama + " --group-query-attention --num-query-groups 8 --position-embedding-type rope");
  const test::CommandResult mha = plan(llama + " --position-embedding-type rope");
  ASSERT_EQ(gqa.status, 0) << gqa.output;
  ASSERT_EQ(mha.status, 0) << mha.output;
  auto number = [](const std::string& out, const char* key) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(out, m, std::regex(std::string("\"") + key + "\": ([0-9.e+]+)"))) << out;
    return std::stod(m[1]);
  };
  EXPECT_GT(number(gqa.output, "tokens_per_s"), number(mha.output, "tokens_per_s"));
  const test::CommandResult alone = plan(llama + " --num-query-groups 8");
  EXPECT_NE(alone.status, 0);
  EXPECT_NE(alone.output.find("[--num-query-groups] needs --group-query-attention"), std::string::npos) << alone.output;
  const test::CommandResult bad = plan(llama + " --position-embedding-type alibi");
  EXPECT_NE(bad.output.find("[--position-embedding-type] invalid choice 'alibi'"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace megatron
