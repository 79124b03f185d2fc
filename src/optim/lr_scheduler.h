// Learning-rate and weight-decay schedules: Megatron's OptimizerParamScheduler
// (C23 megatron/optimizer_param_scheduler.py; WSD from HEAD megatron/core).
//
// Everything counts in SAMPLES: after each successful (not skipped) iteration the caller
// runs step(global batch of that iteration), and the LR for the next iteration is lr().
// The constructor runs step(0), so iteration 1 uses lr(0) = --lr-warmup-init when there is
// a warmup. With n = num_steps, W = warmup_steps, D = decay_steps:
//   n <= W (W > 0)        init + (max - init) * n / W
//   constant              max
//   n > D                 min
//   inverse-square-root   max(min, max * sqrt(max(W,1)) / sqrt(max(n,1)))
//   else r = (n-W)/(D-W): linear 1-r | cosine (cos(pi r)+1)/2 | WSD, with A = D - wsd_decay:
//                         1 if n <= A, else q = (n-A)/wsd_decay and
//                         linear 1-q | cosine (cos(pi q)+1)/2 | exponential 2*0.5^q - 1 |
//                         minus_sqrt 1-sqrt(q);   lr = min + coeff * (max - min)
// Weight decay (get_wd), with I = wd_incr_steps: end if n > I; constant: end; else with
// r = n/I: linear r | cosine (cos(pi (1-r))+1)/2;  wd = start + coeff * (end - start).
// Each parameter group then uses lr() * lr_mult and weight_decay() * wd_mult.
// --decoupled-lr (Megatron-Core's get_standard_config_overrides): the embedding and output
// layer's group runs the same schedule with its own max (--decoupled-lr) and min
// (--decoupled-min-lr, default --min-lr); init (--lr-warmup-init) and the steps are shared.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace megatron::optim {

enum class LrDecayStyle { kConstant, kLinear, kCosine, kInverseSquareRoot, kWSD };
enum class WsdDecayStyle { kLinear, kCosine, kExponential, kMinusSqrt };
enum class WdIncrStyle { kConstant, kLinear, kCosine };

// Flag spellings ("inverse-square-root", "WSD", "minus_sqrt", ...); parsing throws
// megatron::Error naming the flag and listing the choices.
LrDecayStyle parse_lr_decay_style(std::string_view s);    // --lr-decay-style
WsdDecayStyle parse_wsd_decay_style(std::string_view s);  // --lr-wsd-decay-style
WdIncrStyle parse_wd_incr_style(std::string_view s);      // --weight-decay-incr-style
std::string_view to_string(LrDecayStyle style);
std::string_view to_string(WsdDecayStyle style);
std::string_view to_string(WdIncrStyle style);

// The scheduler in steps (samples). warmup_steps is a double because Megatron computes it
// as lr_warmup_fraction * decay_steps, a float.
struct SchedulerConfig {
  double max_lr = 0.0;                     // --lr
  double min_lr = 0.0;                     // --min-lr
  double init_lr = 0.0;                    // --lr-warmup-init
  std::optional<double> decoupled_max_lr;  // --decoupled-lr (none: one group)
  std::optional<double> decoupled_min_lr;  // --decoupled-min-lr (none: min_lr)
  double warmup_steps = 0.0;
  int64_t decay_steps = 0;
  LrDecayStyle decay_style = LrDecayStyle::kLinear;
  int64_t wsd_decay_steps = 0;  // only for WSD
  WsdDecayStyle wsd_decay_style = WsdDecayStyle::kExponential;
  double start_wd = 0.01;
  double end_wd = 0.01;
  int64_t wd_incr_steps = 0;
  WdIncrStyle wd_incr_style = WdIncrStyle::kConstant;
};

// Megatron's flags, as parsed (Megatron defaults). Exactly one of train_iters /
// train_samples is set.
struct ScheduleFlags {
  std::optional<int64_t> train_iters;      // --train-iters
  std::optional<int64_t> train_samples;    // --train-samples
  int64_t global_batch_size = 0;           // --global-batch-size (the final one with a ramp)
  std::optional<double> lr;                // --lr (required)
  double min_lr = 0.0;                     // --min-lr
  std::optional<double> decoupled_lr;      // --decoupled-lr
  std::optional<double> decoupled_min_lr;  // --decoupled-min-lr (only with --decoupled-lr)
  double lr_warmup_init = 0.0;             // --lr-warmup-init
  std::string lr_decay_style = "linear";
  std::optional<int64_t> lr_decay_iters;    // default: train_iters
  std::optional<int64_t> lr_decay_samples;  // default: train_samples
  int64_t lr_warmup_iters = 0;
  int64_t lr_warmup_samples = 0;
  std::optional<double> lr_warmup_fraction;  // of the decay steps
  std::string lr_wsd_decay_style = "exponential";
  std::optional<int64_t> lr_wsd_decay_iters;
  std::optional<int64_t> lr_wsd_decay_samples;
  double weight_decay = 0.01;                // --weight-decay
  std::optional<double> start_weight_decay;  // only with incr style linear|cosine
  std::optional<double> end_weight_decay;
  std::string weight_decay_incr_style = "constant";
};

