// `megatron train` as users run it: --dry-run prints the plan the engine allocates (checked
// against model/memory_plan for the 175B shape) without touching data, a short run prints
// Megatron's lines, and bad or unsupported flags fail with one line naming the flag.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "comm/mpirun.h"
#include "comm/nccl_communicator.h"
#include "data/indexed_dataset.h"
#include "model/memory_plan.h"
#include "parallel/grad_buckets.h"
#include "plan/memory_model.h"
#include "plan/nccl_memory.h"
#include "support/paths.h"
#include "support/plan_models.h"

namespace megatron {
namespace {

std::string train(const std::string& flags, int* status) {
  const test::CommandResult r = test::run_command(test::megatron_binary() + " train " + flags, true);
  *status = r.status;
  return r.output;
}

// An indexed dataset at `prefix` of `docs` documents of `length` tokens, token i of document d
// being (d * a + i * b + c) % 50257: distinct, deterministic documents.
void write_dataset(const std::string& prefix, int docs, int length, int a, int b, int c = 0) {
  data::IndexedDatasetWriter writer(prefix, data::TokenDType::kUInt16);
  for (int d = 0; d < docs; ++d) {
    std::vector<int32_t> tokens;
    for (int i = 0; i < length; ++i) tokens.push_back((d * a + i * b + c) % 50257);
    const int32_t len = static_cast<int32_t>(tokens.size());
    writer.add_document(tokens, std::span<const int32_t>(&len, 1));
  }
  writer.finalize();
}

int occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

int64_t table_bytes(const std::string& out, const std::string& row) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(out, m, std::regex("    " + row + " +([0-9]+) bytes"))) << row << "\n" << out;
  return m.empty() ? -1 : std::stoll(m[1]);
}

TEST(TrainCommand, DryRunPrintsThePlanFor175B) {
  int status = 0;
  const std::string out = train(
      "--model gpt3-175b --micro-batch-size 1 --global-batch-size 1536 --train-iters 10 --lr 6e-5 --bf16 --dry-run",
      &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("> padded vocab (size: 50257) with 47 dummy tokens (new size: 50304)"), std::string::npos);
  model::GPTConfig c;
  c.num_layers = 96;
  c.hidden_size = 12288;
  c.num_attention_heads = 96;
  c.kv_channels = 128;
  c.ffn_hidden_size = 49152;
  c.seq_length = 2048;
  c.max_position_embeddings = 2048;
  c.vocab_size = 50257;
  c.padded_vocab_size = 50304;
  const model::MemoryPlan plan = model::plan_memory(c, DType::kBF16, 1);
  EXPECT_EQ(table_bytes(out, "parameters"), plan.parameters);
  EXPECT_EQ(table_bytes(out, "main parameters \\(fp32\\)"), plan.main_parameters);
  EXPECT_EQ(table_bytes(out, "gradients \\(fp32\\)"), plan.gradients);
  EXPECT_EQ(table_bytes(out, "optimizer state \\(Adam, fp32\\)"), plan.optimizer);
  EXPECT_EQ(table_bytes(out, "activations \\(one micro-batch\\)"), plan.activations);
  EXPECT_EQ(table_bytes(out, "workspace"), plan.workspace);
  EXPECT_EQ(table_bytes(out, "total"), plan.total());
  EXPECT_NE(out.find("FLOPs per iteration"), std::string::npos);
  EXPECT_EQ(out.find("training ..."), std::string::npos) << "a dry run trains nothing";
}

