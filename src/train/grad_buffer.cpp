#include "train/grad_buffer.h"

#include <algorithm>

#include "core/error.h"

namespace megatron::train {

std::vector<Range> grad_buckets(const model::ParameterSet& params, int64_t bucket_size) {
  std::vector<Range> buckets;
  const auto& ps = params.params();
  int64_t end = params.total_numel();
  for (size_t i = ps.size(); i-- > 0;) {
    const int64_t start = ps[i].offset;
    if (bucket_size > 0 && end - start >= bucket_size) {
      buckets.push_back({start, end});
      end = start;
    }
  }
  if (end > 0 || buckets.empty()) buckets.push_back({0, end});
  return buckets;
}

std::vector<int64_t> shard_counts(int64_t n, int64_t dp) {
  MT_CHECK(dp >= 1 && n >= 0) << "shard_counts(" << n << ", " << dp << ")";
  const int64_t s = (n + dp - 1) / dp;
  std::vector<int64_t> counts(static_cast<size_t>(dp));
  for (int64_t r = 0; r < dp; ++r) counts[static_cast<size_t>(r)] = std::clamp<int64_t>(n - r * s, 0, s);
  return counts;
}

std::vector<Range> owned_ranges(const std::vector<Range>& buckets, int64_t dp, int64_t rank) {
  std::vector<Range> owned;
  for (const Range& b : buckets) {
    const std::vector<int64_t> counts = shard_counts(b.size(), dp);
    const int64_t start = b.start + comm::piece_offset(counts, rank);
    const int64_t n = counts[static_cast<size_t>(rank)];
    if (n > 0) owned.push_back({start, start + n});
  }
  return owned;
}

GradBuffer::GradBuffer(model::ParameterSet& params, backend::Backend& backend, comm::Communicator& dp, bool distributed,
                       int64_t bucket_size)
    : params_(params), backend_(backend), dp_(dp), distributed_(distributed), buckets_(grad_buckets(params, bucket_size)) {
  owned_ = distributed_ ? owned_ranges(buckets_, dp_.size(), dp_.rank())
                        : std::vector<Range>{Range{0, params.total_numel()}};
  for (const Range& r : owned_) owned_numel_ += r.size();
}

void GradBuffer::reduce_gradients() {
  const int64_t dp = dp_.size();
  if (dp == 1) return;
  Tensor grads = params_.grads();
  for (const Range& b : buckets_) {
    Tensor bucket = grads.flat_view(b.start, {b.size()});
    // Megatron scales before the reduction (gradient_scaling_factor = 1/dp): the sum of
    // already-averaged terms stays in range where the sum of raw ones might not.
    // Scaling by a power of two is exact; for other dp it rounds once per element.
    if (b.size() > 0) backend_.scale(bucket, 1.0f / static_cast<float>(dp));
    if (distributed_) {
      const std::vector<int64_t> counts = shard_counts(b.size(), dp);
      Tensor mine = bucket.flat_view(comm::piece_offset(counts, dp_.rank()), {counts[static_cast<size_t>(dp_.rank())]});
      dp_.reduce_scatter(bucket, mine, counts, comm::ReduceOp::kSum);
    } else {
      dp_.all_reduce(bucket, comm::ReduceOp::kSum);
    }
  }
}

void GradBuffer::gather_parameters() {
  if (!distributed_ || dp_.size() == 1) return;
  Tensor values = params_.values();
  for (const Range& b : buckets_) {
    const std::vector<int64_t> counts = shard_counts(b.size(), dp_.size());
    Tensor bucket = values.flat_view(b.start, {b.size()});
    Tensor mine = bucket.flat_view(comm::piece_offset(counts, dp_.rank()), {counts[static_cast<size_t>(dp_.rank())]});
    dp_.all_gather(mine, bucket, counts);
  }
}

}  // namespace megatron::train
