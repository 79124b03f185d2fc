#include "data/document_starts.h"

#include "core/error.h"

namespace megatron::data {

void document_starts(std::span<const int32_t> tokens, int32_t eod, std::span<int32_t> start) {
  MT_CHECK(start.size() == tokens.size())
      << "document_starts: " << start.size() << " outputs for " << tokens.size() << " tokens";
  int32_t current = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    start[t] = current;
    if (tokens[t] == eod) current = static_cast<int32_t>(t + 1);
  }
}

}  // namespace megatron::data