// MEGATRON_DP_COPY_ENGINE=1 under 4 GPU ranks (a dry run needs no GPU; the build needs NCCL
// 2.28+ for the copy engines to apply): the plan counts the
// copy engines' receive buffer (what parallel::GradBuffer asks for: tests/plan/memory_model_test)
// and their extra communicator in the NCCL line; without the distributed optimizer the copy
// engines do not apply; a value other than 0 or 1 is a one-line error.
TEST(TrainCommand, DryRunCountsTheCopyEnginesWhenAsked) {
  const std::vector<std::string> argv = {test::megatron_binary(),
                                         "train",
                                         "--model",
                                         "gpt2-350m",
                                         "--micro-batch-size",
                                         "4",
                                         "--global-batch-size",
                                         "16",
                                         "--train-iters",
                                         "10",
                                         "--lr",
                                         "1e-4",
                                         "--bf16",
                                         "--dry-run",
                                         "--overlap-grad-reduce",
                                         "--device",
                                         "cuda"};
  auto run = [&](const std::string& env, bool distributed) {
    std::vector<std::string> a = argv;
    if (distributed) a.push_back("--use-distributed-optimizer");
    const std::vector<std::string> vars = env.empty() ? std::vector<std::string>{} : std::vector<std::string>{env};
    return test::run_command(comm::shell_join(comm::local_mpirun_command(4, a, vars)), true);
  };
  const test::CommandResult sm = run("", true), ce = run("MEGATRON_DP_COPY_ENGINE=1", true);
  ASSERT_EQ(sm.status, 0) << sm.output;
  ASSERT_EQ(ce.status, 0) << ce.output;
  if (!comm::copy_engine_supported()) {  // a build without NCCL 2.28: the copy engines never apply
    EXPECT_EQ(ce.output.find("copy-engine"), std::string::npos) << ce.output;
    return;
  }
  const model::GPTConfig c = plan::config_for_tp(test::gpt_plan_model(24, 1024, 16, 1024), 1);  // gpt2-350m
  const int64_t receive = plan::copy_engine_receive_bytes(c, 1, {}, 4, parallel::overlap_bucket_elements(4));
  EXPECT_GT(receive, 0);
  EXPECT_EQ(sm.output.find("copy-engine"), std::string::npos) << sm.output;
  EXPECT_EQ(table_bytes(ce.output, "copy-engine receive buffer"), receive);
  EXPECT_EQ(table_bytes(ce.output, "NCCL buffers \\(model\\)") - table_bytes(sm.output, "NCCL buffers \\(model\\)"),
            plan::kCommunicatorCreationBytes);
  EXPECT_EQ(table_bytes(ce.output, "total") - table_bytes(sm.output, "total"),
            receive + plan::kCommunicatorCreationBytes);
  const test::CommandResult replicated = run("MEGATRON_DP_COPY_ENGINE=1", false);
  ASSERT_EQ(replicated.status, 0) << replicated.output;
  EXPECT_EQ(replicated.output.find("copy-engine"), std::string::npos) << replicated.output;
  const test::CommandResult bad = run("MEGATRON_DP_COPY_ENGINE=yes", true);
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("error: MEGATRON_DP_COPY_ENGINE=yes: expected 0 or 1\n"), std::string::npos) << bad.output;
}

TEST(TrainCommand, ShortRunOnAPreprocessedDataset) {
  const std::string dir = test::scratch_dir("train_command_run");
  write_dataset(dir + "/d_text_document", 40, 50, 31, 7);
  int status = 0;
  const std::string out = train(
      "--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 "
      "--micro-batch-size 2 --global-batch-size 4 --train-iters 3 --lr 1e-3 "
      "--log-interval 1 --eval-interval 2 --eval-iters 1 --split 80,20,0 "
      "--data-path " +
          dir + "/d_text_document --data-cache-path " + dir +
          "/cache "
          "--vocab-file " +
          test::gpt2_vocab_file() + " --merge-file " + test::gpt2_merge_file(),
      &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find(" iteration        3/       3 | consumed samples:           12 |"), std::string::npos) << out;
  EXPECT_NE(out.find(" validation loss at iteration 2 | lm loss value: "), std::string::npos) << out;
  EXPECT_NE(out.find(" validation loss at iteration 3 on validation set | "), std::string::npos) << out;
}

