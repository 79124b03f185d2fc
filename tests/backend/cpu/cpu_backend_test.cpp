// CPU backend: memory ops, GEMM, linear layers, whole-tensor reductions, 16-bit emulation
// and thread-count independence.
#include "backend/cpu/cpu_backend.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "backend/cpu/cpu_test_util.h"
#include "core/memory.h"

namespace megatron::backend {
namespace {

using namespace megatron::test;

TEST(CpuBackend, EmptyIsZeroFilledAndCounted) {
  auto be = make_cpu_backend();
  EXPECT_EQ(be->device(), Device::kCPU);
  const int64_t before = memory_tracker(Device::kCPU).snapshot().current[static_cast<int>(MemoryKind::kActivations)];
  {
    Tensor t = be->empty({3, 5}, DType::kBF16, MemoryKind::kActivations);
    EXPECT_EQ(t.shape(), (Shape{3, 5}));
    EXPECT_EQ(t.dtype(), DType::kBF16);
    EXPECT_EQ(t.storage()->kind(), MemoryKind::kActivations);
    for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.data_as<uint16_t>()[i], 0);
    EXPECT_EQ(memory_tracker(Device::kCPU).snapshot().current[static_cast<int>(MemoryKind::kActivations)], before + 30);
  }
  EXPECT_EQ(memory_tracker(Device::kCPU).snapshot().current[static_cast<int>(MemoryKind::kActivations)], before);
}

TEST(CpuBackend, FillEveryDtype) {
  auto be = make_cpu_backend();
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    Tensor t = be->empty({7}, d, MemoryKind::kOther);
    be->fill(t, 1.0f / 3.0f);
    for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(get(t, i), round_to(d, 1.0f / 3.0f));
  }
  Tensor ti = be->empty({4}, DType::kI32, MemoryKind::kOther);
  be->fill(ti, 42.0f);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(ti.data_as<int32_t>()[i], 42);
}

TEST(CpuBackend, CopyConvertsWithRoundToNearestEven) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  Tensor src = random_tensor({4, 9}, rng, DType::kF32, 0.1f, 100.0f);
  for (DType d : {DType::kBF16, DType::kF16}) {
    Tensor half = be->empty({36}, d, MemoryKind::kOther);
    be->copy(src, half);
    for (int64_t i = 0; i < 36; ++i) EXPECT_EQ(get(half, i), round_to(d, static_cast<float>(get(src, i))));
    // 16-bit -> 16-bit of the other kind goes through fp32 with one rounding.
    const DType other = d == DType::kBF16 ? DType::kF16 : DType::kBF16;
    Tensor o = be->empty({36}, other, MemoryKind::kOther);
    be->copy(half, o);
    for (int64_t i = 0; i < 36; ++i) EXPECT_EQ(get(o, i), round_to(other, static_cast<float>(get(half, i))));
    Tensor back = be->empty({4, 9}, DType::kF32, MemoryKind::kOther);
    be->copy(half, back);
    for (int64_t i = 0; i < 36; ++i) EXPECT_EQ(get(back, i), get(half, i));
  }
  Tensor ints = tensor_from({1, -2, 3}, {3}, DType::kI32);
  Tensor ints2 = be->empty({3}, DType::kI32, MemoryKind::kOther);
  be->copy(ints, ints2);
  EXPECT_TRUE(bitwise_equal(ints, ints2));
}

// Naive double-precision c = alpha op(a) op(b) + beta c0.
std::vector<double> naive_matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, const std::vector<double>& c0,
                                 int64_t m, int64_t n, int64_t k, double alpha, double beta) {
  const int64_t ac = a.dim(-1), bc = b.dim(-1);
  std::vector<double> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t l = 0; l < k; ++l) {
        const double av = ta ? get(a, l * ac + i) : get(a, i * ac + l);
        const double bv = tb ? get(b, j * bc + l) : get(b, l * bc + j);
        s += av * bv;
      }
      c[static_cast<size_t>(i * n + j)] = alpha * s + beta * c0[static_cast<size_t>(i * n + j)];
    }
  return c;
}

