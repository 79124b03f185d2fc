#include "parallel/optimizer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "comm/self_communicator.h"
#include "core/error.h"

namespace megatron::parallel {

namespace {

// The AdamW segment table of one owned range: the parameter fragments inside it in buffer
// order, neighbours with the same weight-decay rule merged, offsets relative to the range (a
// few hundred bytes: counted as "other", outside the memory plan's kinds). `keep` picks the
// parameters of one learning-rate group; an undefined tensor when none is in the range.
template <class Keep>
Tensor segment_table(const model::ParameterSet& params, const Range& range, backend::Backend& backend, Keep&& keep) {
  std::vector<const model::Parameter*> order;
  for (const model::Parameter& p : params.params()) {
    if (keep(p)) order.push_back(&p);
  }
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->offset < b->offset; });
  std::vector<int64_t> rows;
  for (const model::Parameter* p : order) {
    const int64_t lo = std::max(range.start, p->offset), hi = std::min(range.end, p->offset + p->numel());
    if (lo >= hi) continue;
    const int64_t decay = p->no_weight_decay ? 0 : 1, off = lo - range.start;
    const size_t r = rows.size();
    if (r >= 3 && rows[r - 3] + rows[r - 2] == off && rows[r - 1] == decay) {
      rows[r - 2] += hi - lo;
    } else {
      rows.insert(rows.end(), {off, hi - lo, decay});
    }
  }
  const int64_t S = static_cast<int64_t>(rows.size() / 3);
  if (S == 0) return Tensor();
  Tensor host = Tensor::cpu({S, 3}, DType::kI64);
  std::copy(rows.begin(), rows.end(), host.data_as<int64_t>());
  Tensor table = backend.empty({S, 3}, DType::kI64, MemoryKind::kOther);
  backend.copy(host, table);
  return table;
}

// The parts of `range` holding parameters that count in the norms (see the header), merged.
std::vector<Range> counted_ranges(const model::ParameterSet& params, const Range& range) {
  std::vector<const model::Parameter*> order;
  for (const model::Parameter& p : params.params()) order.push_back(&p);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->offset < b->offset; });
  std::vector<Range> out;
  for (const model::Parameter* p : order) {
    if (!p->counted_in_norms()) continue;
    const int64_t lo = std::max(range.start, p->offset), hi = std::min(range.end, p->offset + p->numel());
    if (lo >= hi) continue;
    if (!out.empty() && out.back().end == lo) {
      out.back().end = hi;
    } else {
      out.push_back({lo, hi});
    }
  }
  return out;
}

}  // namespace

MixedPrecisionOptimizer::MixedPrecisionOptimizer(model::ParameterSet& params, backend::Backend& backend,
                                                 const OptimizerConfig& config, optim::GradScaler scaler,
                                                 const DataParallelOptions& dp)
    : params_(params),
      backend_(backend),
      config_(config),
      scaler_(std::move(scaler)),
      fp16_(params.values().dtype() == DType::kF16),
      self_group_(dp.group ? nullptr : std::make_unique<comm::SelfCommunicator>(backend, "dp")),
      model_parallel_(dp.model_parallel),
      grad_buffer_(params, dp.group ? *dp.group : *self_group_, dp.distributed,
                   BucketLayout{dp.bucket_size, dp.bucket_starts, dp.held_param}, dp.grad_dtype, &backend),
      overlap_param_gather_(dp.overlap_param_gather) {
  const int64_t n = grad_buffer_.owned_numel();
  const bool separate = has_separate_main_params();
  if (separate) main_ = backend.empty({n}, DType::kF32, MemoryKind::kMainParams);
  exp_avg_ = backend.empty({n}, DType::kF32, MemoryKind::kOptimizer);
  exp_avg_sq_ = backend.empty({n}, DType::kF32, MemoryKind::kOptimizer);
  int64_t local = 0;
  for (const Range& r : grad_buffer_.owned()) {
    Shard s;
    s.range = r;
    Tensor values = params.values().flat_view(r.start, {r.size()});
    s.main = separate ? main_.flat_view(local, {r.size()}) : values;
    s.exp_avg = exp_avg_.flat_view(local, {r.size()});
    s.exp_avg_sq = exp_avg_sq_.flat_view(local, {r.size()});
    if (separate) backend.copy(values, s.main);
    if (config.decoupled_lr) {
      s.segments = segment_table(params, r, backend, [](const model::Parameter& p) { return !p.embedding_or_output; });
      s.decoupled_segments =
          segment_table(params, r, backend, [](const model::Parameter& p) { return p.embedding_or_output; });
    } else {
      s.segments = segment_table(params, r, backend, [](const model::Parameter&) { return true; });
    }
    s.norm_ranges = counted_ranges(params, r);
    local += r.size();
    shards_.push_back(std::move(s));
  }
}