// --train-data-path / --valid-data-path (C23's separate data paths): training reads only the
// train prefix, validation only the valid blend, each over all its sequences; --split does not
// choose sequences (a split of "1,0,0" would otherwise leave nothing to validate on). Without a
// valid path there is no validation; a valid path without a train path is refused.
TEST(TrainCommand, SeparateDataPathsPerSplit) {
  const std::string dir = test::scratch_dir("train_command_split_paths");
  for (const char* name : {"t", "v1", "v2"}) write_dataset(dir + "/" + name + "_text_document", 12, 30, 17, 5, name[0]);
  const std::string common =
      "--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 "
      "--micro-batch-size 2 --global-batch-size 4 --train-iters 2 --lr 1e-3 "
      "--log-interval 1 --eval-interval 2 --eval-iters 1 --split 1,0,0 --data-cache-path " +
      dir + "/cache --vocab-file " + test::gpt2_vocab_file() + " --merge-file " + test::gpt2_merge_file() +
      " --train-data-path " + dir + "/t_text_document";
  int status = 0;
  std::string out = train(common + " --valid-data-path 0.5 " + dir + "/v1_text_document 0.5 " + dir +
                              "/v2_text_document --save " + dir + "/ckpt --save-interval 2",
                          &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find(" > separate data paths provided for train, valid & test"), std::string::npos) << out;
  // 8 train samples of the 12 documents x 30 tokens; the valid blend asks (2 // 2 + 1) x 1 x 4 = 8
  // samples, ceil(8 x 0.5 x 1.005) = 5 of each member.
  EXPECT_NE(out.find(" > train: built index"), std::string::npos) << out;
  EXPECT_EQ(occurrences(out, " > valid: built index"), 2) << out;
  EXPECT_NE(out.find(" validation loss at iteration 2 | lm loss value: "), std::string::npos) << out;
  EXPECT_EQ(out.find(" > test:"), std::string::npos) << "no test path: no test dataset\n" << out;
  // The checkpoint records the paths it trained on.
  std::ifstream meta(dir + "/ckpt/iter_0000002/metadata.json");
  const std::string json((std::istreambuf_iterator<char>(meta)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"--train-data-path\""), std::string::npos) << json;
  EXPECT_NE(json.find("v2_text_document"), std::string::npos) << json;

  out = train(common, &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(out.find("validation loss"), std::string::npos) << "no valid path: no validation\n" << out;

  out = train(
      "--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 --micro-batch-size 2 "
      "--train-iters 2 --lr 1e-3 --vocab-file " +
          test::gpt2_vocab_file() + " --merge-file " + test::gpt2_merge_file() + " --valid-data-path " + dir +
          "/v1_text_document",
      &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("[--train-data-path] is required"), std::string::npos) << out;
}

// Megatron's check_for_nan_in_loss_and_grad, on by default: a learning rate of 1e30 blows the
// weights up after one step, the second forward's loss is NaN, and the run stops there with one
// line naming the rank and the iteration (nothing is saved). --no-check-for-nan-in-loss-and-grad
// trains on, as Megatron does, through NaN grad norms.
TEST(TrainCommand, NanLossStopsTheRunUnlessTheCheckIsOff) {
  const std::string dir = test::scratch_dir("train_command_nan");
  write_dataset(dir + "/d_text_document", 20, 40, 13, 11);
  const std::string common =
      "--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 "
      "--micro-batch-size 2 --global-batch-size 4 --train-iters 4 --lr 1e30 --log-interval 1 "
      "--eval-iters 0 --split 1,0,0 --data-path " +
      dir + "/d_text_document --data-cache-path " + dir + "/cache --vocab-file " + test::gpt2_vocab_file() +
      " --merge-file " + test::gpt2_merge_file() + " --save " + dir + "/ckpt --save-interval 2";
  int status = 0;
  std::string out = train(common, &status);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("error: [--no-check-for-nan-in-loss-and-grad] rank 0: found NaN in the local forward loss at "
                     "iteration 2 (node "),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("saving checkpoint"), std::string::npos) << out;
  EXPECT_EQ(out.find(" iteration        2/"), std::string::npos) << "iteration 2 must not be logged\n" << out;

  out = train(common + " --no-check-for-nan-in-loss-and-grad", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find(" iteration        4/       4 |"), std::string::npos) << out;
  EXPECT_NE(out.find("grad norm: nan |"), std::string::npos) << out;
}