TEST(CpuBackend, MatmulAllTransposesAlphaBeta) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t m = 5, n = 7, k = 11;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      // a is read as 2-D [rows, last dim]: give it rank 3 to exercise that.
      Tensor a = ta ? random_tensor({k, m}, rng) : random_tensor({1, m, k}, rng);
      Tensor b = tb ? random_tensor({n, k}, rng) : random_tensor({k, n}, rng);
      Tensor c = random_tensor({m, n}, rng);
      const std::vector<double> c0 = values(c);
      be->matmul(a, ta, b, tb, c, 0.75f, -0.5f);
      // fp32 GEMM with k = 11 products of magnitude <= 1: error well below 1e-5.
      expect_close(c, naive_matmul(a, ta, b, tb, c0, m, n, k, 0.75, -0.5), 1e-5, 1e-5,
                   std::string("matmul ta=") + (ta ? "1" : "0") + " tb=" + (tb ? "1" : "0"));
      // beta = 0 overwrites (even NaN garbage in c).
      be->fill(c, std::numeric_limits<float>::quiet_NaN());
      be->matmul(a, ta, b, tb, c);
      expect_close(c, naive_matmul(a, ta, b, tb, c0, m, n, k, 1.0, 0.0), 1e-5, 1e-5, "matmul beta=0");
    }
}

std::vector<double> naive_linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t out = w.dim(0), in = w.dim(1), n = x.numel() / in;
  std::vector<double> y(static_cast<size_t>(n * out));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = bias.defined() ? get(bias, o) : 0.0;
      for (int64_t i = 0; i < in; ++i) s += get(x, r * in + i) * get(w, o * in + i);
      y[static_cast<size_t>(r * out + o)] = s;
    }
  return y;
}

TEST(CpuBackend, LinearForwardMatchesNaive) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  Tensor x = random_tensor({3, 2, 6}, rng), w = random_tensor({5, 6}, rng), bias = random_tensor({5}, rng);
  Tensor y = be->empty({3, 2, 5}, DType::kF32, MemoryKind::kOther);
  be->linear_forward(x, w, bias, y);
  expect_close(y, naive_linear(x, w, bias), 1e-5, 1e-5, "linear with bias");
  be->linear_forward(x, w, Tensor(), y);
  expect_close(y, naive_linear(x, w, Tensor()), 1e-5, 1e-5, "linear without bias");
}

TEST(CpuBackend, LinearBackwardMatchesFiniteDifferencesAndAccumulates) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t n = 6, in = 5, out = 4;
  Tensor x = random_tensor({n, in}, rng), w = random_tensor({out, in}, rng), bias = random_tensor({out}, rng);
  Tensor r = random_tensor({n, out}, rng);
  Tensor y = be->empty({n, out}, DType::kF32, MemoryKind::kOther);
  auto objective = [&] {
    be->linear_forward(x, w, bias, y);
    return dot(y, r);
  };
  // dx is overwritten (start from garbage), dw/dbias accumulate onto random values.
  Tensor dx = random_tensor({n, in}, rng), dw = random_tensor({out, in}, rng), db = random_tensor({out}, rng);
  const std::vector<double> dw0 = values(dw), db0 = values(db);
  be->linear_backward(r, x, w, dx, dw, db);
  // L is linear in each of x, w, bias, so central differences have no truncation error;
  // step 1e-2 keeps fp32 rounding of L (~1e-7 relative over ~|L| <= 10) below ~1e-4 in the
  // quotient. Tolerance 1e-3 absolute.
  expect_close(dx, finite_difference(x, 1e-2, objective), 1e-3, 1e-3, "dx");
  expect_close(minus(values(dw), dw0), finite_difference(w, 1e-2, objective), 1e-3, 1e-3, "dw (+=)");
  expect_close(minus(values(db), db0), finite_difference(bias, 1e-2, objective), 1e-3, 1e-3, "dbias (+=)");

  // Undefined dx and dbias are skipped; dw accumulates a second time exactly.
  Tensor dw_again = clone(dw);
  Tensor none;
  be->linear_backward(r, x, w, none, dw_again, none);
  const std::vector<double> step = minus(values(dw), dw0);
  const std::vector<double> step2 = minus(values(dw_again), values(dw));
  expect_close(step2, step, 1e-5, 1e-5, "second dw accumulation");
}

