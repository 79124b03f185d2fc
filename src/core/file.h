// Files: read-only memory maps and atomic writes.
// Every failure throws megatron::Error naming the path and the OS reason.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace megatron {

// A read-only, private memory map of a whole regular file (or a link to one). Empty files map
// to data() == nullptr. Anything else (a FIFO, a directory, a device) throws at once naming
// the path and what it is: see open_regular_file.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  int64_t size_ = 0;
};

// Writes `path` atomically: bytes go to "<path>.tmp-<pid>" and commit() flushes,
// fsyncs and renames it into place. Destroyed without commit(), the temporary
// file is removed, so a failure never leaves a partial file under `path`.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, int64_t bytes);
  void write(std::string_view s) { write(s.data(), static_cast<int64_t>(s.size())); }
  int64_t bytes_written() const { return bytes_written_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  // Flush + fsync the temporary file without renaming it (for multi-file commits).
  void finish();
  // Rename the (finished) temporary file to `path`.
  void commit();

 private:
  std::string path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
  int64_t bytes_written_ = 0;
  bool finished_ = false;
  bool committed_ = false;
};

// A scratch file, unlinked on destruction: write sequentially, then read it back.
class SpillFile {
 public:
  explicit SpillFile(const std::string& path_hint);
  ~SpillFile();
  SpillFile(const SpillFile&) = delete;
  SpillFile& operator=(const SpillFile&) = delete;

  void write(const void* data, int64_t bytes);
  // Ends writing; read() then returns the bytes in order.
  void rewind();
  // Reads up to `bytes`, returns how many were read (0 at the end).
  int64_t read(void* data, int64_t bytes);
  int64_t size() const { return size_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  int64_t size_ = 0;
};

// Opens `path` read-only (O_CLOEXEC) and returns the descriptor after checking, on the
// descriptor itself (no window for the name to change), that it is a regular file; *size gets
// its size. The open is non-blocking, so a FIFO with no writer is refused instead of waiting
// forever for one. Throws Error "<path>: is a FIFO (named pipe), not a regular file" (or a
// directory, a character device, ...) or "<path>: cannot open: <reason>".
int open_regular_file(const std::string& path, int64_t* size);
// "a FIFO (named pipe)", "a directory", ... for the S_IFMT bits of a stat mode.
std::string file_type_name(unsigned mode);

bool file_exists(const std::string& path);
int64_t file_size(const std::string& path);  // throws if missing
// Creates the directory and its parents (like mkdir -p); throws on failure.
void make_directories(const std::string& path);
std::string parent_directory(const std::string& path);  // "" -> "."
// Renames atomically; throws naming both paths.
void rename_file(const std::string& from, const std::string& to);
// fsync(2) of a directory, so that the entries created or renamed in it are durable; throws
// naming the directory.
void fsync_directory(const std::string& dir);

}  // namespace megatron
