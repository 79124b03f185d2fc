#include "obs/tensorboard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/host_name.h"

namespace megatron::obs {
namespace tensorboard {
namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;

// Field numbers (see the header for where they were confirmed).
constexpr uint32_t kEventWallTime = 1;
constexpr uint32_t kEventStep = 2;
constexpr uint32_t kEventFileVersion = 3;
constexpr uint32_t kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1;
constexpr uint32_t kValueSimpleValue = 2;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) { put_varint(out, (field << 3) | wire_type); }

void put_fixed32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_fixed64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_bytes_field(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

void put_double_field(std::string& out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  put_key(out, field, kFixed64);
  put_fixed64(out, bits);
}

// Event fields 1 and 2. proto3 leaves out scalars equal to their default (0), as does
// python-protobuf, so a file from us and one from SummaryWriter are byte-identical.
void put_event_header(std::string& out, double wall_time, int64_t step) {
  if (wall_time != 0.0) put_double_field(out, kEventWallTime, wall_time);
  if (step != 0) {
    put_key(out, kEventStep, kVarint);
    put_varint(out, static_cast<uint64_t>(step));  // negative int64: 10-byte two's complement
  }
}

}  // namespace

std::string encode_file_version_event(double wall_time, std::string_view file_version) {
  std::string event;
  put_event_header(event, wall_time, 0);
  put_bytes_field(event, kEventFileVersion, file_version);  // oneof member: always present
  return event;
}

std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, float simple_value) {
  std::string value;  // Summary.Value
  if (!tag.empty()) put_bytes_field(value, kValueTag, tag);
  uint32_t bits;
  std::memcpy(&bits, &simple_value, sizeof(bits));
  put_key(value, kValueSimpleValue, kFixed32);  // oneof member: written even when 0
  put_fixed32(value, bits);

  std::string summary;
  put_bytes_field(summary, kSummaryValue, value);

  std::string event;
  put_event_header(event, wall_time, step);
  put_bytes_field(event, kEventSummary, summary);
  return event;
}

std::string frame_record(std::string_view data) {
  std::string record;
  record.reserve(data.size() + 16);
  put_fixed64(record, data.size());
  put_fixed32(record, crc32c_mask(crc32c(record.data(), 8)));
  record.append(data.data(), data.size());
  put_fixed32(record, crc32c_mask(crc32c(data)));
  return record;
}

}  // namespace tensorboard

namespace {

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::atomic<int64_t> g_file_counter{0};

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t queue_size) : queue_size_(queue_size) {
  if (queue_size < 1) throw_error("[--tensorboard-queue-size] must be >= 1, got ", queue_size);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_error("[--tensorboard-dir] cannot create directory ", dir, ": ", ec.message());

  const double wall_time = now_seconds();
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "%010lld", static_cast<long long>(wall_time));
  path_ = str_cat(dir, "/events.out.tfevents.", stamp, ".", host_name("localhost"), ".", ::getpid(), ".",
                  g_file_counter.fetch_add(1));
  // O_EXCL: never append to or clobber someone else's event file.
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_error("cannot create TensorBoard event file ", path_, ": ", errno_string(errno));

  // The file_version record goes out at once, as TensorBoard's EventFileWriter does, so
  // even a run killed before its first flush leaves a readable (empty) event file.
  pending_ = tensorboard::frame_record(tensorboard::encode_file_version_event(wall_time));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ < 0) return;
  try {
    flush();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: %s\n", e.what());
  }
  ::close(fd_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  add_scalar(tag, value, step, now_seconds());
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  pending_ +=
      tensorboard::frame_record(tensorboard::encode_scalar_event(wall_time, step, tag, static_cast<float>(value)));
  ++pending_count_;
  if (pending_count_ >= queue_size_) flush();
}

void TensorBoardWriter::flush() {
  if (pending_.empty()) return;
  // Taken out first: after a failed write the file may end in a cut record, and retrying
  // (e.g. from the destructor) would only add bytes after it.
  const std::string bytes = std::move(pending_);
  pending_.clear();
  pending_count_ = 0;
  write_all(bytes);
}

void TensorBoardWriter::write_all(std::string_view bytes) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_error("cannot write TensorBoard event file ", path_, ": ", errno_string(errno));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace megatron::obs
