#include "core/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <utility>

#include "core/error.h"

namespace megatron {

namespace {

// Opens `path` for writing with open(2) `flags` (O_CREAT | O_TRUNC | ...) and returns it as a
// stdio stream in `mode`. Non-blocking and checked to be a regular file, as open_regular_file:
// a FIFO left under the name fails at once instead of blocking for a reader.
std::FILE* create_regular_file(const std::string& path, int flags, const char* mode, const std::string& owner) {
  const int fd = ::open(path.c_str(), flags | O_NONBLOCK | O_CLOEXEC, 0666);
  if (fd < 0) throw_error(owner, ": cannot create ", path, ": ", errno_string(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw_error(owner, ": cannot stat ", path, ": ", errno_string(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_error(owner, ": cannot create ", path, ": it exists and is ", file_type_name(st.st_mode),
                ", not a regular file");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // no effect on a regular file; tidy
  std::FILE* file = ::fdopen(fd, mode);
  if (file == nullptr) {
    const int err = errno;
    ::close(fd);
    throw_error(owner, ": cannot create ", path, ": ", errno_string(err));
  }
  return file;
}

}  // namespace

std::string file_type_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO (named pipe)";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFSOCK:
      return "a socket";
    case S_IFLNK:
      return "a symbolic link";
  }
  return "of an unknown file type";
}

int open_regular_file(const std::string& path, int64_t* size) {
  // O_NONBLOCK: open(2) of a FIFO would otherwise wait for a writer. It changes nothing for a
  // regular file (reads and mmap of one never block on it).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw_error(path, ": cannot open: ", errno_string(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw_error(path, ": cannot stat: ", errno_string(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_error(path, ": is ", file_type_name(st.st_mode), ", not a regular file");
  }
  *size = static_cast<int64_t>(st.st_size);
  return fd;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = open_regular_file(path, &size_);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw_error(path, ": cannot mmap ", size_, " bytes: ", errno_string(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  temp_path_ = str_cat(path_, ".tmp-", ::getpid());
  file_ = create_regular_file(temp_path_, O_WRONLY | O_CREAT | O_TRUNC, "wb", path_);
  std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
}

AtomicFile::~AtomicFile() {
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

void AtomicFile::write(const void* data, int64_t bytes) {
  MT_CHECK(!finished_) << "write after finish: " << path_;
  if (bytes == 0) return;
  if (std::fwrite(data, 1, static_cast<size_t>(bytes), file_) != static_cast<size_t>(bytes)) {
    throw_error(temp_path_, ": write failed: ", errno_string(errno));
  }
  bytes_written_ += bytes;
}

void AtomicFile::finish() {
  if (finished_) return;
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0) {
    throw_error(temp_path_, ": flush failed: ", errno_string(errno));
  }
  int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) throw_error(temp_path_, ": close failed: ", errno_string(errno));
  finished_ = true;
}

void AtomicFile::commit() {
  finish();
  rename_file(temp_path_, path_);
  committed_ = true;
}

SpillFile::SpillFile(const std::string& path_hint) {
  path_ = str_cat(path_hint, ".spill-", ::getpid());
  file_ = create_regular_file(path_, O_RDWR | O_CREAT | O_TRUNC, "w+b", "spill file");
  ::unlink(path_.c_str());  // the open handle keeps it alive; nothing is left behind on a crash
  std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
}

SpillFile::~SpillFile() {
  if (file_ != nullptr) std::fclose(file_);
}

void SpillFile::write(const void* data, int64_t bytes) {
  if (bytes == 0) return;
  if (std::fwrite(data, 1, static_cast<size_t>(bytes), file_) != static_cast<size_t>(bytes)) {
    throw_error(path_, ": spill write failed: ", errno_string(errno));
  }
  size_ += bytes;
}

void SpillFile::rewind() {
  if (std::fflush(file_) != 0 || std::fseek(file_, 0, SEEK_SET) != 0) {
    throw_error(path_, ": spill rewind failed: ", errno_string(errno));
  }
}

int64_t SpillFile::read(void* data, int64_t bytes) {
  size_t n = std::fread(data, 1, static_cast<size_t>(bytes), file_);
  if (n == 0 && std::ferror(file_)) throw_error(path_, ": spill read failed: ", errno_string(errno));
  return static_cast<int64_t>(n);
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

int64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw_error(path, ": cannot stat: ", errno_string(errno));
  return static_cast<int64_t>(st.st_size);
}

void make_directories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw_error(path, ": cannot create directory: ", ec.message());
}

std::string parent_directory(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

void rename_file(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    throw_error(to, ": cannot rename ", from, " into place: ", errno_string(errno));
  }
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_error(dir, ": cannot open directory to sync: ", errno_string(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw_error(dir, ": cannot sync directory: ", errno_string(err));
}

}  // namespace megatron
