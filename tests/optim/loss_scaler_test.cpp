// Loss scaling (Megatron grad_scaler.py). Scales are powers of two times the initial
// scale, exact in fp32, so the checks are exact.
#include "optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"

namespace megatron::optim {
namespace {

DynamicScalerConfig small_config() {
  DynamicScalerConfig c;
  c.initial_scale = 1024.0f;
  c.min_scale = 1.0f;
  c.growth_interval = 3;  // --loss-scale-window 3
  c.hysteresis = 2;
  return c;
}

TEST(GradScaler, DefaultsAreMegatrons) {
  GradScaler s = GradScaler::dynamic({});
  EXPECT_EQ(s.scale(), 4294967296.0f);  // 2**32
  EXPECT_EQ(s.state().hysteresis_tracker, 2);
  EXPECT_EQ(s.state().growth_tracker, 0);
}

TEST(GradScaler, OverflowSequenceWithHysteresis) {
  GradScaler s = GradScaler::dynamic(small_config());
  struct Step {
    bool found_inf;
    float scale;
    int64_t growth, hysteresis;
  };
  const Step steps[] = {
      {true, 1024, 0, 1},                       // first overflow: hysteresis 2 -> 1, no backoff yet
      {true, 512, 0, 0},                        // second overflow: tracker hits 0 -> halve
      {true, 256, 0, -1},                       // tracker is not refilled, so every further overflow halves
      {false, 256, 1, -1},                      // clean steps count towards growth
      {false, 256, 2, -1}, {true, 128, 0, -2},  // overflow resets growth and halves again
      {false, 128, 1, -2}, {false, 128, 2, -2},
      {false, 256, 0, 2},  // 3rd clean step in a row = window: double, refill hysteresis
      {true, 256, 0, 1},   // hysteresis absorbs one overflow again
      {true, 128, 0, 0},
  };
  int i = 0;
  for (const Step& st : steps) {
    s.update(st.found_inf);
    SCOPED_TRACE(i++);
    EXPECT_EQ(s.scale(), st.scale);
    EXPECT_EQ(s.state().growth_tracker, st.growth);
    EXPECT_EQ(s.state().hysteresis_tracker, st.hysteresis);
  }
  EXPECT_EQ(s.inv_scale(), 1.0f / 128.0f);
}

TEST(GradScaler, BackoffStopsAtMinScale) {
  DynamicScalerConfig c = small_config();
  c.initial_scale = 4.0f;
  c.min_scale = 2.0f;
  c.hysteresis = 1;
  GradScaler s = GradScaler::dynamic(c);
  s.update(true);  // max(4*0.5, 2) = 2
  EXPECT_EQ(s.scale(), 2.0f);
  s.update(true);  // max(2*0.5, 2) = 2
  EXPECT_EQ(s.scale(), 2.0f);
}

TEST(GradScaler, ConstantNeverChanges) {
  GradScaler s = GradScaler::constant(65536.0f);
  EXPECT_FALSE(s.is_dynamic());
  for (bool inf : {true, true, false, false, false}) s.update(inf);
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.inv_scale(), 1.0f / 65536.0f);
}

TEST(GradScaler, StateRoundTrip) {
  GradScaler a = GradScaler::dynamic(small_config());
  a.update(true);
  a.update(true);
  a.update(false);
  GradScaler b = GradScaler::dynamic(small_config());
  b.load_state(a.state());
  for (bool inf : {false, false, true, true}) {
    a.update(inf);
    b.update(inf);
    EXPECT_EQ(a.scale(), b.scale());
    EXPECT_EQ(a.state().growth_tracker, b.state().growth_tracker);
    EXPECT_EQ(a.state().hysteresis_tracker, b.state().hysteresis_tracker);
  }
  // Restored at {512, growth 1, hysteresis 0}: two clean steps complete the window of 3
  // (1024, hysteresis 2), the first overflow is absorbed, the second halves: 512.
  EXPECT_EQ(b.scale(), 512.0f);
}

void expect_error_naming(const std::function<void()>& f, const std::string& flag) {
  try {
    f();
    ADD_FAILURE() << "expected an error naming " << flag;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
  }
}

TEST(GradScaler, BadFlagsAreErrors) {
  expect_error_naming([] { GradScaler::constant(0.0f); }, "--loss-scale");
  DynamicScalerConfig c = small_config();
  c.min_scale = 2048.0f;
  expect_error_naming([&] { GradScaler::dynamic(c); }, "--min-loss-scale");
  c = small_config();
  c.growth_interval = 0;
  expect_error_naming([&] { GradScaler::dynamic(c); }, "--loss-scale-window");
  c = small_config();
  c.hysteresis = 0;
  expect_error_naming([&] { GradScaler::dynamic(c); }, "--hysteresis");
}

TEST(UnscaleGrads, ScalesAndDetectsNonFinite) {
  std::vector<float> a = {2.0f, -4.0f}, b = {8.0f};
  EXPECT_FALSE(unscale_grads({a, b}, 0.5f));
  EXPECT_EQ(a, (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(b, (std::vector<float>{4.0f}));

  std::vector<float> c = {1.0f, std::numeric_limits<float>::infinity()}, d = {6.0f};
  EXPECT_TRUE(unscale_grads({d, c}, 0.5f));
  EXPECT_EQ(d[0], 3.0f);  // the other grads are still unscaled
  std::vector<float> e = {std::nanf("")};
  EXPECT_TRUE(unscale_grads({e}, 1.0f));
}

}  // namespace
}  // namespace megatron::optim
