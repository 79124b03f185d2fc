#include "train/flops.h"

#include <gtest/gtest.h>

#include <cmath>

namespace megatron::train {
namespace {

// GPT-2-style shape: q = k = h, f = 4h, V = 50304 (GPT-2 padded at TP 1), s = 1024.
model::GPTConfig gpt2_shape(int64_t layers, int64_t hidden, int64_t heads) {
  model::GPTConfig m;
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_attention_heads = heads;
  m.kv_channels = hidden / heads;
  m.ffn_hidden_size = 4 * hidden;
  m.seq_length = 1024;
  m.max_position_embeddings = 1024;
  m.vocab_size = 50257;
  m.padded_vocab_size = 50304;
  return m;
}

// The per-sample test vectors of docs/megatron-formats.md, "FLOPs for the TFLOP/s figure", are
// given to 7 significant digits, so compare with a relative tolerance of 1e-6 (half a unit in the
// 7th digit is 5e-7).
void expect_rel(double got, double want) { EXPECT_NEAR(got / want, 1.0, 1e-6) << got << " vs " << want; }

TEST(Flops, PerSampleVectorsHead2025) {
  expect_rel(flops_per_iteration(gpt2_shape(12, 768, 12), 1, FlopsConvention::k2025), 8.171846e11);
  expect_rel(flops_per_iteration(gpt2_shape(24, 1024, 16), 1, FlopsConvention::k2025), 2.326530e12);
  expect_rel(flops_per_iteration(gpt2_shape(48, 1600, 25), 1, FlopsConvention::k2025), 1.003739e13);
}

TEST(Flops, PerSampleVectors2024) {
  expect_rel(flops_per_iteration(gpt2_shape(12, 768, 12), 1, FlopsConvention::k2024), 8.751667e11);
  expect_rel(flops_per_iteration(gpt2_shape(24, 1024, 16), 1, FlopsConvention::k2024), 2.481149e12);
  expect_rel(flops_per_iteration(gpt2_shape(48, 1600, 25), 1, FlopsConvention::k2024), 1.052057e13);
}

TEST(Flops, ClosedFormsForGpt2Shapes) {
  // 2025: 72*B*s*L*h^2*(1 + s/(12h) + V/(12Lh)); 2024: the same with s/(6h).
  const model::GPTConfig m = gpt2_shape(24, 1024, 16);
  const double B = 8, s = 1024, L = 24, h = 1024, V = 50304;
  const double base = 72 * B * s * L * h * h;
  expect_rel(flops_per_iteration(m, 8, FlopsConvention::k2025), base * (1 + s / (12 * h) + V / (12 * L * h)));
  expect_rel(flops_per_iteration(m, 8, FlopsConvention::k2024), base * (1 + s / (6 * h) + V / (12 * L * h)));
  // The first upstream formula (2023-11), 60*B*s*L*h^2*(1 + g/(5n) + s/(5h) + V/(10Lh)), agrees for MHA.
  expect_rel(flops_per_iteration(m, 8, FlopsConvention::k2024),
             60 * B * s * L * h * h * (1 + 1.0 / 5 + s / (5 * h) + V / (10 * L * h)));
}

TEST(Flops, TermsScaleWithBatchAndOnlyCoreAttentionDiffers) {
  const model::GPTConfig m = gpt2_shape(12, 768, 12);
  const FlopsTerms a = flops_terms(m, 1, FlopsConvention::k2025);
  const FlopsTerms b = flops_terms(m, 1, FlopsConvention::k2024);
  const FlopsTerms a8 = flops_terms(m, 8, FlopsConvention::k2025);
  EXPECT_DOUBLE_EQ(a.attention_linear, b.attention_linear);
  EXPECT_DOUBLE_EQ(a.mlp, b.mlp);
  EXPECT_DOUBLE_EQ(a.logits, b.logits);
  EXPECT_DOUBLE_EQ(2 * a.core_attention, b.core_attention);
  EXPECT_DOUBLE_EQ(a8.total(), 8 * a.total());
  // Exact integer products for L=12, h=768, s=1024, V=50304.
  EXPECT_DOUBLE_EQ(a.attention_linear, 6.0 * 1024 * 12 * (768.0 * 3 * 768 + 768.0 * 768));
  EXPECT_DOUBLE_EQ(a.core_attention, 6.0 * 1024 * 1024 * 12 * 768);
  EXPECT_DOUBLE_EQ(a.mlp, 12.0 * 1024 * 12 * 768 * 3072);
  EXPECT_DOUBLE_EQ(a.logits, 6.0 * 1024 * 768 * 50304);
}

TEST(Flops, KvChannelsAndFfnAreUsed) {
  model::GPTConfig m = gpt2_shape(12, 768, 12);
  const double base = flops_per_iteration(m, 1, FlopsConvention::k2025);
  m.ffn_hidden_size = 2 * 768;  // MLP term halves: 12*s*L*h*(4h - 2h) less
  EXPECT_DOUBLE_EQ(base - flops_per_iteration(m, 1, FlopsConvention::k2025), 12.0 * 1024 * 12 * 768 * 1536);
  m = gpt2_shape(12, 768, 12);
  m.kv_channels = 128;  // q = k = 1536 != h
  const FlopsTerms t = flops_terms(m, 1, FlopsConvention::k2025);
  EXPECT_DOUBLE_EQ(t.attention_linear, 6.0 * 1024 * 12 * (768.0 * (1536 + 2 * 1536) + 1536.0 * 768));
  EXPECT_DOUBLE_EQ(t.core_attention, 6.0 * 1024 * 1024 * 12 * 1536);
}

// --swiglu: Megatron's c = 3 in the MLP term, 6*c*B*s*L*h*f = 18*B*s*L*h*f (FC1 is [2f, h]).
TEST(Flops, SwigluCountsThreeMlpGemms) {
  // h 1024: the --swiglu default f = int(8h/3/64)*64 = 42*64 = 2688 (not 8h/3 = 2730.67).
  model::GPTConfig m = gpt2_shape(24, 1024, 16);
  m.ffn_hidden_size = 2688;
  const FlopsTerms gelu = flops_terms(m, 1, FlopsConvention::k2025);
  m.swiglu = true;
  const FlopsTerms swiglu = flops_terms(m, 1, FlopsConvention::k2025);
  EXPECT_DOUBLE_EQ(gelu.mlp, 12.0 * 1024 * 24 * 1024 * 2688);    // 8.1175e11
  EXPECT_DOUBLE_EQ(swiglu.mlp, 18.0 * 1024 * 24 * 1024 * 2688);  // 1.21762e12
  EXPECT_DOUBLE_EQ(swiglu.mlp, 1217623228416.0);
  EXPECT_DOUBLE_EQ(swiglu.attention_linear, gelu.attention_linear);
  EXPECT_DOUBLE_EQ(swiglu.core_attention, gelu.core_attention);
  EXPECT_DOUBLE_EQ(swiglu.logits, gelu.logits);
  // The 2024 convention (2024-04 .. 2025-03): 12*B*s*L*h^2*[(1 + g/n + s/h)*(q/h) + (f/h)*1.5]
  // + 6*B*s*h*V, the same MLP number.
  const double B = 4, s = 1024, L = 24, h = 1024, f = 2688, V = 50304;
  expect_rel(flops_per_iteration(m, 4, FlopsConvention::k2024),
             12 * B * s * L * h * h * ((1 + 1 + s / h) * 1 + f / h * 1.5) + 6 * B * s * h * V);
  EXPECT_DOUBLE_EQ(flops_terms(m, 1, FlopsConvention::k2024).mlp, swiglu.mlp);
}

// With f = 8h/3 exactly (h a multiple of 24: 768 -> 2048) SwiGLU's 3 GEMMs of h x f are the
// FLOPs of GELU's 2 of h x 4h: the per-sample vector of the 124M shape again.
TEST(Flops, SwigluAtEightThirdsEqualsTheGeluModel) {
  model::GPTConfig m = gpt2_shape(12, 768, 12);
  m.swiglu = true;
  m.ffn_hidden_size = 768 / 24 * 64;
  ASSERT_EQ(m.ffn_hidden_size, 2048);
  expect_rel(flops_per_iteration(m, 1, FlopsConvention::k2025), 8.171846e11);
  EXPECT_DOUBLE_EQ(flops_terms(m, 1, FlopsConvention::k2025).mlp, 18.0 * 1024 * 12 * 768 * 2048);
  EXPECT_DOUBLE_EQ(flops_terms(m, 1, FlopsConvention::k2025).mlp, 347892350976.0);
}

TEST(Flops, RmsNormChangesNothing) {
  model::GPTConfig m = gpt2_shape(12, 768, 12);
  const double layernorm = flops_per_iteration(m, 8, FlopsConvention::k2025);
  m.normalization = model::Normalization::kRMSNorm;
  EXPECT_EQ(flops_per_iteration(m, 8, FlopsConvention::k2025), layernorm);
  EXPECT_EQ(flops_formula_text(m, 8, FlopsConvention::k2025),
            flops_formula_text(gpt2_shape(12, 768, 12), 8, FlopsConvention::k2025));
}

TEST(Flops, ThroughputDividesByAllGpus) { EXPECT_DOUBLE_EQ(tflops_per_gpu(8e15, 2.0, 4), 1000.0); }

TEST(Flops, FormulaTextShowsTermsAndNumbers) {
  const std::string text = flops_formula_text(gpt2_shape(12, 768, 12), 8, FlopsConvention::k2025);
  EXPECT_NE(text.find("causal"), std::string::npos) << text;
  EXPECT_NE(text.find("attention QKV + projection"), std::string::npos) << text;
  EXPECT_NE(text.find("6*B*s^2*L*q"), std::string::npos) << text;
  EXPECT_NE(text.find("V=50304"), std::string::npos) << text;
  EXPECT_NE(text.find("8.1718E+11 per sample"), std::string::npos) << text;     // total per sample
  EXPECT_NE(text.find("6.5375E+12 per iteration"), std::string::npos) << text;  // x 8
  const std::string text24 = flops_formula_text(gpt2_shape(12, 768, 12), 8, FlopsConvention::k2024);
  EXPECT_NE(text24.find("12*B*s^2*L*q"), std::string::npos) << text24;
  EXPECT_NE(text24.find("8.7517E+11 per sample"), std::string::npos) << text24;
  EXPECT_EQ(text.find("SwiGLU"), std::string::npos) << text;

  // SwiGLU: the MLP row shows c = 3; h 1024, f 2688, L 24 -> 18*s*L*h*f = 1.2176E+12 per sample.
  model::GPTConfig m = gpt2_shape(24, 1024, 16);
  m.swiglu = true;
  m.ffn_hidden_size = 2688;
  const std::string sw = flops_formula_text(m, 8, FlopsConvention::k2025);
  EXPECT_NE(sw.find("f=2688 (SwiGLU: c=3)"), std::string::npos) << sw;
  EXPECT_NE(sw.find("MLP (FC1 gate+up, FC2)"), std::string::npos) << sw;
  EXPECT_NE(sw.find("18*B*s*L*h*f"), std::string::npos) << sw;
  EXPECT_NE(sw.find("1.2176E+12 per sample, 9.7410E+12 per iteration"), std::string::npos) << sw;
  EXPECT_EQ(sw.find("12*B*s*L*h*f"), std::string::npos) << sw;
}

// Heads x head size past int64 is counted in doubles, not wrapped (2^32 x 2^32 was 0).
TEST(Flops, HeadsTimesHeadSizeBeyond64Bits) {
  model::GPTConfig m = gpt2_shape(1, 64, 1);
  m.num_attention_heads = m.kv_channels = int64_t{1} << 32;
  const FlopsTerms t = flops_terms(m, 1, FlopsConvention::k2025);
  expect_rel(t.core_attention, 6.0 * 1024 * 1024 * 0x1p64);
  const std::string text = flops_formula_text(m, 1, FlopsConvention::k2025);
  EXPECT_NE(text.find("q=k=n*d=1.8447E+19 "), std::string::npos) << text;
  EXPECT_NE(flops_formula_text(gpt2_shape(12, 768, 12), 8, FlopsConvention::k2025).find("q=k=n*d=768 "),
            std::string::npos);
}

}  // namespace
}  // namespace megatron::train