// --use-checkpoint-args takes the model's shape from the checkpoint (given flags win),
// --ckpt-step loads an older iteration than the latest, and --skip-train only evaluates: the
// validation loss of iteration 4 equals the one printed at the end of training.
TEST(TrainCommand, EvaluateACheckpointWithItsOwnArgs) {
  const std::string dir = test::scratch_dir("train_command_ckpt_args");
  write_dataset(dir + "/d_text_document", 40, 50, 29, 3);
  const std::string data =
      "--micro-batch-size 2 --global-batch-size 4 --train-iters 4 --lr 1e-3 --log-interval 1 "
      "--eval-interval 100 --eval-iters 2 --split 80,20,0 --data-path " +
      dir + "/d_text_document --data-cache-path " + dir + "/cache --vocab-file " + test::gpt2_vocab_file() +
      " --merge-file " + test::gpt2_merge_file();
  int status = 0;
  std::string out = train(
      "--num-layers 2 --hidden-size 16 --num-attention-heads 2 --seq-length 8 "
      "--layernorm-epsilon 1e-6 --untie-embeddings-and-output-weights " +
          data + " --save " + dir + "/ckpt --save-interval 2",
      &status);
  ASSERT_EQ(status, 0) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m,
                                std::regex("validation loss at iteration 4 on validation set \\| lm loss value: "
                                           "([0-9.E+-]+)")))
      << out;
  const std::string trained_loss = m[1];

  out = train("--use-checkpoint-args --skip-train --load " + dir + "/ckpt " + data, &status);
  ASSERT_EQ(status, 0) << out;
  for (const char* line : {"Setting num_layers to 2 from checkpoint", "Setting hidden_size to 16 from checkpoint",
                           "Setting seq_length to 8 from checkpoint", "Setting layernorm_epsilon to ",
                           "Setting untie_embeddings_and_output_weights to True from checkpoint",
                           "skipping training (--skip-train is on) ..."}) {
    EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
  }
  EXPECT_EQ(out.find(" iteration        "), std::string::npos) << "no training step\n" << out;
  EXPECT_NE(out.find("validation loss at iteration 4 on validation set | lm loss value: " + trained_loss),
            std::string::npos)
      << out;

  // --ckpt-step 2; a given flag wins over the checkpoint's (a different shape would not load).
  out = train("--use-checkpoint-args --skip-train --ckpt-step 2 --load " + dir + "/ckpt " + data, &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("validation loss at iteration 2 on validation set"), std::string::npos) << out;
  out = train("--use-checkpoint-args --skip-train --hidden-size 32 --load " + dir + "/ckpt " + data, &status);
  EXPECT_NE(status, 0) << out;
  EXPECT_EQ(out.find("Setting hidden_size"), std::string::npos) << out;

  out = train("--use-checkpoint-args --skip-train --ckpt-step 3 --load " + dir + "/ckpt " + data, &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("iter_0000003"), std::string::npos) << out;
  // Megatron's load_args_from_checkpoint: no --load, or no checkpoint in it, leaves the flags
  // given as they are (the shape flags are then needed, as without --use-checkpoint-args).
  out = train("--use-checkpoint-args --skip-train " + data, &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("No load directory specified, using provided arguments.\n"), std::string::npos) << out;
  EXPECT_NE(out.find("error: [--num-layers]"), std::string::npos) << out;
  std::filesystem::create_directories(dir + "/empty");
  out = train("--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 --use-checkpoint-args --load " +
                  dir + "/empty " + data,
              &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("Checkpoint not found to provide arguments, using provided arguments.\n"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("from checkpoint\n"), std::string::npos) << out;
  EXPECT_NE(out.find(" iteration        4/       4 |"), std::string::npos) << out;
}

