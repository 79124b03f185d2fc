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

// Unlinks first: truncating a just-written file makes ext4 flush it (auto_da_alloc),
// which made the many rewrites below take seconds.
void write_file(const std::string& path, const std::string& bytes) {
  std::filesystem::remove(path);
  std::ofstream(path, std::ios::binary) << bytes;
}

// The worked example of docs/megatron-formats.md, ".idx layout": documents of 3 and 2 uint16
// tokens.
TEST(IndexedDatasetWriter, MatchesTheMegatronWorkedExampleByteForByte) {
  std::string prefix = test::scratch_dir("idx_example") + "/ex";
  IndexedDatasetWriter w(prefix, TokenDType::kUInt16);
  std::vector<int32_t> a = {1, 2, 3}, b = {4, 5};
  std::vector<int32_t> la = {3}, lb = {2};
  w.add_document(a, la);
  w.add_document(b, lb);
  w.finalize();
  EXPECT_EQ(hex(read_bytes(prefix + ".idx")),
            "4d4d49444944580000"
            "0100000000000000"
            "08"
            "0200000000000000"
            "0300000000000000"
            "03000000"
            "02000000"
            "0000000000000000"
            "0600000000000000"
            "0000000000000000"
            "0100000000000000"
            "0200000000000000");
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

// Every truncation of the .idx and the .bin, and every .idx byte flipped three ways:
// opening either throws Error naming the file, or (a flip that happens to leave a
// consistent index, e.g. one document boundary moved) yields a dataset whose every
// sequence lies inside the .bin, checked here independently of the reader's own checks.
TEST(IndexedDataset, EveryCutAndByteFlipIsAClearErrorOrAConsistentDataset) {
  const std::string dir = test::scratch_dir("idx_fuzz");
  for (TokenDType dtype : {TokenDType::kUInt16, TokenDType::kInt32}) {
    const std::string prefix = dir + "/ds" + std::to_string(static_cast<int>(dtype));
    {
      IndexedDatasetWriter w(prefix, dtype);
      std::vector<int32_t> none;
      std::vector<int32_t> a = {1, 2, 3, 4, 5, 6}, la = {2, 4};
      std::vector<int32_t> b = {7}, lb = {1};
      std::vector<int32_t> c = {8, 9, 10, 11, 12}, lc = {3, 0, 2};
      w.add_document(a, la);
      w.add_document({}, none);
      w.add_document(b, lb);
      w.add_document(c, lc);
      w.finalize();
    }
    const std::string idx = read_bytes(prefix + ".idx"), bin = read_bytes(prefix + ".bin");
    ASSERT_EQ(idx.size(), 34u + 12 * 6 + 8 * 5);
    const int64_t itemsize = token_dtype_size(dtype);
    ASSERT_EQ(static_cast<int64_t>(bin.size()), 12 * itemsize);
    int opened = 0, rejected = 0;
    std::string on_disk_idx = idx, on_disk_bin = bin;
    auto try_open = [&](const std::string& what, const std::string& idx_bytes, const std::string& bin_bytes,
                        bool must_fail) {
      if (idx_bytes != on_disk_idx) write_file(prefix + ".idx", on_disk_idx = idx_bytes);
      if (bin_bytes != on_disk_bin) write_file(prefix + ".bin", on_disk_bin = bin_bytes);
      try {
        IndexedDataset ds(prefix);
        ASSERT_FALSE(must_fail) << what << ": opened a damaged dataset";
        // Independent consistency check of what the reader accepted.
        ASSERT_GE(ds.sequence_count(), 0) << what;
        ASSERT_EQ(ds.document_index(0), 0) << what;
        ASSERT_EQ(ds.document_index(ds.document_count()), ds.sequence_count()) << what;
        for (int64_t k = 0; k < ds.document_count(); ++k) {
          ASSERT_LE(ds.document_index(k), ds.document_index(k + 1)) << what << ": document " << k;
        }
        int64_t end = 0;
        for (int64_t i = 0; i < ds.sequence_count(); ++i) {
          ASSERT_GE(ds.sequence_length(i), 0) << what;
          ASSERT_EQ(ds.sequence_pointer(i), end) << what;
          end += ds.sequence_length(i) * token_dtype_size(ds.dtype());
        }
        ASSERT_EQ(end, ds.data_file().size()) << what;
        std::vector<int64_t> all;
        for (int64_t i = 0; i < ds.sequence_count(); ++i) ds.get(i, 0, -1, &all);
        ASSERT_EQ(static_cast<int64_t>(all.size()), ds.token_count()) << what;
        ++opened;
      } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_TRUE(msg.find(prefix + ".idx") != std::string::npos || msg.find(prefix + ".bin") != std::string::npos)
            << what << ": the error does not name the file: " << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << what << ": " << msg;
        ++rejected;
      }
    };
    for (size_t cut = 0; cut < idx.size(); ++cut) try_open(str_cat("idx cut at ", cut), idx.substr(0, cut), bin, true);
    try_open("idx with a trailing byte", idx + "x", bin, true);
    for (size_t cut = 0; cut < bin.size(); ++cut) try_open(str_cat("bin cut at ", cut), idx, bin.substr(0, cut), true);
    try_open("bin with a trailing byte", idx, bin + "x", true);
    for (size_t pos = 0; pos < idx.size(); ++pos) {
      for (int mask : {0x01, 0x80, 0xFF}) {
        std::string flipped = idx;
        flipped[pos] = static_cast<char>(flipped[pos] ^ mask);
        // Header, lengths and pointers are fully determined; only a document boundary may move.
        const bool must_fail = pos < 34 + 12 * 6;
        try_open(str_cat("idx byte ", pos, " ^ ", mask), flipped, bin, must_fail);
      }
    }
    EXPECT_GT(rejected, static_cast<int>(idx.size() + bin.size()));
    EXPECT_GT(opened, 0);  // some boundary moves stay consistent: the check above ran
    write_file(prefix + ".idx", idx);
    write_file(prefix + ".bin", bin);
    EXPECT_EQ(IndexedDataset(prefix).token_count(), 12);
  }
}

// A dataset with no documents and one with only empty documents (0-byte .bin) open.
TEST(IndexedDataset, EmptyDatasetsOpen) {
  const std::string dir = test::scratch_dir("idx_empty");
  {
    IndexedDatasetWriter w(dir + "/none", TokenDType::kUInt16);
    w.finalize();
    IndexedDatasetWriter e(dir + "/empties", TokenDType::kUInt16);
    std::vector<int32_t> no_lengths;
    e.add_document({}, no_lengths);
    e.add_document({}, no_lengths);
    e.finalize();
  }
  IndexedDataset none(dir + "/none");
  EXPECT_EQ(none.document_count(), 0);
  EXPECT_EQ(none.sequence_count(), 0);
  EXPECT_EQ(hex(read_bytes(dir + "/none.idx")),
            "4d4d49444944580000"
            "0100000000000000"
            "08"
            "0000000000000000"
            "0100000000000000"
            "0000000000000000");
  IndexedDataset empties(dir + "/empties");
  EXPECT_EQ(empties.document_count(), 2);
  EXPECT_EQ(empties.sequence_count(), 0);
  EXPECT_EQ(empties.token_count(), 0);
  EXPECT_EQ(read_bytes(dir + "/empties.bin"), "");
}

}  // namespace
}  // namespace megatron::data
