#include "support/walk_corpus.h"

#include <span>
#include <vector>

#include "data/indexed_dataset.h"

namespace megatron::test {

namespace {

// `documents` walks t -> (3t + 1) mod 37 from t = d mod 37, of length(d) tokens, then `eod`
// (if >= 0).
template <class Length>
std::string write_walks(const std::string& dir, int documents, Length length, int32_t eod) {
  const std::string prefix = dir + "/walk_text_document";
  data::IndexedDatasetWriter writer(prefix, data::TokenDType::kUInt16);
  for (int d = 0; d < documents; ++d) {
    std::vector<int32_t> tokens;
    int32_t t = d % 37;
    for (int i = 0; i < length(d); ++i) {
      tokens.push_back(t);
      t = (3 * t + 1) % 37;
    }
    if (eod >= 0) tokens.push_back(eod);
    const int32_t len = static_cast<int32_t>(tokens.size());
    writer.add_document(tokens, std::span<const int32_t>(&len, 1));
  }
  writer.finalize();
  return prefix;
}

}  // namespace

std::string write_walk_corpus(const std::string& dir) {
  return write_walks(
      dir, 120, [](int d) { return 40 + d % 7; }, -1);
}

std::string write_short_walk_corpus(const std::string& dir) {
  return write_walks(
      dir, 400, [](int d) { return 3 + d % 9; }, 50256);
}

}  // namespace megatron::test