// Megatron-Core's mock data: training reads its documents (1, 2, ..., L-1, <|endoftext|>); the
// checkpoint records the flag (a resume with it shows no difference there), and --data-path
// beside it is refused.
TEST(TrainCommand, MockDataTrainsWithoutADataset) {
  const std::string dir = test::scratch_dir("train_command_mock");
  const std::string common =
      "--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 "
      "--micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --lr-decay-iters 10 "
      "--log-interval 1 --eval-interval 2 --eval-iters 1 --vocab-file " +
      test::gpt2_vocab_file() + " --merge-file " + test::gpt2_merge_file();
  int status = 0;
  std::string out = train(common + " --train-iters 2 --mock-data --save " + dir + "/ckpt --save-interval 2", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find(" > train: built index in memory ("), std::string::npos) << out;
  EXPECT_NE(out.find(" iteration        2/       2 | consumed samples:            8 |"), std::string::npos) << out;
  EXPECT_EQ(out.find("index-cache"), std::string::npos) << "mock data writes no index cache";
  out = train(common + " --train-iters 3 --mock-data --override-opt_param-scheduler --load " + dir + "/ckpt", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("    --train-iters: 2 -> 3"), std::string::npos) << out;
  EXPECT_EQ(out.find("--mock-data:"), std::string::npos) << out;
  EXPECT_NE(out.find(" iteration        3/       3 |"), std::string::npos) << out;
  EXPECT_NE(train(common + " --train-iters 3 --mock-data --data-path x", &status).find("[--mock-data]"),
            std::string::npos);
  EXPECT_NE(status, 0);
}

