// Offline resharding (convert/reshard.h) on real checkpoints of a tiny GPT (tests/train/tiny_training.h:
// vocabulary 40, padded to 48 at TP 1 with --make-vocab-size-divisible-by 16):
//   - TP1 -> TP8 re-pads the vocabulary rows to 128 (16 x 8) in the weights and in every optimizer
//     state tensor, the first 48 rows bit for bit and the added rows zero, and records the layout;
//     TP8 -> TP1 then gives back the original files byte for byte (fp32, and bf16 with fp32
//     main params), and the same metadata;
//   - the trainer loads a re-padded checkpoint exactly when its own padding matches (it refuses
//     the unconverted one), and resumes from it;
//   - targets that do not fit the model, and outputs that exist, are one-line errors naming the
//     flag; --load is never modified.
#include "convert/reshard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "ckpt/checkpoint_io.h"
#include "ckpt/checkpoint_metadata.h"
#include "core/error.h"
#include "support/paths.h"
#include "train/tiny_training.h"

namespace megatron::convert {
namespace {

namespace fs = std::filesystem;

using test::read_file;

// Every regular file under dir (relative path -> bytes).
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = read_file(e.path().string());
  }
  return out;
}

bool all_zero(const uint8_t* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (p[i]) return false;
  }
  return true;
}

ckpt::CheckpointMetadata metadata(const ckpt::LoadedCheckpoint& ck) {
  return ckpt::CheckpointMetadata(ck.directory + "/metadata.json", ck.metadata_json);
}

void expect_round_trip(const std::string& name, const std::vector<std::string>& precision) {
  const std::string dir = test::scratch_dir(name);
  test::write_tiny_corpus(dir);
  // 8 heads of 2 (and the FFN's 64 columns) split over TP 8.
  std::vector<std::string> flags = precision;
  for (const std::string& f : {std::string("--save"), dir + "/tp1", std::string("--save-interval"), std::string("3"),
                               std::string("--num-attention-heads"), std::string("8")}) {
    flags.push_back(f);
  }
  test::train_tiny(dir, flags);
  const auto before = snapshot(dir + "/tp1");

  convert::ReshardOptions to8;
  to8.tensor_model_parallel_size = 8;
  const convert::ReshardResult r8 = convert::reshard_checkpoint(dir + "/tp1", dir + "/tp8", to8);
  EXPECT_EQ(r8.iteration, 3);
  EXPECT_EQ(r8.old_padded_vocab_size, 48);
  EXPECT_EQ(r8.new_padded_vocab_size, 128);  // ceil(40 / (16 * 8)) * 128
  EXPECT_EQ(snapshot(dir + "/tp1"), before) << "--load must not change";

  const ckpt::LoadedCheckpoint a = ckpt::load_checkpoint_dir(dir + "/tp1"), b = ckpt::load_checkpoint_dir(dir + "/tp8");
  ASSERT_NE(a.optimizer(), nullptr);
  ASSERT_NE(b.optimizer(), nullptr);
  EXPECT_EQ(b.iteration, 3);
  int64_t repadded = 0;
  for (const auto& [file_name, fa] : a.tensor_files) {
    const ckpt::SafetensorsFile& fb = b.tensor_files.at(file_name);
    ASSERT_EQ(fa.tensors().size(), fb.tensors().size()) << file_name;
    for (const ckpt::SafetensorsTensor& ta : fa.tensors()) {
      const ckpt::SafetensorsTensor& tb = fb.at(ta.name);
      EXPECT_EQ(ta.dtype, tb.dtype) << ta.name;
      if (ta.name.find("word_embeddings") == std::string::npos) {
        EXPECT_EQ(ta.shape, tb.shape) << ta.name;
        EXPECT_TRUE(ta.bytes == tb.bytes && std::memcmp(ta.data, tb.data, ta.bytes) == 0) << ta.name;
        continue;
      }
      ++repadded;
      ASSERT_EQ(tb.shape, (std::vector<int64_t>{128, 16})) << ta.name;
      EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.bytes), 0) << ta.name << ": rows 0..47 bit for bit";
      EXPECT_FALSE(all_zero(ta.data + ta.bytes - 16 * dtype_size(ta.dtype), 16 * dtype_size(ta.dtype)))
          << ta.name << ": the original dummy rows are trained values, kept";
      EXPECT_TRUE(all_zero(tb.data + ta.bytes, tb.bytes - ta.bytes)) << ta.name << ": rows 48..127 zero";
    }
  }
  // The word embedding (tied output layer) and its exp_avg, exp_avg_sq (+ main_param in bf16).
  EXPECT_EQ(repadded, precision.empty() ? 3 : 4);
  EXPECT_EQ(static_cast<int64_t>(r8.repadded.size()), repadded);
  const ckpt::CheckpointMetadata m8 = metadata(b);
  EXPECT_EQ(m8.arg_int("--tensor-model-parallel-size"), 8);
  EXPECT_EQ(m8.arg_int("padded_vocab_size"), 128);
  EXPECT_EQ(m8.arg_int("--make-vocab-size-divisible-by"), 16);
  EXPECT_EQ(m8.layout_int("tensor_model_parallel_size"), 8);
  EXPECT_EQ(m8.top_int("iteration"), 3);

  convert::ReshardOptions to1;
  to1.tensor_model_parallel_size = 1;
  const convert::ReshardResult r1 = convert::reshard_checkpoint(dir + "/tp8", dir + "/back", to1);
  EXPECT_EQ(r1.new_padded_vocab_size, 48);
  const auto after = snapshot(dir + "/back");
  ASSERT_EQ(after.size(), before.size());
  for (const auto& [path, bytes] : before) {
    ASSERT_TRUE(after.count(path)) << path;
    if (path.ends_with("metadata.json")) {
      EXPECT_EQ(ckpt::reformat_json(after.at(path), 0), ckpt::reformat_json(bytes, 0)) << path;
    } else {
      EXPECT_TRUE(after.at(path) == bytes) << path << " differs after TP1 -> TP8 -> TP1";
    }
  }
}

