#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "core/error.h"
#include "support/error_of.h"
#include "support/paths.h"

namespace megatron::data {
namespace {

using test::error_of;

// Expected bounds from C23 get_train_valid_test_split_ run in Python. "1,1" with S = 5 puts
// 2.5 on each side: round-half-to-even gives 2 and 2, then the shift by idx[3] - S = -1
// gives (0, 3, 5, 5); std::round would give (0, 2, 5, 5).
TEST(TrainValidTestSplit, MatchesC23IncludingHalfwayRounding) {
  struct Case {
    const char* split;
    int64_t size;
    std::array<int64_t, 4> bounds;
  };
  for (const Case& c : {Case{"1,1", 5, {0, 3, 5, 5}}, Case{"1,1", 7, {0, 3, 7, 7}}, Case{"1,1", 9, {0, 5, 9, 9}},
                        Case{"969, 30, 1", 1000, {0, 969, 999, 1000}}, Case{"969, 30, 1", 50, {0, 48, 50, 50}},
                        Case{"1", 10, {0, 10, 10, 10}}, Case{"98/2", 3, {0, 3, 3, 3}}, Case{"1,2,1", 6, {0, 1, 4, 6}},
                        Case{"1,1,2", 10, {0, 3, 5, 10}}, Case{"0.5 , 0.25,0.25", 2, {0, 2, 2, 2}},
                        Case{" 3 ", 4, {0, 4, 4, 4}}, Case{"949,50,1", 12345, {0, 11716, 12333, 12345}},
                        Case{"1,1,1", 1, {0, 1, 1, 1}}, Case{"1,0,0", 3, {0, 3, 3, 3}}}) {
    EXPECT_EQ(train_valid_test_split(c.split, c.size), c.bounds) << c.split << " / " << c.size;
  }
  EXPECT_NE(error_of([] { train_valid_test_split("0,0,0", 10); }).find("sum to 0"), std::string::npos);
}

// Megatron-Core's parse_and_normalize_split: re.findall(r"[.0-9]+") (values from Python).
TEST(ParseAndNormalizeSplit, EveryNumberInTheTextIsAWeight) {
  using W = std::array<double, 3>;
  EXPECT_EQ(parse_and_normalize_split("'99,1,0'"), (W{0.99, 0.01, 0.0}));  // quotes kept by a job script
  EXPECT_EQ(parse_and_normalize_split("\"98,2\""), (W{0.98, 0.02, 0.0}));
  EXPECT_EQ(parse_and_normalize_split("969, 30, 1"), (W{0.969, 0.03, 0.001}));
  EXPECT_EQ(parse_and_normalize_split("98/2/0"), (W{0.98, 0.02, 0.0}));
  EXPECT_EQ(parse_and_normalize_split("1,,1"), (W{0.5, 0.5, 0.0}));
  EXPECT_EQ(parse_and_normalize_split("1,-1,1"), (W{1.0 / 3, 1.0 / 3, 1.0 / 3}));  // '-' is not part of a match
  EXPECT_EQ(parse_and_normalize_split("train=.5 valid=0.25 test=1."), (W{0.5 / 1.75, 0.25 / 1.75, 1.0 / 1.75}));
  EXPECT_EQ(parse_and_normalize_split(" 3 "), (W{1.0, 0.0, 0.0}));
  const std::string dots = error_of([] { parse_and_normalize_split("1.2.3,1"); });
  EXPECT_NE(dots.find("[--split]"), std::string::npos) << dots;
  EXPECT_NE(dots.find("'1.2.3' is not a number"), std::string::npos) << dots;
  EXPECT_NE(error_of([] { parse_and_normalize_split("1, . ,1"); }).find("'.' is not a number"), std::string::npos);
  EXPECT_NE(error_of([] { parse_and_normalize_split("1,1,1,1"); }).find("at most 3 weights"), std::string::npos);
  EXPECT_NE(error_of([] { parse_and_normalize_split("a,b"); }).find("sum to 0"), std::string::npos);
  EXPECT_NE(error_of([] { parse_and_normalize_split("", "--x"); }).find("[--x]"), std::string::npos);
}

// Megatron-Core's rule, expected values from blended_megatron_dataset_builder.py's
// int(round(bookend * float(n))) run in Python; "c23" is get_train_valid_test_split_ on the
// same weights. "1,1" of 5: round(2.5) is 2 (half to even; std::round gives 3).
TEST(SplitBounds, MegatronCoreRoundsTheCumulatedBookends) {
  using B = std::array<int64_t, 4>;
  struct Case {
    const char* split;
    int64_t size;
    B mcore;
    B c23;
  };
  for (const Case& c : {Case{"1,1,1", 5, {0, 2, 3, 5}, {0, 1, 3, 5}}, Case{"1,1", 5, {0, 2, 5, 5}, {0, 3, 5, 5}},
                        Case{"1,1", 7, {0, 4, 7, 7}, {0, 3, 7, 7}},
                        Case{"949,50,1", 12345, {0, 11715, 12333, 12345}, {0, 11716, 12333, 12345}},
                        Case{"1,2,1", 6, {0, 2, 4, 6}, {0, 1, 4, 6}}, Case{"1,1,2", 10, {0, 2, 5, 10}, {0, 3, 5, 10}},
                        Case{"1,1,1", 1, {0, 0, 1, 1}, {0, 1, 1, 1}}, Case{"1,1,1", 2, {0, 1, 1, 2}, {0, 0, 1, 2}},
                        Case{"969, 30, 1", 1000, {0, 969, 999, 1000}, {0, 969, 999, 1000}},
                        Case{"'99,1,0'", 1000, {0, 990, 1000, 1000}, {0, 990, 1000, 1000}}}) {
    EXPECT_EQ(split_bounds(SplitRule::kMegatronCore, c.split, c.size), c.mcore) << c.split << " / " << c.size;
    EXPECT_EQ(split_bounds(SplitRule::kClassic, c.split, c.size), c.c23) << c.split << " / " << c.size;
  }
}

// T = 100 tokens, s = 10: 9 samples per epoch; E = 2 once N >= 10, with (2*100-1)//10 = 19
// samples. The last epoch holds N - 9 samples and is separate iff that is < int(0.8*9) = 7.
TEST(EpochPlan, EpochsAndTheEightyPercentRule) {
  EXPECT_EQ(gpt_num_epochs(100, 10, 0), 1);
  EXPECT_EQ(gpt_num_epochs(100, 10, 9), 1);
  EXPECT_EQ(gpt_num_epochs(100, 10, 10), 2);
  EXPECT_EQ(gpt_num_epochs(100, 10, 19), 2);
  EXPECT_EQ(gpt_num_epochs(100, 10, 20), 3);
  EXPECT_EQ(gpt_num_epochs(1, 1, 5), 6);  // (E*1 - 1)//1 >= 5
  EXPECT_THROW(gpt_num_epochs(0, 10, 1), Error);

  EpochPlan one = plan_epochs(100, 10, 9);
  EXPECT_EQ(one.num_epochs, 1);
  EXPECT_FALSE(one.separate_last_epoch);
  EXPECT_EQ(one.total_samples, 9);
  EXPECT_EQ(one.shuffle_first, 9);
  EpochPlan sep = plan_epochs(100, 10, 15);  // last = 6 < 7
  EXPECT_EQ(sep.num_epochs, 2);
  EXPECT_TRUE(sep.separate_last_epoch);
  EXPECT_EQ(sep.samples_sans_last, 9);
  EXPECT_EQ(sep.last_epoch_samples, 6);
  EXPECT_EQ(sep.total_samples, 19);
  EXPECT_EQ(sep.shuffle_first, 9);
  EpochPlan joined = plan_epochs(100, 10, 16);  // last = 7, not < 7
  EXPECT_FALSE(joined.separate_last_epoch);
  EXPECT_EQ(joined.shuffle_first, 19);
  // int(0.80 * 10) = 8: with T = 111, s = 11 per epoch = 10; N = 17 -> last 7 (separate), 18 -> 8.
  EXPECT_TRUE(plan_epochs(111, 11, 17).separate_last_epoch);
  EXPECT_FALSE(plan_epochs(111, 11, 18).separate_last_epoch);
}

// numpy: docs [5, 6, 7], RandomState(1234); separate: concat(shuffle(2 copies), shuffle(1 copy)).
TEST(BuildDocIdx, MatchesNumpy) {
  const std::vector<int32_t> docs = {5, 6, 7};
  NumpyRandomState a(1234);
  EXPECT_EQ(build_doc_idx(docs, 3, true, &a), (std::vector<int32_t>{7, 6, 7, 5, 6, 5, 5, 7, 6}));
  NumpyRandomState b(1234);
  EXPECT_EQ(build_doc_idx(docs, 3, false, &b), (std::vector<int32_t>{7, 7, 6, 5, 6, 6, 7, 5, 5}));
}

// The worked example of gpt_dataset.h: sizes (3, 0, 4), s = 2.
TEST(BuildSampleIdx, WorkedExampleWithAnEmptyDocument) {
  const std::vector<int32_t> sizes = {3, 0, 4}, doc_idx = {0, 1, 2};
  EXPECT_EQ(build_sample_idx(sizes, doc_idx, 2, 1, 7), (std::vector<int32_t>{0, 0, 0, 2, 2, 1, 2, 3}));
  // A sample ending on a document's last token: the next starts there (offset size-1).
  const std::vector<int32_t> sizes2 = {3, 3}, doc_idx2 = {0, 1};
  EXPECT_EQ(build_sample_idx(sizes2, doc_idx2, 2, 1, 6), (std::vector<int32_t>{0, 0, 0, 2, 1, 1}));
}

TEST(BuildShuffleIdx, TwoPartsAndDtype) {
  NumpyRandomState rng(1234);
  const auto idx = build_shuffle_idx(10, 15, &rng);
  // numpy: the first part is RandomState(1234).shuffle(arange(10)).
  EXPECT_EQ(std::vector<int64_t>(idx.begin(), idx.begin() + 10), (std::vector<int64_t>{7, 2, 9, 1, 0, 8, 4, 5, 6, 3}));
  std::vector<int64_t> tail(idx.begin() + 10, idx.end());
  std::sort(tail.begin(), tail.end());
  EXPECT_EQ(tail, (std::vector<int64_t>{10, 11, 12, 13, 14}));
  EXPECT_EQ(shuffle_idx_dtype(4294967293), NpyDType::kUInt32);
  EXPECT_EQ(shuffle_idx_dtype(4294967294), NpyDType::kInt64);
}

TEST(DefaultIndexCacheDir, FollowsOsPathDirname) {
  EXPECT_EQ(default_index_cache_dir("corpus"), "index-cache");
  EXPECT_EQ(default_index_cache_dir("data/corpus"), "data/index-cache");
  EXPECT_EQ(default_index_cache_dir("/data/corpus"), "/data/index-cache");
  EXPECT_EQ(default_index_cache_dir("/corpus"), "/index-cache");
  EXPECT_EQ(default_index_cache_dir("data//corpus"), "data/index-cache");
}

// A dataset of `lengths` uint16 sequences (one per document); token t of the whole corpus is
// (t * 7 + 1) % 60000 so that every sample's content is predictable.
std::shared_ptr<const IndexedDataset> make_dataset(const std::string& prefix, const std::vector<int32_t>& lengths) {
  std::filesystem::create_directories(std::filesystem::path(prefix).parent_path());
  IndexedDatasetWriter w(prefix, TokenDType::kUInt16);
  int32_t next = 0;
  for (int32_t len : lengths) {
    std::vector<int32_t> tokens(static_cast<size_t>(len));
    for (auto& t : tokens) t = (next++ * 7 + 1) % 60000;
    std::vector<int32_t> seq = {len};
    w.add_document(tokens, seq);
  }
  w.finalize();
  return std::make_shared<const IndexedDataset>(prefix);
}

std::vector<int32_t> random_lengths(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> lengths(static_cast<size_t>(n));
  for (auto& l : lengths) l = rng() % 4 == 0 ? 0 : static_cast<int32_t>(rng() % 30);
  return lengths;
}

GPTDatasetOptions options(const std::string& prefix, int64_t begin, int64_t end, int64_t n, int64_t s,
                          const std::string& cache) {
  GPTDatasetOptions o;
  o.name = "train";
  o.prefix = prefix;
  o.doc_begin = begin;
  o.doc_end = end;
  o.num_samples = n;
  o.seq_length = s;
  o.seed = 99;
  o.split_string = "969, 30, 1";
  o.data_cache_path = cache;
  return o;
}

// Sample r (before shuffling) is tokens [r*s, r*s + s] of the doc_idx-ordered token stream;
// this checks the assembly across document boundaries and empty documents without the
// sample_idx arithmetic.
TEST(GPTDataset, SamplesAreWindowsOfTheShuffledDocumentStream) {
  const std::string dir = test::scratch_dir("gpt_windows");
  const auto lengths = random_lengths(60, 3);
  auto ds = make_dataset(dir + "/data/ds", lengths);
  for (int64_t s : {1, 5, 16, 100}) {
    for (int64_t n : {int64_t{3}, int64_t{400}}) {  // one epoch, several epochs
      GPTDataset g(ds, options(dir + "/data/ds", 4, 57, n, s, dir + "/cache"));
      std::vector<int64_t> stream, tmp;
      for (int64_t k = 0; k < g.doc_idx().element_count(); ++k) {
        tmp.clear();
        ds->get(g.doc_idx().at(k), 0, -1, &tmp);
        stream.insert(stream.end(), tmp.begin(), tmp.end());
      }
      ASSERT_GE(g.size(), n);
      std::vector<bool> seen(static_cast<size_t>(g.size()), false);
      std::vector<int64_t> tokens;
      for (int64_t i = 0; i < g.size(); ++i) {
        const int64_t r = g.shuffle_idx().at(i);
        ASSERT_FALSE(seen[static_cast<size_t>(r)]);
        seen[static_cast<size_t>(r)] = true;
        g.sample(i, &tokens);
        ASSERT_EQ(tokens, std::vector<int64_t>(stream.begin() + r * s, stream.begin() + r * s + s + 1))
            << "s=" << s << " n=" << n << " i=" << i;
      }
      EXPECT_THROW(g.sample(g.size(), &tokens), Error);
    }
  }
}

TEST(GPTDataset, CacheIsReusedAndValidated) {
  const std::string dir = test::scratch_dir("gpt_cache");
  auto ds = make_dataset(dir + "/data/ds", random_lengths(40, 5));
  const auto o = options(dir + "/data/ds", 0, 38, 100, 8, dir + "/cache");
  std::vector<int64_t> first, second;
  {
    GPTDataset g(ds, o);
    EXPECT_FALSE(g.cache().loaded);
    EXPECT_EQ(g.cache().directory, dir + "/cache");  // the last location looked in
    g.sample(7, &first);
  }
  GPTDataset again(ds, o);
  EXPECT_TRUE(again.cache().loaded);
  again.sample(7, &second);
  EXPECT_EQ(first, second);
  const std::string hash = again.cache().hash;
  EXPECT_EQ(hash.size(), 32u);

  // A cache in dirname(prefix)/index-cache wins over --data-cache-path.
  std::filesystem::create_directories(dir + "/data/index-cache");
  for (const char* suffix : {".dsc", "_doc_idx.npy", "_sample_idx.npy", "_shuffle_idx.npy"}) {
    std::filesystem::copy_file(dir + "/cache/" + hash + suffix, dir + "/data/index-cache/" + hash + suffix);
  }
  EXPECT_EQ(GPTDataset(ds, o).cache().directory, dir + "/data/index-cache");
  std::filesystem::remove_all(dir + "/data/index-cache");

  // A truncated file is an error naming it and how to rebuild.
  const std::string shuffle = dir + "/cache/" + hash + "_shuffle_idx.npy";
  std::filesystem::resize_file(shuffle, std::filesystem::file_size(shuffle) - 4);
  std::string e = error_of([&] { GPTDataset(ds, o); });
  EXPECT_NE(e.find(shuffle), std::string::npos) << e;
  EXPECT_NE(e.find("to rebuild"), std::string::npos) << e;
  // A well-formed file of the wrong shape is caught too (in a set rebuilt after the truncation).
  for (const char* suffix : {".dsc", "_doc_idx.npy", "_sample_idx.npy", "_shuffle_idx.npy"}) {
    std::filesystem::remove(dir + "/cache/" + hash + suffix);
  }
  EXPECT_FALSE(GPTDataset(ds, o).cache().loaded);
  std::vector<int32_t> wrong(5, 0);
  write_npy(dir + "/cache/" + hash + "_doc_idx.npy", NpyDType::kInt32, {5}, wrong.data());
  e = error_of([&] { GPTDataset(ds, o); });
  EXPECT_NE(e.find("_doc_idx.npy: expected int32"), std::string::npos) << e;
  // Deleting the files rebuilds.
  for (const char* suffix : {".dsc", "_doc_idx.npy", "_sample_idx.npy", "_shuffle_idx.npy"}) {
    std::filesystem::remove(dir + "/cache/" + hash + suffix);
  }
  GPTDataset rebuilt(ds, o);
  EXPECT_FALSE(rebuilt.cache().loaded);
  rebuilt.sample(7, &second);
  EXPECT_EQ(first, second);
}

// A cached sample_idx that is well formed (dtype, shape, rows non-decreasing, offsets inside
// their documents) but whose rows are not seq_length tokens apart is refused when loaded,
// naming the file and the rows; sample() would read a window of the wrong length.
TEST(GPTDataset, SampleIdxRowsMustBeSeqLengthApart) {
  const std::string dir = test::scratch_dir("gpt_sample_idx_rows");
  auto ds = make_dataset(dir + "/data/ds", {9, 0, 4, 12, 7, 30, 2});
  const auto o = options(dir + "/data/ds", 0, 7, 6, 5, dir + "/cache");
  const std::string path = GPTDataset(ds, o).cache().path("_sample_idx.npy");
  std::vector<int32_t> good;
  {
    const NpyFile f(path);
    for (int64_t k = 0; k < f.element_count(); ++k) good.push_back(static_cast<int32_t>(f.at(k)));
  }
  const int64_t rows = static_cast<int64_t>(good.size()) / 2;
  ASSERT_GE(rows, 5);
  auto refused_with = [&](const std::vector<int32_t>& rows_data, const std::string& what) {
    write_npy(path, NpyDType::kInt32, {rows, 2}, rows_data.data());
    const std::string e = error_of([&] { GPTDataset(ds, o); });
    EXPECT_NE(e.find(path + ": rows "), std::string::npos) << e;
    EXPECT_NE(e.find(what), std::string::npos) << e;
    EXPECT_NE(e.find("to rebuild it)"), std::string::npos) << e;
  };
  // Every row (0, 0): each sample would be one token.
  refused_with(std::vector<int32_t>(good.size(), 0), "rows 0 = (0, 0) and 1 = (0, 0) are 0 tokens apart");
  // The offsets of two consecutive rows inside one document (the 30-token one holds several)
  // swapped: the stream jumps ahead, then goes backwards, each row still inside its document.
  int64_t r = 1;
  while (r + 1 < rows && good[2 * r] != good[2 * r + 2]) ++r;
  ASSERT_LT(r + 1, rows);
  std::vector<int32_t> swapped = good;
  std::swap(swapped[2 * r + 1], swapped[2 * r + 3]);
  refused_with(swapped, str_cat("and ", r, " = (", good[2 * r], ", ", good[2 * r + 3], ") are 10 tokens apart"));
  // The later row's offset moved back by one token.
  std::vector<int32_t> shifted = good;
  shifted[2 * r + 3] -= 1;
  refused_with(shifted, str_cat("and ", r + 1, " = (", good[2 * r], ", ", good[2 * r + 3] - 1, ") are 4 tokens apart"));
  // The right rows load again.
  write_npy(path, NpyDType::kInt32, {rows, 2}, good.data());
  GPTDataset g(ds, o);
  EXPECT_TRUE(g.cache().loaded);
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < g.size(); ++i) g.sample(i, &tokens);
}

// A sample count whose epochs overflow int64 (or any count past int32 doc_idx entries) is an
// error, not a wrapped-around epoch plan that aborted.
TEST(GPTDataset, HugeSampleCountsAreErrors) {
  const std::string dir = test::scratch_dir("gpt_huge_count");
  auto ds = make_dataset(dir + "/ds", {5, 3, 8});
  for (const int64_t n :
       {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max() / 2, int64_t{1} << 40}) {
    const std::string e = error_of([&] { GPTDataset(ds, options(dir + "/ds", 0, 3, n, 4, dir + "/c")); });
    EXPECT_NE(e.find(str_cat(" samples, more doc_idx entries than Megatron's int32 sample_idx can address")),
              std::string::npos)
        << n << ": " << e;
  }
}

TEST(GPTDataset, WithoutCachePathBuildsNextToTheData) {
  const std::string dir = test::scratch_dir("gpt_default_cache");
  auto ds = make_dataset(dir + "/ds", random_lengths(10, 9));
  auto o = options(dir + "/ds", 0, 10, 4, 4, "");
  o.data_cache_path.reset();
  GPTDataset g(ds, o);
  EXPECT_EQ(g.cache().directory, dir + "/index-cache");
  EXPECT_TRUE(std::filesystem::exists(g.cache().desc_path()));
  std::ifstream f(g.cache().desc_path());
  std::string text((std::istreambuf_iterator<char>(f)), {});
  EXPECT_EQ(text, "GPT Dataset\n\nData prefix " + dir +
                      "/ds\nDataset name train\nNumber of samples 4\n"
                      "Sequence length 4\nRandom seed 99\nSplit 969, 30, 1\n");
}

TEST(GPTDataset, ASplitRuleAddsADescriptionLineAndChangesTheHash) {
  const std::string dir = test::scratch_dir("gpt_split_rule");
  auto ds = make_dataset(dir + "/ds", random_lengths(10, 9));
  auto o = options(dir + "/ds", 0, 10, 4, 4, dir + "/c");
  GPTDataset c23(ds, o);
  o.split_rule = "Megatron-Core";
  GPTDataset mcore(ds, o);
  EXPECT_FALSE(mcore.cache().loaded);  // not the cache the other rule built
  EXPECT_NE(mcore.cache().hash, c23.cache().hash);
  EXPECT_EQ(GPTDataset::describe(o),
            GPTDataset::describe(options(dir + "/ds", 0, 10, 4, 4, dir + "/c")) + "Split rule Megatron-Core\n");
}

TEST(GPTDataset, ZeroTokensIsAnErrorNotAnEndlessLoop) {
  const std::string dir = test::scratch_dir("gpt_zero");
  auto ds = make_dataset(dir + "/ds", {5, 0, 0, 3});
  const std::string e = error_of([&] { GPTDataset(ds, options(dir + "/ds", 1, 3, 2, 4, dir + "/c")); });
  EXPECT_NE(e.find("holds 0 tokens"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { GPTDataset(ds, options(dir + "/ds", 0, 4, 2, 0, dir + "/c")); }).find("[--seq-length]"),
            std::string::npos);
}

}  // namespace
}  // namespace megatron::data
