// --reset-position-ids / --reset-attention-mask: a micro-batch's documents, from the end-of-
// document tokens among its input tokens (data/document_starts.h has Megatron's rule).
#pragma once

#include <cstdint>

#include "model/gpt_model.h"

namespace megatron::train {

// Fills mb->position_ids (with c.reset_position_ids) and mb->key_start (with
// c.reset_attention_mask) from mb->tokens, row by row; leaves them empty otherwise.
void mark_documents(const model::GPTConfig& c, int64_t eod, model::MicroBatch* mb);

}  // namespace megatron::train
