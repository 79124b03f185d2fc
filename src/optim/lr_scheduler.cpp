// Megatron OptimizerParamScheduler (C23 optimizer_param_scheduler.py, WSD from HEAD) and
// the flag conversion of C23 training.py get_optimizer_param_scheduler.
#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <type_traits>
#include <utility>

#include "core/error.h"

namespace megatron::optim {
namespace {

constexpr double kPi = std::numbers::pi;

template <class Enum, size_t N>
Enum parse_choice(std::string_view s, const char* flag, const std::pair<std::string_view, Enum> (&choices)[N]) {
  std::string list;
  for (const auto& [name, value] : choices) {
    if (s == name) return value;
    list += list.empty() ? "" : ", ";
    list += name;
  }
  throw_error("[", flag, "] unknown style '", s, "', expected one of: ", list);
}

template <class Enum, size_t N>
std::string_view name_of(Enum e, const std::pair<std::string_view, Enum> (&choices)[N]) {
  for (const auto& [name, value] : choices)
    if (value == e) return name;
  MT_CHECK(false) << "unnamed enum value " << static_cast<int>(e);
  return {};
}

constexpr std::pair<std::string_view, LrDecayStyle> kLrStyles[] = {
    {"constant", LrDecayStyle::kConstant},
    {"linear", LrDecayStyle::kLinear},
    {"cosine", LrDecayStyle::kCosine},
    {"inverse-square-root", LrDecayStyle::kInverseSquareRoot},
    {"WSD", LrDecayStyle::kWSD}};
constexpr std::pair<std::string_view, WsdDecayStyle> kWsdStyles[] = {{"exponential", WsdDecayStyle::kExponential},
                                                                     {"linear", WsdDecayStyle::kLinear},
                                                                     {"cosine", WsdDecayStyle::kCosine},
                                                                     {"minus_sqrt", WsdDecayStyle::kMinusSqrt}};
constexpr std::pair<std::string_view, WdIncrStyle> kWdStyles[] = {
    {"constant", WdIncrStyle::kConstant}, {"linear", WdIncrStyle::kLinear}, {"cosine", WdIncrStyle::kCosine}};

double wsd_coeff(WsdDecayStyle style, double q) {
  switch (style) {
    case WsdDecayStyle::kLinear:
      return 1.0 - q;
    case WsdDecayStyle::kCosine:
      return 0.5 * (std::cos(kPi * q) + 1.0);
    case WsdDecayStyle::kExponential:
      return 2.0 * std::pow(0.5, q) - 1.0;
    case WsdDecayStyle::kMinusSqrt:
      return 1.0 - std::sqrt(q);
  }
  MT_CHECK(false) << "wsd style";
  return 0.0;
}

// The flags behind the step counts: "--lr-decay-iters" or "--lr-decay-samples" depending on
// the mode; both spellings when the config was built in code.
struct StepFlags {
  const char* decay = "--lr-decay-iters/--lr-decay-samples";
  const char* warmup = "--lr-warmup-iters/--lr-warmup-samples/--lr-warmup-fraction";
  const char* wsd_decay = "--lr-wsd-decay-iters/--lr-wsd-decay-samples";
};
constexpr StepFlags kIterFlags{"--lr-decay-iters", "--lr-warmup-iters", "--lr-wsd-decay-iters"};
constexpr StepFlags kSampleFlags{"--lr-decay-samples", "--lr-warmup-samples", "--lr-wsd-decay-samples"};

// C23 OptimizerParamScheduler.__init__ asserts, as user errors.
void validate(const SchedulerConfig& c, const StepFlags& flags = {}) {
  if (c.min_lr < 0.0) throw_error("[--min-lr] must be >= 0, got ", c.min_lr);
  if (c.max_lr < c.min_lr) throw_error("[--lr] ", c.max_lr, " is smaller than --min-lr ", c.min_lr);
  if (c.decay_steps <= 0)
    throw_error("[", flags.decay, "] the LR decay must last at least one sample, got ", c.decay_steps);
  if (!(c.warmup_steps < static_cast<double>(c.decay_steps)))
    throw_error("[", flags.warmup, "] the warmup (", c.warmup_steps, " samples) must be shorter than the LR decay (",
                c.decay_steps, " samples)");
  if (c.decay_style == LrDecayStyle::kWSD && c.wsd_decay_steps <= 0)
    throw_error("[", flags.wsd_decay, "] --lr-decay-style WSD needs a positive decay length, got ", c.wsd_decay_steps);
  if (c.start_wd < 0.0) throw_error("[--start-weight-decay] must be >= 0, got ", c.start_wd);
  if (c.end_wd < c.start_wd)
    throw_error("[--end-weight-decay] ", c.end_wd, " is smaller than --start-weight-decay ", c.start_wd);
  if (c.wd_incr_style == WdIncrStyle::kConstant && c.start_wd != c.end_wd)
    throw_error("[--weight-decay-incr-style] constant needs --start-weight-decay == --end-weight-decay, got ",
                c.start_wd, " and ", c.end_wd);
  if (c.wd_incr_style != WdIncrStyle::kConstant && c.wd_incr_steps <= 0)
    throw_error("[--weight-decay-incr-style] ", to_string(c.wd_incr_style), " needs a positive training length, got ",
                c.wd_incr_steps, " samples");
}

}  // namespace

LrDecayStyle parse_lr_decay_style(std::string_view s) { return parse_choice(s, "--lr-decay-style", kLrStyles); }
WsdDecayStyle parse_wsd_decay_style(std::string_view s) { return parse_choice(s, "--lr-wsd-decay-style", kWsdStyles); }
WdIncrStyle parse_wd_incr_style(std::string_view s) { return parse_choice(s, "--weight-decay-incr-style", kWdStyles); }
std::string_view to_string(LrDecayStyle style) { return name_of(style, kLrStyles); }
std::string_view to_string(WsdDecayStyle style) { return name_of(style, kWsdStyles); }
std::string_view to_string(WdIncrStyle style) { return name_of(style, kWdStyles); }

SchedulerConfig make_scheduler_config(const ScheduleFlags& f) {
  if (f.train_iters.has_value() == f.train_samples.has_value())
    throw_error("[--train-iters] give exactly one of --train-iters and --train-samples");
  if (!f.lr) throw_error("[--lr] is required");
  if (f.global_batch_size <= 0) throw_error("[--global-batch-size] must be positive, got ", f.global_batch_size);
  const int64_t g = f.global_batch_size;

  SchedulerConfig c;
  c.max_lr = *f.lr;
  c.min_lr = f.min_lr;
  c.init_lr = f.lr_warmup_init;
  if (f.decoupled_lr) {  // Megatron-Core reads decoupled_min_lr only with decoupled_lr
    c.decoupled_max_lr = f.decoupled_lr;
    c.decoupled_min_lr = f.decoupled_min_lr;
  }
  c.decay_style = parse_lr_decay_style(f.lr_decay_style);
  c.wsd_decay_style = parse_wsd_decay_style(f.lr_wsd_decay_style);
  c.wd_incr_style = parse_wd_incr_style(f.weight_decay_incr_style);

  if (f.train_iters) {
    if (f.lr_decay_samples) throw_error("[--lr-decay-samples] needs --train-samples; use --lr-decay-iters");
    if (f.lr_warmup_samples != 0) throw_error("[--lr-warmup-samples] needs --train-samples; use --lr-warmup-iters");
    if (f.lr_wsd_decay_samples) throw_error("[--lr-wsd-decay-samples] needs --train-samples; use --lr-wsd-decay-iters");
    if (f.lr_warmup_fraction && f.lr_warmup_iters != 0)
      throw_error("[--lr-warmup-fraction] can only specify one of lr-warmup-fraction and lr-warmup-iters");
    c.decay_steps = f.lr_decay_iters.value_or(*f.train_iters) * g;
    c.warmup_steps = f.lr_warmup_fraction ? *f.lr_warmup_fraction * static_cast<double>(c.decay_steps)
                                          : static_cast<double>(f.lr_warmup_iters * g);
    c.wsd_decay_steps = f.lr_wsd_decay_iters.value_or(0) * g;
    c.wd_incr_steps = *f.train_iters * g;
  } else {
    if (f.lr_decay_iters) throw_error("[--lr-decay-iters] needs --train-iters; use --lr-decay-samples");
    if (f.lr_warmup_iters != 0) throw_error("[--lr-warmup-iters] needs --train-iters; use --lr-warmup-samples");
    if (f.lr_wsd_decay_iters) throw_error("[--lr-wsd-decay-iters] needs --train-iters; use --lr-wsd-decay-samples");
    if (f.lr_warmup_fraction && f.lr_warmup_samples != 0)
      throw_error("[--lr-warmup-fraction] can only specify one of lr-warmup-fraction and lr-warmup-samples");
    c.decay_steps = f.lr_decay_samples.value_or(*f.train_samples);
    c.warmup_steps = f.lr_warmup_fraction ? *f.lr_warmup_fraction * static_cast<double>(c.decay_steps)
                                          : static_cast<double>(f.lr_warmup_samples);
    c.wsd_decay_steps = f.lr_wsd_decay_samples.value_or(0);
    c.wd_incr_steps = *f.train_samples;
  }

  if (c.wd_incr_style == WdIncrStyle::kConstant) {
    if (f.start_weight_decay || f.end_weight_decay)
      throw_error(
          "[--start-weight-decay] --start/--end-weight-decay need --weight-decay-incr-style "
          "linear or cosine; constant uses --weight-decay");
    c.start_wd = c.end_wd = f.weight_decay;
  } else {
    if (!f.start_weight_decay || !f.end_weight_decay)
      throw_error("[--weight-decay-incr-style] ", f.weight_decay_incr_style,
                  " needs --start-weight-decay and --end-weight-decay");
    c.start_wd = *f.start_weight_decay;
    c.end_wd = *f.end_weight_decay;
  }
  validate(c, f.train_iters ? kIterFlags : kSampleFlags);
  return c;
}

OptimizerParamScheduler::OptimizerParamScheduler(const SchedulerConfig& config) : config_(config) {
  validate(config_);
  step(0);
}

void OptimizerParamScheduler::step(int64_t increment) {
  MT_CHECK(increment >= 0) << "scheduler increment " << increment;
  num_steps_ += increment;
  lr_ = lr_at(num_steps_);
  decoupled_lr_.reset();
  if (config_.decoupled_max_lr) {
    decoupled_lr_ = lr_at(num_steps_, *config_.decoupled_max_lr, config_.decoupled_min_lr.value_or(config_.min_lr));
  }
  weight_decay_ = weight_decay_at(num_steps_);
}

double OptimizerParamScheduler::lr_at(int64_t num_steps) const {
  return lr_at(num_steps, config_.max_lr, config_.min_lr);
}

double OptimizerParamScheduler::lr_at(int64_t num_steps, double max_lr, double min_lr) const {
  const SchedulerConfig& c = config_;
  const auto n = static_cast<double>(num_steps);
  const double w = c.warmup_steps;
  const auto d = static_cast<double>(c.decay_steps);
  if (w > 0.0 && n <= w) return c.init_lr + (max_lr - c.init_lr) * n / w;
  if (c.decay_style == LrDecayStyle::kConstant) return max_lr;
  if (n > d) return min_lr;
  if (c.decay_style == LrDecayStyle::kInverseSquareRoot) {
    const double lr = max_lr * std::sqrt(std::max(w, 1.0)) / std::sqrt(std::max(n, 1.0));
    return std::max(min_lr, lr);
  }
  const double ratio = (n - w) / (d - w);
  MT_CHECK(ratio >= 0.0 && ratio <= 1.0) << "decay ratio " << ratio;
  double coeff = 0.0;
  switch (c.decay_style) {
    case LrDecayStyle::kLinear:
      coeff = 1.0 - ratio;
      break;
    case LrDecayStyle::kCosine:
      coeff = 0.5 * (std::cos(kPi * ratio) + 1.0);
      break;
    case LrDecayStyle::kWSD: {
      const auto anneal_start = static_cast<double>(c.decay_steps - c.wsd_decay_steps);
      coeff = n <= anneal_start
                  ? 1.0
                  : wsd_coeff(c.wsd_decay_style, (n - anneal_start) / static_cast<double>(c.wsd_decay_steps));
      break;
    }
    case LrDecayStyle::kConstant:
    case LrDecayStyle::kInverseSquareRoot:
      MT_CHECK(false) << "handled above";
  }
  return min_lr + coeff * (max_lr - min_lr);
}

double OptimizerParamScheduler::weight_decay_at(int64_t num_steps) const {
  const SchedulerConfig& c = config_;
  if (num_steps > c.wd_incr_steps) return c.end_wd;
  if (c.wd_incr_style == WdIncrStyle::kConstant) return c.end_wd;
  const double ratio = static_cast<double>(num_steps) / static_cast<double>(c.wd_incr_steps);
  const double coeff = c.wd_incr_style == WdIncrStyle::kLinear ? ratio : 0.5 * (std::cos(kPi * (1.0 - ratio)) + 1.0);
  return c.start_wd + coeff * (c.end_wd - c.start_wd);
}

SchedulerState OptimizerParamScheduler::state() const {
  return SchedulerState{config_.max_lr,       config_.min_lr,      config_.decoupled_max_lr, config_.decoupled_min_lr,
                        config_.warmup_steps, config_.decay_steps, config_.decay_style,      num_steps_,
                        config_.start_wd,     config_.end_wd,      config_.wd_incr_steps,    config_.wd_incr_style};
}

void OptimizerParamScheduler::load_state(const SchedulerState& saved, SchedulerLoadPolicy policy) {
  // Megatron _check_and_set: the flags' value, the checkpoint's, or both required equal.
  const auto show = [](auto v) {
    if constexpr (std::is_enum_v<decltype(v)>) {
      return std::string(to_string(v));
    } else {
      return str_cat(v);
    }
  };
  auto pick = [&](auto current, auto from_checkpoint, const char* flag, const char* what) {
    if (policy == SchedulerLoadPolicy::kOverride) return current;
    if (policy == SchedulerLoadPolicy::kCheck && !(current == from_checkpoint))
      throw_error("[", flag, "] the checkpoint's ", what, " ", show(from_checkpoint), " differs from the arguments' ",
                  show(current), "; pass --override-opt_param-scheduler or --use-checkpoint-opt_param-scheduler");
    return from_checkpoint;
  };
  const StepFlags flags;
  SchedulerConfig c = config_;
  c.max_lr = pick(c.max_lr, saved.max_lr, "--lr", "learning rate");
  c.min_lr = pick(c.min_lr, saved.min_lr, "--min-lr", "minimum learning rate");
  // The embedding and output layer's group: "none" where a run had no --decoupled-lr (Megatron
  // then has a different number of parameter groups, which its optimizer load refuses).
  const auto show_opt = [](const std::optional<double>& v) { return v ? str_cat(*v) : std::string("none"); };
  auto pick_opt = [&](const std::optional<double>& current, const std::optional<double>& from_checkpoint,
                      const char* flag, const char* what) {
    if (policy == SchedulerLoadPolicy::kOverride) return current;
    if (policy == SchedulerLoadPolicy::kCheck && current != from_checkpoint)
      throw_error("[", flag, "] the checkpoint's ", what, " ", show_opt(from_checkpoint),
                  " differs from the arguments' ", show_opt(current),
                  "; pass --override-opt_param-scheduler or --use-checkpoint-opt_param-scheduler");
    return from_checkpoint;
  };
  c.decoupled_max_lr =
      pick_opt(c.decoupled_max_lr, saved.decoupled_max_lr, "--decoupled-lr", "embedding and output learning rate");
  c.decoupled_min_lr = pick_opt(c.decoupled_min_lr, saved.decoupled_min_lr, "--decoupled-min-lr",
                                "embedding and output minimum learning rate");
  c.warmup_steps = pick(c.warmup_steps, saved.warmup_steps, flags.warmup, "warmup length");
  c.decay_steps = pick(c.decay_steps, saved.decay_steps, flags.decay, "decay length");
  c.decay_style = pick(c.decay_style, saved.decay_style, "--lr-decay-style", "decay style");
  c.start_wd = pick(c.start_wd, saved.start_wd, "--start-weight-decay", "start weight decay");
  c.end_wd = pick(c.end_wd, saved.end_wd, "--end-weight-decay", "end weight decay");
  c.wd_incr_steps = pick(c.wd_incr_steps, saved.wd_incr_steps, "--train-iters/--train-samples", "weight decay length");
  c.wd_incr_style =
      pick(c.wd_incr_style, saved.wd_incr_style, "--weight-decay-incr-style", "weight decay increment style");
  validate(c);
  config_ = c;
  num_steps_ = 0;
  step(saved.num_steps);
}

}  // namespace megatron::optim
