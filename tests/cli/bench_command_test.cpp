// `megatron bench --nproc-per-node N` on CPU ranks (mpirun): the data-, tensor- and
// pipeline-parallel rows carry the real layout (nodes, GPUs per node, PP, TP, DP) and per-rank
// memory.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "support/paths.h"

namespace megatron {
namespace {

const char* kTiny =
    " --device cpu --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2"
    " --bench-iters 1 --warmup-iters 0 --csv";

// The CSV row's fields (format_bench_csv: model_size_b, nodes, gpus_per_node, batch_size,
// pipeline_parallel, tensor_parallel, data_parallel, micro_batch, tokens_per_s, report_time_s,
// tflops_per_gpu, memory_per_gpu_gib).
std::vector<std::string> row_of(const std::string& flags) {
  const test::CommandResult r = test::run_command(test::megatron_binary() + " bench" + kTiny + flags, false);
  EXPECT_EQ(r.status, 0) << flags << "\n" << r.output;
  const size_t eol = r.output.find('\n');
  std::vector<std::string> fields;
  if (eol == std::string::npos) return fields;
  std::string line = r.output.substr(eol + 1);
  if (!line.empty() && line.back() == '\n') line.pop_back();
  size_t start = 0;
  for (size_t comma; (comma = line.find(',', start)) != std::string::npos; start = comma + 1) {
    fields.push_back(line.substr(start, comma - start));
  }
  fields.push_back(line.substr(start));
  return fields;
}

TEST(BenchCommand, DataAndTensorParallelRowsOnCpuRanks) {
  const std::vector<std::string> one = row_of("");
  const std::vector<std::string> dp = row_of(" --nproc-per-node 2");
  const std::vector<std::string> tp = row_of(" --nproc-per-node 2 --tensor-model-parallel-size 2");
  ASSERT_EQ(one.size(), 12u);
  ASSERT_EQ(dp.size(), 12u);
  ASSERT_EQ(tp.size(), 12u);
  // nodes, GPUs/node, batch, PP, TP, DP, micro-batch
  EXPECT_EQ(std::vector<std::string>(one.begin() + 1, one.begin() + 8),
            (std::vector<std::string>{"1", "1", "2", "1", "1", "1", "2"}));
  EXPECT_EQ(std::vector<std::string>(dp.begin() + 1, dp.begin() + 8),
            (std::vector<std::string>{"1", "2", "4", "1", "1", "2", "2"}));
  EXPECT_EQ(std::vector<std::string>(tp.begin() + 1, tp.begin() + 8),
            (std::vector<std::string>{"1", "2", "2", "1", "2", "1", "2"}));
  // The whole model's size in every row; per-rank memory: DP replicates, TP shards.
  EXPECT_EQ(one[0], dp[0]);
  EXPECT_EQ(one[0], tp[0]);
  EXPECT_EQ(one[11], dp[11]);
  EXPECT_LT(std::stod(tp[11]), 0.75 * std::stod(one[11]));
  for (const auto* row : {&one, &dp, &tp}) EXPECT_GT(std::stod((*row)[8]), 0.0);  // tokens/s
}

// --profile-ops under TP2 + SP on two CPU ranks: the tensor-parallel group's collectives are
// rows of the op table, the blocking gathers / reduce-scatters of the forward and the started
// ones of the backward with their waits (comm/profiled_communicator.h).
TEST(BenchCommand, ProfileOpsListsTheTensorParallelCollectives) {
  const test::CommandResult r = test::run_command(
      test::megatron_binary() +
          " bench --device cpu --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32"
          " --micro-batch-size 2 --bench-iters 1 --warmup-iters 0 --profile-ops --nproc-per-node 2"
          " --tensor-model-parallel-size 2 --sequence-parallel",
      true);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* row : {"all_gather [tp]", "reduce_scatter [tp]", "start all_gather [tp]", "wait all_gather [tp]",
                          "start reduce_scatter [tp]", "wait reduce_scatter [tp]"}) {
    EXPECT_NE(r.output.find(std::string("    ") + row + " "), std::string::npos) << row << "\n" << r.output;
  }
  // Per iteration (one micro-batch): the LayerNorms' sequence-parallel gradients (2 layers x 4 +
  // the final 2 tensors) travel packed in one all-reduce, not one each, and the vocab-parallel
  // cross-entropy takes three on the device (max, sum of exps, target logit), none through the
  // host (tensor_parallel/vocab_parallel.h). The one host all-reduce on these ranks is the
  // gradient norm's over the model-parallel group, which at pp 1 is tp's communicator
  // (comm/shared_communicator.h), so its row is named [tp].
  const size_t at = r.output.find("    all_reduce [tp] ");
  ASSERT_NE(at, std::string::npos) << r.output;
  std::istringstream row(r.output.substr(at + std::string("    all_reduce [tp] ").size()));
  int64_t calls = 0;
  row >> calls;
  EXPECT_EQ(calls, 1 + 3) << r.output.substr(at, 80);
  const size_t at_host = r.output.find("    all_reduce_host [tp] ");
  ASSERT_NE(at_host, std::string::npos) << r.output;
  std::istringstream host_row(r.output.substr(at_host + std::string("    all_reduce_host [tp] ").size()));
  int64_t host_calls = 0;
  host_row >> host_calls;
  EXPECT_EQ(host_calls, 1) << r.output.substr(at_host, 80);
  // The backward gathers the QKV and FC1 inputs again (2 layers x 2); the loss head's are still
  // in the gather workspace from its forward.
  const std::string started = "    start all_gather [tp] ";
  const size_t at_gather = r.output.find(started);
  ASSERT_NE(at_gather, std::string::npos) << r.output;
  std::istringstream gathers(r.output.substr(at_gather + started.size()));
  int64_t gather_calls = 0;
  gathers >> gather_calls;
  EXPECT_EQ(gather_calls, 4) << r.output.substr(at_gather, 80);
}

// --overlap-grad-reduce and --overlap-param-gather run in bench as in train (several buckets):
// the loss after two steps is the non-overlapped run's.
TEST(BenchCommand, OverlapFlagsRunAsInTrain) {
  auto loss_of = [](const std::string& flags) {
    const test::CommandResult r = test::run_command(
        test::megatron_binary() +
            " bench --device cpu --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32"
            " --micro-batch-size 2 --global-batch-size 4 --bench-iters 2 --warmup-iters 0 --json --nproc-per-node 2"
            " --ddp-bucket-size 3001" +
            flags,
        false);
    EXPECT_EQ(r.status, 0) << flags << "\n" << r.output;
    const size_t at = r.output.find("\"loss\": ");
    return at == std::string::npos ? std::string("missing") : r.output.substr(at, 16);
  };
  const std::string plain = loss_of(""), dist = loss_of(" --use-distributed-optimizer");
  EXPECT_NE(plain, "missing");
  EXPECT_EQ(loss_of(" --overlap-grad-reduce"), plain);
  EXPECT_EQ(loss_of(" --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"), dist);
}

// The benchmark's vocabulary is the tokenizer's: NullTokenizer's --vocab-size N gives N ids
// (padded to 1024 here), not GPT-2's 50257 (padded to 50304): the embedding and output layer
// shrink by (50304 - 1024) rows of h = 64, and the loss of uniform logits is ln(1024).
TEST(BenchCommand, NullTokenizerSetsTheVocabulary) {
  auto json_of = [](const std::string& flags) {
    const test::CommandResult r = test::run_command(
        test::megatron_binary() +
            " bench --device cpu --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32"
            " --micro-batch-size 2 --bench-iters 1 --warmup-iters 0 --json" +
            flags,
        false);
    EXPECT_EQ(r.status, 0) << flags << "\n" << r.output;
    return r.output;
  };
  auto number = [](const std::string& json, const std::string& key) {
    const size_t at = json.find("\"" + key + "\": ");
    return at == std::string::npos ? -1.0 : std::stod(json.substr(at + key.size() + 4));
  };
  const std::string gpt2 = json_of(""), null = json_of(" --tokenizer-type NullTokenizer --vocab-size 1000");
  EXPECT_EQ(number(gpt2, "params") - number(null, "params"), (50304.0 - 1024.0) * 64.0);
  EXPECT_NEAR(number(null, "loss"), std::log(1024.0), 0.2);
}

// Pipeline parallelism runs the 1F1B schedule (2 micro-batches per rank); rank 0 reports the
// first stage, which holds one of the two layers and the embeddings but no output layer copy
// beyond the tied one of the last stage: less memory than the whole model.
TEST(BenchCommand, PipelineParallelRowOnCpuRanks) {
  const std::vector<std::string> one = row_of(" --global-batch-size 4");
  const std::vector<std::string> pp =
      row_of(" --global-batch-size 4 --nproc-per-node 2 --pipeline-model-parallel-size 2");
  ASSERT_EQ(one.size(), 12u);
  ASSERT_EQ(pp.size(), 12u);
  EXPECT_EQ(std::vector<std::string>(pp.begin() + 1, pp.begin() + 8),
            (std::vector<std::string>{"1", "2", "4", "2", "1", "1", "2"}));
  EXPECT_EQ(one[0], pp[0]);
  EXPECT_LT(std::stod(pp[11]), std::stod(one[11]));
  EXPECT_GT(std::stod(pp[8]), 0.0);
}

}  // namespace
}  // namespace megatron