TEST(CpuBackend, SumSquaresAndAllFinite) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  // Larger than one 65536-element chunk so the chunked combine is exercised.
  Tensor x = random_tensor({200001}, rng);
  double expect = 0.0;
  for (int64_t i = 0; i < x.numel(); ++i) expect += get(x, i) * get(x, i);
  EXPECT_NEAR(be->sum_squares(x), expect, 1e-9 * expect);
  Tensor xb = random_tensor({1000}, rng, DType::kBF16);
  double eb = 0.0;
  for (int64_t i = 0; i < xb.numel(); ++i) eb += get(xb, i) * get(xb, i);
  EXPECT_NEAR(be->sum_squares(xb), eb, 1e-12 * eb);

  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    Tensor t = random_tensor({100}, rng, d);
    EXPECT_TRUE(be->all_finite(t)) << dtype_name(d);
    set(t, 57, std::numeric_limits<double>::infinity());
    EXPECT_FALSE(be->all_finite(t)) << dtype_name(d);
    set(t, 57, -std::numeric_limits<double>::infinity());
    EXPECT_FALSE(be->all_finite(t)) << dtype_name(d);
    set(t, 57, std::numeric_limits<double>::quiet_NaN());
    EXPECT_FALSE(be->all_finite(t)) << dtype_name(d);
  }
  // fp16 overflow: 70000 stored as fp16 is inf.
  Tensor h = random_tensor({10}, rng, DType::kF16);
  set(h, 3, 70000.0);
  EXPECT_FALSE(be->all_finite(h));
}

TEST(CpuBackend, AsyncCopyToHostCopiesAtOnce) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const Tensor src = random_tensor({37}, rng);
  Tensor dst = be->host_staging({37}, DType::kF32);
  be->copy_to_host_async(src, dst);
  EXPECT_TRUE(bitwise_equal(dst, src));
  Tensor wrong = Tensor::cpu({37}, DType::kBF16);
  EXPECT_DEATH(be->copy_to_host_async(src, wrong), "copy_to_host_async");
}

TEST(CpuBackend, SixteenBitLinearIsFp32OfRoundedInputsThenRounded) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  for (DType d : {DType::kBF16, DType::kF16}) {
    Tensor x = random_tensor({8, 16}, rng, d), w = random_tensor({12, 16}, rng, d), b = random_tensor({12}, rng, d);
    Tensor y = be->empty({8, 12}, d, MemoryKind::kOther);
    be->linear_forward(x, w, b, y);
    Tensor y32 = be->empty({8, 12}, DType::kF32, MemoryKind::kOther);
    be->linear_forward(to_f32(x), to_f32(w), to_f32(b), y32);
    for (int64_t i = 0; i < y.numel(); ++i)
      ASSERT_EQ(get(y, i), round_to(d, static_cast<float>(get(y32, i)))) << dtype_name(d) << " element " << i;
    // matmul with a 16-bit output and beta != 0 reads the old output.
    Tensor c = random_tensor({8, 12}, rng, d);
    Tensor c32 = to_f32(c);
    be->matmul(x, false, w, true, c, 1.0f, 1.0f);
    be->matmul(to_f32(x), false, to_f32(w), true, c32, 1.0f, 1.0f);
    for (int64_t i = 0; i < c.numel(); ++i)
      ASSERT_EQ(get(c, i), round_to(d, static_cast<float>(get(c32, i)))) << dtype_name(d) << " element " << i;
  }
}

