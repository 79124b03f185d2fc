// Decompressing, universal-newline line reader; see jsonl_reader.h for the contract.
#include "data/jsonl_reader.h"

#include <fcntl.h>
#include <lzma.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace megatron::data {

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::kNone:
      return "plain";
    case Compression::kGzip:
      return "gzip";
    case Compression::kXz:
      return "xz";
    case Compression::kZstd:
      return "zstd";
  }
  return "?";
}

// The byte source: the raw file, or one of the decoders on top of it.
struct LineReader::Source {
  std::string path;
  int fd = -1;
  int64_t size = 0;
  int64_t consumed = 0;  // raw file bytes read
  Compression kind = Compression::kNone;
  std::vector<char> in;  // compressed input buffer
  size_t in_pos = 0, in_len = 0;
  bool file_eof = false;
  std::string head;  // the first bytes, read to detect the format; served before the fd's
  size_t head_pos = 0;

  virtual ~Source() {
    if (fd >= 0) ::close(fd);
  }
  // Up to `cap` decompressed bytes into `out`; 0 only at the end of the stream.
  virtual int64_t read(char* out, int64_t cap) { return read_raw(out, cap); }

  int64_t read_raw(char* out, int64_t cap) {
    if (head_pos < head.size()) {
      const size_t n = std::min(head.size() - head_pos, static_cast<size_t>(cap));
      std::memcpy(out, head.data() + head_pos, n);
      head_pos += n;
      return static_cast<int64_t>(n);
    }
    while (true) {
      const ssize_t n = ::read(fd, out, static_cast<size_t>(cap));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw_error(path, ": read failed: ", errno_string(errno));
      consumed += n;
      return n;
    }
  }
  // Refills `in` when it is used up; returns false at the end of the file.
  bool fill() {
    if (in_pos < in_len) return true;
    if (file_eof) return false;
    if (in.empty()) in.resize(1 << 20);
    in_pos = 0;
    in_len = static_cast<size_t>(read_raw(in.data(), static_cast<int64_t>(in.size())));
    if (in_len == 0) file_eof = true;
    return in_len > 0;
  }
  [[noreturn]] void corrupt(const std::string& why) const {
    throw_error(path, ": corrupt or truncated ", compression_name(kind), " input (", why, ") after ", consumed,
                " compressed bytes");
  }
};

