// The FP8 linear on the CPU backend against references built here: each operand quantized
// explicitly (x * scale rounded by float_to_fp8, whose bits tests/core/fp8_test.cpp checks),
// dequantized with its scale_inv, and multiplied in double. The emulated FP8 GEMM must match
// that to fp32 summation error (the codes' products are exact), and stay within FP8's
// quantization error of the full-precision linear.
#include "backend/fp8_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/fp8_recipe.h"

namespace megatron::backend {
namespace {

using test::random_tensor;
using test::test_rng;
using test::values;

// max |x| of the values, and x's quantize-dequantize at the tensorwise scale.
struct Quantized {
  float amax, scale, scale_inv;
  std::vector<double> deq;  // fp8(x * scale) * scale_inv, in double (exact)
};
Quantized quantize_by_hand(const std::vector<double>& x, Fp8Format f) {
  float amax = 0.0f;
  for (double v : x) amax = std::fmax(amax, std::fabs(static_cast<float>(v)));
  Quantized q;
  q.amax = amax;
  q.scale = amax > 0 ? fp8_max(f) / amax : 1.0f;
  q.scale_inv = 1.0f / q.scale;
  for (double v : x) {
    const float code = fp8_to_float(float_to_fp8(static_cast<float>(v) * q.scale, f), f);
    q.deq.push_back(static_cast<double>(code) * q.scale_inv);
  }
  return q;
}

// c[m, n] = a[m, k] b[n, k]^T in double.
std::vector<double> matmul_nt(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t n,
                              int64_t k) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a[static_cast<size_t>(i * k + p)] * b[static_cast<size_t>(j * k + p)];
      c[static_cast<size_t>(i * n + j)] = s;
    }
  return c;
}
std::vector<double> transpose(const std::vector<double>& a, int64_t rows, int64_t cols) {
  std::vector<double> t(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[static_cast<size_t>(c * rows + r)] = a[static_cast<size_t>(r * cols + c)];
  return t;
}

double rel_error(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

// |got - want| within fp32 summation error of a k-term sum of |terms| (sum_abs), elementwise.
void expect_sum_close(const std::vector<double>& got, const std::vector<double>& want,
                      const std::vector<double>& sum_abs, int64_t k, const char* what) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = 2.0 * static_cast<double>(k + 2) * 6e-8 * sum_abs[i] + 1e-30;
    if (std::fabs(got[i] - want[i]) > tol && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << want[i] << " (tol " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

std::vector<double> abs_of(const std::vector<double>& v) {
  std::vector<double> a;
  for (double x : v) a.push_back(std::fabs(x));
  return a;
}

TEST(Fp8Quantize, CodesScaleAndTranspose) {
  auto be = make_cpu_backend();
  auto rng = test_rng();
  Tensor x = random_tensor({3, 5}, rng, DType::kBF16, 0.01f, 3.0f);
  Fp8Config cfg;
  cfg.recipe = Fp8Recipe::kTensorwise;
  Fp8ScalingState st(*be, cfg, kFp8Roles);
  Tensor q = be->empty({3, 5}, DType::kF8E4M3, MemoryKind::kOther);
  Tensor qt = be->empty({5, 3}, DType::kF8E4M3, MemoryKind::kOther);
  be->fp8_quantize(x, q, qt, st.quantization(0));
  const Quantized want = quantize_by_hand(values(x), Fp8Format::kE4M3);
  EXPECT_EQ(st.scale().data_as<float>()[0], want.scale);
  EXPECT_EQ(st.scale_inv().data_as<float>()[0], want.scale_inv);
  const uint8_t* qp = q.data_as<uint8_t>();
  const uint8_t* qtp = qt.data_as<uint8_t>();
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 5; ++c) {
      const uint8_t code = float_to_fp8(static_cast<float>(test::get(x, r * 5 + c)) * want.scale, Fp8Format::kE4M3);
      EXPECT_EQ(qp[r * 5 + c], code);
      EXPECT_EQ(qtp[c * 3 + r], code);
    }
  // The largest element lands on +-448.
  bool hit_max = false;
  for (int64_t i = 0; i < 15; ++i) hit_max |= std::fabs(fp8_to_float(qp[i], Fp8Format::kE4M3)) == 448.0f;
  EXPECT_TRUE(hit_max);
}

struct Case {
  Fp8Mix mix;
  DType dtype;
  bool bias;
};

class Fp8LinearCpu : public ::testing::TestWithParam<Case> {};

TEST_P(Fp8LinearCpu, ForwardAndBackwardMatchQuantizedReference) {
  const Case cs = GetParam();
  auto be = make_cpu_backend();
  auto rng = test_rng();
  const int64_t n = 24, in = 40, out = 16;
  Tensor x = random_tensor({n, in}, rng, cs.dtype, 0.01f, 2.0f);
  Tensor w = random_tensor({out, in}, rng, cs.dtype, 0.001f, 0.05f);
  Tensor dy = random_tensor({n, out}, rng, cs.dtype, 1e-5f, 1e-3f);
  Tensor bias = cs.bias ? random_tensor({out}, rng, cs.dtype) : Tensor();
  Fp8Config cfg;
  cfg.format = cs.mix;
  cfg.recipe = Fp8Recipe::kTensorwise;
  Fp8ScalingState st(*be, cfg, kFp8Roles);
  const Fp8LinearScaling s{st.quantization(0), st.quantization(1), st.quantization(2)};

  Tensor y = be->empty({n, out}, cs.dtype, MemoryKind::kOther);
  fp8_linear_forward(*be, x, w, bias, y, s);
  const Quantized qx = quantize_by_hand(values(x), Fp8Format::kE4M3);
  const Quantized qw = quantize_by_hand(values(w), Fp8Format::kE4M3);
  const Fp8Format gf = cs.mix == Fp8Mix::kHybrid ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
  const Quantized qdy = quantize_by_hand(values(dy), gf);

  std::vector<double> y_ref = matmul_nt(qx.deq, qw.deq, n, out, in);
  const std::vector<double> y_abs = matmul_nt(abs_of(qx.deq), abs_of(qw.deq), n, out, in);
  if (cs.bias) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < out; ++j) y_ref[static_cast<size_t>(i * out + j)] += test::get(bias, j);
  }
  if (cs.dtype == DType::kF32) {
    expect_sum_close(values(y), y_ref, y_abs, in, "y");
  } else {
    test::expect_close(y, y_ref, 1e-6, 1.0 / 128, "y");  // one bf16 rounding
  }
  // FP8 is an approximation of the full-precision linear, not the same thing.
  Tensor y_full = be->empty({n, out}, DType::kF32, MemoryKind::kOther);
  be->linear_forward(x, w, bias, y_full);
  const double e = rel_error(values(y), values(y_full));
  EXPECT_LT(e, 0.08);
  EXPECT_GT(e, 1e-4);

  Tensor dx = be->empty({n, in}, DType::kF32, MemoryKind::kOther);
  Tensor dw = Tensor::cpu({out, in});
  for (int64_t i = 0; i < dw.numel(); ++i) dw.data_as<float>()[i] = 0.5f;  // accumulated into
  Tensor dbias = cs.bias ? Tensor::cpu({out}) : Tensor();
  fp8_linear_backward(*be, dy, x, w, dx, dw, dbias, s, GradWrite::kAccumulate);
  // dx = dy_q . w_q ; dw = 0.5 + dy_q^T . x_q
  const std::vector<double> wt = transpose(qw.deq, out, in);
  const std::vector<double> dx_ref = matmul_nt(qdy.deq, wt, n, in, out);
  const std::vector<double> dx_abs = matmul_nt(abs_of(qdy.deq), abs_of(wt), n, in, out);
  expect_sum_close(values(dx), dx_ref, dx_abs, out, "dx");
  const std::vector<double> dyt = transpose(qdy.deq, n, out), xt = transpose(qx.deq, n, in);
  std::vector<double> dw_ref = matmul_nt(dyt, xt, out, in, n);
  std::vector<double> dw_abs = matmul_nt(abs_of(dyt), abs_of(xt), out, in, n);
  for (size_t i = 0; i < dw_ref.size(); ++i) {
    dw_ref[i] += 0.5;
    dw_abs[i] += 0.5;
  }
  expect_sum_close(values(dw), dw_ref, dw_abs, n, "dw");
  if (cs.bias) {
    for (int64_t j = 0; j < out; ++j) {
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += test::get(dy, i * out + j);
      EXPECT_NEAR(test::get(dbias, j), sum, 1e-6 * (std::fabs(sum) + 1e-3));  // unquantized dy
    }
  }
  // The recorded amaxes are the three tensors' max |x|.
  const float* amax = st.amax_to_reduce().data_as<float>();
  EXPECT_EQ(amax[0], qx.amax);
  EXPECT_EQ(amax[1], qw.amax);
  EXPECT_EQ(amax[2], qdy.amax);
  EXPECT_EQ(st.scale().data_as<float>()[2], qdy.scale);
  EXPECT_EQ(st.scale().data_as<float>()[0], qx.scale);
  EXPECT_EQ(st.scale().data_as<float>()[1], qw.scale);
}

