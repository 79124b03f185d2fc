// The optimizer step (train/ holds it because it ties model/ parameters to optim/ math) of
// Megatron's MixedPrecisionOptimizer / FP32Optimizer (docs/megatron-formats.md, "Mixed precision,
// loss scaling, skipped iterations" and "Gradient clipping") over a model::ParameterSet:
//   1. gradients are read in place from the gradient buffer (main_grad): fp32, or bf16/fp16
//      (parallel/grad_buffer.h, "Gradient dtype"), widened exactly as they are read;
//   2. fp16: unscale by 1/loss_scale and check for inf/nan; the scaler updates; on overflow
//      the step is skipped (returns success = false, no grad norm, the LR does not step).
//      An fp32 buffer is unscaled in place; a 16-bit one cannot be without rounding the
//      quotients (Megatron unscales fp32 copies of them, main_param.grad), so the check reads
//      the 16-bit values (g / scale is finite iff g is: 1 <= scale), the norm is the 16-bit
//      sum of squares times (1/scale)^2 and AdamW multiplies each gradient by 1/scale as it
//      reads it (AdamWStep::grad_unscale). With a power-of-two scale (the dynamic scaler from
//      a power of two, Megatron's 2^32 default) every product is exact: the same bits as
//      unscaling fp32 copies; otherwise the norm is of the exact quotients (a last-bit
//      difference of the double), the update still takes Megatron's rounded fp32 quotient;
//   3. the global L2 norm is taken (the logged, pre-clip "grad norm") and gradients clipped
//      to --clip-grad (the factor is applied by AdamW as it reads each gradient, so the
//      buffer itself stays unclipped; --log-num-zeros-in-grad counts it: the same zeros but
//      for products that would underflow);
//   4. AdamW on the fp32 main parameters (the model's own values under fp32), weight decay
//      off for biases and 1-D tensors, the embedding and output layer at --decoupled-lr;
//   5. main parameters are copied back to the model dtype (round-to-nearest-even).
// State: fp32 main parameters when the model dtype is bf16/fp16 (MemoryKind::kMainParams),
// Adam exp_avg and exp_avg_sq (MemoryKind::kOptimizer), the loss scaler and the step count.
// Every step runs through backend ops (scale, all_finite, sum_squares, adamw_update_segments), so
// it runs on any backend; the scalars it needs on the host are the norm and the inf flag.
//
// Data parallelism (parallel/grad_buffer.h). reduce_gradients() averages the gradients over the
// data-parallel group. Without --use-distributed-optimizer every rank then holds the same gradients
// and steps the whole (replicated) state. With it (docs/megatron-formats.md, "Distributed optimizer
// and gradient buffers") the fp32 state exists only for the ranges this rank owns ([owned_numel]
// elements, ~P/dp): the inf check, the grad norm (sqrt of the all-reduced sum of the shards' sums
// of squares), clipping and Adam run on the owned ranges, the new values are cast into the owned
// ranges of the model parameters and all-gathered. Results are the same on every rank: the inf flag
// and the norm are reduced over the group, so every rank skips or clips alike.
//
// Tensor parallelism. Each rank's ParameterSet holds its shards, and the gradient buffer,
// buckets and (distributed) optimizer state are per rank over those shards; the DP reduction
// runs over the DP group only. The grad norm is sqrt of the sum over the model-parallel group
// (and over DP when the state is sharded) of each rank's sum of squares, where a parameter
// replicated over TP (LayerNorms, position embedding, row-parallel biases) counts on TP rank 0
// only (Megatron's param_is_not_tensor_parallel_duplicate); the same for --log-num-zeros-in-grad
// and the parameter norm. The inf flag is reduced (MAX) over the model-parallel group too.
// Pipeline parallelism: the model-parallel group is TP x PP (each stage's ranks add their
// parameters' squares), and the last stage's copy of a tied word embedding
// (Parameter::pipeline_shared) is left out, so that every value counts once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "model/parameters.h"
#include "obs/timers.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "parallel/grad_buffer.h"

