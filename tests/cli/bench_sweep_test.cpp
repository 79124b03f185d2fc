// `megatron bench --sweep`: the grammar, the expansion, the flags each point sets, the case
// names, and the command itself: a --dry-run matrix with skipped (invalid) points and their
// reasons, a CPU run where only the one-rank point is measured, and the JSON lines that
// `bench --table` merges back.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "cli/bench_sweep.h"
#include "core/error.h"
#include "support/paths.h"

namespace megatron::cli {
namespace {

std::string error_of(const std::vector<std::string>& tokens) {
  try {
    parse_sweep(tokens);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(BenchSweep, ParsesKeysAndValuesInOrder) {
  const std::vector<SweepAxis> axes = parse_sweep({"tp=1,2,4", "pp=1,2", "recompute=none,full", "sp=off,on"});
  ASSERT_EQ(axes.size(), 4u);
  EXPECT_EQ(axes[0].key, "tp");
  EXPECT_EQ(axes[0].values, (std::vector<std::string>{"1", "2", "4"}));
  EXPECT_EQ(axes[1].values, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(axes[2].values, (std::vector<std::string>{"none", "full"}));
  EXPECT_EQ(axes[3].key, "sp");
}

TEST(BenchSweep, RejectsBadTokensNamingTheToken) {
  EXPECT_NE(error_of({}).find("[--sweep] expected KEY=V"), std::string::npos);
  EXPECT_NE(error_of({"tp"}).find("[--sweep] 'tp' is not KEY=V[,V...]"), std::string::npos);
  EXPECT_NE(error_of({"zz=1"}).find("[--sweep] unknown key 'zz' in 'zz=1'"), std::string::npos);
  EXPECT_NE(error_of({"tp=1", "tp=2"}).find("[--sweep] key 'tp' given twice"), std::string::npos);
  EXPECT_NE(error_of({"tp=1,,2"}).find("[--sweep] tp=1,,2: empty value"), std::string::npos);
  EXPECT_NE(error_of({"tp=0"}).find("[--sweep] tp=0: tp must be positive, got 0"), std::string::npos);
  EXPECT_NE(error_of({"mbs=x"}).find("[--sweep] mbs=x: 'x' is not an integer"), std::string::npos);
  EXPECT_NE(error_of({"recompute=some"}).find("invalid recompute 'some' (choose from none, selective, full)"),
            std::string::npos);
  EXPECT_NE(error_of({"sp=yes"}).find("[--sweep] sp=yes: sp takes on or off, got 'yes'"), std::string::npos);
  EXPECT_NE(error_of({"model=gpt5"}).find("unknown model preset 'gpt5'"), std::string::npos);
}

TEST(BenchSweep, ExpandsTheCartesianProductLastKeyFastest) {
  const std::vector<SweepPoint> points = expand_sweep(parse_sweep({"tp=1,2,4", "mbs=1,2"}));
  ASSERT_EQ(points.size(), 6u);
  const std::vector<std::pair<std::string, std::string>> expected = {{"1", "1"}, {"1", "2"}, {"2", "1"},
                                                                     {"2", "2"}, {"4", "1"}, {"4", "2"}};
  for (size_t i = 0; i < points.size(); ++i) {
    EXPECT_EQ(points[i].at("tp"), expected[i].first) << i;
    EXPECT_EQ(points[i].at("mbs"), expected[i].second) << i;
  }
}

TEST(BenchSweep, PointFlagsAreMegatronFlags) {
  SweepPoint p = {{"dp", "4"},  {"tp", "2"},         {"mbs", "8"},      {"recompute", "full"},
                  {"sp", "on"}, {"dist-opt", "off"}, {"hidden", "1536"}};
  EXPECT_EQ(sweep_point_flags(p), (std::vector<std::string>{"--hidden-size", "1536", "--tensor-model-parallel-size",
                                                            "2", "--micro-batch-size", "8", "--recompute-granularity",
                                                            "full", "--recompute-method", "uniform",
                                                            "--recompute-num-layers", "1", "--sequence-parallel"}));
  EXPECT_EQ(sweep_point_flags({{"recompute", "selective"}}), (std::vector<std::string>{"--recompute-activations"}));
  EXPECT_TRUE(sweep_point_flags({{"recompute", "none"}, {"dp", "2"}}).empty());
  EXPECT_EQ(sweep_key_flags("pp"), (std::vector<std::string>{"--pipeline-model-parallel-size"}));
  EXPECT_TRUE(sweep_key_flags("dp").empty());
}

TEST(BenchSweep, CaseNamesFollowTheReproductionStudy) {
  EXPECT_EQ(sweep_case_name(8, 1, 1, 16, 1536, 16), "DP_8x1x1_16_1536x16");
  EXPECT_EQ(sweep_case_name(1, 8, 1, 16, 1536, 16), "TP_1x8x1_16_1536x16");
  EXPECT_EQ(sweep_case_name(2, 4, 2, 64, 3072, 32), "DP-TP-PP_2x4x2_64_3072x32");
  EXPECT_EQ(sweep_case_name(1, 1, 1, 2, 768, 12), "1GPU_1x1x1_2_768x12");
}

test::CommandResult bench(const std::string& flags) {
  return test::run_command(test::megatron_binary() + " bench " + flags, false);
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t end; (end = s.find('\n', start)) != std::string::npos; start = end + 1)
    out.push_back(s.substr(start, end - start));
  return out;
}

TEST(BenchSweepCommand, DryRunPlansEveryValidPointAndNamesWhyTheOthersAreSkipped) {
  // gpt2-124m has 12 heads: tp 5 is invalid; dp 2 with gbs 3 is invalid; pp 2 is planned.
  const test::CommandResult r =
      bench("--model gpt2-124m --bf16 --sweep dp=1,2 tp=1,5 pp=1,2 gbs=3,4 --micro-batch-size 1 --dry-run --csv");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<std::string> lines = lines_of(r.output);
  ASSERT_EQ(lines.size(), 17u) << r.output;  // header + 2 * 2 * 2 * 2
  EXPECT_EQ(lines[0].rfind("case,status,data_parallel,tensor_parallel,pipeline_parallel,micro_batch,batch_size,", 0),
            0u);
  EXPECT_EQ(lines[1].rfind("1GPU_1x1x1_3_768x12,predicted,1,1,1,1,3,none,", 0), 0u) << lines[1];
  EXPECT_EQ(lines[4].rfind("PP_1x1x2_4_768x12,predicted,1,1,2,1,4,none,", 0), 0u) << lines[4];
  EXPECT_NE(lines[5].find("TP_1x5x1_3_768x12,skipped"), std::string::npos) << lines[5];
  EXPECT_NE(lines[5].find("[--num-attention-heads] 12 is not divisible by --tensor-model-parallel-size 5"),
            std::string::npos)
      << lines[5];
  EXPECT_NE(lines[9].find("DP_2x1x1_3_768x12,skipped"), std::string::npos) << lines[9];
  EXPECT_NE(lines[9].find("global batch size (3) is not divisible by micro batch size (1) times data parallel "
                          "size (2)"),
            std::string::npos)
      << lines[9];
  int predicted = 0;
  for (const std::string& l : lines) predicted += l.find(",predicted,") != std::string::npos;
  EXPECT_EQ(predicted, 6);  // dp 1: (tp 1) x pp x gbs = 4; dp 2: tp 1, gbs 4, pp 1 or 2 = 2
  // Latency and memory of the planned single-GPU point: the planner's (bf16 124M, 3 x 1024 tokens).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(lines[1], m, std::regex("none,([0-9.]+),([0-9.]+),"))) << lines[1];
  EXPECT_GT(std::stod(m[1]), 1.0);
  EXPECT_LT(std::stod(m[1]), 100.0);
  EXPECT_GT(std::stod(m[2]), 2000.0);  // > 2 GiB: 124M parameters x 18 bytes alone
}

TEST(BenchSweepCommand, DryRunTableAndJsonMergeBack) {
  const test::CommandResult text =
      bench("--model gpt2-124m --sweep tp=1,2 mbs=1,2 recompute=none,full --dry-run --gpu a100-80gb");
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find(" > sweep: 8 configuration(s), 8 predicted (--dry-run: planner on a100-80gb), 0 skipped"),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("| TP_1x2x1_2_768x12 | 1 x 2 x 1 | 2 | 2 | full | predicted |"), std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find(" > benchmark result table:\n| Model Size [B] | Nodes | GPUs/node |"), std::string::npos)
      << text.output;

  const std::string dir = test::scratch_dir("bench_sweep");
  const test::CommandResult json = bench("--model gpt2-124m --sweep tp=1,7 --micro-batch-size 2 --dry-run --json");
  ASSERT_EQ(json.status, 0) << json.output;
  ASSERT_EQ(lines_of(json.output).size(), 2u) << json.output;
  EXPECT_NE(json.output.find("\"case\":\"TP_1x7x1_2_768x12\",\"status\":\"skipped\",\"reason\":\"[--num-attention-"
                             "heads] 12 is not divisible by --tensor-model-parallel-size 7\""),
            std::string::npos)
      << json.output;
  std::ofstream(dir + "/sweep.json") << json.output;
  const test::CommandResult merged =
      test::run_command(test::megatron_binary() + " bench --table " + dir + "/sweep.json --csv", true);
  ASSERT_EQ(merged.status, 0) << merged.output;
  ASSERT_EQ(lines_of(merged.output).size(), 2u) << merged.output;  // header + the one planned row
  // model_size_b (124M with the padded vocabulary), nodes 1, GPUs/node 1, batch 2, PP, TP, DP 1, micro-batch 2.
  EXPECT_TRUE(std::regex_search(lines_of(merged.output)[1], std::regex("^0\\.124[0-9],1,1,2,1,1,1,2,")))
      << merged.output;
}

// CPU ranks: points up to the machine's cores run (more than one rank through mpirun, as
// `bench --nproc-per-node`), pipeline parallelism included; more ranks than cores do not.
TEST(BenchSweepCommand, OnTheCpuRunnablePointsAreMeasured) {
  const test::CommandResult r = bench(
      "--device cpu --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 "
      "--bench-iters 1 --warmup-iters 0 --sweep dp=1,2,4096 pp=1,2 --csv");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<std::string> lines = lines_of(r.output);
  ASSERT_EQ(lines.size(), 7u) << r.output;
  EXPECT_EQ(lines[1].rfind("1GPU_1x1x1_2_64x2,measured,1,1,1,2,2,none,", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("PP_1x1x2_2_64x2,measured,1,1,2,2,2,none,", 0), 0u) << lines[2];
  EXPECT_EQ(lines[3].rfind("DP_2x1x1_4_64x2,measured,2,1,1,2,4,none,", 0), 0u) << lines[3];
  EXPECT_NE(lines[5].find("DP_4096x1x1_8192_64x2,skipped"), std::string::npos) << lines[5];
  EXPECT_NE(lines[5].find("does not fit on "), std::string::npos) << lines[5];
  EXPECT_NE(lines[5].find(" CPU cores (needs 4096 ranks)"), std::string::npos) << lines[5];
  // Measured latency is a positive number of milliseconds.
  for (int i : {1, 2, 3}) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(lines[i], m, std::regex("none,([0-9.]+),"))) << lines[i];
    EXPECT_GT(std::stod(m[1]), 0.0) << lines[i];
  }
}

TEST(BenchSweepCommand, FlagsThatFightTheSweepAreErrors) {
  const test::CommandResult r = test::run_command(test::megatron_binary() +
                                                      " bench --model gpt2-124m --tensor-model-parallel-size 2 "
                                                      "--sweep tp=1,2 --micro-batch-size 1 --dry-run",
                                                  true);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("[--sweep] tp is swept; drop --tensor-model-parallel-size"), std::string::npos) << r.output;
  const test::CommandResult bad =
      test::run_command(test::megatron_binary() + " bench --model gpt2-124m --sweep tp=1,2 zz=3 --dry-run", true);
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("[--sweep] unknown key 'zz'"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace megatron::cli