namespace {

struct GzipSource : LineReader::Source {
  z_stream zs{};
  bool in_member = false;  // inside a gzip member (between its header and trailer)
  GzipSource() {
    // 15 + 16: a gzip wrapper (not raw deflate, not zlib).
    if (inflateInit2(&zs, 15 + 16) != Z_OK) throw_error("zlib: inflateInit2 failed");
  }
  ~GzipSource() override { inflateEnd(&zs); }
  int64_t read(char* out, int64_t cap) override {
    zs.next_out = reinterpret_cast<Bytef*>(out);
    zs.avail_out = static_cast<uInt>(cap);
    while (zs.avail_out == static_cast<uInt>(cap)) {
      if (!fill()) {
        if (in_member) corrupt("unexpected end of file");
        return 0;
      }
      if (!in_member) {
        // Between members: Python's gzip skips zero padding after a member.
        while (in_pos < in_len && in[in_pos] == 0) ++in_pos;
        if (in_pos == in_len) continue;
        in_member = true;
      }
      zs.next_in = reinterpret_cast<Bytef*>(in.data() + in_pos);
      zs.avail_in = static_cast<uInt>(in_len - in_pos);
      const int rc = inflate(&zs, Z_NO_FLUSH);
      in_pos = in_len - zs.avail_in;
      if (rc == Z_STREAM_END) {
        in_member = false;
        inflateReset(&zs);
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        corrupt(zs.msg != nullptr ? zs.msg : "inflate failed");
      }
    }
    return cap - zs.avail_out;
  }
};

struct XzSource : LineReader::Source {
  lzma_stream ls = LZMA_STREAM_INIT;
  bool done = false;
  XzSource() {
    if (lzma_stream_decoder(&ls, UINT64_MAX, LZMA_CONCATENATED) != LZMA_OK) throw_error("liblzma: decoder init failed");
  }
  ~XzSource() override { lzma_end(&ls); }
  int64_t read(char* out, int64_t cap) override {
    if (done) return 0;
    ls.next_out = reinterpret_cast<uint8_t*>(out);
    ls.avail_out = static_cast<size_t>(cap);
    while (ls.avail_out == static_cast<size_t>(cap)) {
      const bool more = fill();
      ls.next_in = reinterpret_cast<const uint8_t*>(in.data() + in_pos);
      ls.avail_in = in_len - in_pos;
      // LZMA_FINISH at the end of the file makes a truncated stream an error.
      const lzma_ret rc = lzma_code(&ls, more ? LZMA_RUN : LZMA_FINISH);
      in_pos = in_len - ls.avail_in;
      if (rc == LZMA_STREAM_END) {
        done = true;
        break;
      }
      if (rc == LZMA_BUF_ERROR && !more) corrupt("unexpected end of file");
      if (rc != LZMA_OK && rc != LZMA_BUF_ERROR) corrupt(str_cat("liblzma error ", static_cast<int>(rc)));
    }
    return cap - static_cast<int64_t>(ls.avail_out);
  }
};

struct ZstdSource : LineReader::Source {
  ZSTD_DStream* ds = nullptr;
  size_t last = 0;  // 0 = at a frame boundary
  ZstdSource() {
    ds = ZSTD_createDStream();
    if (ds == nullptr) throw_error("libzstd: ZSTD_createDStream failed");
    ZSTD_initDStream(ds);
  }
  ~ZstdSource() override { ZSTD_freeDStream(ds); }
  int64_t read(char* out, int64_t cap) override {
    ZSTD_outBuffer ob{out, static_cast<size_t>(cap), 0};
    while (ob.pos == 0) {
      // At the end of the file the decoder is still called: it may hold output to flush.
      const bool more = fill();
      if (!more && last == 0) return 0;  // at a frame boundary: a clean end
      ZSTD_inBuffer ib{in.data(), in_len, in_pos};
      last = ZSTD_decompressStream(ds, &ob, &ib);
      in_pos = ib.pos;
      if (ZSTD_isError(last)) corrupt(ZSTD_getErrorName(last));
      if (!more && ob.pos == 0) {
        if (last != 0) corrupt("unexpected end of file");
        return 0;
      }
      // Output full but the decoder may still hold data: the next call flushes it.
      if (ob.pos == ob.size) break;
    }
    return static_cast<int64_t>(ob.pos);
  }
};

}  // namespace

LineReader::LineReader(const std::string& path, int64_t batch_bytes, int64_t max_line_bytes)
    : path_(path), batch_bytes_(batch_bytes), max_line_bytes_(max_line_bytes) {
  MT_CHECK(batch_bytes >= 1 && max_line_bytes >= 1);
  // A blocking open: a FIFO is a legitimate input here (see the header) and waits for its writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_error(path, ": cannot open input: ", errno_string(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    throw_error(path, ": cannot read input: ", S_ISDIR(st.st_mode) ? "is a directory" : errno_string(err));
  }
  auto raw = std::make_unique<Source>();  // reads the magic; replaced by a decoder if it names one
  raw->path = path;
  raw->fd = fd;
  raw->size = static_cast<int64_t>(st.st_size);
  // The magic is read, not pread, so that a pipe is detected too; the bytes are served again.
  char magic[6];
  int64_t got = 0;
  for (int64_t n; got < 6 && (n = raw->read_raw(magic + got, 6 - got)) > 0;) got += n;
  const auto* m = reinterpret_cast<const unsigned char*>(magic);
  Compression kind = Compression::kNone;
  if (got >= 2 && m[0] == 0x1f && m[1] == 0x8b) {
    kind = Compression::kGzip;
  } else if (got >= 6 && std::memcmp(magic,
                                     "\xFD"
                                     "7zXZ\0",
                                     6) == 0) {
    kind = Compression::kXz;
  } else if (got >= 4 && std::memcmp(magic, "\x28\xB5\x2F\xFD", 4) == 0) {
    kind = Compression::kZstd;
  }
  switch (kind) {
    case Compression::kGzip:
      source_ = std::make_unique<GzipSource>();
      break;
    case Compression::kXz:
      source_ = std::make_unique<XzSource>();
      break;
    case Compression::kZstd:
      source_ = std::make_unique<ZstdSource>();
      break;
    case Compression::kNone:
      source_ = std::move(raw);
      break;
  }
  if (kind != Compression::kNone) {
    source_->path = path;
    source_->fd = std::exchange(raw->fd, -1);
    source_->size = raw->size;
    source_->consumed = raw->consumed;
  }
  source_->head.assign(magic, static_cast<size_t>(got));
  source_->kind = kind;
}