float MixedPrecisionOptimizer::loss_scale() const { return fp16_ ? scaler_.scale() : 1.0f; }

void MixedPrecisionOptimizer::zero_grads() { params_.forget_grads(); }

void MixedPrecisionOptimizer::reduce_gradients() {
  if (const int64_t i = params_.first_stale_grad(); i >= 0) {
    throw_error("the backward wrote no gradient for ", params_[i].name, " this step");
  }
  grad_buffer_.finish_grad_sync();
}

double MixedPrecisionOptimizer::reduce_over_state_groups(double value, comm::ReduceOp op, bool include_dp) const {
  if (include_dp) value = comm::all_reduce_scalar(grad_buffer_.group(), value, op);
  if (model_parallel_ != nullptr && model_parallel_->size() > 1)
    value = comm::all_reduce_scalar(*model_parallel_, value, op);
  return value;
}

template <class F>
double MixedPrecisionOptimizer::sum_counted(const Tensor& buffer, F&& f) const {
  double sum = 0.0;
  for (const Shard& s : shards_) {
    for (const Range& r : s.norm_ranges) sum += f(buffer.flat_view(r.start, {r.size()}));
  }
  return sum;
}

bool MixedPrecisionOptimizer::owned_grads_finite() {
  bool finite = true;
  for (const Shard& s : shards_)
    finite = finite && backend_.all_finite(params_.grads().flat_view(s.range.start, {s.range.size()}));
  // Megatron all-reduces found_inf (MAX) over DP and the model-parallel group so that every
  // rank skips the same iterations.
  return reduce_over_state_groups(finite ? 0.0 : 1.0, comm::ReduceOp::kMax, /*include_dp=*/true) == 0.0;
}

double MixedPrecisionOptimizer::owned_sum_squares(bool grads) const {
  // Every counted range's sum from one wait for the device, added in range order (the same
  // double as summing them one by one).
  std::vector<Tensor> parts;
  for (const Shard& s : shards_) {
    for (const Range& r : s.norm_ranges) {
      parts.push_back(grads ? params_.grads().flat_view(r.start, {r.size()})
                            : s.main.flat_view(r.start - s.range.start, {r.size()}));
    }
  }
  double sum = 0.0;
  for (double part : backend_.sum_squares_each(parts)) sum += part;
  // Replicated state: every DP rank already has the whole sum; sharded: add the shards. The
  // model-parallel ranks always hold different parts.
  return reduce_over_state_groups(sum, comm::ReduceOp::kSum, grad_buffer_.distributed());
}