// get_optimizer_param_scheduler's conversion of flags to steps:
//   iteration mode: decay = lr_decay_iters*G (default train_iters*G),
//                   warmup = lr_warmup_fraction*decay or lr_warmup_iters*G,
//                   wsd_decay = lr_wsd_decay_iters*G, wd_incr = train_iters*G;
//   sample mode:    decay = lr_decay_samples (default train_samples),
//                   warmup = lr_warmup_fraction*decay or lr_warmup_samples,
//                   wsd_decay = lr_wsd_decay_samples, wd_incr = train_samples.
// Weight decay: constant style uses --weight-decay for start and end; linear|cosine need
// --start-weight-decay and --end-weight-decay. Throws megatron::Error naming the flag for
// flags of the other mode, a fraction together with warmup iters/samples, a missing --lr,
// a WSD schedule without its decay length, and for what the scheduler itself rejects.
SchedulerConfig make_scheduler_config(const ScheduleFlags& flags);

// What a checkpoint keeps (Megatron's state_dict keys).
struct SchedulerState {
  double max_lr = 0.0;
  double min_lr = 0.0;
  // The embedding and output layer's group (Megatron keeps them in its optimizer's param
  // groups): none without --decoupled-lr.
  std::optional<double> decoupled_max_lr;
  std::optional<double> decoupled_min_lr;
  double warmup_steps = 0.0;
  int64_t decay_steps = 0;
  LrDecayStyle decay_style = LrDecayStyle::kLinear;
  int64_t num_steps = 0;
  double start_wd = 0.0;
  double end_wd = 0.0;
  int64_t wd_incr_steps = 0;
  WdIncrStyle wd_incr_style = WdIncrStyle::kConstant;
};

// How a checkpointed schedule meets the one from the flags (Megatron load_state_dict):
// kCheck (default) requires them to match, kOverride (--override-opt_param-scheduler)
// keeps the flags' values, kUseCheckpoint (--use-checkpoint-opt_param-scheduler) takes the
// checkpoint's. num_steps always comes from the checkpoint.
enum class SchedulerLoadPolicy { kCheck, kOverride, kUseCheckpoint };

class OptimizerParamScheduler {
 public:
  // Validates (min_lr >= 0, max_lr >= min_lr, decay_steps > 0, warmup_steps < decay_steps,
  // 0 <= start_wd <= end_wd, constant wd => start == end, WSD => wsd_decay_steps > 0,
  // non-constant wd => wd_incr_steps > 0) throwing megatron::Error, then runs step(0).
  explicit OptimizerParamScheduler(const SchedulerConfig& config);

  // Advances by `increment` samples (>= 0) and recomputes lr() and weight_decay().
  void step(int64_t increment);

  double lr() const { return lr_; }
  // The embedding and output layer's lr (--decoupled-lr), or none.
  std::optional<double> decoupled_lr() const { return decoupled_lr_; }
  double weight_decay() const { return weight_decay_; }
  int64_t num_steps() const { return num_steps_; }
  const SchedulerConfig& config() const { return config_; }

  // The schedule at any sample count, without changing state (lr_at: the default group's;
  // with max_lr/min_lr: a group's of its own, as Megatron's get_lr(param_group)).
  double lr_at(int64_t num_steps) const;
  double lr_at(int64_t num_steps, double max_lr, double min_lr) const;
  double weight_decay_at(int64_t num_steps) const;

  SchedulerState state() const;
  // Throws megatron::Error naming the flag on a mismatch under kCheck.
  void load_state(const SchedulerState& saved, SchedulerLoadPolicy policy = SchedulerLoadPolicy::kCheck);

 private:
  SchedulerConfig config_;
  int64_t num_steps_ = 0;
  double lr_ = 0.0;
  std::optional<double> decoupled_lr_;
  double weight_decay_ = 0.0;
};

}  // namespace megatron::optim