INSTANTIATE_TEST_SUITE_P(Cases, Fp8LinearCpu,
                         ::testing::Values(Case{Fp8Mix::kHybrid, DType::kF32, false},
                                           Case{Fp8Mix::kE4M3, DType::kF32, true},
                                           Case{Fp8Mix::kHybrid, DType::kBF16, true}));

// The MLP's sources: FC2 fed gelu(pre) and FC1's output gradient d(act) * gelu'(pre) give the
// bits of the same linear fed those activations materialized in fp32 (and the bias gradient
// from dy's cast equals bias_grad's).
TEST(Fp8LinearSources, GeluSourcesEqualTheMaterializedActivations) {
  auto be = make_cpu_backend();
  auto rng = test_rng();
  const int64_t n = 16, in = 24, out = 8;
  Tensor pre = random_tensor({n, in}, rng, DType::kBF16, 0.01f, 3.0f);
  Tensor dact = random_tensor({n, out}, rng, DType::kBF16, 1e-4f, 1e-2f);
  Tensor dpre_src = random_tensor({n, out}, rng, DType::kBF16, 0.01f, 3.0f);
  Tensor w = random_tensor({out, in}, rng, DType::kBF16, 0.001f, 0.05f);
  Tensor act = be->empty({n, in}, DType::kF32, MemoryKind::kOther);
  be->bias_gelu_forward(pre, Tensor(), act, Gelu::kTanh);
  Tensor dy = be->empty({n, out}, DType::kF32, MemoryKind::kOther);
  be->bias_gelu_backward(dact, dpre_src, Tensor(), dy, Gelu::kTanh);

  Fp8Config cfg;
  cfg.recipe = Fp8Recipe::kTensorwise;
  Fp8ScalingState st_a(*be, cfg, kFp8Roles), st_b(*be, cfg, kFp8Roles);
  const Fp8LinearScaling sa{st_a.quantization(0), st_a.quantization(1), st_a.quantization(2)};
  const Fp8LinearScaling sb{st_b.quantization(0), st_b.quantization(1), st_b.quantization(2)};
  const Fp8Source x_src(pre, Fp8Prologue::kGelu, Gelu::kTanh);
  const Fp8Source dy_src(dact, Fp8Prologue::kGeluGrad, Gelu::kTanh, dpre_src);

  Tensor y_a = Tensor::cpu({n, out}), y_b = Tensor::cpu({n, out});
  fp8_linear_forward(*be, x_src, w, Tensor(), y_a, sa);
  fp8_linear_forward(*be, act, w, Tensor(), y_b, sb);
  EXPECT_EQ(values(y_a), values(y_b));
  Tensor dx_a = Tensor::cpu({n, in}), dx_b = Tensor::cpu({n, in});
  Tensor dw_a = Tensor::cpu({out, in}), dw_b = Tensor::cpu({out, in});
  Tensor db_a = Tensor::cpu({out}), db_b = Tensor::cpu({out});
  fp8_linear_backward(*be, dy_src, x_src, w, dx_a, dw_a, db_a, sa, GradWrite::kOverwrite);
  fp8_linear_backward(*be, dy, act, w, dx_b, dw_b, db_b, sb, GradWrite::kOverwrite);
  EXPECT_EQ(values(dx_a), values(dx_b));
  EXPECT_EQ(values(dw_a), values(dw_b));
  EXPECT_EQ(values(db_a), values(db_b));
  Tensor db_ref = Tensor::cpu({out});
  be->bias_grad(dy, db_ref, GradWrite::kOverwrite);
  EXPECT_EQ(values(db_a), values(db_ref));
  EXPECT_GT(std::fabs(test::get(db_a, 0)), 0.0);
}

