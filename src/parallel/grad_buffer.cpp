#include "parallel/grad_buffer.h"

#include <algorithm>

#include "core/error.h"

namespace megatron::parallel {

std::vector<Range> grad_buckets(const model::ParameterSet& params, int64_t bucket_size,
                                const std::vector<int64_t>& starts, int64_t held) {
  std::vector<int64_t> offsets;
  for (const model::Parameter& p : params.params()) offsets.push_back(p.offset);
  return parallel::grad_buckets(offsets, params.total_numel(), bucket_size, starts, held);
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

std::vector<Range> grad_buckets(const model::ParameterSet& params, const BucketLayout& layout) {
  return grad_buckets(params, layout.bucket_size, layout.starts, layout.held);
}

GradBuffer::GradBuffer(model::ParameterSet& params, comm::Communicator& dp, bool distributed, int64_t bucket_size)
    : GradBuffer(params, dp, distributed, BucketLayout{bucket_size, {}, -1}) {}

GradBuffer::GradBuffer(model::ParameterSet& params, comm::Communicator& dp, bool distributed,
                       const BucketLayout& layout)
    : GradBuffer(params, dp, distributed, layout, DType::kF32, nullptr) {}

GradBuffer::GradBuffer(model::ParameterSet& params, comm::Communicator& dp, bool distributed,
                       const BucketLayout& layout, DType grad_dtype, backend::Backend* backend)
    : params_(params),
      dp_(dp),
      distributed_(distributed),
      grad_dtype_(grad_dtype),
      backend_(backend),
      buckets_(grad_buckets(params, layout)),
      held_(buckets_.size()) {
  MT_CHECK(grad_dtype == DType::kF32 || ((grad_dtype == DType::kBF16 || grad_dtype == DType::kF16) && backend))
      << "gradient buffer in " << dtype_name(grad_dtype) << (backend ? "" : " without a backend");
  MT_CHECK(params.grads().dtype() == grad_dtype)
      << "gradient buffer in " << dtype_name(grad_dtype) << " over parameters whose gradients are "
      << dtype_name(params.grads().dtype()) << " (ParameterSet::allocate's grad_dtype)";
  if (layout.held >= 0) {
    const int64_t k = layout.held;
    for (size_t i = 0; i < buckets_.size(); ++i) {
      if (buckets_[i].start == offset_of(k) && buckets_[i].end == offset_of(k + 1)) held_ = i;
    }
    MT_CHECK(held_ < buckets_.size()) << "no bucket of its own for parameter " << k;
  }
  grad_started_.assign(buckets_.size(), false);
  owned_ = distributed_ ? owned_ranges(buckets_, dp_.size(), dp_.rank())
                        : std::vector<Range>{Range{0, params.total_numel()}};
  for (const Range& r : owned_) owned_numel_ += r.size();
}

int64_t GradBuffer::offset_of(int64_t k) const {
  const auto& ps = params_.params();
  return k < static_cast<int64_t>(ps.size()) ? ps[static_cast<size_t>(k)].offset : params_.total_numel();
}

void GradBuffer::start_grad_bucket(size_t i) {
  grad_started_[i] = true;
  const int64_t dp = dp_.size();
  const Range& b = buckets_[i];
  Tensor bucket = params_.grads().flat_view(b.start, {b.size()});
  // A 16-bit buffer is scaled in its dtype first and summed in it (see the header); fp32
  // averages in the collective.
  const bool sixteen = grad_dtype_ != DType::kF32;
  if (sixteen) backend_->scale(bucket, 1.0f / static_cast<float>(dp));
  const comm::ReduceOp op = sixteen ? comm::ReduceOp::kSum : comm::ReduceOp::kAvg;
  // Megatron scales by 1/dp before the reduction (gradient_scaling_factor), so that the sum
  // of already-averaged terms stays in range where the sum of raw ones might not. kAvg does
  // that multiplication inside the collective (NCCL's pre-multiplied sum), the same products
  // without a pass of its own over the bucket (2.65 ms of a 1.3B DP2 step on H200, 2%).
  if (distributed_) {
    const std::vector<int64_t> counts = shard_counts(b.size(), dp);
    Tensor mine = bucket.flat_view(comm::piece_offset(counts, dp_.rank()), {counts[static_cast<size_t>(dp_.rank())]});
    const bool on_sms = copy_engine_ && i + kTailBucketsOnSms >= buckets_.size();
    if (on_sms) dp_.use_copy_engine(false);
    grad_pending_.push_back(dp_.start_reduce_scatter(bucket, mine, counts, op));
    if (on_sms) dp_.use_copy_engine(true);
  } else {
    grad_pending_.push_back(dp_.start_all_reduce(bucket, op));
  }
}

int64_t GradBuffer::copy_engine_receive_elements() const {
  return parallel::copy_engine_receive_elements(buckets_, dp_.size());
}

comm::CopyEngineResult GradBuffer::enable_copy_engine() {
  if (!distributed_) return {false, "needs --use-distributed-optimizer: an all-reduce needs the SMs"};
  if (dp_.size() == 1) return {false, "one data-parallel rank"};
  const Tensor buffers[] = {params_.values(), params_.grads()};
  comm::CopyEngineResult r = dp_.enable_copy_engine(buffers, copy_engine_receive_elements());
  copy_engine_ = r.on;
  return r;
}

void GradBuffer::arm_grad_overlap(int64_t first, int64_t end) {
  MT_CHECK(first <= end) << "arm_grad_overlap(" << first << ", " << end << ")";
  armed_ = {offset_of(first), offset_of(end)};
}

void GradBuffer::grads_final_from(int64_t k) {
  if (armed_.size() == 0 || dp_.size() == 1) return;
  const int64_t first = offset_of(k);
  // Within the armed chunk the gradients from `first` to the chunk's end are final: every
  // bucket of the chunk starting at or after `first` is complete (buckets run from the end of
  // the buffer towards 0, so these are taken in backprop order).
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const Range& b = buckets_[i];
    if (!grad_started_[i] && i != held_ && b.start >= first && b.start >= armed_.start && b.end <= armed_.end) {
      start_grad_bucket(i);
    }
  }
}

void GradBuffer::finish_grad_sync() {
  armed_ = {};
  if (dp_.size() == 1) return;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (!grad_started_[i]) start_grad_bucket(i);
  }
  for (auto& p : grad_pending_) p->wait();
  grad_pending_.clear();
  grad_started_.assign(buckets_.size(), false);
}

void GradBuffer::start_param_gather(bool overlap) {
  start_param_gather(overlap, [](const Range&) {});
}

void GradBuffer::start_param_gather(bool overlap, const std::function<void(const Range& bucket)>& update) {
  const bool gather = distributed_ && dp_.size() > 1;
  if (gather) finish_param_gather();
  Tensor values = params_.values();
  if (gather) gather_pending_.resize(buckets_.size());
  // The forward reads from parameter 0 on (chunk by chunk, in schedule order): the last bucket
  // first.
  for (size_t i = buckets_.size(); i-- > 0;) {
    const Range& b = buckets_[i];
    update(b);
    if (!gather) continue;
    const std::vector<int64_t> counts = shard_counts(b.size(), dp_.size());
    Tensor bucket = values.flat_view(b.start, {b.size()});
    Tensor mine = bucket.flat_view(comm::piece_offset(counts, dp_.rank()), {counts[static_cast<size_t>(dp_.rank())]});
    gather_pending_[i] = dp_.start_all_gather(mine, bucket, counts);
  }
  if (!overlap) finish_param_gather();
}

void GradBuffer::before_reading(int64_t k) {
  if (gather_pending_.empty()) return;
  const int64_t end = offset_of(k);
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

}  // namespace megatron::parallel
