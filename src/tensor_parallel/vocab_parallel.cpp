#include "tensor_parallel/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

std::vector<double> vocab_parallel_cross_entropy(backend::Backend& backend, comm::Communicator& tp,
                                                 const Tensor& logits, const Tensor& local_labels,
                                                 Tensor& losses_scratch, Tensor& lse) {
  const int64_t n = lse.numel();
  backend.cross_entropy_forward(logits, local_labels, losses_scratch, lse);
  Tensor host_lse = Tensor::cpu({n}, DType::kF32), host_loss = Tensor::cpu({n}, DType::kF32);
  Tensor host_labels = Tensor::cpu({n}, DType::kI32);
  backend.copy(lse, host_lse);
  backend.copy(losses_scratch, host_loss);
  backend.copy(local_labels, host_labels);
  const float* l = host_lse.data_as<float>();
  const float* ls = host_loss.data_as<float>();
  const int32_t* lab = host_labels.data_as<int32_t>();

  // [0, n): the slice lse (then the max); [n, 2n): exp(lse_r - M) (then S); [2n, 3n): target.
  std::vector<double> v(static_cast<size_t>(3 * n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = l[i];
  tp.all_reduce_host(std::span<double>(v.data(), static_cast<size_t>(n)), comm::ReduceOp::kMax);
  for (int64_t i = 0; i < n; ++i) {
    const double m = v[static_cast<size_t>(i)];
    // A slice of -inf logits only (m finite elsewhere) adds exp(-inf) = 0.
    v[static_cast<size_t>(n + i)] = std::isinf(m) ? (l[i] == m ? 1.0 : 0.0) : std::exp(static_cast<double>(l[i]) - m);
    v[static_cast<size_t>(2 * n + i)] = lab[i] >= 0 ? static_cast<double>(l[i]) - static_cast<double>(ls[i]) : 0.0;
  }
  tp.all_reduce_host(std::span<double>(v.data() + n, static_cast<size_t>(2 * n)), comm::ReduceOp::kSum);
  std::vector<double> losses(static_cast<size_t>(n));
  float* out_lse = host_lse.data_as<float>();
  for (int64_t i = 0; i < n; ++i) {
    const double total_lse = v[static_cast<size_t>(i)] + std::log(v[static_cast<size_t>(n + i)]);
    out_lse[i] = static_cast<float>(total_lse);
    losses[static_cast<size_t>(i)] = total_lse - v[static_cast<size_t>(2 * n + i)];
  }
  backend.copy(host_lse, lse);
  return losses;
}

}  // namespace megatron::tensor_parallel