StepResult MixedPrecisionOptimizer::step(float lr, float weight_decay, std::optional<float> decoupled_lr) {
  MT_CHECK(decoupled_lr.has_value() == config_.decoupled_lr) << "decoupled lr given without its parameter group";
  StepResult result;
  Tensor grads = params_.grads();
  auto for_owned_grads = [&](auto&& f) {
    for (const Shard& s : shards_) {
      Tensor g = grads.flat_view(s.range.start, {s.range.size()});
      f(g);
    }
  };

  // A 16-bit gradient buffer is read in place as it is (parallel/optimizer.h, step 2): the
  // unscale is a factor of the norm and of AdamW's read of each gradient.
  const bool sixteen_bit_grads = grads.dtype() != DType::kF32;
  float unscale = 1.0f;
  if (fp16_) {
    // Unscale, then check: a finite value times 1/scale stays finite, so this finds exactly
    // the inf/nan that were there before (torch's non-finite check and unscale).
    start_timer("optimizer-unscale-and-check-inf");
    if (sixteen_bit_grads) {
      unscale = scaler_.inv_scale();
    } else {
      for_owned_grads([&](Tensor& g) { backend_.scale(g, scaler_.inv_scale()); });
    }
    const bool found_inf = !owned_grads_finite();
    stop_timer("optimizer-unscale-and-check-inf");
    scaler_.update(found_inf);
    if (found_inf) {
      result.success = false;
      return result;
    }
  }
  float clip_scale = 1.0f;
  start_timer("optimizer-clip-main-grad");
  if (config_.clip_grad > 0.0) {
    // Megatron clip_grads: the pre-clip norm is logged; clip_coeff = max / (norm + 1e-6)
    // applied as an fp32 factor when < 1. A nan norm never clips; an inf norm zeroes.
    const double u = unscale;
    const double norm = std::sqrt(owned_sum_squares(/*grads=*/true) * u * u);
    result.grad_norm = norm;
    if (config_.check_for_nan_in_grad && std::isnan(norm)) {
      stop_timer("optimizer-clip-main-grad");
      result.success = false;
      result.nan_grad_norm = true;
      return result;
    }
    if (std::isinf(norm)) {
      for_owned_grads([&](Tensor& g) { backend_.fill(g, 0.0f); });
    } else if (!std::isnan(norm)) {
      const double coeff = config_.clip_grad / (norm + 1e-6);
      // Applied by AdamW as it reads each gradient (AdamWStep::grad_scale): the same fp32
      // product as scaling the gradients first, without a pass over them.
      if (coeff < 1.0) clip_scale = static_cast<float>(coeff);
    }
  }
  stop_timer("optimizer-clip-main-grad");
  start_timer("optimizer-count-zeros");
  if (config_.count_zeros) {
    double zeros = sum_counted(grads, [&](const Tensor& g) { return static_cast<double>(backend_.count_zeros(g)); });
    zeros = reduce_over_state_groups(zeros, comm::ReduceOp::kSum, grad_buffer_.distributed());
    result.num_zeros = static_cast<int64_t>(zeros);
  }
  stop_timer("optimizer-count-zeros");

  start_timer("optimizer-inner-step");
  ++steps_;
  // One pass per owned range over all its parameter fragments (weight decay per segment),
  // writing the 16-bit model copy of the range. The distributed optimizer's ranges are pieces
  // of the buckets: each bucket's is updated in the order the forward reads the buckets and its
  // all-gather started at once, so that the gathers run beside the updates of the buckets after
  // it (the forward's first bucket, with the word embedding, is not left to gather after the
  // whole update). The same updates and gathers, in another order: the same bits.
  backend::AdamWStep a;
  a.lr = lr;
  a.beta1 = config_.beta1;
  a.beta2 = config_.beta2;
  a.eps = config_.eps;
  a.weight_decay = weight_decay;
  a.step = steps_;
  a.grad_unscale = unscale;
  a.grad_scale = clip_scale;
  auto update = [&](Shard& s) {
    Tensor model_copy =
        has_separate_main_params() ? params_.values().flat_view(s.range.start, {s.range.size()}) : Tensor();
    Tensor g = grads.flat_view(s.range.start, {s.range.size()});
    // Each group's segments only: the other group's elements are left as they are.
    if (s.segments.defined())
      backend_.adamw_update_segments(s.main, g, s.exp_avg, s.exp_avg_sq, s.segments, a, model_copy);
    if (s.decoupled_segments.defined()) {
      backend::AdamWStep d = a;
      d.lr = *decoupled_lr;
      backend_.adamw_update_segments(s.main, g, s.exp_avg, s.exp_avg_sq, s.decoupled_segments, d, model_copy);
    }
  };
  if (grad_buffer_.distributed()) {
    size_t updated = 0;  // each owned range is a piece of one bucket
    grad_buffer_.start_param_gather(/*overlap=*/true, [&](const Range& bucket) {
      for (Shard& s : shards_) {
        if (s.range.start >= bucket.start && s.range.end <= bucket.end) {
          update(s);
          ++updated;
        }
      }
    });
    MT_CHECK(updated == shards_.size()) << updated << " of " << shards_.size() << " owned ranges updated";
  } else {
    for (Shard& s : shards_) update(s);
  }
  stop_timer("optimizer-inner-step");
  // Megatron's DistributedOptimizer times the gather: here the wait for what the update did not
  // hide (none when it overlaps the next forward), as the gathers are started inside
  // optimizer-inner-step (a communicator without asynchronous collectives, MPI's, runs them
  // there in full); the replicated optimizer has none.
  if (grad_buffer_.distributed()) {
    start_timer("params-all-gather");
    if (!overlap_param_gather_) grad_buffer_.finish_param_gather();
    stop_timer("params-all-gather");
  }
  return result;
}

