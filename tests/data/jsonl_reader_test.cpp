// Tests for data/jsonl_reader.h: compression detected from bytes, Python's universal
// newlines, batching, and errors naming the file. Compressed fixtures are made at test
// time with the gzip / xz / zstd command-line tools.
#include "data/jsonl_reader.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "support/paths.h"

namespace megatron::data {
namespace {

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

using test::read_file;

struct Read {
  std::vector<std::string> lines;
  std::vector<int> terminated;
  std::vector<int64_t> first_lines;
};

Read read_all(const std::string& path, int64_t batch_bytes = 1 << 20) {
  LineReader reader(path, batch_bytes);
  LineBatch batch;
  Read r;
  while (reader.next(&batch)) {
    EXPECT_EQ(batch.first_line, static_cast<int64_t>(r.lines.size()) + 1);
    r.first_lines.push_back(batch.first_line);
    for (int64_t k = 0; k < batch.size(); ++k) {
      r.lines.emplace_back(batch.line(k));
      r.terminated.push_back(batch.terminated[k]);
    }
  }
  EXPECT_FALSE(reader.next(&batch));  // stays at the end
  return r;
}

// Compresses `plain` with a command-line tool ("gzip -c", ...) into `out`.
void compress(const std::string& tool, const std::string& plain, const std::string& out) {
  const auto r = test::run_command(tool + " < '" + plain + "' > '" + out + "'");
  ASSERT_EQ(r.status, 0) << tool;
}

// A corpus with every kind of line ending and line length, ending without a newline.
std::string corpus() {
  std::string s;
  for (int i = 0; i < 3000; ++i) {
    s += "{\"text\": \"line " + std::to_string(i) + std::string(static_cast<size_t>(i % 97), 'x') + "\"}";
    s += i % 5 == 0 ? "\r\n" : (i % 7 == 0 ? "\r" : "\n");
    if (i % 100 == 0) s += "\n";  // a blank line
  }
  s += "{\"text\": \"last, unterminated\"}";
  return s;
}

std::vector<std::string> expected_lines(const std::string& s) {
  // Python: "\r\n", "\r" and "\n" end a line.
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r' || s[i] == '\n') {
      out.push_back(cur);
      cur.clear();
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      cur.push_back(s[i]);
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

TEST(LineReader, UniversalNewlinesAndUnterminatedLastLine) {
  const std::string dir = test::scratch_dir("jsonl_reader_newlines");
  write_file(dir + "/a.jsonl", "one\r\ntwo\rthree\n\nfive\r\r\nseven");
  Read r = read_all(dir + "/a.jsonl");
  EXPECT_EQ(r.lines, (std::vector<std::string>{"one", "two", "three", "", "five", "", "seven"}));
  EXPECT_EQ(r.terminated, (std::vector<int>{1, 1, 1, 1, 1, 1, 0}));
  write_file(dir + "/b.jsonl", "x\r");
  r = read_all(dir + "/b.jsonl");
  EXPECT_EQ(r.lines, (std::vector<std::string>{"x"}));
  EXPECT_EQ(r.terminated, (std::vector<int>{1}));
  write_file(dir + "/empty.jsonl", "");
  EXPECT_TRUE(read_all(dir + "/empty.jsonl").lines.empty());
}

TEST(LineReader, SmallBatchesSplitOnlyBetweenLines) {
  const std::string dir = test::scratch_dir("jsonl_reader_batches");
  const std::string text = corpus();
  write_file(dir + "/c.jsonl", text);
  // 4 KiB batches: many batches, '\r' at batch edges, and "\r\n" split across reads.
  Read small = read_all(dir + "/c.jsonl", 4096);
  EXPECT_GT(small.first_lines.size(), 20u);
  EXPECT_EQ(small.lines, expected_lines(text));
  // One line longer than the batch size still comes out whole.
  const std::string long_line = "{\"text\": \"" + std::string(100000, 'y') + "\"}";
  write_file(dir + "/long.jsonl", "a\n" + long_line + "\r\nb");
  Read r = read_all(dir + "/long.jsonl", 1000);
  EXPECT_EQ(r.lines, (std::vector<std::string>{"a", long_line, "b"}));
}

TEST(LineReader, CompressedInputsGiveTheSameLines) {
  const std::string dir = test::scratch_dir("jsonl_reader_compressed");
  const std::string text = corpus();
  const std::string plain = dir + "/c.jsonl";
  write_file(plain, text);
  const std::vector<std::string> expected = expected_lines(text);
  struct Case {
    std::string tool, name;
    Compression kind;
  };
  // Names deliberately lie about the format: detection goes by the magic bytes.
  const std::vector<Case> cases = {{"gzip -c", "c.gz.jsonl", Compression::kGzip},
                                   {"xz -c", "c.xz.data", Compression::kXz},
                                   {"zstd -q -c", "c.jsonl.gz", Compression::kZstd}};
  for (const Case& c : cases) {
    const std::string path = dir + "/" + c.name;
    compress(c.tool, plain, path);
    LineReader probe(path);
    EXPECT_EQ(probe.compression(), c.kind) << c.tool;
    Read r = read_all(path, 8192);
    EXPECT_EQ(r.lines, expected) << c.tool;
    EXPECT_EQ(r.terminated.back(), 0) << c.tool;
  }
  // Concatenated members / streams / frames read as one stream (`cat a.gz b.gz`).
  for (const Case& c : cases) {
    const std::string one = dir + "/one", two = dir + "/two." + c.name;
    write_file(dir + "/part1", "first\n");
    write_file(dir + "/part2", "second\n");
    compress(c.tool, dir + "/part1", one);
    compress(c.tool, dir + "/part2", dir + "/p2");
    write_file(two, read_file(one) + read_file(dir + "/p2"));
    EXPECT_EQ(read_all(two).lines, (std::vector<std::string>{"first", "second"})) << c.tool;
  }
}

TEST(LineReader, TruncatedOrCorruptCompressedInputNamesTheFile) {
  const std::string dir = test::scratch_dir("jsonl_reader_truncated");
  const std::string plain = dir + "/c.jsonl";
  write_file(plain, corpus());
  for (const std::string tool : {"gzip -c", "xz -c", "zstd -q -c"}) {
    const std::string full = dir + "/full", cut = dir + "/cut.jsonl";
    compress(tool, plain, full);
    const std::string bytes = read_file(full);
    write_file(cut, bytes.substr(0, bytes.size() * 2 / 3));
    try {
      read_all(cut);
      ADD_FAILURE() << tool << ": a truncated file was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(cut + ": corrupt or truncated"), std::string::npos) << e.what();
    }
    std::string corrupt = bytes;
    for (size_t i = corrupt.size() / 3; i < corrupt.size() / 3 + 64; ++i)
      corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5A);
    write_file(cut, corrupt);
    try {
      read_all(cut);
      ADD_FAILURE() << tool << ": a corrupt file was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(cut + ": corrupt or truncated"), std::string::npos) << e.what();
    }
  }
}

// A line longer than the limit is an error naming the file and line, after reading about the
// limit, not the whole input (a file without line ends, /dev/zero, a decompression bomb).
TEST(LineReader, ALineLongerThanTheLimitIsAnError) {
  const std::string dir = test::scratch_dir("jsonl_reader_long_line");
  write_file(dir + "/a.jsonl", "short\n" + std::string(5000, 'x') + "\n" + std::string(20000, 'y'));
  LineReader ok(dir + "/a.jsonl", 1024, 20000);
  LineBatch batch;
  int64_t lines = 0;
  while (ok.next(&batch)) lines += batch.size();
  EXPECT_EQ(lines, 3);
  LineReader reader(dir + "/a.jsonl", 1024, 4096);
  try {
    while (reader.next(&batch)) {
    }
    FAIL() << "a 5000-byte line passed a 4096-byte limit";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), dir + "/a.jsonl:2: line longer than 4096 bytes");
  }
  LineReader zeros("/dev/zero", 1 << 16, 1 << 20);
  try {
    zeros.next(&batch);
    FAIL() << "/dev/zero gave a line";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "/dev/zero:1: line longer than 1048576 bytes");
  }
  EXPECT_LE(zeros.bytes_consumed(), (1 << 20) + (1 << 16));
}

