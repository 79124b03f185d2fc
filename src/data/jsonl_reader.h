// A decompressing line reader for JSONL corpora: the input side of `megatron
// preprocess` (Megatron-LM's tools/preprocess_data.py iterates `open(input, 'r',
// encoding='utf-8')`; the decompression is our addition).
//
// Contract:
//  - The format is detected from the first bytes, not the file name: gzip (1f 8b),
//    xz (fd 37 7a 58 5a 00), zstd (28 b5 2f fd), otherwise plain text. Concatenated
//    gzip members / xz streams / zstd frames are read as one stream.
//  - Lines follow Python's universal newlines (text mode, newline=None): "\r\n", "\r"
//    and "\n" all end a line, and the terminator is not part of the line. A last line
//    without a terminator is still a line; an empty file has no lines.
//  - Lines are handed out in batches of whole lines of about `batch_bytes` (a longer
//    line makes a bigger batch), so memory is bounded by the batch size and the
//    longest line, never by the file size. A line longer than `max_line_bytes` is an
//    error naming the file and line (input without line ends, e.g. /dev/zero or a
//    decompression bomb, must not take all memory).
//  - The input is a stream, read once from the start: a FIFO or pipe (bash's
//    <(zcat ...)) works like a file, compressed or not. Opening one waits for its
//    writer, as cat(1) does; only a directory is refused.
//  - A missing file, a read error or a truncated/corrupt compressed stream throws
//    megatron::Error naming the file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace megatron::data {

enum class Compression { kNone, kGzip, kXz, kZstd };
const char* compression_name(Compression c);

// Whole lines of the input, in order.
struct LineBatch {
  std::string data;             // the decompressed bytes the lines point into
  std::vector<int64_t> starts;  // line k = data[starts[k], ends[k])
  std::vector<int64_t> ends;
  std::vector<uint8_t> terminated;  // 1 when line k had a terminator (counts as one character)
  int64_t first_line = 1;           // 1-based number of line 0
  int64_t input_offset = 0;         // bytes of the (compressed) file consumed so far

  int64_t size() const { return static_cast<int64_t>(starts.size()); }
  std::string_view line(int64_t k) const {
    return std::string_view(data.data() + starts[k], static_cast<size_t>(ends[k] - starts[k]));
  }
};

class LineReader {
 public:
  // 1 GiB: far above any real JSONL document, and what a worker can still tokenize.
  static constexpr int64_t kMaxLineBytes = int64_t{1} << 30;

  explicit LineReader(const std::string& path, int64_t batch_bytes = 1 << 20, int64_t max_line_bytes = kMaxLineBytes);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Fills *batch with the next lines (reusing its buffers); returns false at the end.
  bool next(LineBatch* batch);

  const std::string& path() const { return path_; }
  Compression compression() const;
  int64_t file_size() const;       // bytes on disk (compressed size for compressed input)
  int64_t bytes_consumed() const;  // bytes of the file read so far

  struct Source;  // the raw file or a decoder over it (defined in jsonl_reader.cpp)

 private:
  // Throws "<path>:<line>: line longer than <max> bytes" past the limit.
  void check_line_length(int64_t bytes, int64_t index_in_batch) const;

  std::string path_;
  int64_t batch_bytes_;
  int64_t max_line_bytes_;
  std::unique_ptr<Source> source_;
  std::string carry_;  // the unfinished last line of the previous batch
  int64_t next_line_ = 1;
  bool eof_ = false;
};

}  // namespace megatron::data