// Before the first step (here with --dry-run) train prints megatron plan's prediction for its
// exact layout on --gpu: the same iteration time, tokens/s and 2024-convention TFLOP/s as
// `megatron plan --json` for those flags, both at Megatron's default dropouts 0.1 (TP2 x PP2 x DP2 of gpt3-1.3b on 8
// H100s of one node); a GPU kind the planner does not know is one line naming --gpu.
TEST(TrainCommand, PrintsThePlannersPredictionBeforeTheFirstStep) {
  const std::string layout =
      "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 2 "
      "--global-batch-size 64";
  int status = 0;
  // Rank 0 of 8 on one node, as torchrun would start it (a dry run connects to nobody); with
  // megatron plan's default overlaps, and without them.
  auto run = [&](const std::string& overlaps) {
    const test::CommandResult r = test::run_command("env WORLD_SIZE=8 RANK=0 LOCAL_RANK=0 LOCAL_WORLD_SIZE=8 " +
                                                        test::megatron_binary() + " train --model gpt3-1.3b " + layout +
                                                        " --sequence-parallel --use-distributed-optimizer " + overlaps +
                                                        " --bf16 --lr 1e-4 --train-iters 10 --dry-run --gpu h100-80gb",
                                                    true);
    EXPECT_EQ(r.status, 0) << r.output;
    return r.output;
  };
  const std::regex line(
      R"( > predicted by megatron plan for h100-80gb \(1 node\(s\) x 8 GPU\(s\)\): ([0-9.]+) ms per iteration, ([0-9]+) tokens/s, ([0-9.]+) TFLOP/s/GPU \(Megatron 2024 convention, as megatron plan; [0-9.]+ in this run's 2025 convention\), report time [0-9.]+ s; fits \()");
  const std::string out = run("--overlap-grad-reduce --overlap-param-gather"), serial_out = run("");
  std::smatch m, serial;
  ASSERT_TRUE(std::regex_search(out, m, line)) << out;
  ASSERT_TRUE(std::regex_search(serial_out, serial, line)) << serial_out;
  EXPECT_GT(std::stod(serial[1]), std::stod(m[1])) << "the run's overlaps count: " << serial_out;
  const test::CommandResult plan = test::run_command(
      test::megatron_binary() + " plan --model gpt3-1.3b --gpu h100-80gb --gpus-per-node 8 --nodes 1 " + layout +
          " --sequence-parallel --use-distributed-optimizer --json",
      true);
  ASSERT_EQ(plan.status, 0) << plan.output;
  std::smatch s, t;
  ASSERT_TRUE(std::regex_search(plan.output, s, std::regex(R"("seconds_per_iteration": ([0-9.e-]+))"))) << plan.output;
  ASSERT_TRUE(std::regex_search(plan.output, t, std::regex(R"("tokens_per_s": ([0-9.e+]+))"))) << plan.output;
  EXPECT_NEAR(std::stod(m[1]), 1e3 * std::stod(s[1]), 0.051) << out;
  EXPECT_NEAR(std::stod(m[2]), std::stod(t[1]), 0.51) << out;
  std::smatch f;
  ASSERT_TRUE(std::regex_search(plan.output, f, std::regex(R"("tflops_per_gpu_2024": ([0-9.e+]+))"))) << plan.output;
  EXPECT_NEAR(std::stod(m[3]), std::stod(f[1]), 0.051) << out;
  // Documents: cuDNN reads their bias, so the same layout is predicted slower.
  const std::string one =
      "--model gpt3-1.3b --micro-batch-size 4 --global-batch-size 4 --lr 1e-4 --train-iters 10 "
      "--dry-run --bf16 --attention-dropout 0 --hidden-dropout 0 --gpu h100-80gb";
  const std::regex single(R"( > predicted by megatron plan for h100-80gb \(1 node\(s\) x 1 GPU\(s\)\): ([0-9.]+) ms)");
  const std::string causal = train(one, &status), documents = train(one + " --reset-attention-mask", &status);
  std::smatch c1, d1;
  ASSERT_TRUE(std::regex_search(causal, c1, single)) << causal;
  ASSERT_TRUE(std::regex_search(documents, d1, single)) << documents;
  EXPECT_GT(std::stod(d1[1]), std::stod(c1[1]) + 5.0) << documents;
  const std::string bad =
      train("--model gpt3-1.3b --micro-batch-size 1 --lr 1e-4 --train-iters 10 --dry-run --gpu b200", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(bad.find("[--gpu] unknown GPU 'b200'"), std::string::npos) << bad;
}

// --profile on the CPU backend: NVTX ranges only (said at start-up), the run unchanged; a
// --profile-ranks rank outside the world is one line before the first step.
TEST(TrainCommand, ProfileOnTheCpuSaysWhatItCaptures) {
  const std::string common =
      "--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 "
      "--micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --train-iters 3 --log-interval 1 "
      "--eval-iters 0 --mock-data --tokenizer-type NullTokenizer --vocab-size 50000 --device cpu "
      "--profile --profile-step-start 1 --profile-step-end 2";
  int status = 0;
  std::string out = train(common, &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find(" > --profile: no CUDA profiler on the CPU backend; NVTX ranges only"), std::string::npos) << out;
  EXPECT_NE(out.find(" iteration        3/       3 |"), std::string::npos) << out;
  EXPECT_EQ(out.find("capture window"), std::string::npos) << "iterations 2-2 are inside 1-3: " << out;
  // A window past the run's last iteration is said at start-up.
  out = train(common + " --profile-step-end 9", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find(" > warning: [--profile-step-start/--profile-step-end] the capture window (iterations 2-9) is "
                     "not inside this run's iterations (1-3)"),
            std::string::npos)
      << out;
  out = train(common + " --profile-ranks 0 3", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("error: [--profile-ranks] rank 3 is not in the world of 1 ranks"), std::string::npos) << out;
  EXPECT_EQ(out.find(" iteration        1/"), std::string::npos) << "no step before the error: " << out;
}

// Megatron-Core's NullTokenizer: --vocab-size N is the vocabulary (the EOD is N - 1), padded as
// usual. The mock documents count up to 4094 modulo N, so any N runs on them; ids of real data
// beyond the padded vocabulary stop the run with a line naming the flag.
TEST(TrainCommand, NullTokenizerTakesItsVocabularyFromVocabSize) {
  const std::string common =
      "--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 "
      "--micro-batch-size 2 --global-batch-size 4 --train-iters 1 --lr 1e-3 --eval-iters 0 "
      "--tokenizer-type NullTokenizer";
  int status = 0;
  std::string out = train(common + " --mock-data --vocab-size 5000", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("> padded vocab (size: 5000) with 120 dummy tokens (new size: 5120)"), std::string::npos) << out;
  out = train(common + " --mock-data --vocab-size 1000", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("> padded vocab (size: 1000) with 24 dummy tokens (new size: 1024)"), std::string::npos) << out;
  const std::string dir = test::scratch_dir("train_command_null_tokenizer");
  data::IndexedDatasetWriter writer(dir + "/big_ids", data::TokenDType::kUInt16);
  for (int d = 0; d < 20; ++d) {
    const std::vector<int32_t> tokens = {1, 2000 + d, 3, 4, 5, 6, 7, 8, 9, 10};
    const int32_t len = static_cast<int32_t>(tokens.size());
    writer.add_document(tokens, std::span<const int32_t>(&len, 1));
  }
  writer.finalize();
  out =
      train(common + " --vocab-size 1000 --split 1 --data-path " + dir + "/big_ids --data-cache-path " + dir, &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("error: [--vocab-size/--vocab-file] sample 0 holds token id 20"), std::string::npos) << out;
  EXPECT_NE(out.find("outside the padded vocabulary of 1024 ids"), std::string::npos) << out;
}

// --eod-mask-loss drops the positions whose input token is the EOD from the loss: on data with
// EODs the first iteration's loss changes, on data without any it does not.
TEST(TrainCommand, EodMaskLossMasksOnlyEndOfDocumentPositions) {
  const std::string dir = test::scratch_dir("train_command_eod_mask");
  auto write = [&](const std::string& prefix, bool with_eod) {
    data::IndexedDatasetWriter writer(prefix, data::TokenDType::kUInt16);
    for (int d = 0; d < 40; ++d) {
      std::vector<int32_t> tokens;
      for (int i = 0; i < 12; ++i) tokens.push_back((d * 31 + i * 7) % 50000);
      if (with_eod) tokens.push_back(50256);
      const int32_t len = static_cast<int32_t>(tokens.size());
      writer.add_document(tokens, std::span<const int32_t>(&len, 1));
    }
    writer.finalize();
  };
  write(dir + "/eod_text_document", true);
  write(dir + "/plain_text_document", false);
  auto first_loss = [&](const std::string& prefix, const std::string& extra) {
    int status = 0;
    const std::string out = train(
        "--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 "
        "--micro-batch-size 2 --global-batch-size 2 --train-iters 1 --lr 1e-3 "
        "--log-interval 1 --eval-iters 0 --split 1 --data-path " +
            prefix + " --data-cache-path " + dir + "/cache --vocab-file " + test::gpt2_vocab_file() + " --merge-file " +
            test::gpt2_merge_file() + extra,
        &status);
    EXPECT_EQ(status, 0) << out;
    std::smatch m;
    EXPECT_TRUE(std::regex_search(out, m, std::regex("lm loss: ([0-9.E+-]+)"))) << out;
    return m.empty() ? std::string() : m[1].str();
  };
  const std::string eod_plain = first_loss(dir + "/eod_text_document", "");
  const std::string eod_masked = first_loss(dir + "/eod_text_document", " --eod-mask-loss");
  EXPECT_FALSE(eod_plain.empty());
  EXPECT_NE(eod_plain, eod_masked);
  EXPECT_EQ(first_loss(dir + "/plain_text_document", ""), first_loss(dir + "/plain_text_document", " --eod-mask-loss"));
}

TEST(TrainCommand, SigtermSavesAndExitsZero) {
  const std::string dir = test::scratch_dir("train_command_sigterm");
  {
    data::IndexedDatasetWriter writer(dir + "/d_text_document", data::TokenDType::kUInt16);
    for (int d = 0; d < 40; ++d) {
      std::vector<int32_t> tokens;
      for (int i = 0; i < 50; ++i) tokens.push_back((d * 31 + i * 7) % 50257);
      const int32_t len = static_cast<int32_t>(tokens.size());
      writer.add_document(tokens, std::span<const int32_t>(&len, 1));
    }
    writer.finalize();
  }
  // A long run; SIGTERM once the first iteration line is out.
  const std::string train_cmd = test::megatron_binary() +
                                " train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 "
                                "--micro-batch-size 2 --global-batch-size 2 --train-iters 1000000 --lr 1e-3 "
                                "--log-interval 1 --eval-interval 1000000 --split 100,0,0 --exit-signal-handler "
                                "--data-path " +
                                dir + "/d_text_document --data-cache-path " + dir +
                                "/cache "
                                "--save " +
                                dir + "/ckpt --vocab-file " + test::gpt2_vocab_file() + " --merge-file " +
                                test::gpt2_merge_file();
  const std::string script = "(" + train_cmd + " > " + dir +
                             "/log 2>&1 & pid=$!; "
                             "for i in $(seq 1 600); do grep -q 'consumed samples' " +
                             dir +
                             "/log && break; sleep 0.1; done; "
                             "kill -TERM $pid; wait $pid; echo rc=$?)";
  const test::CommandResult r = test::run_command(script, true);
  EXPECT_NE(r.output.find("rc=0"), std::string::npos) << r.output;
  std::ifstream log(dir + "/log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("exiting program after receiving SIGTERM."), std::string::npos) << text;
  EXPECT_NE(text.find("successfully saved checkpoint at iteration"), std::string::npos) << text;
  std::ifstream tracker(dir + "/ckpt/latest_checkpointed_iteration.txt");
  int64_t iteration = 0;
  EXPECT_TRUE(tracker >> iteration);
  EXPECT_GE(iteration, 1);
}

TEST(TrainCommand, BadFlagsFailWithOneLineNamingTheFlag) {
  const std::string base = "--num-layers 2 --hidden-size 64 --micro-batch-size 2 --train-iters 10 --lr 1e-3 --dry-run ";
  const std::string s128 = "--seq-length 128 ";
  struct Case {
    std::string flags;
    std::string message;
  };
  const std::vector<Case> cases = {
      {base + s128 + "--num-attention-heads 5", "--num-attention-heads"},
      {base + s128 + "--num-attention-heads 4 --global-batch-size 7", "--global-batch-size"},
      {base + "--num-attention-heads 4 --seq-length 2048 --max-position-embeddings 1024", "--max-position-embeddings"},
      {base + s128 + "--num-attention-heads 4 --tensor-model-parallel-size 2",
       "world size (1) is not divisible by tensor parallel size (2)"},
      {base + s128 + "--num-attention-heads 4 --fp16 --bf16", "--bf16"},
      {base + s128 + "--num-attention-heads 4 --no-such-flag", "--no-such-flag"},
  };
  for (const Case& c : cases) {
    int status = 0;
    const std::string out = train(c.flags, &status);
    EXPECT_NE(status, 0) << c.flags;
    const size_t at = out.find("error: ");
    ASSERT_NE(at, std::string::npos) << c.flags << "\n" << out;
    const std::string line = out.substr(at);
    EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line: " << line;
    EXPECT_NE(line.find(c.message), std::string::npos) << line;
  }
}

}  // namespace
}  // namespace megatron