// A FIFO (bash's <(...)) is read like a file, its compression detected from the bytes that
// come through it.
TEST(LineReader, ReadsCompressedInputFromAFifo) {
  const std::string dir = test::scratch_dir("jsonl_reader_fifo");
  write_file(dir + "/c.jsonl", corpus());
  const std::vector<std::string> lines = read_all(dir + "/c.jsonl").lines;
  for (const std::string tool : {"cat", "gzip -c", "xz -c", "zstd -q -c"}) {
    const std::string fifo = dir + "/pipe";
    std::filesystem::remove(fifo);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    std::thread writer([&] { test::run_command(tool + " < '" + dir + "/c.jsonl' > '" + fifo + "'"); });
    Read r;
    try {
      r = read_all(fifo);
    } catch (const Error& e) {
      ADD_FAILURE() << tool << ": " << e.what();  // the reader closed the FIFO: the writer ends too
    }
    writer.join();
    EXPECT_TRUE(r.lines == lines) << tool << ": " << r.lines.size() << " lines";
  }
}

TEST(LineReader, MissingFileNamesIt) {
  try {
    LineReader reader("/nonexistent/dir/x.jsonl");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/x.jsonl: cannot open input"), std::string::npos) << e.what();
  }
}

TEST(LineReader, ReportsSizeAndProgress) {
  const std::string dir = test::scratch_dir("jsonl_reader_progress");
  write_file(dir + "/a.jsonl", "abc\ndef\n");
  LineReader reader(dir + "/a.jsonl");
  EXPECT_EQ(reader.file_size(), 8);
  LineBatch batch;
  ASSERT_TRUE(reader.next(&batch));
  EXPECT_EQ(batch.input_offset, 8);
  EXPECT_EQ(reader.bytes_consumed(), 8);
}

}  // namespace
}  // namespace megatron::data
