#include "ckpt/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <simdjson.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/json_writer.h"

namespace megatron::ckpt {
namespace {

constexpr int64_t kMaxHeaderBytes = int64_t{100} << 20;  // the reference implementation's limit
constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kGlobalShapeSuffix = ".global_shape";
constexpr const char* kLayoutSuffix = ".layout";

// numel * element size, or -1 on overflow / negative dimension.
int64_t checked_bytes(const std::vector<int64_t>& shape, int64_t element_size, int64_t* numel_out) {
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (__builtin_mul_overflow(numel, d, &numel)) return -1;
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(numel, element_size, &bytes)) return -1;
  if (numel_out != nullptr) *numel_out = numel;
  return bytes;
}

template <class... Args>
[[noreturn]] void corrupt(const std::string& path, Args&&... what) {
  throw_error(path, ": safetensors: ", std::forward<Args>(what)...);
}

// Writing order: by decreasing element size, stable (see the header comment).
std::vector<size_t> layout_order(const std::vector<TensorToWrite>& tensors) {
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return dtype_size(tensors[a].dtype) > dtype_size(tensors[b].dtype); });
  return order;
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kF8E4M3:
      return "F8_E4M3";
    case DType::kF8E5M2:
      return "F8_E5M2";
  }
  MT_CHECK(false) << "unknown DType " << static_cast<int>(dtype);
  return "";
}

std::optional<DType> parse_safetensors_dtype(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  if (name == "I32") return DType::kI32;
  if (name == "I64") return DType::kI64;
  if (name == "F8_E4M3") return DType::kF8E4M3;
  if (name == "F8_E5M2") return DType::kF8E5M2;
  return std::nullopt;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::optional<std::vector<int64_t>> parse_shape(std::string_view text) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text.data(), text.size());
  simdjson::dom::array arr;
  if (parser.parse(padded).get_array().get(arr) != simdjson::SUCCESS) return std::nullopt;
  std::vector<int64_t> shape;
  for (simdjson::dom::element e : arr) {
    uint64_t v = 0;
    if (e.get_uint64().get(v) != simdjson::SUCCESS || v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return std::nullopt;
    }
    shape.push_back(static_cast<int64_t>(v));
  }
  return shape;
}

SafetensorsHeader make_safetensors_header(const std::vector<TensorToWrite>& tensors, const StringMap& metadata) {
  SafetensorsHeader h;
  h.data_offsets.assign(tensors.size(), 0);
  h.data_sizes.assign(tensors.size(), 0);
  std::set<std::string_view> names;
  for (const TensorToWrite& t : tensors) {
    if (t.name.empty()) throw_error("safetensors: a tensor has an empty name");
    if (t.name == kMetadataKey) throw_error("safetensors: '", kMetadataKey, "' is reserved, not a tensor name");
    if (!names.insert(t.name).second) throw_error("safetensors: duplicate tensor name '", t.name, "'");
  }
  for (const auto& [key, value] : metadata) {
    for (const char* suffix : {kGlobalShapeSuffix, kLayoutSuffix}) {
      const std::string_view k = key;
      const size_t n = std::strlen(suffix);
      if (k.size() > n && k.substr(k.size() - n) == suffix && names.count(k.substr(0, k.size() - n)) > 0) {
        throw_error("safetensors: metadata key '", key, "' collides with the per-tensor key of '",
                    k.substr(0, k.size() - n), "'");
      }
    }
  }
  int64_t offset = 0;
  for (size_t i : layout_order(tensors)) {
    const TensorToWrite& t = tensors[i];
    const int64_t bytes = checked_bytes(t.shape, dtype_size(t.dtype), nullptr);
    if (bytes < 0) throw_error("safetensors: tensor '", t.name, "' has an invalid shape ", shape_to_string(t.shape));
    if (!t.global_shape.empty() && checked_bytes(t.global_shape, 1, nullptr) < 0) {
      throw_error("safetensors: tensor '", t.name, "' has an invalid global shape ", shape_to_string(t.global_shape));
    }
    h.data_offsets[i] = offset;
    h.data_sizes[i] = bytes;
    offset += bytes;
  }
  h.data_bytes = offset;

  JsonWriter w;
  w.begin_object();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorToWrite& t = tensors[i];
    const int64_t bytes = checked_bytes(t.shape, dtype_size(t.dtype), nullptr);
    w.key(t.name).begin_object();
    w.key("dtype").value(safetensors_dtype_name(t.dtype));
    w.key("shape").begin_array();
    for (int64_t d : t.shape) w.value(d);
    w.end_array();
    w.key("data_offsets").begin_array().value(h.data_offsets[i]).value(h.data_offsets[i] + bytes).end_array();
    w.end_object();
  }
  StringMap all = metadata;
  for (const TensorToWrite& t : tensors) {
    all[t.name + kGlobalShapeSuffix] = shape_to_string(t.global_shape.empty() ? t.shape : t.global_shape);
    all[t.name + kLayoutSuffix] = t.layout;
  }
  w.key(kMetadataKey).begin_object();
  for (const auto& [key, value] : all) w.key(key).value(value);
  w.end_object();
  w.end_object();
  std::string json = w.take();
  // Pad with spaces so that 8 + N is a multiple of 8 (the data area is 8-byte aligned).
  json.append((8 - json.size() % 8) % 8, ' ');
  const uint64_t n = json.size();
  h.bytes.resize(8);
  for (int b = 0; b < 8; ++b) h.bytes[static_cast<size_t>(b)] = static_cast<char>((n >> (8 * b)) & 0xFF);
  h.bytes += json;
  return h;
}

