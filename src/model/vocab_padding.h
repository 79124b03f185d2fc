// The padded vocabulary: the embedding and output tables have this many rows, so that each
// tensor-parallel rank holds an equal, GEMM-friendly slice (docs/megatron-formats.md,
// "Tensor-parallel layers and vocabulary padding").
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace megatron::model {

// Megatron's _vocab_size_with_padding: the vocabulary padded up to a multiple of
// divisible_by * tp. Example: (50257, 128, 1) -> 50304 (47 dummy tokens);
// (50257, 128, 8) -> 51200 (943 dummy tokens). Throws megatron::Error for non-positive inputs.
int64_t padded_vocab_size(int64_t vocab, int64_t divisible_by, int64_t tp);
// The same, also writing Megatron's rank-0 line to `log` when it is not null:
// " > padded vocab (size: 50257) with 47 dummy tokens (new size: 50304)\n".
int64_t padded_vocab_size(int64_t vocab, int64_t divisible_by, int64_t tp, std::ostream* log);
std::string padded_vocab_message(int64_t vocab, int64_t padded);

}  // namespace megatron::model
