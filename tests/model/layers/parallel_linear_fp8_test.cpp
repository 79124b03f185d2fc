// The tensor-parallel linears with FP8 on (LayerContext::fp8), one rank, CPU backend in fp32:
// forward (plain, with the GELU epilogue, row-parallel with the residual), dgrad, wgrad and the
// bias gradient against an independent emulation written here from the recipe's definition:
// each operand rounded with core/fp8.h's round_to_fp8(x * scale) at the recipe's scale
// (tensorwise: fp8_max / amax of the tensor itself; delayed: the state's scale, which the
// update sets to fp8_max * 2^-margin / amax of the history), the product summed in double and
// multiplied by both scale_inv. The CPU GEMM sums exact fp32 products in fp32, so the two agree
// to fp32 summation rounding (1e-5 relative of the row's absolute sum); a wrong scale, a missed
// quantization or a wrong format moves an output by far more (E4M3 has 3 mantissa bits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "backend/fp8_recipe.h"
#include "comm/self_communicator.h"
#include "model/layers/layer_test_util.h"
#include "model/layers/parallel_linear.h"

namespace megatron::model {
namespace {

using backend::Fp8Config;
using backend::Fp8Mix;
using backend::Fp8Recipe;
using backend::Fp8Role;
using backend::Fp8ScalingState;

std::vector<float> values(const Tensor& t) {
  const float* p = t.data_as<float>();
  return std::vector<float>(p, p + t.numel());
}

float amax_of(const std::vector<float>& x) {
  float a = 0;
  for (float v : x) a = std::max(a, std::fabs(v));
  return a;
}

// round_to_fp8(x * scale) of every element.
std::vector<float> quantized(const std::vector<float>& x, float scale, Fp8Format f) {
  std::vector<float> q(x.size());
  for (size_t i = 0; i < x.size(); ++i) q[i] = round_to_fp8(x[i] * scale, f);
  return q;
}

// c[m, n] = (a[m, k] . b[n, k]) * sa_inv * sb_inv in double; also the bound sum |a||b| * s.
void emulated_gemm(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t n, int64_t k, double s,
                   std::vector<double>& c, std::vector<double>& bound) {
  c.assign(static_cast<size_t>(m * n), 0.0);
  bound.assign(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, abs = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double v = static_cast<double>(a[static_cast<size_t>(i * k + p)]) * b[static_cast<size_t>(j * k + p)];
        sum += v;
        abs += std::fabs(v);
      }
      c[static_cast<size_t>(i * n + j)] = sum * s;
      bound[static_cast<size_t>(i * n + j)] = abs * s;
    }
  }
}

std::vector<float> transposed(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> t(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[static_cast<size_t>(c * rows + r)] = x[static_cast<size_t>(r * cols + c)];
  return t;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& bound,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5 * bound[i] + 1e-30) << what << " element " << i;
  }
}

// Fills fp32 tensors with normals of a given deviation, from one seeded stream.
struct NormalFill {
  std::mt19937 rng;
  std::normal_distribution<float> g{0.0f, 1.0f};
  explicit NormalFill(unsigned seed) : rng(seed) {}
  void operator()(Tensor& t, float sd) {
    float* p = t.data_as<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = sd * g(rng);
  }
};

// The FP8 buffers for linears `shapes` ([out, in] each) over n rows, sized as
// GPTModel::allocate_fp8 sizes them, and h1 [n, h1_cols] for the row-parallel partial sums.
LayerWorkspace fp8_workspace(int64_t n, int64_t h1_cols, std::initializer_list<std::pair<int64_t, int64_t>> shapes) {
  int64_t rows = 0, weight = 0, rows_t = 0, cols_t = 0;
  for (const auto& [out, in] : shapes) {
    rows = std::max({rows, n * in, n * out});
    weight = std::max(weight, out * in);
    rows_t = std::max(rows_t, n * out);
    cols_t = std::max(cols_t, n * in);
  }
  LayerWorkspace ws;
  ws.h1 = Tensor::cpu({n, h1_cols});
  ws.fp8_rows = Tensor::cpu({rows}, DType::kF8E4M3);
  ws.fp8_weight = Tensor::cpu({weight}, DType::kF8E4M3);
  ws.fp8_rows_t = Tensor::cpu({rows_t}, DType::kF8E4M3);
  ws.fp8_cols_t = Tensor::cpu({cols_t}, DType::kF8E4M3);
  return ws;
}

