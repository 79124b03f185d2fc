// OptimizerParamScheduler (Megatron optimizer_param_scheduler.py) against values worked
// out by hand from Megatron's formulas. Tolerance 1e-12 relative: the formulas are a few
// double operations, so only double rounding separates them from the hand values.
#include "optim/lr_scheduler.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.h"

namespace megatron::optim {
namespace {

void expect_lr(double actual, double expected) {
  EXPECT_NEAR(actual, expected, 1e-12 * std::abs(expected) + 1e-18) << "expected " << expected;
}

void expect_error_naming(const std::function<void()>& f, const std::string& flag) {
  try {
    f();
    ADD_FAILURE() << "expected an error naming " << flag;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
  }
}

// Iteration mode, G = 10: --train-iters 110 --lr-warmup-iters 10 --lr 3e-4 --min-lr 3e-5
// --lr-decay-style cosine  =>  W = 100 samples, D = 1100 samples.
optim::ScheduleFlags cosine_flags() {
  optim::ScheduleFlags f;
  f.train_iters = 110;
  f.global_batch_size = 10;
  f.lr = 3e-4;
  f.min_lr = 3e-5;
  f.lr_decay_style = "cosine";
  f.lr_warmup_iters = 10;
  return f;
}

TEST(LrScheduler, WarmupThenCosine) {
  const optim::SchedulerConfig c = optim::make_scheduler_config(cosine_flags());
  EXPECT_EQ(c.warmup_steps, 100.0);
  EXPECT_EQ(c.decay_steps, 1100);
  optim::OptimizerParamScheduler s(c);
  expect_lr(s.lr(), 0.0);          // constructor ran step(0): iteration 1 uses init = 0
  expect_lr(s.lr_at(50), 1.5e-4);  // 3e-4 * 50/100
  expect_lr(s.lr_at(100), 3e-4);   // n <= W still warmup: 3e-4 * 100/100
  // r = (350-100)/1000 = 0.25: coeff = (cos(pi/4)+1)/2 = 0.853553391;
  // lr = 3e-5 + 0.853553391 * 2.7e-4 = 2.60459415e-4
  expect_lr(s.lr_at(350), 2.6045941546018394e-4);
  expect_lr(s.lr_at(600), 1.65e-4);  // r = 0.5: coeff 0.5: 3e-5 + 1.35e-4
  expect_lr(s.lr_at(1100), 3e-5);    // r = 1: coeff 0
  expect_lr(s.lr_at(5000), 3e-5);    // past D: min
}

TEST(LrScheduler, StepsCountSamples) {
  optim::OptimizerParamScheduler s(optim::make_scheduler_config(cosine_flags()));
  for (int it = 1; it <= 5; ++it) s.step(10);  // five successful iterations of G = 10
  EXPECT_EQ(s.num_steps(), 50);
  expect_lr(s.lr(), 1.5e-4);  // the LR of iteration 6 (and the one logged at iteration 5)
  s.step(0);                  // a skipped iteration does not step the scheduler
  expect_lr(s.lr(), 1.5e-4);
}

TEST(LrScheduler, WarmupInit) {
  optim::ScheduleFlags f = cosine_flags();
  f.lr_warmup_init = 1e-5;
  optim::OptimizerParamScheduler s(optim::make_scheduler_config(f));
  expect_lr(s.lr(), 1e-5);
  expect_lr(s.lr_at(50), 1.55e-4);  // 1e-5 + (3e-4 - 1e-5) * 50/100
}

TEST(LrScheduler, Linear) {
  optim::SchedulerConfig c;
  c.max_lr = 1.0;
  c.min_lr = 0.1;
  c.decay_steps = 100;  // no warmup
  c.decay_style = optim::LrDecayStyle::kLinear;
  optim::OptimizerParamScheduler s(c);
  expect_lr(s.lr(), 1.0);         // W = 0: no warmup branch; r = 0
  expect_lr(s.lr_at(25), 0.775);  // 0.1 + (1 - 0.25) * 0.9
  expect_lr(s.lr_at(100), 0.1);
}

TEST(LrScheduler, Constant) {
  optim::SchedulerConfig c;
  c.max_lr = 2e-4;
  c.warmup_steps = 10;
  c.decay_steps = 100;
  c.decay_style = optim::LrDecayStyle::kConstant;
  optim::OptimizerParamScheduler s(c);
  expect_lr(s.lr_at(5), 1e-4);
  expect_lr(s.lr_at(50), 2e-4);
  expect_lr(s.lr_at(1000), 2e-4);  // constant is checked before n > D
}

TEST(LrScheduler, InverseSquareRoot) {
  optim::SchedulerConfig c;
  c.max_lr = 1e-3;
  c.min_lr = 1e-5;
  c.warmup_steps = 100;
  c.decay_steps = 1'000'000;
  c.decay_style = optim::LrDecayStyle::kInverseSquareRoot;
  optim::OptimizerParamScheduler s(c);
  expect_lr(s.lr_at(100), 1e-3);        // end of warmup
  expect_lr(s.lr_at(400), 5e-4);        // 1e-3 * sqrt(100)/sqrt(400) = 1e-3 * 10/20
  expect_lr(s.lr_at(10'000), 1e-4);     // 1e-3 * 10/100
  expect_lr(s.lr_at(250'000), 2e-5);    // 1e-3 * 10/500
  expect_lr(s.lr_at(1'000'000), 1e-5);  // 1e-3 * 10/1000 = 1e-5 = min, at n = D
  EXPECT_GT(s.lr_at(999'999), 1e-5);    // 1e-3 * 10/999.9995 = 1.0000005e-5
  expect_lr(s.lr_at(1'000'001), 1e-5);  // past D: min
  c.warmup_steps = 0;                   // max(W, 1) and max(n, 1)
  optim::OptimizerParamScheduler s0(c);
  expect_lr(s0.lr(), 1e-3);
  expect_lr(s0.lr_at(4), 5e-4);  // 1e-3 * 1/2
}

TEST(LrScheduler, WSD) {
  // W = 10, D = 110, wsd decay 40  =>  stable until A = 70, then decay over q = (n-70)/40.
  optim::SchedulerConfig c;
  c.max_lr = 1.0;
  c.min_lr = 0.1;
  c.warmup_steps = 10;
  c.decay_steps = 110;
  c.decay_style = optim::LrDecayStyle::kWSD;
  c.wsd_decay_steps = 40;
  const auto lr = [&](optim::WsdDecayStyle style, int64_t n) {
    c.wsd_decay_style = style;
    return optim::OptimizerParamScheduler(c).lr_at(n);
  };
  expect_lr(lr(optim::WsdDecayStyle::kExponential, 5), 0.5);   // warmup: 5/10
  expect_lr(lr(optim::WsdDecayStyle::kExponential, 50), 1.0);  // stable
  expect_lr(lr(optim::WsdDecayStyle::kExponential, 70), 1.0);  // n <= A
  // exponential, q = 0.5: coeff = 2*0.5^0.5 - 1 = 0.414213562; 0.1 + 0.9*coeff = 0.472792206
  expect_lr(lr(optim::WsdDecayStyle::kExponential, 90), 0.47279220613578565);
  expect_lr(lr(optim::WsdDecayStyle::kExponential, 110), 0.1);  // q = 1: 2*0.5 - 1 = 0
  expect_lr(lr(optim::WsdDecayStyle::kLinear, 90), 0.55);       // 0.1 + 0.9*(1 - 0.5)
  // cosine, q = 0.25: (cos(pi/4)+1)/2 = 0.853553391; 0.1 + 0.9*that = 0.868198052
  expect_lr(lr(optim::WsdDecayStyle::kCosine, 80), 0.1 + 0.9 * 0.8535533905932737);
  expect_lr(lr(optim::WsdDecayStyle::kMinusSqrt, 80), 0.55);  // 1 - sqrt(0.25) = 0.5
  expect_lr(lr(optim::WsdDecayStyle::kMinusSqrt, 111), 0.1);  // past D
}

TEST(LrScheduler, WeightDecaySchedule) {
  optim::SchedulerConfig c;
  c.max_lr = 1.0;
  c.decay_steps = 1000;
  c.start_wd = 0.01;
  c.end_wd = 0.1;
  c.wd_incr_steps = 1000;
  c.wd_incr_style = optim::WdIncrStyle::kLinear;
  optim::OptimizerParamScheduler lin(c);
  expect_lr(lin.weight_decay(), 0.01);
  expect_lr(lin.weight_decay_at(250), 0.0325);  // 0.01 + 0.25 * 0.09
  expect_lr(lin.weight_decay_at(1001), 0.1);
  c.wd_incr_style = optim::WdIncrStyle::kCosine;
  optim::OptimizerParamScheduler cos(c);
  // r = 0.25: coeff = (cos(pi*0.75)+1)/2 = 0.146446609; 0.01 + 0.09*coeff = 0.0231801948
  expect_lr(cos.weight_decay_at(250), 0.023180194846605363);
  expect_lr(cos.weight_decay_at(1000), 0.1);
  c.wd_incr_style = optim::WdIncrStyle::kConstant;
  c.start_wd = c.end_wd = 0.05;
  optim::OptimizerParamScheduler con(c);
  expect_lr(con.weight_decay_at(0), 0.05);
  expect_lr(con.weight_decay_at(700), 0.05);
}

TEST(LrScheduler, FlagsToSteps) {
  // Iteration mode, fraction of the decay: D = 100*8 = 800, W = 0.1*800 = 80.
  optim::ScheduleFlags f;
  f.train_iters = 100;
  f.global_batch_size = 8;
  f.lr = 1e-4;
  f.lr_warmup_fraction = 0.1;
  f.lr_decay_style = "WSD";
  f.lr_wsd_decay_iters = 5;
  f.weight_decay_incr_style = "linear";
  f.start_weight_decay = 0.0;
  f.end_weight_decay = 0.1;
  optim::SchedulerConfig c = optim::make_scheduler_config(f);
  EXPECT_EQ(c.decay_steps, 800);
  EXPECT_EQ(c.warmup_steps, 80.0);
  EXPECT_EQ(c.wsd_decay_steps, 40);  // 5 * 8
  EXPECT_EQ(c.wd_incr_steps, 800);   // train_iters * G
  EXPECT_EQ(c.decay_style, optim::LrDecayStyle::kWSD);
  EXPECT_EQ(c.end_wd, 0.1);
  // --lr-decay-iters overrides the decay, not the wd length.
  f.lr_decay_iters = 50;
  c = optim::make_scheduler_config(f);
  EXPECT_EQ(c.decay_steps, 400);
  EXPECT_EQ(c.warmup_steps, 40.0);
  EXPECT_EQ(c.wd_incr_steps, 800);

  // Sample mode: D = train_samples, W = 0.01*D (a float: 12.34), wd_incr = train_samples.
  optim::ScheduleFlags s;
  s.train_samples = 1234;
  s.global_batch_size = 8;
  s.lr = 1e-4;
  s.lr_warmup_fraction = 0.01;
  c = optim::make_scheduler_config(s);
  EXPECT_EQ(c.decay_steps, 1234);
  EXPECT_DOUBLE_EQ(c.warmup_steps, 12.34);
  EXPECT_EQ(c.wd_incr_steps, 1234);
  EXPECT_EQ(c.start_wd, 0.01);  // constant style: --weight-decay default
  s.lr_warmup_fraction.reset();
  s.lr_warmup_samples = 100;
  s.lr_decay_samples = 1000;
  c = optim::make_scheduler_config(s);
  EXPECT_EQ(c.decay_steps, 1000);
  EXPECT_EQ(c.warmup_steps, 100.0);
  // A fractional warmup is used as is: lr(6) = 1e-4 * 6/12.34.
  s.lr_decay_samples.reset();
  s.lr_warmup_samples = 0;
  s.lr_warmup_fraction = 0.01;
  optim::OptimizerParamScheduler sch(optim::make_scheduler_config(s));
  expect_lr(sch.lr_at(6), 1e-4 * 6 / 12.34);
}

TEST(LrScheduler, BadFlagsAreErrors) {
  optim::ScheduleFlags both = cosine_flags();
  both.train_samples = 1000;
  expect_error_naming([&] { optim::make_scheduler_config(both); }, "--train-iters");

  optim::ScheduleFlags f = cosine_flags();
  f.lr.reset();
  expect_error_naming([&] { optim::make_scheduler_config(f); }, "--lr");

  f = cosine_flags();
  f.lr_warmup_samples = 10;
  expect_error_naming([&] { optim::make_scheduler_config(f); }, "--lr-warmup-samples");

  f = cosine_flags();
  f.lr_warmup_fraction = 0.1;
  expect_error_naming([&] { optim::make_scheduler_config(f); }, "--lr-warmup-fraction");

  f = cosine_flags();
  f.lr_warmup_iters = 110;  // W = 1100 = D
  expect_error_naming([&] { optim::make_scheduler_config(f); }, "--lr-warmup-iters");

  f = cosine_flags();
  f.lr_decay_style = "WSD";
  expect_error_naming([&] { optim::make_scheduler_config(f); }, "--lr-wsd-decay-iters");

  f = cosine_flags();
  f.lr_decay_style = "cosine_annealing";
  expect_error_naming([&] { optim::make_scheduler_config(f); }, "--lr-decay-style");

  f = cosine_flags();
  f.min_lr = 1e-3;
  expect_error_naming([&] { optim::make_scheduler_config(f); }, "--min-lr");

  f = cosine_flags();
  f.start_weight_decay = 0.0;
  expect_error_naming([&] { optim::make_scheduler_config(f); }, "--start-weight-decay");

  f = cosine_flags();
  f.weight_decay_incr_style = "cosine";
  expect_error_naming([&] { optim::make_scheduler_config(f); }, "--start-weight-decay");

  optim::ScheduleFlags s;
  s.train_samples = 1000;
  s.global_batch_size = 8;
  s.lr = 1e-4;
  s.lr_warmup_iters = 3;
  expect_error_naming([&] { optim::make_scheduler_config(s); }, "--lr-warmup-iters");
  s.lr_warmup_iters = 0;
  s.lr_warmup_samples = 1000;  // W = D = train_samples
  expect_error_naming([&] { optim::make_scheduler_config(s); }, "--lr-warmup-samples");
  s.lr_warmup_samples = 0;
  s.lr_decay_style = "WSD";
  expect_error_naming([&] { optim::make_scheduler_config(s); }, "--lr-wsd-decay-samples");
}

TEST(LrScheduler, StateRoundTripAndChecks) {
  optim::OptimizerParamScheduler a(optim::make_scheduler_config(cosine_flags()));
  a.step(350);
  const optim::SchedulerState st = a.state();
  EXPECT_EQ(st.num_steps, 350);

  optim::OptimizerParamScheduler b(optim::make_scheduler_config(cosine_flags()));
  b.load_state(st);
  EXPECT_EQ(b.num_steps(), 350);
  expect_lr(b.lr(), 2.6045941546018394e-4);

  optim::ScheduleFlags other = cosine_flags();
  other.lr = 6e-4;
  optim::OptimizerParamScheduler c(optim::make_scheduler_config(other));
  expect_error_naming([&] { c.load_state(st); }, "--lr");
  c.load_state(st, optim::SchedulerLoadPolicy::kOverride);  // keep --lr 6e-4
  EXPECT_EQ(c.config().max_lr, 6e-4);
  EXPECT_EQ(c.num_steps(), 350);
  // 3e-5 + 0.853553391 * (6e-4 - 3e-5)
  expect_lr(c.lr(), 3e-5 + 0.8535533905932737 * 5.7e-4);
  optim::OptimizerParamScheduler d(optim::make_scheduler_config(other));
  d.load_state(st, optim::SchedulerLoadPolicy::kUseCheckpoint);  // take 3e-4 from the checkpoint
  EXPECT_EQ(d.config().max_lr, 3e-4);
  expect_lr(d.lr(), 2.6045941546018394e-4);
}

TEST(LrScheduler, DecoupledLrRunsTheSameScheduleWithItsOwnBounds) {
  // Megatron-Core's get_lr(param_group) with the group's max_lr 1e-3 and min_lr 1e-4, the
  // warmup init and the steps shared: W = 100, D = 1100 as in WarmupThenCosine.
  optim::ScheduleFlags f = cosine_flags();
  f.decoupled_lr = 1e-3;
  f.decoupled_min_lr = 1e-4;
  optim::OptimizerParamScheduler s(optim::make_scheduler_config(f));
  ASSERT_TRUE(s.decoupled_lr());
  expect_lr(*s.decoupled_lr(), 0.0);
  s.step(50);
  expect_lr(*s.decoupled_lr(), 5e-4);  // 1e-3 * 50/100
  expect_lr(s.lr(), 1.5e-4);           // the default group is unchanged
  s.step(300);                         // n = 350: coeff (cos(pi/4)+1)/2
  expect_lr(*s.decoupled_lr(), 1e-4 + 0.8535533905932737 * 9e-4);
  s.step(5000);
  expect_lr(*s.decoupled_lr(), 1e-4);
  // Without --decoupled-min-lr the group's floor is --min-lr (3e-5).
  f.decoupled_min_lr.reset();
  optim::OptimizerParamScheduler m(optim::make_scheduler_config(f));
  m.step(600);  // r = 0.5
  expect_lr(*m.decoupled_lr(), 3e-5 + 0.5 * (1e-3 - 3e-5));
  // --decoupled-min-lr alone changes nothing (Megatron-Core reads it only with --decoupled-lr).
  optim::ScheduleFlags alone = cosine_flags();
  alone.decoupled_min_lr = 1e-4;
  EXPECT_FALSE(optim::OptimizerParamScheduler(optim::make_scheduler_config(alone)).decoupled_lr());
  EXPECT_FALSE(optim::OptimizerParamScheduler(optim::make_scheduler_config(cosine_flags())).decoupled_lr());
}

TEST(LrScheduler, DecoupledLrIsCheckedOnLoad) {
  optim::ScheduleFlags f = cosine_flags();
  f.decoupled_lr = 1e-3;
  optim::OptimizerParamScheduler a(optim::make_scheduler_config(f));
  a.step(350);
  const optim::SchedulerState st = a.state();
  ASSERT_EQ(st.decoupled_max_lr, 1e-3);
  EXPECT_FALSE(st.decoupled_min_lr);
  optim::OptimizerParamScheduler same(optim::make_scheduler_config(f));
  same.load_state(st);
  expect_lr(*same.decoupled_lr(), 3e-5 + 0.8535533905932737 * (1e-3 - 3e-5));
  // Another rate, or none, or a floor the checkpoint did not have: refused unless told.
  optim::ScheduleFlags other = f;
  other.decoupled_lr = 2e-3;
  optim::OptimizerParamScheduler b(optim::make_scheduler_config(other));
  expect_error_naming([&] { b.load_state(st); }, "--decoupled-lr");
  optim::OptimizerParamScheduler none(optim::make_scheduler_config(cosine_flags()));
  expect_error_naming([&] { none.load_state(st); }, "--decoupled-lr");
  optim::ScheduleFlags floor = f;
  floor.decoupled_min_lr = 1e-4;
  optim::OptimizerParamScheduler c(optim::make_scheduler_config(floor));
  expect_error_naming([&] { c.load_state(st); }, "--decoupled-min-lr");
  b.load_state(st, optim::SchedulerLoadPolicy::kOverride);
  EXPECT_EQ(b.config().decoupled_max_lr, 2e-3);
  optim::OptimizerParamScheduler d(optim::make_scheduler_config(other));
  d.load_state(st, optim::SchedulerLoadPolicy::kUseCheckpoint);
  EXPECT_EQ(d.config().decoupled_max_lr, 1e-3);
}

TEST(LrScheduler, StyleNames) {
  EXPECT_EQ(optim::parse_lr_decay_style("inverse-square-root"), optim::LrDecayStyle::kInverseSquareRoot);
  EXPECT_EQ(optim::parse_lr_decay_style("WSD"), optim::LrDecayStyle::kWSD);
  EXPECT_EQ(optim::parse_wsd_decay_style("minus_sqrt"), optim::WsdDecayStyle::kMinusSqrt);
  EXPECT_EQ(to_string(optim::LrDecayStyle::kCosine), "cosine");
  EXPECT_EQ(to_string(optim::WdIncrStyle::kLinear), "linear");
  expect_error_naming([] { optim::parse_wd_incr_style("exp"); }, "--weight-decay-incr-style");
}

}  // namespace
}  // namespace megatron::optim
