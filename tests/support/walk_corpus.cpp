#include "support/walk_corpus.h"

#include <span>
#include <vector>

#include "data/indexed_dataset.h"

namespace megatron::test {

std::string write_walk_corpus(const std::string& dir) {
  const std::string prefix = dir + "/walk_text_document";
  data::IndexedDatasetWriter writer(prefix, data::TokenDType::kUInt16);
  for (int d = 0; d < 120; ++d) {
    std::vector<int32_t> tokens;
    int32_t t = d % 37;
    for (int i = 0; i < 40 + d % 7; ++i) {
      tokens.push_back(t);
      t = (3 * t + 1) % 37;
    }
    const int32_t len = static_cast<int32_t>(tokens.size());
    writer.add_document(tokens, std::span<const int32_t>(&len, 1));
  }
  writer.finalize();
  return prefix;
}

}  // namespace megatron::test
