#include "tensor_parallel/vocab_parallel.h"

#include "core/error.h"

namespace megatron::tensor_parallel {

VocabRange vocab_range(int64_t padded_vocab, int64_t rank, int64_t size) {
  MT_CHECK(size >= 1 && rank >= 0 && rank < size && padded_vocab % size == 0)
      << "vocabulary of " << padded_vocab << " over " << size << " ranks (rank " << rank << ")";
  const int64_t per = padded_vocab / size;
  return {rank * per, per};
}

std::vector<int32_t> localize_ids(const std::vector<int32_t>& ids, const VocabRange& range) {
  std::vector<int32_t> out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    out[i] = range.contains(ids[i]) ? static_cast<int32_t>(ids[i] - range.start) : -1;
  }
  return out;
}

void vocab_parallel_cross_entropy(backend::Backend& backend, comm::Communicator& tp, const Tensor& logits,
                                  const Tensor& local_labels, Tensor& max_scratch, Tensor& losses, Tensor& lse) {
  backend.cross_entropy_forward(logits, local_labels, losses, lse);  // the slice's lse and loss
  backend.copy(lse, max_scratch);
  tp.all_reduce(max_scratch, comm::ReduceOp::kMax);  // M
  backend.vocab_parallel_ce_terms(max_scratch, local_labels, lse, losses);
  tp.all_reduce(lse, comm::ReduceOp::kSum);     // S
  tp.all_reduce(losses, comm::ReduceOp::kSum);  // the target logit
  backend.vocab_parallel_ce_finish(max_scratch, lse, losses);
}

}  // namespace megatron::tensor_parallel