int64_t write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                          const StringMap& metadata) {
  SafetensorsHeader h;
  try {
    h = make_safetensors_header(tensors, metadata);
  } catch (const Error& e) {
    throw_error(path, ": ", e.what());
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (h.data_sizes[i] > 0 && tensors[i].data == nullptr && !tensors[i].fill) {
      throw_error(path, ": safetensors: tensor '", tensors[i].name, "' has no data");
    }
  }
  AtomicFile out(path);
  out.write(h.bytes);
  std::vector<char> produced;  // fill's buffer, reused from tensor to tensor
  for (size_t i : layout_order(tensors)) {
    const TensorToWrite& t = tensors[i];
    const int64_t bytes = checked_bytes(t.shape, dtype_size(t.dtype), nullptr);
    if (t.data == nullptr && t.fill && bytes > 0) {
      produced.resize(static_cast<size_t>(bytes));
      t.fill(produced.data());
      out.write(produced.data(), bytes);
    } else {
      out.write(t.data, bytes);
    }
  }
  MT_CHECK_EQ(out.bytes_written(), static_cast<int64_t>(h.bytes.size()) + h.data_bytes);
  out.commit();
  return out.bytes_written();
}

namespace {

// pwrite of all `bytes` at `at`; 0, or the errno of the failure (EIO for a write of nothing).
int pwrite_all(int fd, const void* data, int64_t bytes, int64_t at) {
  const char* p = static_cast<const char*>(data);
  for (int64_t done = 0; done < bytes;) {
    const ssize_t w = ::pwrite(fd, p + done, static_cast<size_t>(bytes - done), at + done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    done += w;
  }
  return 0;
}

// fsync, then close `fd` (also when fsync fails); Error naming `path`.
void fsync_and_close(int fd, const std::string& path) {
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw_error(path, ": fsync failed: ", errno_string(err));
  }
  if (::close(fd) != 0) throw_error(path, ": close failed: ", errno_string(errno));
}

}  // namespace

void create_safetensors_file(const std::string& path, const SafetensorsHeader& header) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw_error(path, ": cannot create: ", errno_string(errno));
  const auto fail = [&](const char* what, int err) {
    ::close(fd);
    throw_error(path, ": ", what, ": ", errno_string(err));
  };
  if (::ftruncate(fd, header.file_bytes()) != 0) fail("cannot size the file", errno);
  if (const int err = pwrite_all(fd, header.bytes.data(), static_cast<int64_t>(header.bytes.size()), 0)) {
    fail("cannot write the header", err);
  }
  fsync_and_close(fd, path);
}

SafetensorsRangeWriter::SafetensorsRangeWriter(std::string path, const SafetensorsHeader& header)
    : path_(std::move(path)), header_(header) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0) throw_error(path_, ": cannot open for writing: ", errno_string(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || st.st_size != header.file_bytes()) {
    ::close(fd_);
    fd_ = -1;
    throw_error(path_, ": safetensors: expected a file of ", header.file_bytes(), " bytes laid out for writing");
  }
}