Tensor MixedPrecisionOptimizer::gather_param_state(const model::Parameter& p, StateKind kind) const {
  MT_CHECK(kind != StateKind::kMainParams || has_separate_main_params()) << "fp32 models keep no main params";
  auto state_of = [&](const Shard& s) -> const Tensor& {
    return kind == StateKind::kMainParams ? s.main : kind == StateKind::kExpAvg ? s.exp_avg : s.exp_avg_sq;
  };
  const int64_t lo = p.offset, hi = p.offset + p.numel();
  comm::Communicator& g = grad_buffer_.group();
  if (!state_sharded()) {
    // This rank holds the whole state: a view of it, or (the distributed optimizer on one
    // rank: a shard per bucket) a copy of its pieces.
    const std::vector<HeldState> held = held_param_state(p, kind);
    if (held.size() == 1) return held[0].values.view(p.shape);
    Tensor out = backend_.empty(p.shape, DType::kF32, MemoryKind::kOther);
    for (const HeldState& h : held) {
      Tensor dst = out.flat_view(h.begin, {h.values.numel()});
      backend_.copy(h.values, dst);
    }
    return out;
  }
  // Sharded: every piece of every bucket that overlaps the range, from its owner to rank 0, in
  // bucket order, each pair of ranks meeting in the same order on both sides.
  const bool root = g.rank() == 0;
  Tensor out = root ? backend_.empty(p.shape, DType::kF32, MemoryKind::kOther) : Tensor();
  for (const Range& b : grad_buffer_.buckets()) {
    if (b.end <= lo || hi <= b.start) continue;
    const std::vector<int64_t> counts = shard_counts(b.size(), g.size());
    for (int64_t r = 0; r < g.size(); ++r) {
      const int64_t start = b.start + comm::piece_offset(counts, r), end = start + counts[static_cast<size_t>(r)];
      const int64_t a = std::max(start, lo), z = std::min(end, hi);
      if (a >= z) continue;
      if (r == g.rank()) {
        const auto it =
            std::find_if(shards_.begin(), shards_.end(), [&](const Shard& s) { return s.range.start == start; });
        MT_CHECK(it != shards_.end()) << "no shard at " << start;
        const Tensor mine = state_of(*it).flat_view(a - start, {z - a});
        if (root) {
          Tensor dst = out.flat_view(a - lo, {z - a});
          backend_.copy(mine, dst);
        } else {
          g.send(mine, 0);
        }
      } else if (root) {
        Tensor dst = out.flat_view(a - lo, {z - a});
        g.recv(dst, r);
      }
    }
  }
  return out;
}

std::vector<MixedPrecisionOptimizer::HeldState> MixedPrecisionOptimizer::held_param_state(const model::Parameter& p,
                                                                                          StateKind kind) const {
  MT_CHECK(kind != StateKind::kMainParams || has_separate_main_params()) << "fp32 models keep no main params";
  std::vector<HeldState> out;
  for (const Shard& s : shards_) {  // in buffer order, so in p's element order
    const int64_t lo = std::max(s.range.start, p.offset), hi = std::min(s.range.end, p.offset + p.numel());
    if (lo >= hi) continue;
    const Tensor& state = kind == StateKind::kMainParams ? s.main
                          : kind == StateKind::kExpAvg   ? s.exp_avg
                                                         : s.exp_avg_sq;
    out.push_back({lo - p.offset, state.flat_view(lo - s.range.start, {hi - lo})});
  }
  if (!state_sharded()) {
    int64_t held = 0;
    for (const HeldState& h : out) held += h.values.numel();
    MT_CHECK_EQ(held, p.numel()) << p.name << ": the replicated state misses part of it";
  }
  return out;
}

void MixedPrecisionOptimizer::restore(int64_t steps, const optim::GradScalerState& scaler) {
  MT_CHECK(steps >= 0) << "optimizer steps " << steps;
  steps_ = steps;
  scaler_.load_state(scaler);
}

void MixedPrecisionOptimizer::reload_main_params_from_model() {
  if (!has_separate_main_params()) return;
  for (Shard& s : shards_) backend_.copy(params_.values().flat_view(s.range.start, {s.range.size()}), s.main);
}

double MixedPrecisionOptimizer::params_norm() const { return std::sqrt(owned_sum_squares(/*grads=*/false)); }

}  // namespace megatron::parallel
