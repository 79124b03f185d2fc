#include "train/micro_batch_documents.h"

#include <span>
#include <vector>

#include "core/error.h"
#include "data/document_starts.h"

namespace megatron::train {

void mark_documents(const model::GPTConfig& c, int64_t eod, model::MicroBatch* mb) {
  const int64_t b = mb->batch, s = mb->seq;
  MT_CHECK(static_cast<int64_t>(mb->tokens.size()) == b * s)
      << "mark_documents: " << mb->tokens.size() << " tokens for " << b << "x" << s;
  mb->position_ids.assign(c.reset_position_ids ? static_cast<size_t>(b * s) : 0, 0);
  mb->key_start.assign(c.reset_attention_mask ? static_cast<size_t>(b * s) : 0, 0);
  if (!c.reset_position_ids && !c.reset_attention_mask) return;
  std::vector<int32_t> starts(static_cast<size_t>(s));
  for (int64_t i = 0; i < b; ++i) {
    data::document_starts(std::span<const int32_t>(mb->tokens.data() + i * s, static_cast<size_t>(s)),
                          static_cast<int32_t>(eod), starts);
    for (int64_t t = 0; t < s; ++t) {
      const int32_t start = starts[static_cast<size_t>(t)];
      const size_t k = static_cast<size_t>(i * s + t);
      if (c.reset_position_ids) mb->position_ids[k] = static_cast<int32_t>(t) - start;
      if (c.reset_attention_mask) mb->key_start[k] = start;
    }
  }
}

}  // namespace megatron::train
