#include "data/blended_dataset.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <limits>

#include "core/error.h"
#include "data/dataset_config.h"
#include "data/indexed_dataset.h"
#include "support/paths.h"

namespace megatron::data {
namespace {

// The worked example of blended_dataset.h.
TEST(BuildBlendingIndices, HandComputedExample) {
  std::vector<uint8_t> index;
  std::vector<int64_t> sample;
  build_blending_indices({0.5, 0.25, 0.25}, 6, &index, &sample);
  EXPECT_EQ(index, (std::vector<uint8_t>{0, 1, 2, 0, 0, 1}));
  EXPECT_EQ(sample, (std::vector<int64_t>{0, 0, 0, 1, 2, 1}));
  // Equal errors go to the first dataset: i=0 (.5, .5) -> 0; i=2 (0, 0) -> 0.
  build_blending_indices({0.5, 0.5}, 4, &index, &sample);
  EXPECT_EQ(index, (std::vector<uint8_t>{0, 1, 0, 1}));
  EXPECT_EQ(sample, (std::vector<int64_t>{0, 0, 1, 1}));
}

TEST(DataPath, ParsesLikeC23) {
  DataBlend one = parse_data_path({"data/a"});
  EXPECT_FALSE(one.blended());
  EXPECT_EQ(one.prefixes, std::vector<std::string>{"data/a"});
  DataBlend two = parse_data_path({"1", " a ", "3", "b"});
  EXPECT_TRUE(two.blended());
  EXPECT_EQ(two.prefixes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(two.weights, (std::vector<double>{0.25, 0.75}));
  EXPECT_TRUE(parse_data_path({"1.0", "a"}).blended());  // a weighted single prefix is a blend
  EXPECT_THROW(parse_data_path({"a", "b", "c"}), Error);
  EXPECT_THROW(parse_data_path({"x", "a", "1", "b"}), Error);
  EXPECT_THROW(parse_data_path({"0", "a", "0", "b"}), Error);
}

TEST(DataPath, TargetSizesAndBlendSurplus) {
  const TargetSamples it = target_sample_counts(std::nullopt, 500, 8, 100, 10);
  EXPECT_EQ(it.train, 4000);
  EXPECT_EQ(it.valid, 480);  // (500 // 100 + 1) * 10 * 8
  EXPECT_EQ(it.test, 80);
  const TargetSamples sm = target_sample_counts(1000, std::nullopt, 8, 100, 10);
  EXPECT_EQ(sm.train, 1000);
  EXPECT_EQ(sm.valid, 160);                       // train_iters = 1000 // 8 = 125
  EXPECT_EQ(blend_member_samples(100, 0.3), 31);  // ceil(30.15)
  EXPECT_EQ(blend_member_samples(100, 0.7), 71);  // ceil(70.35)
  EXPECT_EQ(blend_member_samples(200, 0.5), 101);
  EXPECT_EQ(blend_member_samples(0, 0.5), 0);
}

// Counts past int64 are flag errors, not wrapped-around negative sample counts (which aborted
// in the sample index).
TEST(DataPath, SampleCountsThatOverflowAreErrors) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] { target_sample_counts(std::nullopt, kMax, 2, 1000, 100); }),
            "[--train-iters] 9223372036854775807 x 2 samples do not fit a 64-bit count");
  EXPECT_EQ(message([&] { target_sample_counts(10, std::nullopt, 1, 1, kMax / 2); }),
            "[--eval-iters] 11 x 4611686018427387903 samples do not fit a 64-bit count");
  EXPECT_NE(
      message([&] { blend_member_samples(kMax, 0.999); }).find("[--data-path] 9223372036854775807 samples x weight"),
      std::string::npos);
  EXPECT_EQ(target_sample_counts(std::nullopt, kMax / 8, 8, kMax, 0).train, kMax / 8 * 8);
}

