// safetensors files (https://huggingface.co/docs/safetensors): the tensor format of our
// checkpoints (docs/design.md, "Interoperable files"). No pickle, no code: a header and raw bytes.
//
// Layout, all little-endian:
//   8 bytes      N, the header length (uint64)
//   N bytes      JSON header, padded with spaces so that the data starts at a multiple of 8:
//                {"<name>": {"dtype": "F32", "shape": [4, 8], "data_offsets": [begin, end]}, ...,
//                 "__metadata__": {"<key>": "<string>", ...}}
//   the rest     the tensors' bytes; data_offsets are relative to the start of this area.
//
// What we add in __metadata__ (string values only, as the format requires), per tensor:
//   "<name>.global_shape" = "[4,8]"                       the unsharded shape (JSON array text)
//   "<name>.layout"       = "tp=1,pp=1,partition_axis=-1" the parallel layout it was saved under
// so that a later reader can reshard on load. Caller metadata keys must not collide with them.
//
// The writer lays the tensors out by decreasing element size (the caller's order within one
// size), so that every tensor of a file we wrote starts at a multiple of its element size
// and can be used in place from the memory map. Files written elsewhere may be unaligned:
// there, copy the bytes out (memcpy) before reading them as numbers.
//
// The reader trusts nothing: a truncated, corrupt or hostile file is a megatron::Error
// "<path>: safetensors: <what is wrong>", never a crash or an out-of-bounds read.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <functional>

#include "core/dtype.h"
#include "core/file.h"

namespace megatron::ckpt {

inline constexpr const char* kDefaultTensorLayout = "tp=1,pp=1,partition_axis=-1";

// One tensor to write: `data` points at numel(shape) * dtype_size(dtype) bytes of host
// memory, in our byte order (little-endian) and row-major. Or, with `fill` set and `data`
// null, the bytes are produced when the tensor's turn comes: fill(dst) writes them into a host
// buffer of that size, one tensor at a time in the file's data order (a writer that streams
// tensors gathered from other ranks holds one at a time).
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  std::vector<int64_t> global_shape;          // empty: the same as shape
  std::string layout = kDefaultTensorLayout;  // recorded as "<name>.layout"
  std::function<void(void* dst)> fill;        // see above; null: `data` holds the bytes
};

using StringMap = std::map<std::string, std::string>;

// The safetensors dtype names: "F32", "BF16", "F16", "I32", "I64".
std::string_view safetensors_dtype_name(DType dtype);
std::optional<DType> parse_safetensors_dtype(std::string_view name);

// The complete header block (8-byte length + padded JSON) for these tensors, and the data
// offset and size of each tensor (same order as `tensors`, relative to the data area). Only
// names, dtypes and shapes are read: every process computes the same header from the same list.
struct SafetensorsHeader {
  std::string bytes;
  std::vector<int64_t> data_offsets;
  std::vector<int64_t> data_sizes;
  int64_t data_bytes = 0;
  int64_t file_bytes() const { return static_cast<int64_t>(bytes.size()) + data_bytes; }
};
SafetensorsHeader make_safetensors_header(const std::vector<TensorToWrite>& tensors, const StringMap& metadata);

// One file written by several processes at once (the parallel checkpoint save,
// ckpt/checkpoint.cpp): one process creates it (create_safetensors_file: the header, and the
// data area sized but not written, sparse where the file system allows), then each writes byte
// ranges of tensors' data at their offsets through a SafetensorsRangeWriter of its own. The
// file is complete when the writers together have written every byte of every tensor; that is
// the caller's protocol to ensure, and not an atomic write: put the file in a directory that is
// renamed into place afterwards. Errors name the path.
void create_safetensors_file(const std::string& path, const SafetensorsHeader& header);

class SafetensorsRangeWriter {
 public:
  // Opens the file create_safetensors_file made with this header (Error when it is missing
  // or of another size).
  SafetensorsRangeWriter(std::string path, const SafetensorsHeader& header);
  ~SafetensorsRangeWriter();
  SafetensorsRangeWriter(const SafetensorsRangeWriter&) = delete;
  SafetensorsRangeWriter& operator=(const SafetensorsRangeWriter&) = delete;

  // Writes `bytes` bytes at byte `offset` of tensor `index`'s data (index into the list the
  // header was made from); the range must lie within the tensor (MT_CHECK).
  void write(size_t index, int64_t offset, const void* data, int64_t bytes);
  // fsync and close; the destructor closes without fsync (after an error).
  void finish();

 private:
  std::string path_;
  const SafetensorsHeader& header_;
  int fd_ = -1;
};

// Writes `path` atomically (a temporary file, fsync, rename: core/file.h AtomicFile).
// Throws Error for an empty or duplicate name, neither data nor fill with bytes to write,
// a negative dimension, a metadata key that collides with the per-tensor keys, or I/O errors.
// Returns the file size in bytes.
int64_t write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                          const StringMap& metadata = {});

// One tensor of a mapped file.
struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t offset = 0;  // absolute byte offset in the file
  int64_t bytes = 0;
  const uint8_t* data = nullptr;      // into the map; nullptr when bytes == 0
  std::vector<int64_t> global_shape;  // from "<name>.global_shape", else shape
  std::string layout;                 // from "<name>.layout", else ""
};

// A validated, read-only memory map of a safetensors file.
class SafetensorsFile {
 public:
  SafetensorsFile() = default;
  explicit SafetensorsFile(const std::string& path);  // throws Error on any defect

  const std::string& path() const { return file_.path(); }
  int64_t size_bytes() const { return file_.size(); }
  // Tensors in file order (increasing offset).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(std::string_view name) const;
  // Throws Error "<path>: no tensor '<name>'".
  const SafetensorsTensor& at(std::string_view name) const;
  // All of __metadata__, our per-tensor keys included.
  const StringMap& metadata() const { return metadata_; }

 private:
  MappedFile file_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
  StringMap metadata_;
};

// "[4,8]" <-> {4, 8}; parse returns nullopt unless the text is a JSON array of
// non-negative integers.
std::string shape_to_string(const std::vector<int64_t>& shape);
std::optional<std::vector<int64_t>> parse_shape(std::string_view text);

}  // namespace megatron::ckpt
