#include "data/npy.h"

#include <cctype>
#include <limits>
#include <string_view>

#include "core/error.h"

namespace megatron::data {
namespace {

constexpr char kMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
constexpr int64_t kArrayAlign = 64;        // numpy.lib.format.ARRAY_ALIGN
constexpr int64_t kGrowthAxisDigits = 21;  // numpy.lib.format.GROWTH_AXIS_MAX_DIGITS

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

int64_t npy_dtype_size(NpyDType dtype) {
  switch (dtype) {
    case NpyDType::kInt32:
      return 4;
    case NpyDType::kUInt32:
      return 4;
    case NpyDType::kInt64:
      return 8;
    case NpyDType::kUInt8:
      return 1;
    case NpyDType::kInt16:
      return 2;
  }
  return 0;
}

const char* npy_descr(NpyDType dtype) {
  switch (dtype) {
    case NpyDType::kInt32:
      return "<i4";
    case NpyDType::kUInt32:
      return "<u4";
    case NpyDType::kInt64:
      return "<i8";
    case NpyDType::kUInt8:
      return "|u1";
    case NpyDType::kInt16:
      return "<i2";
  }
  return "?";
}

const char* npy_dtype_name(NpyDType dtype) {
  switch (dtype) {
    case NpyDType::kInt32:
      return "int32";
    case NpyDType::kUInt32:
      return "uint32";
    case NpyDType::kInt64:
      return "int64";
    case NpyDType::kUInt8:
      return "uint8";
    case NpyDType::kInt16:
      return "int16";
  }
  return "?";
}

std::string npy_shape_string(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

std::string npy_header(NpyDType dtype, const std::vector<int64_t>& shape) {
  std::string dict =
      str_cat("{'descr': '", npy_descr(dtype), "', 'fortran_order': False, 'shape': ", npy_shape_string(shape), ", }");
  if (!shape.empty()) {
    dict.append(static_cast<size_t>(kGrowthAxisDigits - static_cast<int64_t>(std::to_string(shape[0]).size())), ' ');
  }
  // Version 1.0: magic (6) + version (2) + u16 length (2), then dict + padding + '\n'.
  const int64_t hlen = static_cast<int64_t>(dict.size()) + 1;
  const int64_t padlen = kArrayAlign - ((10 + hlen) % kArrayAlign);
  const int64_t total_len = hlen + padlen;
  MT_CHECK(total_len <= 0xffff) << "npy header too long for version 1.0";
  std::string out(kMagic, 6);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(total_len & 0xff));
  out.push_back(static_cast<char>(total_len >> 8));
  out += dict;
  out.append(static_cast<size_t>(padlen), ' ');
  out.push_back('\n');
  return out;
}

void write_npy(AtomicFile* file, NpyDType dtype, const std::vector<int64_t>& shape, const void* data) {
  file->write(npy_header(dtype, shape));
  file->write(data, product(shape) * npy_dtype_size(dtype));
  file->finish();
}

void write_npy(const std::string& path, NpyDType dtype, const std::vector<int64_t>& shape, const void* data) {
  AtomicFile file(path);
  write_npy(&file, dtype, shape, data);
  file.commit();
}

NpyFile NpyFile::in_memory(std::string name, NpyDType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  MT_CHECK(!name.empty());
  MT_CHECK_EQ(static_cast<int64_t>(bytes.size()), product(shape) * npy_dtype_size(dtype)) << name;
  NpyFile f;
  f.memory_name_ = std::move(name);
  f.dtype_ = dtype;
  f.count_ = product(shape);
  f.shape_ = std::move(shape);
  f.memory_ = std::move(bytes);
  f.data_ = f.memory_.data();
  return f;
}

NpyFile::NpyFile(const std::string& path) : file_(path) {
  const uint8_t* p = file_.data();
  const int64_t size = file_.size();
  if (size < 10 || std::memcmp(p, kMagic, 6) != 0) throw_error(path, ": not a NumPy .npy file (bad magic)");
  const int major = p[6];
  int64_t header_len = 0, prefix = 0;
  if (major == 1) {
    header_len = int64_t(p[8]) | int64_t(p[9]) << 8;
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) throw_error(path, ": truncated .npy header");
    header_len = int64_t(p[8]) | int64_t(p[9]) << 8 | int64_t(p[10]) << 16 | int64_t(p[11]) << 24;
    prefix = 12;
  } else {
    throw_error(path, ": unsupported .npy format version ", major, ".", int(p[7]));
  }
  if (prefix + header_len > size) throw_error(path, ": truncated .npy header");
  const std::string_view header(reinterpret_cast<const char*>(p + prefix), static_cast<size_t>(header_len));

