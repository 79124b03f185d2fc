#include "data/indexed_dataset.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace megatron::data {
namespace {

template <class T>
void put(std::vector<uint8_t>* buf, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  buf->insert(buf->end(), p, p + sizeof(T));
}

bool valid_dtype_code(uint8_t code) { return code >= 1 && code <= 8; }

}  // namespace

int64_t token_dtype_size(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kUInt8:
    case TokenDType::kInt8:
      return 1;
    case TokenDType::kInt16:
    case TokenDType::kUInt16:
      return 2;
    case TokenDType::kInt32:
    case TokenDType::kFloat32:
      return 4;
    case TokenDType::kInt64:
    case TokenDType::kFloat64:
      return 8;
  }
  MT_CHECK(false) << "bad dtype code " << static_cast<int>(dtype);
  return 0;
}

const char* token_dtype_name(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kUInt8:
      return "uint8";
    case TokenDType::kInt8:
      return "int8";
    case TokenDType::kInt16:
      return "int16";
    case TokenDType::kInt32:
      return "int32";
    case TokenDType::kInt64:
      return "int64";
    case TokenDType::kFloat64:
      return "float64";
    case TokenDType::kFloat32:
      return "float32";
    case TokenDType::kUInt16:
      return "uint16";
  }
  return "?";
}

TokenDType optimal_token_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::kUInt16 : TokenDType::kInt32;
}

std::string index_file_path(const std::string& prefix) { return prefix + ".idx"; }
std::string data_file_path(const std::string& prefix) { return prefix + ".bin"; }

// ---------------------------------------------------------------------------------------------
// Reader

IndexedDataset::IndexedDataset(const std::string& prefix)
    : prefix_(prefix), idx_(index_file_path(prefix)), bin_(data_file_path(prefix)) {
  const std::string& ip = idx_.path();
  const uint8_t* p = idx_.data();
  const int64_t idx_size = idx_.size();
  if (idx_size < kIndexHeaderBytes) {
    throw_error(ip, ": truncated index: ", idx_size, " bytes, the header alone is ", kIndexHeaderBytes);
  }
  if (std::memcmp(p, kIndexMagic, sizeof(kIndexMagic)) != 0) {
    throw_error(ip, ": not a Megatron MMIDIDX index (bad magic bytes)");
  }
  const uint64_t version = load<uint64_t>(p + 9);
  if (version != 1) throw_error(ip, ": unsupported MMIDIDX version ", version, " (expected 1)");
  const uint8_t code = p[17];
  if (!valid_dtype_code(code)) throw_error(ip, ": unknown token dtype code ", static_cast<int>(code));
  dtype_ = static_cast<TokenDType>(code);
  if (dtype_ == TokenDType::kFloat32 || dtype_ == TokenDType::kFloat64) {
    throw_error(ip, ": token dtype ", token_dtype_name(dtype_), " is not an integer type");
  }
  const uint64_t s = load<uint64_t>(p + 18);
  const uint64_t d1 = load<uint64_t>(p + 26);
  // Bound the counts before multiplying so that a corrupt header cannot overflow.
  const uint64_t max_entries = static_cast<uint64_t>(idx_size) / 4;
  if (s > max_entries || d1 > max_entries || d1 == 0) {
    throw_error(ip, ": corrupt header: sequence count ", s, ", document count+1 ", d1, " do not fit a ", idx_size,
                "-byte index");
  }
  sequence_count_ = static_cast<int64_t>(s);
  document_count_ = static_cast<int64_t>(d1) - 1;
  const int64_t expected = kIndexHeaderBytes + 12 * sequence_count_ + 8 * (document_count_ + 1);
  if (idx_size != expected) {
    throw_error(ip, ": index is ", idx_size, " bytes but its header (", sequence_count_, " sequences, ",
                document_count_, " documents) needs ", expected, (idx_size < expected ? " (truncated?)" : ""));
  }
  lengths_ = p + kIndexHeaderBytes;
  pointers_ = lengths_ + 4 * sequence_count_;
  documents_ = pointers_ + 8 * sequence_count_;

  if (document_index(0) != 0) throw_error(ip, ": document_indices[0] is ", document_index(0), ", expected 0");
  for (int64_t k = 0; k < document_count_; ++k) {
    if (document_index(k + 1) < document_index(k)) {
      throw_error(ip, ": document_indices decrease at document ", k);
    }
  }
  if (document_index(document_count_) != sequence_count_) {
    throw_error(ip, ": last document index is ", document_index(document_count_), ", expected the sequence count ",
                sequence_count_);
  }
  const int64_t itemsize = token_dtype_size(dtype_);
  int64_t offset = 0;
  for (int64_t i = 0; i < sequence_count_; ++i) {
    const int32_t len = sequence_length(i);
    if (len < 0) throw_error(ip, ": sequence ", i, " has negative length ", len);
    if (sequence_pointer(i) != offset) {
      throw_error(ip, ": sequence ", i, " points to byte ", sequence_pointer(i), ", expected ", offset);
    }
    offset += static_cast<int64_t>(len) * itemsize;
  }
  token_count_ = offset / itemsize;
  if (bin_.size() != offset) {
    throw_error(bin_.path(), ": data file is ", bin_.size(), " bytes but ", ip, " describes ", offset,
                (bin_.size() < offset ? " (truncated?)" : ""));
  }
}

