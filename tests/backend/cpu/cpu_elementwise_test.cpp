// CPU backend elementwise ops: add, scale, dropout, bias-dropout-add, bias gradient, GELU.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_test_util.h"
#include "core/rng.h"

namespace megatron::backend {
namespace {

using namespace megatron::test;

TEST(CpuElementwise, AddAndScale) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  Tensor a = random_tensor({4, 6}, rng), b = random_tensor({4, 6}, rng);
  Tensor out = be->empty({4, 6}, DType::kF32, MemoryKind::kOther);
  be->add(a, b, out);
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(get(out, i), static_cast<float>(get(a, i) + get(b, i)));
  const std::vector<double> before = values(out);
  be->scale(out, -2.5f);
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(get(out, i), static_cast<float>(before[i] * -2.5));
  // 16-bit in place: rounded once.
  Tensor h = random_tensor({10}, rng, DType::kBF16);
  const std::vector<double> hv = values(h);
  be->scale(h, 0.3f);
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(get(h, i), round_to(DType::kBF16, static_cast<float>(hv[i]) * 0.3f));
}

// scale of a 16-bit tensor (a 16-bit gradient buffer's 1/dp): the fp32 product of the value and
// alpha, rounded once to the dtype, on values whose roundings are worked out by hand (bf16 keeps
// 8 significant bits, fp16 11; ties to even).
TEST(CpuElementwise, ScaleOfA16BitTensorRoundsTheProductOnce) {
  auto be = make_cpu_backend();
  auto run = [&](const std::vector<float>& in, DType dtype, float alpha) {
    Tensor f = Tensor::cpu({static_cast<int64_t>(in.size())}, DType::kF32);
    std::copy(in.begin(), in.end(), f.data_as<float>());
    Tensor x = Tensor::cpu(f.shape(), dtype);
    be->copy(f, x);
    be->scale(x, alpha);
    be->copy(x, f);
    return std::vector<float>(f.data_as<float>(), f.data_as<float>() + f.numel());
  };
  const float e7 = std::ldexp(1.0f, -7), e10 = std::ldexp(1.0f, -10);
  // bf16: 3 * (1/3 in fp32) = 0.99999994 rounds to 1; (1 + 2^-7) / 2 is exact; (1 + 3 2^-7) x 1.5
  // = 1.5 + 4.5 2^-7 ties between 1.5 + 4 2^-7 and 1.5 + 5 2^-7 (ulp 2^-7): to even, 1.5 + 2^-5.
  EXPECT_EQ(run({3.0f, 1 + e7, 1 + 3 * e7}, DType::kBF16, 1.0f / 3.0f)[0], 1.0f);
  EXPECT_EQ(run({1 + e7}, DType::kBF16, 0.5f), (std::vector<float>{0.5f + e7 / 2}));
  EXPECT_EQ(run({1 + 3 * e7}, DType::kBF16, 1.5f), (std::vector<float>{1.5f + std::ldexp(1.0f, -5)}));
  // fp16: 65504 x 1.001 = 65569.5 overflows to inf; (1 + 2^-10) x 0.5 is exact; 1/3's product
  // with 3 rounds to 1.
  EXPECT_EQ(run({65504.0f, 1 + e10, 3.0f}, DType::kF16, 1.001f)[0], INFINITY);
  EXPECT_EQ(run({1 + e10}, DType::kF16, 0.5f), (std::vector<float>{0.5f + e10 / 2}));
  EXPECT_EQ(run({3.0f}, DType::kF16, 1.0f / 3.0f), (std::vector<float>{1.0f}));
}

TEST(CpuElementwise, DropoutMaskScaleAndFraction) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t n = 100000;
  Tensor x = random_tensor({n}, rng);
  Tensor out = be->empty({n}, DType::kF32, MemoryKind::kOther);
  const DropoutParams dp{0.3f, 1234, 77};
  be->dropout_forward(x, out, dp);
  int64_t dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = dropout_keep(dp.seed, dp.stream, i, dp.p);
    if (keep) {
      ASSERT_EQ(get(out, i), static_cast<float>(get(x, i)) * (1.0f / 0.7f)) << i;
    } else {
      ASSERT_EQ(get(out, i), 0.0) << i;
      ++dropped;
    }
  }
  // Binomial(n, 0.3): standard deviation sqrt(n 0.3 0.7) = 145; allow 5 sigma.
  EXPECT_NEAR(static_cast<double>(dropped), 0.3 * n, 5 * 145.0);
  // Another stream gives another mask.
  Tensor out2 = be->empty({n}, DType::kF32, MemoryKind::kOther);
  be->dropout_forward(x, out2, DropoutParams{0.3f, 1234, 78});
  EXPECT_FALSE(bitwise_equal(out, out2));
  // p = 0 is the identity.
  be->dropout_forward(x, out2, DropoutParams{0.0f, 1234, 77});
  EXPECT_TRUE(bitwise_equal(out2, x));
}

