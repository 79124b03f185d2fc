#include "model/vocab_padding.h"

#include "core/checked_int.h"
#include "core/error.h"

namespace megatron::model {

std::string padded_vocab_message(int64_t vocab, int64_t padded) {
  return str_cat(" > padded vocab (size: ", vocab, ") with ", padded - vocab, " dummy tokens (new size: ", padded, ")");
}

int64_t padded_vocab_size(int64_t vocab, int64_t divisible_by, int64_t tp) {
  if (vocab <= 0) throw_error("[vocab] vocabulary size must be positive, got ", vocab);
  if (divisible_by <= 0) {
    throw_error("[--make-vocab-size-divisible-by] must be positive, got ", divisible_by);
  }
  if (tp <= 0) throw_error("[--tensor-model-parallel-size] must be positive, got ", tp);
  try {
    const CheckedInt multiple = CheckedInt(divisible_by) * tp;
    return ((vocab + multiple - 1) / multiple * multiple).value();
  } catch (const IntegerOverflow&) {
    throw_error("[--make-vocab-size-divisible-by] the vocabulary (", vocab, ") padded to a multiple of ", divisible_by,
                " x --tensor-model-parallel-size ", tp, " does not fit in 64 bits");
  }
}

int64_t padded_vocab_size(int64_t vocab, int64_t divisible_by, int64_t tp, std::ostream* log) {
  const int64_t padded = padded_vocab_size(vocab, divisible_by, tp);
  if (log != nullptr) *log << padded_vocab_message(vocab, padded) << "\n";
  return padded;
}

}  // namespace megatron::model
