// `megatron bench --table`: rows of several --json result files merged into the benchmark's
// table (text and CSV), and a one-line error for a file that lacks a field.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "support/paths.h"

namespace megatron {
namespace {

std::string row(double size_b, int nodes, int tp, int pp, int dp, int gbs, double tokens) {
  return "{\"device\": \"NVIDIA H100 80GB HBM3\", \"micro_batch\": 1, \"global_batch\": " + std::to_string(gbs) +
         ", \"tokens_per_s\": " + std::to_string(tokens) + ", \"report_time_s\": " + std::to_string(20e6 / tokens) +
         ", \"model_size_b\": " + std::to_string(size_b) + ", \"nodes\": " + std::to_string(nodes) +
         ", \"gpus_per_node\": 8, \"tensor_model_parallel_size\": " + std::to_string(tp) +
         ", \"pipeline_model_parallel_size\": " + std::to_string(pp) +
         ", \"data_parallel_size\": " + std::to_string(dp) +
         ", \"tflops_per_gpu\": 400.5, \"memory_per_gpu_bytes\": 53687091200}\n";
}

TEST(BenchTable, MergesJsonFilesIntoOneTable) {
  const std::string dir = test::scratch_dir("bench_table");
  std::ofstream(dir + "/a.json") << row(174.6, 16, 8, 8, 2, 1536, 40000.0);
  std::ofstream(dir + "/b.json") << row(12.85, 2, 4, 2, 2, 512, 50000.0) << "\n"
                                 << row(12.85, 4, 4, 2, 4, 512, 80000.0);
  const test::CommandResult text =
      test::run_command(test::megatron_binary() + " bench --table " + dir + "/a.json " + dir + "/b.json", true);
  ASSERT_EQ(text.status, 0) << text.output;
  const std::string expected =
      "| Model Size [B] | Nodes | GPUs/node | Batch Size | Pipeline Parallel | Tensor Parallel | Data Parallel | "
      "Micro-batch | Tokens/sec | Report Time [s] | TFLOP/s/GPU | Memory/GPU [GiB] |\n"
      "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
      "| 174.60 | 16 | 8 | 1536 | 8 | 8 | 2 | 1 | 40000.0 | 500.0 | 400.5 | 50.00 |\n"
      "| 12.85 | 2 | 8 | 512 | 2 | 4 | 2 | 1 | 50000.0 | 400.0 | 400.5 | 50.00 |\n"
      "| 12.85 | 4 | 8 | 512 | 2 | 4 | 4 | 1 | 80000.0 | 250.0 | 400.5 | 50.00 |\n";
  EXPECT_EQ(text.output, expected);
  const test::CommandResult csv =
      test::run_command(test::megatron_binary() + " bench --table " + dir + "/b.json --csv", true);
  ASSERT_EQ(csv.status, 0) << csv.output;
  EXPECT_EQ(csv.output,
            "model_size_b,nodes,gpus_per_node,batch_size,pipeline_parallel,tensor_parallel,data_parallel,micro_batch,"
            "tokens_per_s,report_time_s,tflops_per_gpu,memory_per_gpu_gib\n"
            "12.8500,2,8,512,2,4,2,1,50000.0,400.00,400.50,50.000\n"
            "12.8500,4,8,512,2,4,4,1,80000.0,250.00,400.50,50.000\n");
}

TEST(BenchTable, MissingFieldIsOneLineNamingFileAndLine) {
  const std::string dir = test::scratch_dir("bench_table_bad");
  std::ofstream(dir + "/old.json") << "{\"tokens_per_s\": 1000.0, \"global_batch\": 8}\n";
  const test::CommandResult r =
      test::run_command(test::megatron_binary() + " bench --table " + dir + "/old.json", true);
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.output, "error: [--table] " + dir + "/old.json:1: missing field \"model_size_b\"\n");
}

}  // namespace
}  // namespace megatron
