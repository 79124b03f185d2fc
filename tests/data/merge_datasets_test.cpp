// Tests for data/merge_datasets.h and `megatron merge-datasets` (Megatron-LM's
// tools/merge_datasets.py): order, directory mode, dtype mismatch, atomic output.
#include "data/merge_datasets.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "support/paths.h"

namespace megatron::data {
namespace {

namespace fs = std::filesystem;

using test::read_file;

// Document d of dataset `seed`: (d % 3) sequences of distinct tokens; d % 4 == 3 is empty.
struct Doc {
  std::vector<int32_t> tokens, lengths;
};
Doc make_doc(int seed, int d) {
  Doc doc;
  if (d % 4 == 3) return doc;
  for (int s = 0; s < 1 + d % 3; ++s) {
    const int len = 1 + (seed * 7 + d * 3 + s) % 5;
    for (int t = 0; t < len; ++t) doc.tokens.push_back(seed * 1000 + d * 10 + t);
    doc.lengths.push_back(len);
  }
  return doc;
}

void write_docs(IndexedDatasetWriter* w, int seed, int docs) {
  for (int d = 0; d < docs; ++d) {
    const Doc doc = make_doc(seed, d);
    w->add_document(doc.tokens, doc.lengths);
  }
}

void write_dataset(const std::string& prefix, int seed, int docs, TokenDType dtype = TokenDType::kUInt16) {
  IndexedDatasetWriter w(prefix, dtype);
  write_docs(&w, seed, docs);
  w.finalize();
}

// The bytes a single writer produces for the given datasets in order: what a merge must equal.
void write_concatenation(const std::string& prefix, const std::vector<std::pair<int, int>>& parts) {
  IndexedDatasetWriter w(prefix, TokenDType::kUInt16);
  for (const auto& [seed, docs] : parts) write_docs(&w, seed, docs);
  w.finalize();
}

bool same_dataset_bytes(const std::string& a, const std::string& b) {
  return read_file(a + ".bin") == read_file(b + ".bin") && read_file(a + ".idx") == read_file(b + ".idx");
}

std::string merge_cli(const std::string& inputs, const std::string& output) {
  return str_cat(test::megatron_binary(), " merge-datasets --input ", inputs, " --output-prefix '", output, "'");
}

TEST(MergeDatasets, ConcatenatesInTheGivenOrder) {
  const std::string dir = test::scratch_dir("merge_order");
  write_dataset(dir + "/a", 1, 9);
  write_dataset(dir + "/b", 2, 5);
  write_dataset(dir + "/c", 3, 4);
  write_concatenation(dir + "/expect_cab", {{3, 4}, {1, 9}, {2, 5}});
  const auto r = test::run_command(merge_cli(dir + "/c " + dir + "/a " + dir + "/b", dir + "/cab"), true);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("Merged 3 datasets: 18 documents"), std::string::npos) << r.output;
  EXPECT_TRUE(same_dataset_bytes(dir + "/cab", dir + "/expect_cab"));
  IndexedDataset merged(dir + "/cab");
  EXPECT_EQ(merged.document_count(), 18);
  EXPECT_GT(merged.token_count(), 20);
  // Library entry point, same result.
  merge_datasets({dir + "/c", dir + "/a", dir + "/b"}, dir + "/lib");
  EXPECT_TRUE(same_dataset_bytes(dir + "/lib", dir + "/expect_cab"));
}

TEST(MergeDatasets, DirectoryInputMergesSortedPrefixes) {
  const std::string dir = test::scratch_dir("merge_dir");
  fs::create_directories(dir + "/in");
  write_dataset(dir + "/in/part_b", 2, 6);
  write_dataset(dir + "/in/part_a", 1, 7);
  write_dataset(dir + "/in/Part_c", 3, 2);  // 'P' < 'p': sorts first, like Python's sorted()
  std::ofstream(dir + "/in/README.txt") << "ignored";
  write_concatenation(dir + "/expect", {{3, 2}, {1, 7}, {2, 6}});
  EXPECT_EQ(merge_input_prefixes({dir + "/in"}),
            (std::vector<std::string>{dir + "/in/Part_c", dir + "/in/part_a", dir + "/in/part_b"}));
  const auto r = test::run_command(merge_cli("'" + dir + "/in'", dir + "/merged"), true);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(same_dataset_bytes(dir + "/merged", dir + "/expect"));

  // A lone .bin (or .idx) is an error naming it.
  std::ofstream(dir + "/in/orphan.bin") << "x";
  const auto bad = test::run_command(merge_cli("'" + dir + "/in'", dir + "/bad") + " 2>&1 >/dev/null");
  EXPECT_NE(bad.status, 0);
  EXPECT_EQ(bad.output, "error: " + dir + "/in/orphan.bin: no matching .idx file\n");
  fs::remove(dir + "/in/orphan.bin");
  std::ofstream(dir + "/in/orphan.idx") << "x";
  EXPECT_THROW(merge_input_prefixes({dir + "/in"}), Error);

  fs::create_directories(dir + "/empty");
  EXPECT_THROW(merge_input_prefixes({dir + "/empty"}), Error);
  EXPECT_THROW(merge_input_prefixes({dir + "/in", dir + "/empty"}), Error);  // a directory among prefixes
}

TEST(MergeDatasets, DtypeMismatchIsAnErrorAndLeavesNothing) {
  const std::string dir = test::scratch_dir("merge_dtype");
  write_dataset(dir + "/a", 1, 3);
  write_dataset(dir + "/wide", 2, 3, TokenDType::kInt32);
  std::ofstream(dir + "/out.bin") << "previous";
  const auto r = test::run_command(merge_cli(dir + "/a " + dir + "/wide", dir + "/out") + " 2>&1 >/dev/null");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.output, "error: " + dir + "/wide.idx: token dtype int32 differs from the output's uint16\n") << r.output;
  EXPECT_EQ(read_file(dir + "/out.bin"), "previous");
  EXPECT_FALSE(fs::exists(dir + "/out.idx"));
  // A missing input names it and leaves nothing either.
  const auto missing = test::run_command(merge_cli(dir + "/a " + dir + "/nope", dir + "/out2") + " 2>&1 >/dev/null");
  EXPECT_NE(missing.status, 0);
  EXPECT_NE(missing.output.find(dir + "/nope"), std::string::npos) << missing.output;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a.bin", "a.idx", "out.bin", "wide.bin", "wide.idx"}));
}

TEST(MergeDatasets, SingleInputCopiesIt) {
  const std::string dir = test::scratch_dir("merge_single");
  write_dataset(dir + "/a", 5, 11);
  merge_datasets(merge_input_prefixes({dir + "/a"}), dir + "/copy");
  EXPECT_TRUE(same_dataset_bytes(dir + "/copy", dir + "/a"));
}

}  // namespace
}  // namespace megatron::data