std::shared_ptr<const GPTDataset> make_gpt(const std::string& dir, const std::string& name, int docs, int64_t n) {
  const std::string prefix = dir + "/" + name;
  IndexedDatasetWriter w(prefix, TokenDType::kUInt16);
  for (int d = 0; d < docs; ++d) {
    std::vector<int32_t> tokens(static_cast<size_t>(5 + d % 7), d + (name == "a" ? 0 : 1000));
    std::vector<int32_t> seq = {static_cast<int32_t>(tokens.size())};
    w.add_document(tokens, seq);
  }
  w.finalize();
  GPTDatasetOptions o;
  o.name = "train";
  o.prefix = prefix;
  o.doc_begin = 0;
  o.doc_end = docs;
  o.num_samples = n;
  o.seq_length = 8;
  o.seed = 1234;
  o.split_string = "1";
  o.data_cache_path = dir + "/cache";
  return std::make_shared<const GPTDataset>(std::make_shared<const IndexedDataset>(prefix), o);
}

TEST(BlendedDataset, SamplesComeFromTheChosenMembersAndTheCacheIsReused) {
  const std::string dir = test::scratch_dir("blend");
  auto a = make_gpt(dir, "a", 30, 40);
  auto b = make_gpt(dir, "b", 30, 40);
  BlendedDataset blend({a, b}, {1, 3}, 50, dir + "/cache");
  ASSERT_TRUE(blend.cache().has_value());
  EXPECT_FALSE(blend.cache()->loaded);
  EXPECT_EQ(blend.weights(), (std::vector<double>{0.25, 0.75}));
  std::vector<int64_t> got, want;
  int64_t from_a = 0;
  for (int64_t i = 0; i < blend.size(); ++i) {
    blend.sample(i, &got);
    const auto& member = blend.dataset_index(i) == 0 ? a : b;
    member->sample(blend.dataset_sample_index(i), &want);
    EXPECT_EQ(got, want);
    from_a += blend.dataset_index(i) == 0;
  }
  EXPECT_EQ(from_a, 13);  // within one of 0.25 * 50
  BlendedDataset again({a, b}, {1, 3}, 50, dir + "/cache");
  EXPECT_TRUE(again.cache()->loaded);
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(again.dataset_sample_index(i), blend.dataset_sample_index(i));
  EXPECT_THROW(blend.sample(50, &got), Error);
  // More blended samples than a member holds is an error naming it.
  try {
    BlendedDataset too_big({a, b}, {1, 1}, 2 * b->size() + 10, std::nullopt);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[--data-path]"), std::string::npos) << e.what();
  }
}

// A loaded blend cache whose sample numbers do not exist in their member is refused when
// loaded, naming the file and how to rebuild it, not when training reaches the sample.
TEST(BlendedDataset, ALoadedCacheMustNameExistingSamples) {
  const std::string dir = test::scratch_dir("blend_bad_cache");
  auto a = make_gpt(dir, "a", 30, 40);
  auto b = make_gpt(dir, "b", 30, 40);
  std::string sample_path;
  std::vector<int64_t> good;
  {
    BlendedDataset blend({a, b}, {1, 3}, 50, dir + "/cache");
    sample_path = blend.cache()->path("_sample_index.npy");
    for (int64_t i = 0; i < 50; ++i) good.push_back(blend.dataset_sample_index(i));
  }
  for (const int64_t bad : {int64_t{-1}, int64_t{1} << 40}) {
    std::vector<int64_t> v = good;
    v[7] = bad;
    write_npy(sample_path, NpyDType::kInt64, {50}, v.data());
    try {
      BlendedDataset blend({a, b}, {1, 3}, 50, dir + "/cache");
      FAIL() << "loaded sample number " << bad;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(bad < 0 ? sample_path + ": entry 7 = -1 is negative" : "[--data-path] the blend takes"),
                std::string::npos)
          << msg;
      EXPECT_NE(msg.find("to rebuild it)"), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace megatron::data
