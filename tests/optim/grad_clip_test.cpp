// Gradient clipping (Megatron clip_grads.py): L2 norm over all grads, clip_coeff =
// max_norm/(norm + 1e-6) applied when < 1, pre-clip norm returned.
#include "optim/grad_clip.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"

namespace megatron::optim {
namespace {

TEST(GradClip, NormOverAllTensors) {
  // sqrt(3^2 + 4^2 + 12^2) = sqrt(169) = 13
  std::vector<float> a = {3.0f, 4.0f}, b = {12.0f};
  EXPECT_DOUBLE_EQ(global_grad_norm({a, b}), 13.0);
  EXPECT_DOUBLE_EQ(grad_sum_of_squares({a, b}), 169.0);
  EXPECT_DOUBLE_EQ(global_grad_norm({}), 0.0);
}

TEST(GradClip, ClipsToMaxNormAndReturnsPreClipNorm) {
  std::vector<float> a = {3.0f, 4.0f}, b = {12.0f};
  // coeff = 1/(13 + 1e-6); clipped grads are (3, 4, 12) * coeff, norm ~1.
  const double norm = clip_grads({a, b}, 1.0);
  EXPECT_DOUBLE_EQ(norm, 13.0);
  const float coeff = static_cast<float>(1.0 / (13.0 + 1e-6));
  EXPECT_EQ(a[0], 3.0f * coeff);
  EXPECT_EQ(a[1], 4.0f * coeff);
  EXPECT_EQ(b[0], 12.0f * coeff);
  EXPECT_NEAR(global_grad_norm({a, b}), 1.0, 1e-6);
}

TEST(GradClip, NoClipBelowMaxNorm) {
  std::vector<float> a = {3.0f, 4.0f}, b = {12.0f};
  EXPECT_DOUBLE_EQ(clip_grads({a, b}, 20.0), 13.0);  // coeff 20/13 > 1: untouched
  EXPECT_EQ(a, (std::vector<float>{3.0f, 4.0f}));
  EXPECT_EQ(b, (std::vector<float>{12.0f}));
}

TEST(GradClip, NormEqualToMaxStillClipsByTheEpsilon) {
  // coeff = 13/(13 + 1e-6) = 0.99999992 < 1, as in Megatron.
  std::vector<float> a = {3.0f, 4.0f}, b = {12.0f};
  EXPECT_DOUBLE_EQ(clip_grads({a, b}, 13.0), 13.0);
  EXPECT_LT(b[0], 12.0f);
  EXPECT_EQ(b[0], 12.0f * static_cast<float>(13.0 / (13.0 + 1e-6)));
}

TEST(GradClip, ZeroMaxNormDisablesClipping) {
  std::vector<float> a = {300.0f, 400.0f};
  EXPECT_EQ(clip_grads({a}, 0.0), 0.0);
  EXPECT_EQ(a, (std::vector<float>{300.0f, 400.0f}));
}

TEST(GradClip, NegativeMaxNormIsAnError) {
  std::vector<float> a = {1.0f};
  try {
    clip_grads({a}, -1.0);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--clip-grad"), std::string::npos) << e.what();
  }
}

TEST(GradClip, AllFinite) {
  std::vector<float> a = {1.0f, -2.0f}, b = {0.0f};
  EXPECT_TRUE(all_finite({a, b}));
  b[0] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(all_finite({a, b}));
  b[0] = -std::numeric_limits<float>::infinity();
  EXPECT_FALSE(all_finite({a, b}));
  b[0] = std::nanf("");
  EXPECT_FALSE(all_finite({a, b}));
  EXPECT_TRUE(std::isnan(global_grad_norm({a, b})));
}

TEST(GradClip, LargeSumIsExactInDouble) {
  // 300,000 elements of 0.5 (several reduction blocks) and one 1000:
  // 300000*0.25 + 1000^2 = 1,075,000, exact in double (fp32 accumulation would drift).
  std::vector<float> g(300001, 0.5f);
  g[123457] = 1000.0f;
  EXPECT_EQ(grad_sum_of_squares({g}), 1075000.0);
}

TEST(GradClip, SquaresAreFormedInDouble) {
  // x = 1 + 2^-12: x^2 = 1 + 2^-11 + 2^-24 needs 25 significant bits, so an fp32 square
  // would round it; the double square is exact.
  const float x = 1.0f + 0x1p-12f;
  std::vector<float> g = {x};
  EXPECT_EQ(grad_sum_of_squares({g}), 1.0 + 0x1p-11 + 0x1p-24);
}

TEST(GradClip, SumDoesNotDependOnThreadCount) {
  // Values whose squares round when added, so a different summation order would show.
  std::vector<float> g(500000);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(std::sin(0.001 * i) * 3.7);
  const std::vector<std::span<const float>> grads = {g};
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = grad_sum_of_squares(grads);
  omp_set_num_threads(3);
  const double three = grad_sum_of_squares(grads);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, three);
  double serial = 0.0;  // the same value as a plain loop, to double rounding
  for (float x : g) serial += static_cast<double>(x) * x;
  EXPECT_NEAR(one, serial, 1e-9 * serial);
}

}  // namespace
}  // namespace megatron::optim