TEST(Reshard, Tp1ToTp8AndBackIsBitExactFp32) { expect_round_trip("reshard_fp32", {}); }

TEST(Reshard, Tp1ToTp8AndBackIsBitExactBf16) { expect_round_trip("reshard_bf16", {"--bf16"}); }

TEST(Reshard, RepadRows) {
  const uint8_t src[6] = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(convert::repad_rows(src, 3, 2, 4), (std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 0, 0}));
  EXPECT_EQ(convert::repad_rows(src, 3, 2, 2), (std::vector<uint8_t>{1, 2, 3, 4}));
}

// The trainer refuses a checkpoint whose padded vocabulary is not its own; after convert with
// the run's --make-vocab-size-divisible-by it loads and resumes.
TEST(Reshard, TrainerLoadsTheRepaddedCheckpoint) {
  const std::string dir = test::scratch_dir("reshard_resume");
  test::write_tiny_corpus(dir);
  test::train_tiny(dir, {"--save", dir + "/ck", "--save-interval", "3", "--exit-interval", "3", "--train-iters", "5"});
  const std::vector<std::string> resume = {"--load", dir + "/ck",     "--make-vocab-size-divisible-by",
                                           "32",     "--train-iters", "5"};
  try {
    test::train_tiny(dir, resume);
    ADD_FAILURE() << "a padded vocabulary of 64 must not load a checkpoint padded to 48";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the padded vocabulary is 64 but the checkpoint"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("(re-pad it for this run with megatron convert"), std::string::npos)
        << e.what();
  }
  convert::ReshardOptions o;
  o.make_vocab_size_divisible_by = 32;
  EXPECT_EQ(convert::reshard_checkpoint(dir + "/ck", dir + "/ck64", o).new_padded_vocab_size, 64);
  std::vector<std::string> converted = resume;
  converted[1] = dir + "/ck64";
  const std::string log = test::train_tiny(dir, converted);
  EXPECT_NE(log.find("successfully loaded checkpoint from " + dir + "/ck64 at iteration 3"), std::string::npos) << log;
  EXPECT_NE(log.find(" iteration        5/       5 |"), std::string::npos) << log;
  EXPECT_EQ(log.find("padded_vocab_size:"), std::string::npos) << "no difference left to report:\n" << log;
}

TEST(Reshard, BadTargetsAndOutputsAreOneLineErrors) {
  const std::string dir = test::scratch_dir("reshard_errors");
  test::write_tiny_corpus(dir);
  test::train_tiny(dir, {"--save", dir + "/ck", "--save-interval", "3"});
  const auto before = snapshot(dir + "/ck");
  auto error_of = [&](const convert::ReshardOptions& o, const std::string& save) {
    try {
      convert::reshard_checkpoint(dir + "/ck", save, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  convert::ReshardOptions tp3;
  tp3.tensor_model_parallel_size = 3;
  EXPECT_EQ(error_of(tp3, dir + "/out"),
            "[--target-tensor-parallel-size] 3 does not divide --num-attention-heads 2 "
            "of the checkpoint in " +
                dir + "/ck/iter_0000003");
  convert::ReshardOptions pp3;
  pp3.pipeline_model_parallel_size = 3;
  EXPECT_EQ(error_of(pp3, dir + "/out"),
            "[--target-pipeline-model-parallel-size] 3 does not divide --num-layers 2 "
            "of the checkpoint in " +
                dir + "/ck/iter_0000003");
  convert::ReshardOptions tp0;
  tp0.tensor_model_parallel_size = 0;
  EXPECT_EQ(error_of(tp0, dir + "/out"), "[--target-tensor-parallel-size] must be positive, got 0");
  EXPECT_FALSE(fs::exists(dir + "/out"));
  EXPECT_EQ(error_of({}, dir + "/ck"),
            "[--save] " + dir + "/ck already exists and is not empty (convert writes a new directory)");
  convert::ReshardOptions missing;
  missing.iteration = 7;
  EXPECT_NE(error_of(missing, dir + "/out").find("iteration 7"), std::string::npos) << error_of(missing, dir + "/out");
  EXPECT_EQ(snapshot(dir + "/ck"), before);
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find("convert_tmp"), std::string::npos) << "left behind: " << e.path();
  }

  // PP is validated and recorded only (the files do not depend on it); an empty directory is
  // a valid output.
  fs::create_directories(dir + "/empty");
  convert::ReshardOptions pp2;
  pp2.pipeline_model_parallel_size = 2;
  const convert::ReshardResult r = convert::reshard_checkpoint(dir + "/ck", dir + "/empty", pp2);
  EXPECT_EQ(r.new_pp, 2);
  EXPECT_TRUE(r.repadded.empty());
  const ckpt::LoadedCheckpoint ck = ckpt::load_checkpoint_dir(dir + "/empty");
  EXPECT_EQ(metadata(ck).arg_int("--pipeline-model-parallel-size"), 2);
  EXPECT_EQ(metadata(ck).layout_int("pipeline_model_parallel_size"), 2);
}

}  // namespace
}  // namespace megatron::convert