struct Case {
  Fp8Mix mix;
  Fp8Recipe recipe;
};

class ParallelLinearFp8 : public ::testing::TestWithParam<Case> {};

TEST_P(ParallelLinearFp8, MatchesAnIndependentEmulation) {
  const Case k = GetParam();
  auto be = backend::make_cpu_backend();
  comm::SelfCommunicator tp(*be, "tp");
  const int64_t n = 12, in = 24, out = 20;
  ParameterSet ps;
  ColumnParallelLinear col;
  col.weight = ps.add("col.weight", {out, in}, Init::kNormal);
  col.bias = ps.add("col.bias", {out}, Init::kZeros);
  col.fp8 = 0;
  RowParallelLinear row;
  row.weight = ps.add("row.weight", {in, out}, Init::kNormal);
  row.bias = ps.add("row.bias", {in}, Init::kZeros);
  row.fp8 = 1;
  ps.allocate(*be, DType::kF32);
  NormalFill fill(3);
  for (Parameter& p : ps.params()) fill(p.value, 0.05f);
  Tensor x = Tensor::cpu({n, in}), dy = Tensor::cpu({n, out}), residual = Tensor::cpu({n, in});
  fill(x, 3.0f);
  fill(dy, 1e-4f);  // gradients are small: E5M2's range needs the scale
  fill(residual, 1.0f);

  Fp8Config cfg;
  cfg.format = k.mix;
  cfg.recipe = k.recipe;
  cfg.amax_history_len = 3;
  cfg.amax_compute_algo = backend::Fp8AmaxAlgo::kMax;
  cfg.margin = 1;
  Fp8ScalingState state(*be, cfg, 2 * backend::kFp8Roles);
  LayerWorkspace ws = fp8_workspace(n, in, {{out, in}, {in, out}});
  LayerContext ctx = test_layer_context(*be, tp, ps, ws, n, 1, in);
  ctx.fp8 = &state;

  const Fp8Format f_in = Fp8Format::kE4M3;
  const Fp8Format f_dy = k.mix == Fp8Mix::kHybrid ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
  const bool delayed = k.recipe == Fp8Recipe::kDelayed;
  // Delayed: run one step first, so that the scales are the update's, not the initial 1.
  if (delayed) {
    Tensor y0 = Tensor::cpu({n, out}), dx0 = Tensor::cpu({n, in});
    col.forward(ctx, x, y0);
    col.backward(ctx, dy, x, dx0);
    state.update();
  }
  // The scale an operand is quantized with: tensorwise its own; delayed the state's, which
  // must be fp8_max * 2^-margin / (the one recorded amax: the history's max).
  auto scale_for = [&](int64_t linear, Fp8Role role, const std::vector<float>& t, Fp8Format f) {
    if (!delayed) return fp8_current_scale(amax_of(t), fp8_max(f));
    const float s = state.scale().data_as<float>()[Fp8ScalingState::slot(linear, role)];
    EXPECT_FLOAT_EQ(s, fp8_max(f) * 0.5f / amax_of(t)) << "delayed scale of slot " << linear << "/" << int(role);
    return s;
  };

  const std::vector<float> xv = values(x), wv = values(ps[col.weight].value), dyv = values(dy);
  const float sx = scale_for(0, Fp8Role::kInput, xv, f_in), sw = scale_for(0, Fp8Role::kWeight, wv, f_in);
  const float sdy = scale_for(0, Fp8Role::kGradOutput, dyv, f_dy);
  const std::vector<float> qx = quantized(xv, sx, f_in), qw = quantized(wv, sw, f_in), qdy = quantized(dyv, sdy, f_dy);
  std::vector<double> want, bound;

  // The bias added to the product's [rows, cols] (bias [cols]).
  auto add_bias = [&](const Tensor& bias, int64_t cols) {
    const float* bv = bias.data_as<float>();
    for (size_t i = 0; i < want.size(); ++i) {
      want[i] += bv[i % static_cast<size_t>(cols)];
      bound[i] += std::fabs(bv[i % static_cast<size_t>(cols)]);
    }
  };
  // Column-parallel forward: y = q(x) q(w)^T / (sx sw) + bias.
  Tensor y = Tensor::cpu({n, out});
  col.forward(ctx, x, y);
  emulated_gemm(qx, qw, n, out, in, 1.0 / (static_cast<double>(sx) * sw), want, bound);
  add_bias(ps[col.bias].value, out);
  expect_close(values(y), want, bound, "forward");
  // With the GELU epilogue: pre as above, act = gelu(pre).
  Tensor pre = Tensor::cpu({n, out}), act = Tensor::cpu({n, out});
  col.forward_gelu(ctx, x, pre, act, backend::Gelu::kTanh);
  expect_close(values(pre), want, bound, "forward_gelu pre");
  EXPECT_NE(values(act)[0], values(pre)[0]);

  // Backward: dx = q(dy) q(w^T)^T, dw = q(dy^T) q(x^T)^T, db = column sums of dy.
  Tensor dx = Tensor::cpu({n, in});
  ps.forget_grads();
  col.backward(ctx, dy, x, dx);
  emulated_gemm(qdy, transposed(qw, out, in), n, in, out, 1.0 / (static_cast<double>(sdy) * sw), want, bound);
  expect_close(values(dx), want, bound, "dgrad");
  emulated_gemm(transposed(qdy, n, out), transposed(qx, n, in), out, in, n, 1.0 / (static_cast<double>(sdy) * sx), want,
                bound);
  expect_close(values(ps[col.weight].grad), want, bound, "wgrad");
  for (int64_t j = 0; j < out; ++j) {
    double sum = 0, abs = 0;
    for (int64_t i = 0; i < n; ++i) {
      sum += dyv[static_cast<size_t>(i * out + j)];
      abs += std::fabs(dyv[static_cast<size_t>(i * out + j)]);
    }
    ASSERT_NEAR(ps[col.bias].grad.data_as<float>()[j], sum, 1e-6 * abs) << "bias grad " << j;
  }

  // Row-parallel forward with the residual: out = residual + q(a) q(w2)^T / (sa sw2) + bias.
  // (Tensorwise only: the delayed scales of this linear would come from an earlier step.)
  if (!delayed) {
    const std::vector<float> av = values(act), w2 = values(ps[row.weight].value);
    const float sa = scale_for(1, Fp8Role::kInput, av, f_in), sw2 = scale_for(1, Fp8Role::kWeight, w2, f_in);
    Tensor o = Tensor::cpu({n, in});
    row.forward_residual(ctx, act, residual, o, {});
    emulated_gemm(quantized(av, sa, f_in), quantized(w2, sw2, f_in), n, in, out, 1.0 / (static_cast<double>(sa) * sw2),
                  want, bound);
    add_bias(ps[row.bias].value, in);
    const std::vector<float> rv = values(residual);
    for (size_t i = 0; i < want.size(); ++i) {
      want[i] += rv[i];
      bound[i] += std::fabs(rv[i]);
    }
    expect_close(values(o), want, bound, "row-parallel forward");
  }

  // Every quantization recorded its amax into history row 0 (the next update's input).
  if (!delayed) return;
  const float* h = state.amax_history().data_as<float>();
  EXPECT_EQ(h[Fp8ScalingState::slot(0, Fp8Role::kInput)], amax_of(xv));
  EXPECT_EQ(h[Fp8ScalingState::slot(0, Fp8Role::kWeight)], amax_of(wv));
  EXPECT_EQ(h[Fp8ScalingState::slot(0, Fp8Role::kGradOutput)], amax_of(dyv));
}

