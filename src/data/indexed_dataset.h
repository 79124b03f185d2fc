// Megatron's indexed dataset: "<prefix>.bin" (raw tokens) + "<prefix>.idx" (MMIDIDX v1).
//
// .idx layout (little-endian; docs/megatron-formats.md, "Indexed dataset"):
//   0   9 B  magic "MMIDIDX\0\0"
//   9   u64  version = 1
//   17  u8   dtype code of the tokens (8 = uint16, 4 = int32, ...)
//   18  u64  S = sequence count
//   26  u64  D+1 = document count + 1 (length of document_indices)
//   34  i32[S]   sequence lengths (tokens)
//       i64[S]   sequence pointers (byte offset in .bin; pointer[i] = sum of earlier lengths * itemsize)
//       i64[D+1] document indices (0, then the exclusive end sequence of each document)
// Example: documents of 3 and 2 tokens as uint16 give an 82-byte .idx with
// lengths (3, 2), pointers (0, 6), document indices (0, 1, 2).
//
// The arrays start at byte 34, so they are not aligned: read them through the
// accessors below (memcpy loads), never through a reinterpret_cast'ed pointer.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/file.h"
#include "data/sequence_source.h"

namespace megatron::data {

// Megatron's DType codes.
enum class TokenDType : uint8_t {
  kUInt8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUInt16 = 8,
};
int64_t token_dtype_size(TokenDType dtype);
const char* token_dtype_name(TokenDType dtype);
// Megatron's DType.optimal_dtype: uint16 when vocab_size < 65500, else int32.
TokenDType optimal_token_dtype(int64_t vocab_size);

std::string index_file_path(const std::string& prefix);  // prefix + ".idx"
std::string data_file_path(const std::string& prefix);   // prefix + ".bin"

inline constexpr char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr int64_t kIndexHeaderBytes = 34;

// A memory-mapped dataset, validated on open: magic, version, dtype, array sizes
// against the .idx size, document indices non-decreasing and ending at S, and every
// sequence inside the .bin (pointer[i] = sum of earlier lengths * itemsize and
// the .bin size equals the total). A bad file throws Error naming it and the fault.
class IndexedDataset final : public SequenceSource {
 public:
  explicit IndexedDataset(const std::string& prefix);

  const std::string& prefix() const override { return prefix_; }
  TokenDType dtype() const { return dtype_; }
  int64_t sequence_count() const override { return sequence_count_; }
  int64_t document_count() const { return document_count_; }  // D, without the +1
  int64_t token_count() const { return token_count_; }

  int32_t sequence_length(int64_t i) const override { return load<int32_t>(lengths_ + 4 * i); }
  int64_t sequence_pointer(int64_t i) const { return load<int64_t>(pointers_ + 8 * i); }
  // i in [0, D]: document_index(k) .. document_index(k+1) are document k's sequences.
  int64_t document_index(int64_t i) const { return load<int64_t>(documents_ + 8 * i); }
  // All sequence lengths, copied into an aligned array.
  std::vector<int32_t> sequence_lengths() const override;

  void get(int64_t i, int64_t offset, int64_t length, std::vector<int64_t>* out) const override;

  const MappedFile& index_file() const { return idx_; }
  const MappedFile& data_file() const { return bin_; }

 private:
  template <class T>
  static T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }

  std::string prefix_;
  MappedFile idx_;
  MappedFile bin_;
  TokenDType dtype_ = TokenDType::kUInt16;
  int64_t sequence_count_ = 0;
  int64_t document_count_ = 0;
  int64_t token_count_ = 0;
  const uint8_t* lengths_ = nullptr;
  const uint8_t* pointers_ = nullptr;
  const uint8_t* documents_ = nullptr;
};

// Writes a dataset the way Megatron's IndexedDatasetBuilder does, streaming:
// tokens go straight to the .bin, the per-sequence lengths and document ends are
// spilled to scratch files, so memory stays constant whatever the corpus size.
// Files are written under temporary names; finalize() renames .bin then .idx into
// place. A writer destroyed without finalize() leaves nothing behind.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& prefix, TokenDType dtype);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // One document made of sequences of the given lengths (Megatron's add_document).
  // sum(sequence_lengths) must equal tokens.size(); no sequences = an empty document.
  void add_document(std::span<const int32_t> tokens, std::span<const int32_t> sequence_lengths);
  // Appends a whole dataset of the same dtype (Megatron's add_index / merge_file_).
  void add_dataset(const IndexedDataset& other);
  void finalize();

  int64_t sequence_count() const { return sequence_count_; }
  int64_t document_count() const { return document_count_; }
  int64_t token_count() const { return token_count_; }
  int64_t bin_bytes() const;

 private:
  void write_tokens(std::span<const int32_t> tokens);

  std::string prefix_;
  TokenDType dtype_;
  std::unique_ptr<AtomicFile> bin_;
  std::unique_ptr<AtomicFile> idx_;
  std::unique_ptr<SpillFile> lengths_;    // int32 per sequence
  std::unique_ptr<SpillFile> documents_;  // int64 per document: its exclusive end sequence
  std::vector<uint8_t> convert_buffer_;
  int64_t sequence_count_ = 0;
  int64_t document_count_ = 0;
  int64_t token_count_ = 0;
  bool finalized_ = false;
};

}  // namespace megatron::data