// Sequence parallelism: the shard [offset, offset + m) of a tensor, run with that offset,
// gets exactly the whole tensor's mask there (also at offsets that are not a multiple of the
// 4 words of a Philox block), in dropout and in bias-dropout-add.
TEST(CpuElementwise, DropoutOffsetGivesTheWholeTensorsMask) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t n = 60, cols = 6;
  Tensor x = random_tensor({n / cols, cols}, rng), bias = random_tensor({cols}, rng),
         res = random_tensor({n / cols, cols}, rng);
  Tensor whole = be->empty({n / cols, cols}, DType::kF32, MemoryKind::kOther);
  Tensor whole_bda = be->empty({n / cols, cols}, DType::kF32, MemoryKind::kOther);
  const DropoutParams dp{0.5f, 99, 5};
  be->dropout_forward(x, whole, dp);
  be->bias_dropout_add(x, bias, res, whole_bda, dp);
  for (int64_t rows0 : {int64_t{2}, int64_t{5}}) {  // offsets 12 and 30 (30 % 4 != 0)
    const int64_t off = rows0 * cols, m = 3 * cols;
    DropoutParams shard = dp;
    shard.offset = static_cast<uint64_t>(off);
    const Tensor xs = x.flat_view(off, {3, cols}), rs = res.flat_view(off, {3, cols});
    Tensor out = be->empty({3, cols}, DType::kF32, MemoryKind::kOther);
    be->dropout_forward(xs, out, shard);
    EXPECT_TRUE(bitwise_equal(out, whole.flat_view(off, {3, cols}))) << "offset " << off;
    be->bias_dropout_add(xs, bias, rs, out, shard);
    EXPECT_TRUE(bitwise_equal(out, whole_bda.flat_view(off, {3, cols}))) << "offset " << off;
    // Offset 0 on the shard draws the mask of elements [0, m): another one.
    be->dropout_forward(xs, out, dp);
    EXPECT_FALSE(bitwise_equal(out, whole.flat_view(off, {3, cols}))) << "offset " << off << ", " << m;
  }
}

TEST(CpuElementwise, DropoutBackwardMatchesFiniteDifferences) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  Tensor x = random_tensor({5, 8}, rng), r = random_tensor({5, 8}, rng);
  Tensor out = be->empty({5, 8}, DType::kF32, MemoryKind::kOther);
  const DropoutParams dp{0.4f, 99, 5};
  Tensor dx = random_tensor({5, 8}, rng);
  be->dropout_backward(r, dx, dp);
  // Linear in x: central differences are exact up to fp32 rounding of L (|L| < 40, so
  // ~4e-6 absolute), divided by 2h = 2e-2: 2e-4. Tolerance 1e-3.
  auto fd = finite_difference(x, 1e-2, [&] {
    be->dropout_forward(x, out, dp);
    return dot(out, r);
  });
  expect_close(dx, fd, 1e-3, 1e-3, "dropout dx");
}

