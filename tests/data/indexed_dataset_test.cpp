#include "data/indexed_dataset.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "support/paths.h"

namespace megatron::data {
namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string hex(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}

std::string error_opening(const std::string& prefix) {
  try {
    IndexedDataset ds(prefix);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// The worked example of megatron-facts.md §1.1: documents of 3 and 2 uint16 tokens.
TEST(IndexedDatasetWriter, MatchesTheMegatronWorkedExampleByteForByte) {
  std::string prefix = test::scratch_dir("idx_example") + "/ex";
  IndexedDatasetWriter w(prefix, TokenDType::kUInt16);
  std::vector<int32_t> a = {1, 2, 3}, b = {4, 5};
  std::vector<int32_t> la = {3}, lb = {2};
  w.add_document(a, la);
  w.add_document(b, lb);
  w.finalize();
  EXPECT_EQ(hex(read_bytes(prefix + ".idx")),
            "4d4d49444944580000" "0100000000000000" "08" "0200000000000000" "0300000000000000"
            "03000000" "02000000" "0000000000000000" "0600000000000000"
            "0000000000000000" "0100000000000000" "0200000000000000");
  EXPECT_EQ(hex(read_bytes(prefix + ".bin")), "01000200030004000500");
}

TEST(IndexedDataset, RoundTripsMultiSequenceAndEmptyDocuments) {
  std::string dir = test::scratch_dir("idx_roundtrip");
  std::mt19937 rng(7);
  std::vector<std::vector<std::vector<int32_t>>> docs;  // doc -> sequences -> tokens
  IndexedDatasetWriter w(dir + "/ds", TokenDType::kUInt16);
  for (int d = 0; d < 200; ++d) {
    std::vector<std::vector<int32_t>> seqs(rng() % 4);  // 0 sequences = empty document
    std::vector<int32_t> flat, lens;
    for (auto& s : seqs) {
      s.resize(1 + rng() % 50);
      for (auto& t : s) t = static_cast<int32_t>(rng() % 50257);
      flat.insert(flat.end(), s.begin(), s.end());
      lens.push_back(static_cast<int32_t>(s.size()));
    }
    w.add_document(flat, lens);
    docs.push_back(seqs);
  }
  w.finalize();
  IndexedDataset ds(dir + "/ds");
  ASSERT_EQ(ds.document_count(), 200);
  int64_t seq = 0;
  for (int d = 0; d < 200; ++d) {
    ASSERT_EQ(ds.document_index(d), seq);
    for (const auto& s : docs[d]) {
      std::vector<int64_t> got;
      ds.get(seq, 0, -1, &got);
      ASSERT_EQ(got, std::vector<int64_t>(s.begin(), s.end()));
      if (s.size() > 2) {
        got.clear();
        ds.get(seq, 1, 2, &got);
        EXPECT_EQ(got, (std::vector<int64_t>{s[1], s[2]}));
      }
      ++seq;
    }
  }
  EXPECT_EQ(ds.sequence_count(), seq);
}

TEST(IndexedDatasetWriter, AbandonedWriterLeavesNoFiles) {
  std::string dir = test::scratch_dir("idx_abandon");
  {
    IndexedDatasetWriter w(dir + "/ds", TokenDType::kUInt16);
    std::vector<int32_t> t = {1, 2}, l = {2};
    w.add_document(t, l);
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 0);
}

TEST(IndexedDatasetWriter, RejectsTokensThatDoNotFitTheDtype) {
  std::string dir = test::scratch_dir("idx_range");
  IndexedDatasetWriter w(dir + "/ds", TokenDType::kUInt16);
  std::vector<int32_t> t = {70000}, l = {1};
  EXPECT_THROW(w.add_document(t, l), Error);
}

TEST(IndexedDatasetWriter, AddDatasetConcatenates) {
  std::string dir = test::scratch_dir("idx_merge");
  for (int k = 0; k < 2; ++k) {
    IndexedDatasetWriter w(dir + "/p" + std::to_string(k), TokenDType::kUInt16);
    std::vector<int32_t> t = {10 * k + 1, 10 * k + 2, 10 * k + 3}, l = {2, 1}, none;
    w.add_document(t, l);
    w.add_document({}, none);
    w.finalize();
  }
  IndexedDatasetWriter m(dir + "/m", TokenDType::kUInt16);
  m.add_dataset(IndexedDataset(dir + "/p0"));
  m.add_dataset(IndexedDataset(dir + "/p1"));
  m.finalize();
  IndexedDataset ds(dir + "/m");
  EXPECT_EQ(ds.document_count(), 4);
  EXPECT_EQ(ds.sequence_count(), 4);
  EXPECT_EQ(ds.document_index(2), 2);
  EXPECT_EQ(ds.document_index(3), 4);
  EXPECT_EQ(ds.document_index(4), 4);
  std::vector<int64_t> got;
  ds.get(3, 0, -1, &got);
  EXPECT_EQ(got, (std::vector<int64_t>{13}));
  IndexedDatasetWriter bad(dir + "/bad", TokenDType::kInt32);
  EXPECT_THROW(bad.add_dataset(IndexedDataset(dir + "/p0")), Error);
}

class CorruptIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix_ = test::scratch_dir("idx_corrupt") + "/ds";
    IndexedDatasetWriter w(prefix_, TokenDType::kUInt16);
    std::vector<int32_t> t = {1, 2, 3, 4, 5}, l = {3, 2};
    w.add_document(t, l);
    w.finalize();
    idx_ = read_bytes(prefix_ + ".idx");
    bin_ = read_bytes(prefix_ + ".bin");
  }
  std::string prefix_, idx_, bin_;
};

TEST_F(CorruptIndex, EachFaultIsNamed) {
  struct Case {
    std::string idx, bin, expected;
  };
  std::string bad_magic = idx_;
  bad_magic[0] = 'X';
  std::string bad_version = idx_;
  bad_version[9] = 2;
  std::string bad_pointer = idx_;
  bad_pointer[34 + 8 + 8] = 4;  // pointer[1] = 4 instead of 6
  std::string bad_docs = idx_;
  bad_docs[34 + 8 + 16 + 8] = 1;  // document end 1 instead of 2
  const Case cases[] = {
      {idx_.substr(0, 20), bin_, "truncated index: 20 bytes"},
      {idx_.substr(0, idx_.size() - 3), bin_, "(truncated?)"},
      {bad_magic, bin_, "not a Megatron MMIDIDX index"},
      {bad_version, bin_, "unsupported MMIDIDX version 2"},
      {bad_pointer, bin_, "sequence 1 points to byte 4, expected 6"},
      {bad_docs, bin_, "last document index is 1, expected the sequence count 2"},
      {idx_, bin_.substr(0, 7), ".bin: data file is 7 bytes but"},
  };
  for (const Case& c : cases) {
    write_file(prefix_ + ".idx", c.idx);
    write_file(prefix_ + ".bin", c.bin);
    std::string err = error_opening(prefix_);
    EXPECT_NE(err.find(c.expected), std::string::npos) << "got: " << err << "\nexpected: " << c.expected;
  }
  std::filesystem::remove(prefix_ + ".bin");
  EXPECT_NE(error_opening(prefix_).find(".bin: cannot open"), std::string::npos);
}

}  // namespace
}  // namespace megatron::data