SafetensorsRangeWriter::~SafetensorsRangeWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsRangeWriter::write(size_t index, int64_t offset, const void* data, int64_t bytes) {
  MT_CHECK(fd_ >= 0) << path_ << ": written after finish()";
  MT_CHECK(index < header_.data_sizes.size() && offset >= 0 && bytes >= 0 &&
           offset + bytes <= header_.data_sizes[index])
      << path_ << ": tensor " << index << " bytes [" << offset << ", " << offset + bytes << ")";
  const int64_t at = static_cast<int64_t>(header_.bytes.size()) + header_.data_offsets[index] + offset;
  if (const int err = pwrite_all(fd_, data, bytes, at)) throw_error(path_, ": write failed: ", errno_string(err));
}

void SafetensorsRangeWriter::finish() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  fsync_and_close(fd, path_);
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  const int64_t size = file_.size();
  if (size < 8) corrupt(path, "file has ", size, " bytes, fewer than the 8-byte header length");
  const uint8_t* base = file_.data();
  uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = (n << 8) | base[b];
  if (n > static_cast<uint64_t>(size - 8)) corrupt(path, "header length ", n, " exceeds the file size ", size);
  if (n > static_cast<uint64_t>(kMaxHeaderBytes))
    corrupt(path, "header length ", n, " exceeds the limit of ", kMaxHeaderBytes);
  if (n < 2 || base[8] != '{') corrupt(path, "header does not start with '{'");
  const int64_t data_start = 8 + static_cast<int64_t>(n);
  const int64_t data_size = size - data_start;

  simdjson::dom::parser parser;
  simdjson::padded_string header(reinterpret_cast<const char*>(base + 8), static_cast<size_t>(n));
  simdjson::dom::object root;
  if (auto err = parser.parse(header).get_object().get(root); err != simdjson::SUCCESS) {
    corrupt(path, "header is not a JSON object: ", simdjson::error_message(err));
  }

  struct Raw {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    int64_t numel;
    int64_t begin, end;
  };
  std::vector<Raw> raw;
  std::set<std::string_view> seen;
  bool have_metadata = false;
  for (simdjson::dom::key_value_pair field : root) {
    const std::string_view name = field.key;
    if (!seen.insert(name).second) corrupt(path, "duplicate key '", name, "' in the header");
    if (name == kMetadataKey) {
      have_metadata = true;
      simdjson::dom::object meta;
      if (field.value.get_object().get(meta) != simdjson::SUCCESS)
        corrupt(path, "'", kMetadataKey, "' is not an object");
      for (simdjson::dom::key_value_pair kv : meta) {
        std::string_view value;
        if (kv.value.get_string().get(value) != simdjson::SUCCESS) {
          corrupt(path, "'", kMetadataKey, "' value of '", kv.key, "' is not a string");
        }
        if (!metadata_.emplace(std::string(kv.key), std::string(value)).second) {
          corrupt(path, "duplicate key '", kv.key, "' in '", kMetadataKey, "'");
        }
      }
      continue;
    }
    if (name.empty()) corrupt(path, "a tensor has an empty name");
    simdjson::dom::object desc;
    if (field.value.get_object().get(desc) != simdjson::SUCCESS)
      corrupt(path, "tensor '", name, "': entry is not an object");
    Raw r{std::string(name), DType::kF32, {}, 0, 0, 0};
    bool has_dtype = false, has_shape = false, has_offsets = false;
    for (simdjson::dom::key_value_pair kv : desc) {
      if (kv.key == "dtype") {
        std::string_view d;
        if (has_dtype || kv.value.get_string().get(d) != simdjson::SUCCESS)
          corrupt(path, "tensor '", name, "': bad 'dtype'");
        const std::optional<DType> dt = parse_safetensors_dtype(d);
        if (!dt)
          corrupt(path, "tensor '", name, "': unsupported dtype '", d, "' (expected F32, BF16, F16, I32 or I64)");
        r.dtype = *dt;
        has_dtype = true;
      } else if (kv.key == "shape") {
        simdjson::dom::array arr;
        if (has_shape || kv.value.get_array().get(arr) != simdjson::SUCCESS)
          corrupt(path, "tensor '", name, "': bad 'shape'");
        for (simdjson::dom::element e : arr) {
          uint64_t v = 0;
          if (e.get_uint64().get(v) != simdjson::SUCCESS ||
              v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            corrupt(path, "tensor '", name, "': 'shape' holds something other than a non-negative integer");
          }
          r.shape.push_back(static_cast<int64_t>(v));
        }
        has_shape = true;
      } else if (kv.key == "data_offsets") {
        simdjson::dom::array arr;
        if (has_offsets || kv.value.get_array().get(arr) != simdjson::SUCCESS || arr.size() != 2) {
          corrupt(path, "tensor '", name, "': 'data_offsets' is not a pair [begin, end]");
        }
        uint64_t v[2] = {0, 0};
        int k = 0;
        for (simdjson::dom::element e : arr) {
          if (e.get_uint64().get(v[k]) != simdjson::SUCCESS) {
            corrupt(path, "tensor '", name, "': 'data_offsets' holds something other than a non-negative integer");
          }
          ++k;
        }
        if (v[0] > v[1])
          corrupt(path, "tensor '", name, "': data_offsets [", v[0], ", ", v[1], "] end before they begin");
        if (v[1] > static_cast<uint64_t>(data_size)) {
          corrupt(path, "tensor '", name, "': data_offsets [", v[0], ", ", v[1], "] run past the data area of ",
                  data_size, " bytes (truncated file?)");
        }
        r.begin = static_cast<int64_t>(v[0]);
        r.end = static_cast<int64_t>(v[1]);
        has_offsets = true;
      } else {
        corrupt(path, "tensor '", name, "': unexpected field '", kv.key, "'");
      }
    }
    if (!has_dtype || !has_shape || !has_offsets) {
      corrupt(path, "tensor '", name, "': missing '",
              !has_dtype   ? "dtype"
              : !has_shape ? "shape"
                           : "data_offsets",
              "'");
    }
    const int64_t bytes = checked_bytes(r.shape, dtype_size(r.dtype), &r.numel);
    if (bytes < 0) corrupt(path, "tensor '", name, "': shape ", shape_to_string(r.shape), " overflows");
    if (bytes != r.end - r.begin) {
      corrupt(path, "tensor '", name, "': ", r.end - r.begin, " bytes in data_offsets, but shape ",
              shape_to_string(r.shape), " ", safetensors_dtype_name(r.dtype), " needs ", bytes);
    }
    raw.push_back(std::move(r));
  }
  (void)have_metadata;

  // Non-overlapping, and (as the reference implementation requires) no holes and nothing
  // after the last tensor.
  std::stable_sort(raw.begin(), raw.end(),
                   [](const Raw& a, const Raw& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  int64_t covered = 0;
  for (const Raw& r : raw) {
    if (r.begin < covered) corrupt(path, "tensor '", r.name, "' overlaps the bytes of another tensor");
    if (r.begin > covered)
      corrupt(path, "gap of ", r.begin - covered, " bytes in the data area before tensor '", r.name, "'");
    covered = r.end;
  }
  if (covered != data_size)
    corrupt(path, data_size - covered, " bytes after the last tensor (the data area has ", data_size, ")");

  for (Raw& r : raw) {
    SafetensorsTensor t;
    t.name = std::move(r.name);
    t.dtype = r.dtype;
    t.shape = std::move(r.shape);
    t.numel = r.numel;
    t.offset = data_start + r.begin;
    t.bytes = r.end - r.begin;
    t.data = t.bytes > 0 ? base + t.offset : nullptr;
    t.global_shape = t.shape;
    if (auto it = metadata_.find(t.name + kGlobalShapeSuffix); it != metadata_.end()) {
      std::optional<std::vector<int64_t>> g = parse_shape(it->second);
      if (!g) corrupt(path, "tensor '", t.name, "': '", it->first, "' is not a shape: '", it->second, "'");
      t.global_shape = std::move(*g);
    }
    if (auto it = metadata_.find(t.name + kLayoutSuffix); it != metadata_.end()) t.layout = it->second;
    by_name_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

const SafetensorsTensor& SafetensorsFile::at(std::string_view name) const {
  const SafetensorsTensor* t = find(name);
  if (t == nullptr) throw_error(path(), ": no tensor '", name, "'");
  return *t;
}

}  // namespace megatron::ckpt