TEST(CpuElementwise, BiasDropoutAddForwardAndGradients) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 3, b = 2, h = 7;
  Tensor x = random_tensor({s, b, h}, rng), bias = random_tensor({h}, rng), res = random_tensor({s, b, h}, rng);
  Tensor out = be->empty({s, b, h}, DType::kF32, MemoryKind::kOther);
  for (float p : {0.0f, 0.25f}) {
    const DropoutParams dp{p, 4242, 3};
    be->bias_dropout_add(x, bias, res, out, dp);
    for (int64_t i = 0; i < s * b * h; ++i) {
      const double keep = p == 0.0f ? 1.0 : (dropout_keep(dp.seed, dp.stream, i, p) ? 1.0 / (1.0 - p) : 0.0);
      const double expect = get(res, i) + (get(x, i) + get(bias, i % h)) * keep;
      EXPECT_NEAR(get(out, i), expect, 1e-6) << "p=" << p << " element " << i;
    }
    // Gradients through dropout_backward (x) and bias_grad (bias); residual's is r itself.
    Tensor r = random_tensor({s, b, h}, rng);
    auto objective = [&] {
      be->bias_dropout_add(x, bias, res, out, dp);
      return dot(out, r);
    };
    Tensor dx = be->empty({s, b, h}, DType::kF32, MemoryKind::kOther);
    be->dropout_backward(r, dx, dp);
    Tensor db = random_tensor({h}, rng);
    const std::vector<double> db0 = values(db);
    be->bias_grad(dx, db);
    // L is linear in all three inputs: see DropoutBackwardMatchesFiniteDifferences.
    expect_close(dx, finite_difference(x, 1e-2, objective), 1e-3, 1e-3, "bias_dropout_add dx");
    expect_close(minus(values(db), db0), finite_difference(bias, 1e-2, objective), 1e-3, 1e-3,
                 "bias_dropout_add dbias (+=)");
    expect_close(values(r), finite_difference(res, 1e-2, objective), 1e-3, 1e-3, "bias_dropout_add dresidual");
  }
  // Undefined bias.
  be->bias_dropout_add(x, Tensor(), res, out, DropoutParams{});
  for (int64_t i = 0; i < s * b * h; ++i) EXPECT_EQ(get(out, i), static_cast<float>(get(res, i) + get(x, i)));
}

TEST(CpuElementwise, BiasGradAccumulatesColumnSums) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  // 150 columns: more than two 64-column chunks, the last one partial.
  const int64_t rows = 37, cols = 150;
  Tensor dy = random_tensor({rows, cols}, rng), db = random_tensor({cols}, rng);
  const std::vector<double> db0 = values(db);
  be->bias_grad(dy, db);
  std::vector<double> expect(db0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) expect[c] += get(dy, r * cols + c);
  // 38 fp32 additions of values <= 1: error < 38 * 40 * 6e-8 ~ 1e-4; tolerance 1e-4.
  expect_close(db, expect, 1e-4, 0.0, "bias_grad");
}

TEST(CpuElementwise, GeluForwardMatchesReference) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t n = 9, f = 11;
  Tensor x = random_tensor({n, f}, rng, DType::kF32, 0.1f, 4.0f), bias = random_tensor({f}, rng);
  Tensor out = be->empty({n, f}, DType::kF32, MemoryKind::kOther);
  for (Gelu kind : {Gelu::kTanh, Gelu::kExact}) {
    be->bias_gelu_forward(x, bias, out, kind);
    std::vector<double> expect(n * f);
    for (int64_t i = 0; i < n * f; ++i) {
      const double v = get(x, i) + get(bias, i % f);
      expect[i] = kind == Gelu::kTanh ? gelu_tanh_ref(v) : gelu_erf_ref(v);
    }
    expect_close(out, expect, 1e-6, 1e-5, kind == Gelu::kTanh ? "gelu tanh" : "gelu exact");
  }
  // The two forms differ (by up to ~1e-3 around |x| ~ 2), so the test can tell them apart.
  EXPECT_NE(gelu_tanh_ref(2.0), gelu_erf_ref(2.0));
  be->bias_gelu_forward(x, Tensor(), out, Gelu::kExact);
  for (int64_t i = 0; i < n * f; ++i) EXPECT_NEAR(get(out, i), gelu_erf_ref(get(x, i)), 1e-6);
}

