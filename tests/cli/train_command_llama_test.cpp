// Megatron's own Llama job flags run unchanged (the tokenizer flags aside: --mock-data with
// NullTokenizer) on a tiny shape on the CPU: the model flags of
// examples/llama/train_llama3_8b_h100_fp8.sh and of docs/llama_mistral.md's Llama 2 section. Each
// trains, saves, and resumes from its checkpoint with --use-checkpoint-args, which must restore
// the Llama flags (a resume with other rotary settings or groups is refused, naming the flag).
#include <gtest/gtest.h>

#include <string>

#include "support/paths.h"

namespace megatron {
namespace {

std::string train(const std::string& flags, int* status) {
  const test::CommandResult r = test::run_command(test::megatron_binary() + " train " + flags, true);
  *status = r.status;
  return r.output;
}

const std::string kTiny =
    " --num-layers 2 --hidden-size 64 --num-attention-heads 4 --kv-channels 16 --seq-length 32 "
    "--max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 --lr 0.00015 --min-lr 0.00001 "
    "--lr-decay-style cosine --log-interval 1 --eval-iters 1 --device cpu --mock-data --tokenizer-type NullTokenizer "
    "--vocab-size 128256 --split 99,1,0";

// The Llama-3 8B example's model flags (its shape flags replaced by kTiny's).
const std::string kLlama3 =
    " --ffn-hidden-size 128 --group-query-attention --num-query-groups 2 --position-embedding-type rope "
    "--rotary-base 1000000 --rotary-percent 1.0 --attention-dropout 0.0 --hidden-dropout 0.0 --swiglu "
    "--normalization RMSNorm --init-method-std 0.0134 --apply-layernorm-1p --untie-embeddings-and-output-weights "
    "--disable-bias-linear --clip-grad 1.0 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --bf16";

// docs/llama_mistral.md's Llama 2 flags.
const std::string kLlama2 =
    " --untie-embeddings-and-output-weights --use-rotary-position-embeddings --normalization RMSNorm "
    "--no-position-embedding --no-masked-softmax-fusion --attention-softmax-in-fp32 --swiglu --disable-bias-linear";

// *dir_out (when given): the directory whose ck/ holds the checkpoint.
void trains_saves_and_resumes(const std::string& name, const std::string& model, std::string* dir_out = nullptr) {
  const std::string dir = test::scratch_dir(name);
  if (dir_out != nullptr) *dir_out = dir;
  int status = 0;
  std::string out = train(kTiny + model + " --train-iters 3 --save " + dir + "/ck --save-interval 3", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find(" iteration        3/       3 |"), std::string::npos) << out;
  // The shape and the Llama flags come back from the checkpoint.
  out = train(" --use-checkpoint-args --override-opt_param-scheduler --load " + dir +
                  "/ck --train-iters 4 --micro-batch-size 2 --global-batch-size 4"
                  " --lr 0.00015 --device cpu --mock-data --split 99,1,0 --eval-iters 1"
                  " --log-interval 1" +
                  std::string(model.find("--bf16") != std::string::npos ? " --bf16" : ""),
              &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("Setting position_embedding_type to rope from checkpoint"), std::string::npos) << out;
  EXPECT_NE(out.find(" iteration        4/       4 |"), std::string::npos) << out;
  // A resume that changes what the weights mean is refused in one line naming the flag.
  out = train(kTiny + model + " --rotary-base 20000 --train-iters 4 --load " + dir + "/ck", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("[--rotary-base]"), std::string::npos) << out;
}

TEST(TrainCommandLlama, TheLlama3ExampleModelFlags) { trains_saves_and_resumes("train_llama3_flags", kLlama3); }

TEST(TrainCommandLlama, TheLlama2DocsFlags) { trains_saves_and_resumes("train_llama2_flags", kLlama2); }

// --qk-layernorm is recorded: --use-checkpoint-args restores it, and a resume without it (the
// query/key norms' tensors would be left unused) is refused naming the flag.
TEST(TrainCommandLlama, QkLayernormIsRestoredAndChecked) {
  const std::string model = kLlama2 + " --qk-layernorm";
  std::string dir;
  trains_saves_and_resumes("train_llama2_qk_flags", model, &dir);
  if (HasFatalFailure()) return;
  int status = 0;
  std::string out = train(" --use-checkpoint-args --override-opt_param-scheduler --load " + dir +
                              "/ck --train-iters 4 --micro-batch-size 2 --global-batch-size 4 --lr 0.00015 --device cpu"
                              " --mock-data --split 99,1,0 --eval-iters 1 --log-interval 1",
                          &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("Setting qk_layernorm to True from checkpoint"), std::string::npos) << out;
  out = train(kTiny + kLlama2 + " --train-iters 4 --load " + dir + "/ck", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("[--qk-layernorm]"), std::string::npos) << out;
}

}  // namespace
}  // namespace megatron