double gelu_tanh_grad(double x) {
  const double c = std::sqrt(2.0 / M_PI), t = std::tanh(c * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

TEST(CpuBackend, LinearGeluForwardIsGeluOfTheUnroundedProduct) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    Tensor x = random_tensor({4, 3, 10}, rng, d), w = random_tensor({7, 10}, rng, d), b = random_tensor({7}, rng, d);
    Tensor pre = be->empty({12, 7}, d, MemoryKind::kOther), y = be->empty({12, 7}, d, MemoryKind::kOther);
    for (bool with_bias : {true, false}) {
      const Tensor bias = with_bias ? b : Tensor();
      be->linear_gelu_forward(x, w, bias, pre, y, Gelu::kTanh);
      const std::vector<double> z = naive_linear(x, w, bias);
      std::vector<double> g(z.size());
      for (size_t i = 0; i < z.size(); ++i) g[i] = gelu_tanh_ref(z[i]);
      // fp32: 10 products of magnitude <= 1 (error << 1e-5); 16-bit: one rounding of each
      // output (2^-8 bf16, 2^-11 fp16 relative) on top, from the same fp32 value.
      const double rel = d == DType::kBF16 ? 8e-3 : d == DType::kF16 ? 1e-3 : 1e-5;
      expect_close(pre, z, 1e-5, rel, "pre " + std::string(dtype_name(d)));
      expect_close(y, g, 1e-5, rel, "gelu " + std::string(dtype_name(d)));
    }
  }
  // y is gelu of the fp32 product, not of the rounded pre: with bf16, some element tells them apart.
  Tensor x = random_tensor({64, 32}, rng, DType::kBF16), w = random_tensor({16, 32}, rng, DType::kBF16);
  Tensor pre = be->empty({64, 16}, DType::kBF16, MemoryKind::kOther),
         y = be->empty({64, 16}, DType::kBF16, MemoryKind::kOther);
  Tensor y_unfused = be->empty({64, 16}, DType::kBF16, MemoryKind::kOther);
  be->linear_gelu_forward(x, w, Tensor(), pre, y, Gelu::kTanh);
  be->bias_gelu_forward(pre, Tensor(), y_unfused, Gelu::kTanh);
  EXPECT_FALSE(bitwise_equal(y, y_unfused));
}

TEST(CpuBackend, LinearResidualForwardAddsTheUnroundedProduct) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Tensor x = random_tensor({4, 3, 10}, rng, d), w = random_tensor({7, 10}, rng, d);
    const Tensor b = random_tensor({7}, rng, d), r = random_tensor({12, 7}, rng, d);
    for (bool with_bias : {true, false}) {
      const Tensor bias = with_bias ? b : Tensor();
      Tensor y = be->empty({12, 7}, d, MemoryKind::kOther);
      be->linear_residual_forward(x, w, bias, r, y);
      // Against the fp32 product of the same inputs: residual + (z + bias) in fp32, rounded once.
      Tensor z = be->empty({12, 7}, DType::kF32, MemoryKind::kOther);
      be->linear_forward(x, w, Tensor(), z);
      for (int64_t i = 0; i < y.numel(); ++i) {
        const float v = with_bias ? static_cast<float>(get(z, i)) + static_cast<float>(get(b, i % 7))
                                  : static_cast<float>(get(z, i));
        ASSERT_EQ(get(y, i), round_to(d, static_cast<float>(get(r, i)) + v))
            << dtype_name(d) << (with_bias ? " +bias" : "") << " element " << i;
      }
      // In place (y is the residual) gives the same bits.
      Tensor in_place = clone(r);
      be->linear_residual_forward(x, w, bias, in_place, in_place);
      EXPECT_TRUE(bitwise_equal(in_place, y)) << dtype_name(d);
      // fp32: the same bits as the unfused pair the model runs under TP or dropout.
      if (d == DType::kF32) {
        Tensor h = be->empty({12, 7}, d, MemoryKind::kOther), unfused = be->empty({12, 7}, d, MemoryKind::kOther);
        be->linear_forward(x, w, Tensor(), h);
        be->bias_dropout_add(h, bias, r, unfused, DropoutParams{});
        EXPECT_TRUE(bitwise_equal(unfused, y));
      }
    }
  }
  // bf16: the product is not rounded before the add, so some element differs from the pair.
  const Tensor x = random_tensor({64, 32}, rng, DType::kBF16), w = random_tensor({16, 32}, rng, DType::kBF16);
  const Tensor r = random_tensor({64, 16}, rng, DType::kBF16, 1e-3f, 1e-2f);
  Tensor y = be->empty({64, 16}, DType::kBF16, MemoryKind::kOther),
         h = be->empty({64, 16}, DType::kBF16, MemoryKind::kOther);
  Tensor unfused = be->empty({64, 16}, DType::kBF16, MemoryKind::kOther);
  be->linear_residual_forward(x, w, Tensor(), r, y);
  be->linear_forward(x, w, Tensor(), h);
  be->bias_dropout_add(h, Tensor(), r, unfused, DropoutParams{});
  EXPECT_FALSE(bitwise_equal(y, unfused));
}

