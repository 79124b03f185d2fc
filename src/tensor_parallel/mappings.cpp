#include "tensor_parallel/mappings.h"

#include <vector>

#include "core/error.h"

namespace megatron::tensor_parallel {

void all_reduce_tp(comm::Communicator& tp, Tensor& x) {
  if (tp.size() == 1) return;
  tp.all_reduce(x, comm::ReduceOp::kSum);
}

int64_t shard_rows(const comm::Communicator& tp, int64_t n) {
  MT_CHECK(n % tp.size() == 0) << n << " rows do not split over " << tp.size() << " sequence-parallel ranks";
  return n / tp.size();
}

Tensor sequence_shard(const comm::Communicator& tp, const Tensor& full) {
  const int64_t n = full.dim(0), rows = shard_rows(tp, n), row_numel = full.numel() / n;
  Shape shape = full.shape();
  shape[0] = rows;
  return full.flat_view(tp.rank() * rows * row_numel, shape);
}

void gather_sequence(comm::Communicator& tp, const Tensor& shard, Tensor& full) {
  MT_CHECK_EQ(shard.numel() * tp.size(), full.numel());
  Tensor flat_full = full.view({full.numel()});
  comm::all_gather(tp, shard.view({shard.numel()}), flat_full);
}

void reduce_scatter_sequence(comm::Communicator& tp, Tensor& full, Tensor& shard) {
  MT_CHECK_EQ(shard.numel() * tp.size(), full.numel());
  Tensor flat_full = full.view({full.numel()});
  Tensor flat_shard = shard.view({shard.numel()});
  comm::reduce_scatter(tp, flat_full, flat_shard, comm::ReduceOp::kSum);
}

std::unique_ptr<comm::PendingCollective> start_all_reduce_tp(comm::Communicator& tp, Tensor& x) {
  if (tp.size() == 1) return std::make_unique<comm::FinishedCollective>();
  return tp.start_all_reduce(x, comm::ReduceOp::kSum);
}

std::unique_ptr<comm::PendingCollective> start_reduce_scatter_sequence(comm::Communicator& tp, Tensor& full,
                                                                       Tensor& shard) {
  MT_CHECK_EQ(shard.numel() * tp.size(), full.numel());
  // One rank, in place: the shard already holds the sum.
  if (tp.size() == 1 && shard.data() == full.data()) return std::make_unique<comm::FinishedCollective>();
  Tensor flat_full = full.view({full.numel()});
  Tensor flat_shard = shard.view({shard.numel()});
  const std::vector<int64_t> counts(static_cast<size_t>(tp.size()), flat_shard.numel());
  return tp.start_reduce_scatter(flat_full, flat_shard, counts, comm::ReduceOp::kSum);
}

std::unique_ptr<comm::PendingCollective> start_gather_sequence(comm::Communicator& tp, const Tensor& shard,
                                                               Tensor& full) {
  MT_CHECK_EQ(shard.numel() * tp.size(), full.numel());
  Tensor flat_full = full.view({full.numel()});
  const std::vector<int64_t> counts(static_cast<size_t>(tp.size()), shard.numel());
  return tp.start_all_gather(shard.view({shard.numel()}), flat_full, counts);
}

}  // namespace megatron::tensor_parallel
