// FP8 scaling recipes against hand-computed values: the tensorwise scale (TE's
// compute_scale_from_amax), the delayed update (TE's amax_and_scale_update_after_reduction:
// roll, max / most recent, margin, amax 0 skipped), and Fp8ScalingState with the CPU backend's
// quantize op recording into it.
#include "backend/fp8_recipe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/ops.h"

namespace megatron::backend {
namespace {

constexpr float kFloatMax = std::numeric_limits<float>::max();

TEST(Fp8Recipe, FormatsOfRoles) {
  EXPECT_EQ(fp8_format_of(Fp8Mix::kE4M3, Fp8Role::kGradOutput), Fp8Format::kE4M3);
  EXPECT_EQ(fp8_format_of(Fp8Mix::kHybrid, Fp8Role::kGradOutput), Fp8Format::kE5M2);
  EXPECT_EQ(fp8_format_of(Fp8Mix::kHybrid, Fp8Role::kInput), Fp8Format::kE4M3);
  EXPECT_EQ(fp8_format_of(Fp8Mix::kHybrid, Fp8Role::kWeight), Fp8Format::kE4M3);
  EXPECT_EQ(fp8_mix_name(Fp8Mix::kHybrid), "hybrid");
  EXPECT_EQ(fp8_recipe_name(Fp8Recipe::kTensorwise), "tensorwise");
  EXPECT_EQ(fp8_amax_algo_name(Fp8AmaxAlgo::kMostRecent), "most_recent");
}

TEST(Fp8Recipe, CurrentScale) {
  EXPECT_EQ(fp8_current_scale(2.0f, 448.0f), 224.0f);
  EXPECT_EQ(fp8_current_scale(3.5f, 448.0f), 128.0f);
  EXPECT_EQ(fp8_current_scale(5.0f, 448.0f), 448.0f / 5.0f);
  EXPECT_EQ(fp8_current_scale(1024.0f, 57344.0f), 56.0f);
  EXPECT_EQ(fp8_current_scale(0.0f, 448.0f), 1.0f);
  EXPECT_EQ(fp8_current_scale(INFINITY, 448.0f), 1.0f);
  EXPECT_EQ(fp8_current_scale(NAN, 448.0f), 1.0f);
  EXPECT_EQ(fp8_current_scale(1e-44f, 448.0f), kFloatMax);  // 448 / 1e-44 overflows fp32
}

TEST(Fp8Recipe, DelayedMaxRollsTheHistory) {
  std::vector<float> h = {4.0f, 2.0f, 8.0f};  // entry 0: this step's amax
  float scale = 1.0f;
  fp8_delayed_update(h.data(), 3, scale, Fp8AmaxAlgo::kMax, 448.0f, 0);
  EXPECT_EQ(scale, 56.0f);  // 448 / max(4, 2, 8)
  EXPECT_EQ(h, (std::vector<float>{0.0f, 8.0f, 4.0f}));
  // The next step records 1: the window now holds {1, 8, 4}; then 8 leaves it.
  h[0] = 1.0f;
  fp8_delayed_update(h.data(), 3, scale, Fp8AmaxAlgo::kMax, 448.0f, 0);
  EXPECT_EQ(scale, 56.0f);
  EXPECT_EQ(h, (std::vector<float>{0.0f, 4.0f, 1.0f}));
  h[0] = 0.5f;
  fp8_delayed_update(h.data(), 3, scale, Fp8AmaxAlgo::kMax, 448.0f, 0);
  EXPECT_EQ(scale, 112.0f);  // max(0.5, 4, 1)
  EXPECT_EQ(h, (std::vector<float>{0.0f, 1.0f, 0.5f}));
}

TEST(Fp8Recipe, DelayedMostRecentAndMargin) {
  std::vector<float> h = {4.0f, 2.0f, 8.0f};
  float scale = 1.0f;
  fp8_delayed_update(h.data(), 3, scale, Fp8AmaxAlgo::kMostRecent, 448.0f, 0);
  EXPECT_EQ(scale, 112.0f);  // 448 / 4
  h = {4.0f, 2.0f, 8.0f};
  fp8_delayed_update(h.data(), 3, scale, Fp8AmaxAlgo::kMax, 448.0f, 2);
  EXPECT_EQ(scale, 14.0f);  // 448 * 2^-2 / 8
  h = {4096.0f, 0.0f};
  fp8_delayed_update(h.data(), 2, scale, Fp8AmaxAlgo::kMax, 57344.0f, 1);
  EXPECT_EQ(scale, 7.0f);  // 57344 / 2 / 4096
  EXPECT_EQ(h, (std::vector<float>{0.0f, 4096.0f}));
}

TEST(Fp8Recipe, DelayedLengthOneAndEdgeCases) {
  std::vector<float> h = {5.0f};
  float scale = 3.0f;
  fp8_delayed_update(h.data(), 1, scale, Fp8AmaxAlgo::kMax, 448.0f, 0);
  EXPECT_EQ(scale, 448.0f / 5.0f);
  EXPECT_EQ(h[0], 0.0f);
  // Nothing recorded: no roll, scale kept.
  h = {0.0f, 7.0f};
  scale = 3.0f;
  fp8_delayed_update(h.data(), 2, scale, Fp8AmaxAlgo::kMax, 448.0f, 0);
  EXPECT_EQ(scale, 3.0f);
  EXPECT_EQ(h, (std::vector<float>{0.0f, 7.0f}));
  // An infinite most-recent amax keeps the scale (and is rolled into the history).
  h = {INFINITY, 7.0f};
  fp8_delayed_update(h.data(), 2, scale, Fp8AmaxAlgo::kMostRecent, 448.0f, 0);
  EXPECT_EQ(scale, 3.0f);
  EXPECT_EQ(h[1], INFINITY);
  // A tiny amax: the quotient overflows to FLT_MAX.
  h = {1e-44f};
  fp8_delayed_update(h.data(), 1, scale, Fp8AmaxAlgo::kMax, 448.0f, 0);
  EXPECT_EQ(scale, kFloatMax);
}

// The CPU backend's quantize records amax into the state, and update() turns it into scales.
TEST(Fp8ScalingState, DelayedThroughQuantize) {
  auto be = make_cpu_backend();
  Fp8Config cfg;
  cfg.recipe = Fp8Recipe::kDelayed;
  cfg.amax_history_len = 2;
  cfg.amax_compute_algo = Fp8AmaxAlgo::kMax;
  Fp8ScalingState st(*be, cfg, 2 * kFp8Roles);
  EXPECT_EQ(st.history_len(), 2);
  EXPECT_EQ(st.format(Fp8ScalingState::slot(1, Fp8Role::kGradOutput)), Fp8Format::kE5M2);
  EXPECT_EQ(st.format(Fp8ScalingState::slot(1, Fp8Role::kWeight)), Fp8Format::kE4M3);

  const int64_t s_in = Fp8ScalingState::slot(1, Fp8Role::kInput);
  const int64_t s_grad = Fp8ScalingState::slot(1, Fp8Role::kGradOutput);
  Tensor x = Tensor::cpu({2, 2});
  const float xs[] = {1.0f, -3.5f, 0.25f, 2.0f};
  for (int i = 0; i < 4; ++i) x.data_as<float>()[i] = xs[i];
  Tensor q = be->empty({2, 2}, DType::kF8E4M3, MemoryKind::kOther), none;
  be->fp8_quantize(x, q, none, st.quantization(s_in));  // scale 1: codes are x itself
  EXPECT_EQ(fp8_to_float(q.data_as<uint8_t>()[1], Fp8Format::kE4M3), -3.5f);
  Tensor g = Tensor::cpu({3});
  g.data_as<float>()[0] = 1024.0f;
  Tensor qg = be->empty({3}, DType::kF8E5M2, MemoryKind::kOther);
  be->fp8_quantize(g, qg, none, st.quantization(s_grad));
  const float* amax = st.amax_to_reduce().data_as<float>();
  EXPECT_EQ(amax[s_in], 3.5f);
  EXPECT_EQ(amax[s_grad], 1024.0f);
  st.update();
  const float* scale = st.scale().data_as<float>();
  const float* scale_inv = st.scale_inv().data_as<float>();
  EXPECT_EQ(scale[s_in], 128.0f);
  EXPECT_EQ(scale_inv[s_in * Fp8ScalingState::kScaleInvStride], 1.0f / 128.0f);  // one 16-byte slot each
  EXPECT_EQ(scale[s_grad], 56.0f);                                               // 57344 / 1024
  EXPECT_EQ(scale[0], 1.0f);                                                     // never quantized: unchanged
  EXPECT_EQ(st.amax_history().data_as<float>()[st.operands() + s_in], 3.5f);     // rolled to entry 1
  EXPECT_EQ(amax[s_in], 0.0f);
  // The next quantization uses the updated scale: 1.0 * 128 = 128, 3.5 * 128 = 448 (max).
  be->fp8_quantize(x, q, none, st.quantization(s_in));
  EXPECT_EQ(fp8_to_float(q.data_as<uint8_t>()[0], Fp8Format::kE4M3), 128.0f);
  EXPECT_EQ(fp8_to_float(q.data_as<uint8_t>()[1], Fp8Format::kE4M3), -448.0f);
}

TEST(Fp8ScalingState, TensorwiseScalesEachQuantization) {
  auto be = make_cpu_backend();
  Fp8Config cfg;
  cfg.recipe = Fp8Recipe::kTensorwise;
  cfg.amax_history_len = 16;  // ignored by tensorwise
  Fp8ScalingState st(*be, cfg, kFp8Roles);
  EXPECT_EQ(st.history_len(), 1);
  Tensor x = Tensor::cpu({2});
  x.data_as<float>()[0] = 2.0f;
  x.data_as<float>()[1] = -0.5f;
  Tensor q = be->empty({2}, DType::kF8E4M3, MemoryKind::kOther), none;
  const Fp8Quantization qz = st.quantization(0);
  EXPECT_TRUE(qz.current);
  be->fp8_quantize(x, q, none, qz);
  EXPECT_EQ(st.scale().data_as<float>()[0], 224.0f);
  EXPECT_EQ(st.scale_inv().data_as<float>()[0], 1.0f / 224.0f);
  EXPECT_EQ(fp8_to_float(q.data_as<uint8_t>()[0], Fp8Format::kE4M3), 448.0f);
  EXPECT_EQ(fp8_to_float(q.data_as<uint8_t>()[1], Fp8Format::kE4M3), -112.0f);
  EXPECT_EQ(st.amax_to_reduce().data_as<float>()[0], 2.0f);
  st.update();
  EXPECT_EQ(st.amax_to_reduce().data_as<float>()[0], 0.0f);
  EXPECT_EQ(st.scale().data_as<float>()[0], 224.0f);
}

}  // namespace
}  // namespace megatron::backend