TEST(CpuBackend, LinearDgeluBackwardMatchesDoubleReference) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t n = 9, in = 8, out = 5;
  Tensor dy = random_tensor({n, out}, rng), x = random_tensor({n, in}, rng), w = random_tensor({out, in}, rng);
  Tensor pre = random_tensor({n, in}, rng, DType::kF32, 0.1f, 3.0f);
  Tensor dpre = be->empty({n, in}, DType::kF32, MemoryKind::kOther);
  Tensor dw = random_tensor({out, in}, rng), db = random_tensor({out}, rng);
  const Tensor dw0 = clone(dw), db0 = clone(db);
  be->linear_dgelu_backward(dy, x, w, pre, dpre, dw, db, Gelu::kTanh);
  std::vector<double> e_dpre(static_cast<size_t>(n * in)), e_dw(static_cast<size_t>(out * in)), e_db(out);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < in; ++i) {
      double s = 0.0;
      for (int64_t o = 0; o < out; ++o) s += get(dy, r * out + o) * get(w, o * in + i);
      e_dpre[static_cast<size_t>(r * in + i)] = s * gelu_tanh_grad(get(pre, r * in + i));
    }
  for (int64_t o = 0; o < out; ++o) {
    e_db[static_cast<size_t>(o)] = get(db0, o);
    for (int64_t r = 0; r < n; ++r) e_db[static_cast<size_t>(o)] += get(dy, r * out + o);
    for (int64_t i = 0; i < in; ++i) {
      double s = get(dw0, o * in + i);
      for (int64_t r = 0; r < n; ++r) s += get(dy, r * out + o) * get(x, r * in + i);
      e_dw[static_cast<size_t>(o * in + i)] = s;
    }
  }
  // Sums of <= 10 fp32 products of magnitude <= 3: errors far below 1e-5.
  expect_close(dpre, e_dpre, 1e-5, 1e-5, "dpre");
  expect_close(dw, e_dw, 1e-5, 1e-5, "dw (+=)");
  expect_close(db, e_db, 1e-5, 1e-5, "dbias (+=)");
}

TEST(CpuBackend, ResultsIndependentOfThreadCount) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  // Sizes above the backend's parallel threshold (32768 elements) so that threads are used.
  Tensor x = random_tensor({512, 48}, rng), w = random_tensor({80, 48}, rng), r = random_tensor({512, 80}, rng);
  Tensor bias = random_tensor({80}, rng);
  Tensor big = random_tensor({300000}, rng);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    Tensor y = be->empty({512, 80}, DType::kF32, MemoryKind::kOther);
    be->linear_forward(x, w, bias, y);
    Tensor dx = be->empty({512, 48}, DType::kF32, MemoryKind::kOther);
    Tensor dw = be->empty({80, 48}, DType::kF32, MemoryKind::kOther);
    Tensor db = be->empty({80}, DType::kF32, MemoryKind::kOther);
    be->linear_backward(r, x, w, dx, dw, db);
    const double s = be->sum_squares(big);
    return std::make_tuple(y, dx, dw, db, s);
  };
  const int saved = omp_get_max_threads();
  auto [y1, dx1, dw1, db1, s1] = run(1);
  auto [y2, dx2, dw2, db2, s2] = run(2);
  omp_set_num_threads(saved);
  EXPECT_TRUE(bitwise_equal(y1, y2));
  EXPECT_TRUE(bitwise_equal(dx1, dx2));
  EXPECT_TRUE(bitwise_equal(dw1, dw2));
  EXPECT_TRUE(bitwise_equal(db1, db2));
  EXPECT_EQ(s1, s2);
}

}  // namespace
}  // namespace megatron::backend
