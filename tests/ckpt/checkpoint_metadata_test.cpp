// ckpt/checkpoint_metadata.h: typed reads with one-line errors naming the file, and rewrites
// that change only the given members of "args" / "layout", keeping every other value and the
// member order.
#include "ckpt/checkpoint_metadata.h"

#include <gtest/gtest.h>

#include <string>

#include "ckpt/checkpoint_io.h"
#include "core/error.h"

namespace megatron::ckpt {
namespace {

const char* kDoc = R"({"format": "f", "iteration": 7, "scheduler": {"max_lr": 0.003, "num_steps": 28},
  "layout": {"tensor_model_parallel_size": 1, "data_parallel_size": 2},
  "args": {"--num-layers": 2, "--lr": 0.003, "--data-path": ["a", "b"], "--bf16": false, "precision": "fp32"}})";

TEST(CheckpointMetadata, TypedReads) {
  const ckpt::CheckpointMetadata m("m.json", kDoc);
  EXPECT_EQ(m.arg_int("--num-layers"), 2);
  EXPECT_EQ(m.arg_double("--lr"), 0.003);
  EXPECT_EQ(m.arg_double("--num-layers"), 2.0);
  EXPECT_FALSE(m.arg_bool("--bf16"));
  EXPECT_EQ(m.arg_string("precision"), "fp32");
  EXPECT_EQ(m.optional_arg_string("--tokenizer-type"), std::nullopt);
  EXPECT_EQ(m.layout_int("data_parallel_size"), 2);
  EXPECT_EQ(m.layout_int("pipeline_model_parallel_size"), std::nullopt);
  EXPECT_EQ(m.top_int("iteration"), 7);
  EXPECT_EQ(m.top_string("format"), "f");
  try {
    m.arg_int("--lr");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "m.json: args.--lr is not an integer");
  }
  try {
    m.arg_int("--hidden-size");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "m.json: args.--hidden-size is missing");
  }
  EXPECT_THROW(ckpt::CheckpointMetadata("bad.json", "[1, 2]"), Error);
}

TEST(CheckpointMetadata, RewriteChangesOnlyWhatIsGiven) {
  const ckpt::CheckpointMetadata m("m.json", kDoc);
  const std::string out = m.rewritten({{"--num-layers", "4"}, {"padded_vocab_size", "128"}},
                                      {{"tensor_model_parallel_size", "8"}, {"pipeline_model_parallel_size", "2"}});
  EXPECT_EQ(ckpt::reformat_json(out, 0),
            R"({"format":"f","iteration":7,"scheduler":{"max_lr":0.003,"num_steps":28},)"
            R"("layout":{"tensor_model_parallel_size":8,"data_parallel_size":2,"pipeline_model_parallel_size":2},)"
            R"("args":{"--num-layers":4,"--lr":0.003,"--data-path":["a","b"],"--bf16":false,"precision":"fp32",)"
            R"("padded_vocab_size":128}})");
  EXPECT_EQ(out, ckpt::reformat_json(out, 2)) << "indented like the trainer's metadata.json";
}

}  // namespace
}  // namespace megatron::ckpt