LineReader::~LineReader() = default;

Compression LineReader::compression() const { return source_->kind; }
int64_t LineReader::file_size() const { return source_->size; }
int64_t LineReader::bytes_consumed() const { return source_->consumed; }

void LineReader::check_line_length(int64_t bytes, int64_t index_in_batch) const {
  if (bytes > max_line_bytes_) {
    throw_error(path_, ":", next_line_ + index_in_batch, ": line longer than ", max_line_bytes_, " bytes");
  }
}

bool LineReader::next(LineBatch* batch) {
  batch->starts.clear();
  batch->ends.clear();
  batch->terminated.clear();
  batch->first_line = next_line_;
  std::string& data = batch->data;
  data.swap(carry_);
  carry_.clear();
  if (eof_ && data.empty()) return false;

  int64_t target = batch_bytes_;
  while (true) {
    // Read until the batch is full or the input ends.
    while (!eof_ && static_cast<int64_t>(data.size()) < target) {
      const int64_t have = static_cast<int64_t>(data.size());
      const int64_t want = std::max<int64_t>(target - have, 4096);
      data.resize(static_cast<size_t>(have + want));
      const int64_t n = source_->read(data.data() + have, want);
      data.resize(static_cast<size_t>(have + n));
      if (n == 0) eof_ = true;
    }
    // Split whole lines; "\r\n", "\r" and "\n" end a line (universal newlines).
    const char* base = data.data();
    const int64_t n = static_cast<int64_t>(data.size());
    int64_t pos = 0;
    while (pos < n) {
      const auto* nl = static_cast<const char*>(std::memchr(base + pos, '\n', static_cast<size_t>(n - pos)));
      const int64_t limit = nl != nullptr ? nl - base : n;
      const auto* cr = static_cast<const char*>(std::memchr(base + pos, '\r', static_cast<size_t>(limit - pos)));
      int64_t end, next;
      if (cr != nullptr) {
        end = cr - base;
        if (end + 1 < n) {
          next = end + (base[end + 1] == '\n' ? 2 : 1);
        } else if (eof_) {
          next = end + 1;
        } else {
          break;  // a '\r' at the buffer's end: a '\n' may follow
        }
      } else if (nl != nullptr) {
        end = limit;
        next = end + 1;
      } else if (eof_) {
        check_line_length(n - pos, batch->size());
        batch->starts.push_back(pos);
        batch->ends.push_back(n);
        batch->terminated.push_back(0);
        pos = n;
        break;
      } else {
        break;  // an unfinished line
      }
      check_line_length(end - pos, batch->size());
      batch->starts.push_back(pos);
      batch->ends.push_back(end);
      batch->terminated.push_back(1);
      pos = next;
    }
    if (batch->starts.empty() && !eof_) {
      // One line longer than a batch: read on, up to the limit (+2 for its "\r\n"). The last byte
      // may be a '\r' that ends the line, hence size - 1.
      check_line_length(static_cast<int64_t>(data.size()) - 1, 0);
      target = std::min(std::max<int64_t>(target, static_cast<int64_t>(data.size())) * 2, max_line_bytes_ + 2);
      continue;
    }
    carry_.assign(data, static_cast<size_t>(pos), std::string::npos);
    data.resize(static_cast<size_t>(pos));
    break;
  }
  next_line_ += batch->size();
  batch->input_offset = source_->consumed;
  return batch->size() > 0;
}

}  // namespace megatron::data
