#include "data/dataset_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "support/paths.h"

namespace megatron::data {
namespace {

// Five sequences of 6 tokens each.
std::string write_five_sequences(const std::string& dir) {
  const std::string prefix = dir + "/data/ds";
  std::filesystem::create_directories(dir + "/data");
  IndexedDatasetWriter w(prefix, TokenDType::kUInt16);
  for (int32_t d = 0; d < 5; ++d) {
    const std::vector<int32_t> tokens = {d, d, d, d, d, d};
    const std::vector<int32_t> seq = {6};
    w.add_document(tokens, seq);
  }
  w.finalize();
  return prefix;
}

GPTDataConfig config(const std::string& prefix, const std::string& cache, SplitRule rule) {
  GPTDataConfig c;
  c.data_path = {prefix};
  c.split = "1,1,1";
  c.split_rule = rule;
  c.seq_length = 2;
  c.seed = 1234;
  c.data_cache_path = cache;
  c.targets = {2, 2, 2};
  return c;
}

// "1,1,1" of 5 sequences: Megatron-Core's round(5/3) = 2, round(10/3) = 3 give (0, 2, 3, 5);
// C23's rule gives (0, 1, 3, 5). The test split [3, 5) is the same under both rules and shares
// its cache; train and valid differ and never read the other rule's files.
TEST(BuildGPTDatasets, SplitRuleChoosesTheRangesAndKeepsTheCachesApart) {
  const std::string dir = test::scratch_dir("dataset_config_split_rule");
  const std::string prefix = write_five_sequences(dir);
  const GPTDatasets classic = build_gpt_datasets(config(prefix, dir + "/cache", SplitRule::kClassic));
  ASSERT_EQ(classic.bounds.size(), 1u);
  EXPECT_EQ(classic.bounds[0], (std::array<int64_t, 4>{0, 1, 3, 5}));
  const GPTDatasets mcore = build_gpt_datasets(config(prefix, dir + "/cache", SplitRule::kMegatronCore));
  EXPECT_EQ(mcore.bounds[0], (std::array<int64_t, 4>{0, 2, 3, 5}));
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE(classic.parts[0][s] && mcore.parts[0][s]) << s;
    EXPECT_EQ(mcore.parts[0][s]->cache().loaded, s == 2) << kSplitNames[s];
    EXPECT_EQ(mcore.parts[0][s]->cache().hash == classic.parts[0][s]->cache().hash, s == 2) << kSplitNames[s];
  }
  EXPECT_EQ(mcore.parts[0][0]->description().find("Split rule Megatron-Core\n") != std::string::npos, true);
  EXPECT_EQ(classic.parts[0][0]->description().find("Split rule"), std::string::npos);
  // The default is Megatron-Core's rule.
  GPTDataConfig defaults;
  EXPECT_EQ(defaults.split_rule, SplitRule::kMegatronCore);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A missing dataset names its flag, and the prefix preprocess would have written beside it.
TEST(CheckDatasetPrefix, NamesTheFlagAndSuggestsPreprocessNaming) {
  const std::string dir = test::scratch_dir("check_dataset_prefix");
  std::filesystem::remove_all(dir + "/data");
  const std::string prefix = write_five_sequences(dir);  // <dir>/data/ds
  EXPECT_EQ(error_of([&] { check_dataset_prefix(prefix, "--data-path"); }), "");
  std::filesystem::rename(prefix + ".idx", prefix + "_text_document.idx");
  std::filesystem::rename(prefix + ".bin", prefix + "_text_document.bin");
  EXPECT_EQ(error_of([&] { check_dataset_prefix(prefix, "--valid-data-path"); }),
            "[--valid-data-path] " + prefix + ": no dataset (" + prefix + ".idx and " + prefix +
                ".bin are missing); did you mean --valid-data-path " + prefix + "_text_document?");
  std::filesystem::copy_file(prefix + "_text_document.idx", prefix + ".idx");
  EXPECT_EQ(error_of([&] { check_dataset_prefix(prefix, "--data-path"); }),
            "[--data-path] " + prefix + ": no dataset (" + prefix + ".bin is missing); did you mean --data-path " +
                prefix + "_text_document?");
  EXPECT_EQ(error_of([&] { check_dataset_prefix(dir + "/data/other", "--data-path"); }),
            "[--data-path] " + dir + "/data/other: no dataset (" + dir + "/data/other.idx and " + dir +
                "/data/other.bin are missing)");
  // Through the dataset builder, with the flag of a per-split path.
  GPTDataConfig c = config(dir + "/data/ds", dir + "/cache", SplitRule::kMegatronCore);
  c.data_path.clear();
  c.split_data_path[2] = {dir + "/data/nothing"};
  EXPECT_TRUE(error_of([&] {
                build_gpt_datasets(c);
              }).starts_with("[--test-data-path] " + dir + "/data/nothing: no dataset ("));
}
}  // namespace
}  // namespace megatron::data
