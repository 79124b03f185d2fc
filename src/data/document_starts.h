// Documents packed into one training sample: where each token's document begins.
//
// Megatron's GPT samples run across document boundaries; the end-of-document token (eod,
// 50256 for GPT-2) separates them. get_ltor_masks_and_position_ids (megatron/core/datasets/
// gpt_dataset.py) then, for the s input tokens of a sample and each eod at position i:
//   --reset-attention-mask: attention_mask[(i+1):, :(i+1)] = 0 (no token after the eod sees
//                           it or anything before it);
//   --reset-position-ids:   position_ids[(i+1):] restart at 0.
// Both follow from one array: start[t] = 1 + the position of the last eod before t (0 if
// none), the first position of t's document. The eod itself belongs to the document it ends.
// Then position_ids[t] = t - start[t], and query t attends to keys start[t] .. t
// (AttentionParams::key_start).
#pragma once

#include <cstdint>
#include <span>

namespace megatron::data {

// start[t] for the input tokens of one sample (start.size() == tokens.size()).
void document_starts(std::span<const int32_t> tokens, int32_t eod, std::span<int32_t> start);

}  // namespace megatron::data