// The row-parallel linear fed gelu(pre) with its transposed input codes kept from the forward
// (Fp8SavedInput, the MLP's FC2): a later micro-batch's forward overwrites the slot's
// tensorwise scale before this one's backward, which must still give the bits of a backward
// that runs right after its own forward and quantizes x again.
TEST(ParallelLinearFp8, SavedInputCodesGiveTheRecomputedGradients) {
  auto be = backend::make_cpu_backend();
  comm::SelfCommunicator tp(*be, "tp");
  const int64_t n = 16, f = 24, h = 8;
  ParameterSet ps;
  RowParallelLinear row;
  row.weight = ps.add("row.weight", {h, f}, Init::kNormal);
  row.bias = ps.add("row.bias", {h}, Init::kZeros);
  row.fp8 = 0;
  ps.allocate(*be, DType::kF32);
  NormalFill fill(5);
  for (Parameter& p : ps.params()) fill(p.value, 0.05f);
  Tensor pre_a = Tensor::cpu({n, f}), pre_b = Tensor::cpu({n, f}), dy = Tensor::cpu({n, h});
  Tensor residual = Tensor::cpu({n, h});
  fill(pre_a, 2.0f);
  fill(pre_b, 9.0f);  // another amax: another tensorwise scale
  fill(dy, 1e-3f);
  Fp8Config cfg;
  cfg.recipe = Fp8Recipe::kTensorwise;
  Fp8ScalingState state(*be, cfg, backend::kFp8Roles);
  LayerWorkspace ws = fp8_workspace(n, h, {{h, f}});
  LayerContext ctx = test_layer_context(*be, tp, ps, ws, n, 1, h);
  ctx.fp8 = &state;
  auto gelu = [](const Tensor& pre) {
    return backend::Fp8Source(pre, backend::Fp8Prologue::kGelu, backend::Gelu::kTanh);
  };
  auto backward = [&](const Fp8SavedInput& saved) {
    Tensor dx = Tensor::cpu({n, f});
    ps.forget_grads();
    any_linear_backward(ctx, row.fp8, dy, gelu(pre_a), ps[row.weight].value, dx, ps[row.weight].grad, ps[row.bias].grad,
                        backend::GradWrite::kOverwrite, saved);
    return std::vector<std::vector<float>>{values(dx), values(ps[row.weight].grad), values(ps[row.bias].grad)};
  };
  Tensor out = Tensor::cpu({n, h});
  row.forward_residual(ctx, gelu(pre_a), residual, out, {});
  const std::vector<std::vector<float>> want = backward({});

  Tensor kept = Tensor::cpu({n, f}, DType::kBF16);  // the bytes of act_out
  row.forward_residual(ctx, gelu(pre_a), residual, out, {}, Fp8SavedInput{kept});
  row.forward_residual(ctx, gelu(pre_b), residual, out, {});
  const std::vector<std::vector<float>> got = backward(Fp8SavedInput{kept});
  EXPECT_EQ(got[0], want[0]) << "dgrad";
  EXPECT_EQ(got[1], want[1]) << "wgrad";
  EXPECT_EQ(got[2], want[2]) << "bias gradient";
  EXPECT_NE(amax_of(want[1]), 0.0f);
  // The backward reads the kept codes: zeroed, the weight gradient is zero.
  std::memset(kept.data(), 0, static_cast<size_t>(n * f));
  const std::vector<std::vector<float>> zeroed = backward(Fp8SavedInput{kept});
  for (float v : zeroed[1]) ASSERT_EQ(v, 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Recipes, ParallelLinearFp8,
                         ::testing::Values(Case{Fp8Mix::kHybrid, Fp8Recipe::kTensorwise},
                                           Case{Fp8Mix::kE4M3, Fp8Recipe::kTensorwise},
                                           Case{Fp8Mix::kHybrid, Fp8Recipe::kDelayed},
                                           Case{Fp8Mix::kE4M3, Fp8Recipe::kDelayed}));

}  // namespace
}  // namespace megatron::model