namespace megatron::parallel {

struct OptimizerConfig {
  float beta1 = 0.9f;        // --adam-beta1
  float beta2 = 0.999f;      // --adam-beta2
  float eps = 1e-8f;         // --adam-eps
  double clip_grad = 1.0;    // --clip-grad (0: no clipping, no norm)
  bool count_zeros = false;  // --log-num-zeros-in-grad
  // Megatron's check_for_nan_in_loss_and_grad (on unless --no-check-for-nan-in-loss-and-grad):
  // a NaN gradient norm (computed for clipping; every rank gets the same) stops the step before
  // AdamW and sets StepResult::nan_grad_norm, so that every rank can stop the run together.
  bool check_for_nan_in_grad = false;
  // --decoupled-lr: the parameters marked model::Parameter::embedding_or_output are updated
  // with step()'s decoupled_lr (Megatron-Core's parameter group of their own; the same Adam
  // state and weight decay rule, only the learning rate differs).
  bool decoupled_lr = false;
};

// The data-parallel group of the optimizer (null: one rank) and its options.
struct DataParallelOptions {
  comm::Communicator* group = nullptr;
  bool distributed = false;  // --use-distributed-optimizer
  int64_t bucket_size = 0;   // --ddp-bucket-size (elements; 0: one bucket)
  // The model-parallel group (TP x PP; null: one rank) over which norms and the inf flag are reduced.
  comm::Communicator* model_parallel = nullptr;
  bool overlap_param_gather = false;  // --overlap-param-gather (with distributed)
  // Bucket cuts besides the size (parallel/grad_buffer.h BucketLayout): model chunks, the tied
  // embedding's own bucket (held back from the overlap; -1: none).
  std::vector<int64_t> bucket_starts = {};
  int64_t held_param = -1;
  // What the gradients are accumulated and reduced in (parallel/grad_buffer.h, "Gradient
  // dtype"): fp32, or the model's 16-bit dtype.
  DType grad_dtype = DType::kF32;
};

// The full fp32 optimizer state [P] for a checkpoint (main_params undefined when the model is
// fp32: its values are the main parameters).
enum class StateKind { kMainParams, kExpAvg, kExpAvgSq };

struct StepResult {
  bool success = true;               // false: skipped (fp16 overflow)
  std::optional<double> grad_norm;   // pre-clip; absent when skipped or clip_grad == 0
  std::optional<int64_t> num_zeros;  // with count_zeros
  bool nan_grad_norm = false;        // check_for_nan_in_grad found a NaN norm (success is false)
};

class MixedPrecisionOptimizer {
 public:
  // `scaler` is used only when the model dtype is fp16 (bf16/fp32 log a loss scale of 1.0).
  MixedPrecisionOptimizer(model::ParameterSet& params, backend::Backend& backend, const OptimizerConfig& config,
                          optim::GradScaler scaler, const DataParallelOptions& dp = {});

  // The factor the loss is multiplied by before backward (the current loss scale, or 1).
  float loss_scale() const;
  // Averages the gradients over the data-parallel group (after the last backward of the
  // iteration, before step(); a no-op on one rank). Buckets started during the backward
  // (--overlap-grad-reduce) are waited for here.
  void reduce_gradients();
  // One update with the scheduler's lr and weight decay for this iteration. Collective over
  // the data-parallel group. With --overlap-param-gather the distributed optimizer's
  // all-gathers are still in flight when it returns (see GradBuffer::start_param_gather).
  // With OptimizerConfig::decoupled_lr the embedding and output layer use decoupled_lr
  // (otherwise it must be absent).
  StepResult step(float lr, float weight_decay, std::optional<float> decoupled_lr = std::nullopt);
  // Megatron's zero_grad: the gradients of the next backward start from zero. Done without a
  // fill: they are marked stale and the backward's first write of each overwrites it
  // (model::ParameterSet::forget_grads); reduce_gradients() checks that every one was written.
  void zero_grads();
  // L2 norm of all parameters (the fp32 main copy), for --log-params-norm. Collective.
  double params_norm() const;

