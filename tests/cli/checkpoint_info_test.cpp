// `megatron checkpoint-info DIR`: iterations with sizes, the tracker, the tensors of the
// latest (or --iteration N) checkpoint and its metadata.json pretty-printed; a corrupt file
// is exit 1 with one line naming it, and so is a checkpoint the loaders refuse (the fixtures
// here are bare directories, not loadable: shown, then refused).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "ckpt/checkpoint_io.h"
#include "support/paths.h"

namespace megatron {
namespace {

using ckpt::CheckpointFile;

test::CommandResult info(const std::string& args) {
  return test::run_command(test::megatron_binary() + " checkpoint-info " + args, true);
}

void save(const std::string& dir, int64_t it, bool optimizer) {
  static std::vector<float> w(6, 1.5f);
  static std::vector<uint16_t> emb(8, 0);
  static std::vector<float> m(6, 0.25f);
  std::vector<CheckpointFile> files;
  files.push_back(CheckpointFile::safetensors(
      ckpt::kModelFileName,
      {{"decoder.layers.0.mlp.fc1.weight", DType::kF32, {2, 3}, w.data(), {4, 3}, "tp=2,pp=1,partition_axis=0"},
       {"embedding.word_embeddings.weight", DType::kBF16, {4, 2}, emb.data()}},
      {{"format", "megatron.cpp"}}));
  if (optimizer)
    files.push_back(CheckpointFile::safetensors(ckpt::kOptimizerFileName, {{"exp_avg", DType::kF32, {6}, m.data()}}));
  files.push_back(CheckpointFile::text_file(
      ckpt::kMetadataFileName,
      "{\"iteration\":" + std::to_string(it) + ",\"config\":{\"num_layers\":2,\"lr\":0.0001}}"));
  ckpt::save_checkpoint_dir(dir, it, files);
}

TEST(CheckpointInfo, ShowsIterationsTensorsAndMetadata) {
  const std::string dir = test::scratch_dir("checkpoint_info");
  save(dir, 100, true);
  save(dir, 200, false);
  const test::CommandResult r = info(dir);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(r.output.ends_with("error: " + dir + "/iter_0000200/metadata.json: format is missing\n")) << r.output;
  const std::string& out = r.output;
  EXPECT_NE(out.find("tracker: iteration 200"), std::string::npos) << out;
  EXPECT_NE(out.find("checkpoints: 2"), std::string::npos) << out;
  const int64_t bytes100 = ckpt::list_checkpoints(dir)[0].bytes;
  EXPECT_TRUE(std::regex_search(out, std::regex("iter_0000100 +" + std::to_string(bytes100) + " bytes\n"))) << out;
  EXPECT_NE(out.find("(latest)"), std::string::npos);
  EXPECT_LT(out.find("iter_0000200"), out.find("(latest)"));
  EXPECT_NE(out.find("iteration 200: " + dir + "/iter_0000200"), std::string::npos) << out;
  EXPECT_NE(out.find("model.safetensors: "), std::string::npos);
  EXPECT_NE(out.find("2 tensors, 14 elements"), std::string::npos) << out;
  // name, dtype, shape, global shape, layout on one line.
  EXPECT_TRUE(std::regex_search(
      out, std::regex(R"(decoder\.layers\.0\.mlp\.fc1\.weight +F32 +\[2,3\] +\[4,3\] +tp=2,pp=1,partition_axis=0)")))
      << out;
  EXPECT_TRUE(std::regex_search(
      out, std::regex(R"(embedding\.word_embeddings\.weight +BF16 +\[4,2\] +\[4,2\] +tp=1,pp=1,partition_axis=-1)")))
      << out;
  EXPECT_NE(out.find("format = megatron.cpp"), std::string::npos) << out;
  EXPECT_NE(out.find("no optimizer.safetensors"), std::string::npos) << out;
  EXPECT_NE(out.find("{\n  \"iteration\": 200,\n  \"config\": {\n    \"num_layers\": 2,\n    \"lr\": 0.0001\n  }\n}"),
            std::string::npos)
      << out;

  const test::CommandResult r100 = info(dir + " --iteration 100");
  EXPECT_EQ(r100.status, 1) << r100.output;
  EXPECT_NE(r100.output.find("iteration 100: " + dir + "/iter_0000100"), std::string::npos) << r100.output;
  EXPECT_NE(r100.output.find("optimizer.safetensors: "), std::string::npos) << r100.output;
  EXPECT_NE(r100.output.find("\"iteration\": 100"), std::string::npos) << r100.output;
}

TEST(CheckpointInfo, MissingTrackerAndErrors) {
  const std::string dir = test::scratch_dir("checkpoint_info_errors");
  const test::CommandResult empty = info(dir);
  ASSERT_EQ(empty.status, 0) << empty.output;
  EXPECT_NE(empty.output.find("tracker: missing"), std::string::npos) << empty.output;
  EXPECT_NE(empty.output.find("no checkpoint to show"), std::string::npos) << empty.output;

  save(dir, 100, true);
  std::filesystem::remove(dir + "/latest_checkpointed_iteration.txt");
  const test::CommandResult newest = info(dir);  // no tracker: the newest directory is shown
  EXPECT_EQ(newest.status, 1) << newest.output;
  EXPECT_NE(newest.output.find("iteration 100: "), std::string::npos) << newest.output;

  { std::ofstream(dir + "/latest_checkpointed_iteration.txt") << "garbage"; }
  const test::CommandResult garbage = info(dir);
  EXPECT_EQ(garbage.status, 1) << garbage.output;  // every loader refuses the tracker
  EXPECT_NE(
      garbage.output.find("INVALID: " + dir + "/latest_checkpointed_iteration.txt: invalid tracker content 'garbage'"),
      std::string::npos)
      << garbage.output;

  { std::ofstream(dir + "/latest_checkpointed_iteration.txt") << "100"; }
  const std::string model = dir + "/iter_0000100/model.safetensors";
  std::filesystem::resize_file(model, std::filesystem::file_size(model) - 3);
  const test::CommandResult corrupt = info(dir);
  EXPECT_EQ(corrupt.status, 1) << corrupt.output;
  EXPECT_NE(corrupt.output.find("error: " + model + ": safetensors: "), std::string::npos) << corrupt.output;

  const test::CommandResult missing = info(dir + "/nope");
  EXPECT_EQ(missing.status, 1) << missing.output;
  EXPECT_NE(missing.output.find("error: " + dir + "/nope: not a checkpoint directory"), std::string::npos)
      << missing.output;
  EXPECT_EQ(info(dir + " --iteration 7").status, 1);
}

}  // namespace
}  // namespace megatron
