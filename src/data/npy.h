// NumPy .npy files: byte-identical writes and validating memory-mapped reads.
//
// Megatron caches its index arrays with np.save(allow_pickle=True) and reads them
// with np.load(mmap_mode='r') (C23 megatron/data/gpt_dataset.py), so our cache files
// must be what np.save writes (numpy/lib/format.py, format version 1.0):
//   "\x93NUMPY" 0x01 0x00 <u16 little-endian header length H>
//   "{'descr': '<i4', 'fortran_order': False, 'shape': (10,), }"
//   + (21 - len(repr(shape[0]))) spaces (numpy >= 1.23 "growth axis" room; none for 0-d)
//   + spaces so that 10 + H is a multiple of 64, the last byte of H being '\n'
//   then the C-order data. Example: int32 arange(10) is a 128-byte header + 40 bytes.
// Shapes print as Python tuples: (N,) and (N, 2).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/file.h"

namespace megatron::data {

// Little-endian dtypes we write (descr '<i4', '<u4', '<i8', '|u1', '<i2').
enum class NpyDType : uint8_t { kInt32, kUInt32, kInt64, kUInt8, kInt16 };
int64_t npy_dtype_size(NpyDType dtype);
const char* npy_descr(NpyDType dtype);
const char* npy_dtype_name(NpyDType dtype);  // "int32", "uint32", ...

// The full header (magic .. '\n') that np.save writes for this dtype and shape.
std::string npy_header(NpyDType dtype, const std::vector<int64_t>& shape);

// Writes path atomically (temporary file + rename). data holds prod(shape) elements.
void write_npy(const std::string& path, NpyDType dtype, const std::vector<int64_t>& shape, const void* data);
// As write_npy, but leaves the finished temporary file for the caller to commit(), so that
// several files can be renamed into place together.
void write_npy(AtomicFile* file, NpyDType dtype, const std::vector<int64_t>& shape, const void* data);

// A read-only memory-mapped .npy. The constructor validates magic, version (1.0, 2.0
// or 3.0), a little-endian descr we support, fortran_order False, and that the file size
// is exactly header + prod(shape) * itemsize; any fault throws Error naming the path.
class NpyFile {
 public:
  NpyFile() = default;
  explicit NpyFile(const std::string& path);
  // An array held in memory instead (the mock data's sample index, which Megatron does not
  // cache): `bytes` holds prod(shape) little-endian elements; `name` stands for the path.
  static NpyFile in_memory(std::string name, NpyDType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);

  const std::string& path() const { return memory_name_.empty() ? file_.path() : memory_name_; }
  NpyDType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t element_count() const { return count_; }
  const uint8_t* data() const { return data_; }

  // Throws Error "<path>: expected int32 (N, 2), found uint32 (M,)" when they differ.
  void expect(NpyDType dtype, const std::vector<int64_t>& shape) const;

  // Element i of the flattened array, converted to int64 (uint32 and int64 fit).
  // The data may be unaligned in files from other writers, hence memcpy loads.
  int64_t at(int64_t i) const {
    switch (dtype_) {
      case NpyDType::kInt32:
        return load<int32_t>(i);
      case NpyDType::kUInt32:
        return load<uint32_t>(i);
      case NpyDType::kInt64:
        return load<int64_t>(i);
      case NpyDType::kUInt8:
        return load<uint8_t>(i);
      case NpyDType::kInt16:
        return load<int16_t>(i);
    }
    return 0;
  }

 private:
  template <class T>
  T load(int64_t i) const {
    T v;
    std::memcpy(&v, data_ + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    return v;
  }

  MappedFile file_;
  std::string memory_name_;      // in_memory: the name
  std::vector<uint8_t> memory_;  // in_memory: the elements (data_ points here; moves keep the buffer)
  NpyDType dtype_ = NpyDType::kInt32;
  std::vector<int64_t> shape_;
  int64_t count_ = 0;
  const uint8_t* data_ = nullptr;
};

std::string npy_shape_string(const std::vector<int64_t>& shape);  // "(10,)", "(11, 2)"

}  // namespace megatron::data