  int64_t steps() const { return steps_; }
  bool has_separate_main_params() const { return params_.values().dtype() != DType::kF32; }
  // One parameter's fp32 state of `kind` (shape p.shape): on data-parallel rank 0 a tensor
  // (a view of this rank's state when it holds all of p's range, else the owners' pieces
  // received into a new one), undefined on the other ranks. Collective over the data-parallel
  // group when the state is sharded; every rank calls it for the same parameters in the same
  // order: the state a checkpoint keeps, one parameter at a time, so that memory stays bounded.
  Tensor gather_param_state(const model::Parameter& p, StateKind kind) const;
  // The pieces of parameter p's fp32 state of `kind` this rank holds, as views in element
  // order: (first element within p, values). The whole parameter, one piece, unless the state
  // is sharded (state_sharded()), when it is the parts of p's range this rank owns (none on
  // some ranks). No communication: what the parallel checkpoint save writes from every rank,
  // and what a load fills in (the views are this rank's state itself).
  struct HeldState {
    int64_t begin = 0;
    Tensor values;  // fp32 [n], on the backend's device
  };
  std::vector<HeldState> held_param_state(const model::Parameter& p, StateKind kind) const;
  // --use-distributed-optimizer over more than one data-parallel rank.
  bool state_sharded() const { return grad_buffer_.distributed() && grad_buffer_.group().size() > 1; }
  // After a checkpoint set the tensors: the step count and the scaler.
  void restore(int64_t steps, const optim::GradScalerState& scaler);
  // Main parameters := the model's values (loading weights without optimizer state, as
  // Megatron's reload_model_params()).
  void reload_main_params_from_model();
  const GradBuffer& grad_buffer() const { return grad_buffer_; }
  // For the overlap hooks (GradBuffer's arm_grad_overlap, grads_final_from, before_reading).
  GradBuffer& grad_buffer() { return grad_buffer_; }
  const optim::GradScaler& scaler() const { return scaler_; }
  bool uses_scaler() const { return fp16_; }
  // Megatron's level-1 optimizer timers during step() (obs/timers.h), in its order:
  // optimizer-unscale-and-check-inf (fp16), optimizer-clip-main-grad (the norm; the clip factor
  // is applied inside AdamW), optimizer-count-zeros, optimizer-inner-step (AdamW, which also
  // writes the 16-bit model copy: Megatron's optimizer-copy-main-to-model-params has no pass of
  // its own here, nor has optimizer-copy-to-main-grad: the fp32 grads are read in place) and,
  // with the distributed optimizer, params-all-gather. Null: no timers. `world` for barriers.
  void set_timers(obs::Timers* timers, comm::Communicator* world, bool barrier) {
    timers_ = timers;
    timer_world_ = world;
    timer_barrier_ = barrier;
  }

 private:
  // One owned range of the buffers and this rank's state for it.
  struct Shard {
    Range range;     // into the flat parameter / gradient buffers
    Tensor main;     // fp32 [range.size()]; a view of the model values under fp32
    Tensor exp_avg;  // fp32 [range.size()]
    Tensor exp_avg_sq;
    // int64 [S, 3]: (offset, numel, decay) runs of parameter fragments in this range, offsets
    // relative to range.start, for adamw_update_segments.
    Tensor segments;
    // With OptimizerConfig::decoupled_lr: `segments` leaves out the embedding_or_output
    // parameters, which this table holds (undefined when the range has none).
    Tensor decoupled_segments;
    // The parts of `range` (absolute buffer offsets, merged) that count in the norms: all of it
    // except TP-duplicated parameters on TP ranks other than 0.
    std::vector<Range> norm_ranges;
  };
  // Sum over the owned, counted ranges of f(values of `buffer` there), as a double.
  template <class F>
  double sum_counted(const Tensor& buffer, F&& f) const;
  // `value` summed (or maxed) over the groups the state is split over: DP when sharded, then
  // the model-parallel group.
  double reduce_over_state_groups(double value, comm::ReduceOp op, bool include_dp) const;
  // Whether every owned gradient is finite, on every rank of the state groups (fp16).
  bool owned_grads_finite();
  // The sum of squares of the owned, counted gradients (or main parameters), over the state groups.
  double owned_sum_squares(bool grads) const;

  void start_timer(const char* name) {
    if (timers_) timers_->start(name, 1, timer_world_, timer_barrier_);
  }
  void stop_timer(const char* name) {
    if (timers_) timers_->stop(name);
  }

  obs::Timers* timers_ = nullptr;
  comm::Communicator* timer_world_ = nullptr;
  bool timer_barrier_ = false;
  model::ParameterSet& params_;
  backend::Backend& backend_;
  OptimizerConfig config_;
  optim::GradScaler scaler_;
  bool fp16_;
  std::unique_ptr<comm::Communicator> self_group_;  // the one-rank group when none is given
  comm::Communicator* model_parallel_ = nullptr;    // null: one rank
  GradBuffer grad_buffer_;
  bool overlap_param_gather_ = false;
  Tensor main_;        // fp32 [owned_numel]; unused under fp32 (the shards view the values)
  Tensor exp_avg_;     // fp32 [owned_numel]
  Tensor exp_avg_sq_;  // fp32 [owned_numel]
  std::vector<Shard> shards_;
  int64_t steps_ = 0;  // successful updates (Adam's t)
};

}  // namespace megatron::parallel