std::vector<int32_t> IndexedDataset::sequence_lengths() const {
  std::vector<int32_t> out(static_cast<size_t>(sequence_count_));
  if (sequence_count_ > 0) std::memcpy(out.data(), lengths_, 4 * out.size());
  return out;
}

void IndexedDataset::get(int64_t i, int64_t offset, int64_t length, std::vector<int64_t>* out) const {
  MT_CHECK(i >= 0 && i < sequence_count_) << "sequence " << i << " of " << sequence_count_;
  const int64_t len = sequence_length(i);
  if (length < 0) length = len - offset;
  MT_CHECK(offset >= 0 && length >= 0 && offset + length <= len)
      << "range [" << offset << ", " << offset + length << ") of a " << len << "-token sequence";
  const int64_t itemsize = token_dtype_size(dtype_);
  const uint8_t* src = bin_.data() + sequence_pointer(i) + offset * itemsize;
  const size_t base = out->size();
  out->resize(base + static_cast<size_t>(length));
  int64_t* dst = out->data() + base;
  for (int64_t k = 0; k < length; ++k) {
    const uint8_t* e = src + k * itemsize;
    switch (dtype_) {
      case TokenDType::kUInt8:
        dst[k] = e[0];
        break;
      case TokenDType::kInt8:
        dst[k] = static_cast<int8_t>(e[0]);
        break;
      case TokenDType::kInt16:
        dst[k] = load<int16_t>(e);
        break;
      case TokenDType::kUInt16:
        dst[k] = load<uint16_t>(e);
        break;
      case TokenDType::kInt32:
        dst[k] = load<int32_t>(e);
        break;
      case TokenDType::kInt64:
        dst[k] = load<int64_t>(e);
        break;
      default:
        MT_CHECK(false) << "float token dtype";
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Writer

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, TokenDType dtype)
    : prefix_(prefix), dtype_(dtype) {
  bin_ = std::make_unique<AtomicFile>(data_file_path(prefix));
  idx_ = std::make_unique<AtomicFile>(index_file_path(prefix));
  lengths_ = std::make_unique<SpillFile>(prefix + ".lengths");
  documents_ = std::make_unique<SpillFile>(prefix + ".documents");
}

IndexedDatasetWriter::~IndexedDatasetWriter() = default;

int64_t IndexedDatasetWriter::bin_bytes() const { return bin_->bytes_written(); }

void IndexedDatasetWriter::write_tokens(std::span<const int32_t> tokens) {
  const int64_t itemsize = token_dtype_size(dtype_);
  if (dtype_ == TokenDType::kInt32) {
    bin_->write(tokens.data(), static_cast<int64_t>(tokens.size()) * 4);
    return;
  }
  int64_t lo = 0, hi = 0;
  switch (dtype_) {
    case TokenDType::kUInt8:
      hi = 255;
      break;
    case TokenDType::kInt8:
      lo = -128;
      hi = 127;
      break;
    case TokenDType::kInt16:
      lo = -32768;
      hi = 32767;
      break;
    case TokenDType::kUInt16:
      hi = 65535;
      break;
    case TokenDType::kInt64:
      lo = std::numeric_limits<int32_t>::min();
      hi = std::numeric_limits<int32_t>::max();
      break;
    default:
      throw_error(prefix_, ": cannot write tokens as ", token_dtype_name(dtype_));
  }
  convert_buffer_.resize(tokens.size() * static_cast<size_t>(itemsize));
  uint8_t* out = convert_buffer_.data();
  for (size_t k = 0; k < tokens.size(); ++k) {
    const int64_t t = tokens[k];
    if (t < lo || t > hi) throw_error(prefix_, ": token id ", t, " does not fit dtype ", token_dtype_name(dtype_));
    if (itemsize == 8) {
      std::memcpy(out + 8 * k, &t, 8);
    } else if (itemsize == 2) {
      const auto v = static_cast<uint16_t>(t);
      std::memcpy(out + 2 * k, &v, 2);
    } else {
      out[k] = static_cast<uint8_t>(t);
    }
  }
  bin_->write(convert_buffer_.data(), static_cast<int64_t>(convert_buffer_.size()));
}

void IndexedDatasetWriter::add_document(std::span<const int32_t> tokens, std::span<const int32_t> sequence_lengths) {
  MT_CHECK(!finalized_) << prefix_;
  int64_t total = 0;
  for (int32_t len : sequence_lengths) {
    MT_CHECK(len >= 0) << "negative sequence length " << len;
    total += len;
  }
  MT_CHECK_EQ(total, static_cast<int64_t>(tokens.size()));
  write_tokens(tokens);
  lengths_->write(sequence_lengths.data(), static_cast<int64_t>(sequence_lengths.size()) * 4);
  sequence_count_ += static_cast<int64_t>(sequence_lengths.size());
  documents_->write(&sequence_count_, 8);
  document_count_ += 1;
  token_count_ += total;
}

void IndexedDatasetWriter::add_dataset(const IndexedDataset& other) {
  MT_CHECK(!finalized_) << prefix_;
  if (other.dtype() != dtype_) {
    throw_error(index_file_path(other.prefix()), ": token dtype ", token_dtype_name(other.dtype()),
                " differs from the output's ", token_dtype_name(dtype_));
  }
  bin_->write(other.data_file().data(), other.data_file().size());
  const int64_t base = sequence_count_;
  for (int64_t i = 0; i < other.sequence_count(); ++i) {
    const int32_t len = other.sequence_length(i);
    lengths_->write(&len, 4);
  }
  for (int64_t k = 1; k <= other.document_count(); ++k) {
    const int64_t end = base + other.document_index(k);
    documents_->write(&end, 8);
  }
  sequence_count_ += other.sequence_count();
  document_count_ += other.document_count();
  token_count_ += other.token_count();
}

void IndexedDatasetWriter::finalize() {
  MT_CHECK(!finalized_) << prefix_;
  std::vector<uint8_t> header;
  header.insert(header.end(), kIndexMagic, kIndexMagic + sizeof(kIndexMagic));
  put<uint64_t>(&header, 1);
  put<uint8_t>(&header, static_cast<uint8_t>(dtype_));
  put<uint64_t>(&header, static_cast<uint64_t>(sequence_count_));
  put<uint64_t>(&header, static_cast<uint64_t>(document_count_ + 1));
  idx_->write(header.data(), static_cast<int64_t>(header.size()));

  constexpr int64_t kChunk = 1 << 16;
  std::vector<int32_t> lengths(kChunk);
  std::vector<int64_t> words(kChunk);
  // Pass 1: the lengths, verbatim.
  lengths_->rewind();
  for (int64_t n; (n = lengths_->read(lengths.data(), kChunk * 4)) > 0;) idx_->write(lengths.data(), n);
  // Pass 2: the pointers, a running byte offset over the lengths.
  lengths_->rewind();
  const int64_t itemsize = token_dtype_size(dtype_);
  int64_t address = 0;
  for (int64_t n; (n = lengths_->read(lengths.data(), kChunk * 4)) > 0;) {
    const int64_t count = n / 4;
    for (int64_t k = 0; k < count; ++k) {
      words[k] = address;
      address += static_cast<int64_t>(lengths[k]) * itemsize;
    }
    idx_->write(words.data(), count * 8);
  }
  MT_CHECK_EQ(address, bin_->bytes_written());
  // The document indices: a leading 0, then each document's end.
  const int64_t zero = 0;
  idx_->write(&zero, 8);
  documents_->rewind();
  for (int64_t n; (n = documents_->read(words.data(), kChunk * 8)) > 0;) idx_->write(words.data(), n);

  bin_->finish();
  idx_->finish();
  bin_->commit();
  idx_->commit();
  finalized_ = true;
}

}  // namespace megatron::data