  // The header is a Python dict literal; find each key's value.
  auto value_of = [&](std::string_view key) -> std::string_view {
    const std::string quoted = str_cat("'", key, "':");
    size_t at = header.find(quoted);
    if (at == std::string_view::npos) throw_error(path, ": .npy header has no '", key, "' entry");
    at += quoted.size();
    while (at < header.size() && header[at] == ' ') ++at;
    return header.substr(at);
  };
  std::string_view descr = value_of("descr");
  if (descr.size() < 5 || descr[0] != '\'' || descr[4] != '\'') throw_error(path, ": bad .npy descr");
  descr = descr.substr(1, 3);
  bool known = false;
  for (NpyDType d : {NpyDType::kInt32, NpyDType::kUInt32, NpyDType::kInt64, NpyDType::kUInt8, NpyDType::kInt16}) {
    if (descr == npy_descr(d)) {
      dtype_ = d;
      known = true;
    }
  }
  if (!known) throw_error(path, ": unsupported .npy dtype '", descr, "' (expected one of <i4 <u4 <i8 |u1 <i2)");
  std::string_view fortran = value_of("fortran_order");
  if (fortran.substr(0, 5) != "False") throw_error(path, ": .npy array is not C-ordered (fortran_order must be False)");
  std::string_view shape = value_of("shape");
  if (shape.empty() || shape[0] != '(') throw_error(path, ": bad .npy shape");
  size_t close = shape.find(')');
  if (close == std::string_view::npos) throw_error(path, ": bad .npy shape");
  std::string_view dims = shape.substr(1, close - 1);
  size_t i = 0;
  while (i < dims.size()) {
    while (i < dims.size() && (dims[i] == ' ' || dims[i] == ',')) ++i;
    if (i >= dims.size()) break;
    if (!std::isdigit(static_cast<unsigned char>(dims[i]))) throw_error(path, ": bad .npy shape");
    int64_t v = 0;
    while (i < dims.size() && std::isdigit(static_cast<unsigned char>(dims[i]))) {
      if (v > (int64_t{1} << 50)) throw_error(path, ": .npy shape too large");
      v = v * 10 + (dims[i++] - '0');
    }
    shape_.push_back(v);
  }
  // prod(shape) * itemsize without overflow: a corrupt header may hold any dimensions (a zero
  // one makes the others harmless); past INT64_MAX the file cannot match anyway.
  const int64_t data_offset = prefix + header_len;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  bool empty = false, overflow = false;
  int64_t count = 1;
  for (int64_t d : shape_) {
    if (d == 0)
      empty = true;
    else if (count > kMax / d)
      overflow = true;
    else
      count *= d;
  }
  if (empty) {
    count = 0;
    overflow = false;
  }
  const int64_t itemsize = npy_dtype_size(dtype_);
  if (overflow || count > (kMax - data_offset) / itemsize) {
    throw_error(path, ": file is ", size, " bytes but its header (", npy_descr(dtype_), " ", npy_shape_string(shape_),
                ") needs more than 2^63 bytes");
  }
  count_ = count;
  const int64_t expected = data_offset + count_ * itemsize;
  if (size != expected) {
    throw_error(path, ": file is ", size, " bytes but its header (", npy_descr(dtype_), " ", npy_shape_string(shape_),
                ") needs ", expected);
  }
  data_ = p + data_offset;
}

void NpyFile::expect(NpyDType dtype, const std::vector<int64_t>& shape) const {
  if (dtype != dtype_ || shape != shape_) {
    throw_error(path(), ": expected ", npy_dtype_name(dtype), " ", npy_shape_string(shape), ", found ",
                npy_dtype_name(dtype_), " ", npy_shape_string(shape_));
  }
}

}  // namespace megatron::data