TEST(CpuElementwise, GeluBackwardMatchesFiniteDifferences) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t n = 6, f = 10;
  Tensor x = random_tensor({n, f}, rng, DType::kF32, 0.1f, 3.0f), bias = random_tensor({f}, rng);
  Tensor r = random_tensor({n, f}, rng);
  Tensor out = be->empty({n, f}, DType::kF32, MemoryKind::kOther);
  for (Gelu kind : {Gelu::kTanh, Gelu::kExact}) {
    auto objective = [&] {
      be->bias_gelu_forward(x, bias, out, kind);
      return dot(out, r);
    };
    Tensor dx = be->empty({n, f}, DType::kF32, MemoryKind::kOther);
    be->bias_gelu_backward(r, x, bias, dx, kind);
    // Step 1e-3: truncation error h^2/6 |gelu'''| <= 1e-6 * 0.3; fp32 rounding of the one
    // changed output (|gelu| <= 4, 2.4e-7 relative ~ 1e-6) over 2h ~ 5e-4. Tolerance 2e-3.
    expect_close(dx, finite_difference(x, 1e-3, objective), 2e-3, 1e-3, kind == Gelu::kTanh ? "dgelu tanh" : "dgelu");
    // The bias gradient is bias_grad(dx).
    Tensor db = be->empty({f}, DType::kF32, MemoryKind::kOther);
    be->bias_grad(dx, db);
    expect_close(db, finite_difference(bias, 1e-3, objective), 5e-3, 1e-3, "dgelu bias");
  }
}

TEST(CpuElementwise, SixteenBitGeluAndDropoutAreRoundedFp32) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  for (DType d : {DType::kBF16, DType::kF16}) {
    Tensor x = random_tensor({8, 12}, rng, d, 0.1f, 3.0f), bias = random_tensor({12}, rng, d);
    Tensor out = be->empty({8, 12}, d, MemoryKind::kOther);
    Tensor out32 = be->empty({8, 12}, DType::kF32, MemoryKind::kOther);
    be->bias_gelu_forward(x, bias, out, Gelu::kTanh);
    be->bias_gelu_forward(to_f32(x), to_f32(bias), out32, Gelu::kTanh);
    for (int64_t i = 0; i < out.numel(); ++i)
      ASSERT_EQ(get(out, i), round_to(d, static_cast<float>(get(out32, i)))) << dtype_name(d) << " " << i;
    Tensor res = random_tensor({8, 12}, rng, d);
    const DropoutParams dp{0.1f, 5, 6};
    be->bias_dropout_add(x, bias, res, out, dp);
    be->bias_dropout_add(to_f32(x), to_f32(bias), to_f32(res), out32, dp);
    for (int64_t i = 0; i < out.numel(); ++i)
      ASSERT_EQ(get(out, i), round_to(d, static_cast<float>(get(out32, i)))) << dtype_name(d) << " " << i;
  }
}

TEST(CpuElementwise, ResultsIndependentOfThreadCount) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  Tensor x = random_tensor({300, 130}, rng), bias = random_tensor({130}, rng), res = random_tensor({300, 130}, rng);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    Tensor out = be->empty({300, 130}, DType::kF32, MemoryKind::kOther);
    be->bias_dropout_add(x, bias, res, out, DropoutParams{0.2f, 1, 2});
    Tensor g = be->empty({300, 130}, DType::kF32, MemoryKind::kOther);
    be->bias_gelu_backward(out, x, bias, g, Gelu::kTanh);
    Tensor db = be->empty({130}, DType::kF32, MemoryKind::kOther);
    be->bias_grad(g, db);
    return std::make_pair(g, db);
  };
  const int saved = omp_get_max_threads();
  auto [g1, db1] = run(1);
  auto [g2, db2] = run(2);
  omp_set_num_threads(saved);
  EXPECT_TRUE(bitwise_equal(g1, g2));
  EXPECT_TRUE(bitwise_equal(db1, db2));
}

}  // namespace
}  // namespace megatron::backend
