// AdamW (apex FusedAdam, adam_w_mode=True) against values worked out by hand and a double
// precision evaluation of the same formulas. Tolerance: the implementation runs in fp32
// (like apex), so results agree with the double reference to a few fp32 ulps; 2e-6
// relative (about 16 ulps) leaves room for the ~10 roundings per element and nothing more.
#include "optim/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace megatron::optim {
namespace {

struct Moments {
  double p, m, v;
};

// One AdamW step in double, the formulas of the brief written out.
Moments reference_step(Moments s, double g, double lr, double b1, double b2, double eps, double wd, int t) {
  s.m = b1 * s.m + (1 - b1) * g;
  s.v = b2 * s.v + (1 - b2) * g * g;
  const double m_hat = s.m / (1 - std::pow(b1, t));
  const double v_hat = s.v / (1 - std::pow(b2, t));
  s.p = s.p - lr * (m_hat / (std::sqrt(v_hat) + eps) + wd * s.p);
  return s;
}

void expect_close(float actual, double expected) {
  EXPECT_NEAR(actual, expected, 2e-6 * std::abs(expected) + 1e-12) << "expected " << expected;
}

TEST(AdamW, FirstStepByHand) {
  // Step 1: m = 0.1 g, v = 0.001 g^2; bias corrections 0.1 and 0.001 give m_hat = g,
  // v_hat = g^2, so the update is g/(|g| + eps) + wd*p.
  // p = 0.5, g = 0.2, lr = 0.1, wd = 0.01:
  //   0.2/(0.2 + 1e-8) = 0.99999995;  + 0.01*0.5 = 1.00499995;  p = 0.5 - 0.100499995 = 0.399500005
  std::vector<float> p = {0.5f}, g = {0.2f}, m = {0.0f}, v = {0.0f};
  adamw_update(p, g, m, v,
               {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .step = 1});
  expect_close(p[0], 0.399500005);
  expect_close(m[0], 0.02);  // 0.1 * 0.2
  // The betas are fp32 (as in apex): 1 - 0.999f = 0.000999987125, so v = 3.99994850e-5,
  // not 4e-5. The bias correction uses the same fp32 beta, so v_hat is still g^2.
  expect_close(v[0], (1.0 - double(0.999f)) * double(0.2f) * double(0.2f));
  EXPECT_GT(std::abs(v[0] - 4e-5), 1e-10);
}

TEST(AdamW, WeightDecayIsDecoupled) {
  // g = 0: m = v = 0, so the Adam part is 0/(0 + eps) = 0 and only the decay acts:
  // p = 2 - 0.1*(0.01*2) = 1.998. (L2 mode would fold wd*p into g and move p by ~lr.)
  std::vector<float> p = {2.0f}, g = {0.0f}, m = {0.0f}, v = {0.0f};
  adamw_update(p, g, m, v, {.lr = 0.1f, .weight_decay = 0.01f, .step = 1});
  expect_close(p[0], 1.998);
  EXPECT_EQ(m[0], 0.0f);
  EXPECT_EQ(v[0], 0.0f);
}

TEST(AdamW, TwoStepsMatchDoubleReference) {
  const double lr = 1e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  const std::vector<float> p0 = {0.5f, -1.25f, 3.0f, 0.0f, -0.01f};
  const std::vector<float> g1 = {0.2f, -0.4f, 1e-3f, 5.0f, -2.0f};
  const std::vector<float> g2 = {-0.1f, -0.3f, 2e-3f, -5.0f, 0.5f};
  std::vector<float> p = p0, m(p0.size(), 0.0f), v(p0.size(), 0.0f);
  AdamWHyper h{
      .lr = float(lr), .beta1 = float(b1), .beta2 = float(b2), .eps = float(eps), .weight_decay = float(wd), .step = 1};
  adamw_update(p, g1, m, v, h);
  h.step = 2;
  adamw_update(p, g2, m, v, h);

  // Element 0 by hand (b1 = 0.9, b2 = 0.95):
  //  step 1: m = 0.02, v = 0.05*0.04 = 0.002, m_hat = 0.2, v_hat = 0.04,
  //          p = 0.5 - 1e-3*(0.2/(0.2+1e-8) + 0.05) = 0.5 - 1e-3*1.04999995 = 0.49895000005
  //  step 2: m = 0.9*0.02 + 0.1*(-0.1) = 0.008;  v = 0.95*0.002 + 0.05*0.01 = 0.0024
  //          m_hat = 0.008/(1-0.81) = 0.0421052632;  v_hat = 0.0024/(1-0.9025) = 0.0246153846
  //          sqrt(v_hat) = 0.156892908;  m_hat/(sqrt+eps) = 0.268369431
  //          p = 0.49895000005 - 1e-3*(0.268369431 + 0.1*0.49895000005) = 0.498631736
  expect_close(p[0], 0.498631736);
  expect_close(m[0], 0.008);
  expect_close(v[0], 0.0024);

  for (size_t i = 0; i < p0.size(); ++i) {
    Moments s{p0[i], 0.0, 0.0};
    s = reference_step(s, g1[i], lr, b1, b2, eps, wd, 1);
    s = reference_step(s, g2[i], lr, b1, b2, eps, wd, 2);
    SCOPED_TRACE(i);
    expect_close(p[i], s.p);
    expect_close(m[i], s.m);
    expect_close(v[i], s.v);
  }
}

TEST(AdamW, BiasCorrectionUsesTheStep) {
  // Same state, step 1 vs step 10: different bias corrections, so different parameters.
  std::vector<float> pa = {1.0f}, pb = {1.0f}, g = {0.5f};
  std::vector<float> ma = {0.1f}, mb = {0.1f}, va = {0.01f}, vb = {0.01f};
  adamw_update(pa, g, ma, va, {.lr = 0.1f, .step = 1});
  adamw_update(pb, g, mb, vb, {.lr = 0.1f, .step = 10});
  EXPECT_NE(pa[0], pb[0]);
  Moments s = reference_step({1.0, 0.1f, 0.01f}, 0.5, 0.1, 0.9f, 0.999f, 1e-8f, 0.0, 10);
  expect_close(pb[0], s.p);
}

TEST(AdamW, NoWeightDecayGroups) {
  EXPECT_TRUE(no_weight_decay("decoder.layers.0.self_attention.linear_qkv.bias", 1));
  EXPECT_TRUE(no_weight_decay("decoder.layers.0.input_layernorm.weight", 1));
  EXPECT_TRUE(no_weight_decay("decoder.final_layernorm.bias", 1));
  EXPECT_TRUE(no_weight_decay("some.2d.bias", 2));  // the name alone excludes it
  EXPECT_FALSE(no_weight_decay("embedding.word_embeddings.weight", 2));
  EXPECT_FALSE(no_weight_decay("embedding.position_embeddings.weight", 2));
  EXPECT_FALSE(no_weight_decay("output_layer.weight", 2));
  EXPECT_FALSE(no_weight_decay("decoder.layers.0.mlp.linear_fc1.bias_extra", 2));
}

}  // namespace
}  // namespace megatron::optim
