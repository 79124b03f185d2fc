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

void GradBuffer::start_grad_bucket(size_t i) {
  const int64_t dp = dp_.size();
  const Range& b = buckets_[i];
  Tensor bucket = params_.grads().flat_view(b.start, {b.size()});
  // Megatron scales before the reduction (gradient_scaling_factor = 1/dp): the sum of
  // already-averaged terms stays in range where the sum of raw ones might not.
  // Scaling by a power of two is exact; for other dp it rounds once per element.
  if (b.size() > 0) backend_.scale(bucket, 1.0f / static_cast<float>(dp));
  if (distributed_) {
    const std::vector<int64_t> counts = shard_counts(b.size(), dp);
    Tensor mine = bucket.flat_view(comm::piece_offset(counts, dp_.rank()), {counts[static_cast<size_t>(dp_.rank())]});
    grad_pending_.push_back(dp_.start_reduce_scatter(bucket, mine, counts, comm::ReduceOp::kSum));
  } else {
    grad_pending_.push_back(dp_.start_all_reduce(bucket, comm::ReduceOp::kSum));
  }
}

void GradBuffer::grads_final_from(int64_t k) {
  if (!armed_ || dp_.size() == 1) return;
  const auto& ps = params_.params();
  const int64_t first = k < static_cast<int64_t>(ps.size()) ? ps[static_cast<size_t>(k)].offset : params_.total_numel();
  // Buckets run from the end of the buffer towards 0: bucket i is complete once every
  // element from its start on is final.
  while (next_grad_bucket_ < buckets_.size() && buckets_[next_grad_bucket_].start >= first) {
    start_grad_bucket(next_grad_bucket_++);
  }
}

void GradBuffer::finish_grad_sync() {
  armed_ = false;
  if (dp_.size() == 1) return;
  while (next_grad_bucket_ < buckets_.size()) start_grad_bucket(next_grad_bucket_++);
  for (auto& p : grad_pending_) p->wait();
  grad_pending_.clear();
  next_grad_bucket_ = 0;
}

void GradBuffer::start_param_gather(bool overlap) {
  if (!distributed_ || dp_.size() == 1) return;
  finish_param_gather();
  Tensor values = params_.values();
  gather_pending_.resize(buckets_.size());
  // The forward reads from parameter 0 on: the last bucket first.
  for (size_t i = buckets_.size(); i-- > 0;) {
    const Range& b = buckets_[i];
    const std::vector<int64_t> counts = shard_counts(b.size(), dp_.size());
    Tensor bucket = values.flat_view(b.start, {b.size()});
    Tensor mine = bucket.flat_view(comm::piece_offset(counts, dp_.rank()), {counts[static_cast<size_t>(dp_.rank())]});
    gather_pending_[i] = dp_.start_all_gather(mine, bucket, counts);
  }
  if (!overlap) finish_param_gather();
}

void GradBuffer::before_reading(int64_t k) {
  if (gather_pending_.empty()) return;
  const auto& ps = params_.params();
  const int64_t end = k < static_cast<int64_t>(ps.size()) ? ps[static_cast<size_t>(k)].offset : params_.total_numel();
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (buckets_[i].start < end && gather_pending_[i]) {
      gather_pending_[i]->wait();
      gather_pending_[i].reset();
    }
  }
}

void GradBuffer::finish_param_gather() {
  for (auto& p : gather_pending_) {
    if (p) p->wait();
  }
  gather_pending_.clear();
}

}  // namespace megatron::train