// Hybrid and e4m3 quantize the output gradient differently (e5m2 keeps 2 mantissa bits).
TEST(Fp8LinearHybrid, UsesE5M2ForGradients) {
  auto be = make_cpu_backend();
  auto rng = test_rng();
  const int64_t n = 8, in = 8, out = 8;
  Tensor x = random_tensor({n, in}, rng);
  Tensor w = random_tensor({out, in}, rng);
  Tensor dy = random_tensor({n, out}, rng);
  std::vector<std::vector<double>> dxs;
  for (Fp8Mix mix : {Fp8Mix::kE4M3, Fp8Mix::kHybrid}) {
    Fp8Config cfg;
    cfg.format = mix;
    cfg.recipe = Fp8Recipe::kTensorwise;
    Fp8ScalingState st(*be, cfg, kFp8Roles);
    const Fp8LinearScaling s{st.quantization(0), st.quantization(1), st.quantization(2)};
    Tensor dx = be->empty({n, in}, DType::kF32, MemoryKind::kOther);
    Tensor dw = be->empty({out, in}, DType::kF32, MemoryKind::kOther);
    Tensor none;
    fp8_linear_backward(*be, dy, x, w, dx, dw, none, s, GradWrite::kOverwrite);
    dxs.push_back(values(dx));
    const Quantized qdy = quantize_by_hand(values(dy), mix == Fp8Mix::kHybrid ? Fp8Format::kE5M2 : Fp8Format::kE4M3);
    EXPECT_EQ(st.scale().data_as<float>()[2], qdy.scale);
  }
  EXPECT_NE(dxs[0], dxs[1]);
}

}  // namespace
}  // namespace megatron::backend
