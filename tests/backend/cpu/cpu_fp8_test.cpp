// The CPU backend's fp8_cast with a prologue and the fused bias gradient, against two
// references: the unfused ops (the activation materialized in fp32 by bias_gelu_forward /
// bias_gelu_backward, then fp8_quantize and bias_grad), which must give the same bits, and the
// GELU in double precision (its derivative by central differences), which the decoded codes
// must match to FP8's rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_test_util.h"
#include "backend/fp8_recipe.h"

namespace megatron::backend {
namespace {

using test::random_tensor;
using test::test_rng;
using test::values;

using test::gelu_erf_ref;
using test::gelu_tanh_ref;

double gelu_ref(double x, Gelu kind) { return kind == Gelu::kTanh ? gelu_tanh_ref(x) : gelu_erf_ref(x); }
double gelu_grad_ref(double x, Gelu kind) {
  const double h = 1e-5;
  return (gelu_ref(x + h, kind) - gelu_ref(x - h, kind)) / (2 * h);
}

struct Case {
  Fp8Prologue prologue;
  Gelu gelu;
  DType dtype;
  bool current;
};

class CpuFp8Cast : public ::testing::TestWithParam<Case> {};

TEST_P(CpuFp8Cast, PrologueAndBiasGradientMatchTheUnfusedOps) {
  const Case cs = GetParam();
  CpuBackend be;
  auto rng = test_rng();
  const int64_t rows = 37, cols = 24;
  // Wide inputs so that GELU's negative tail (values near 0) and its linear part both occur.
  Tensor x = random_tensor({rows, cols}, rng, cs.dtype, 0.01f, 4.0f);
  Tensor aux = random_tensor({rows, cols}, rng, cs.dtype, 0.01f, 4.0f);
  Tensor v = be.empty({rows, cols}, DType::kF32, MemoryKind::kOther);
  if (cs.prologue == Fp8Prologue::kGelu) be.bias_gelu_forward(x, Tensor(), v, cs.gelu);
  if (cs.prologue == Fp8Prologue::kGeluGrad) be.bias_gelu_backward(x, aux, Tensor(), v, cs.gelu);
  if (cs.prologue == Fp8Prologue::kIdentity) be.copy(x, v);

  Fp8Config cfg;
  cfg.recipe = cs.current ? Fp8Recipe::kTensorwise : Fp8Recipe::kDelayed;
  cfg.format = Fp8Mix::kHybrid;
  Fp8ScalingState fused(be, cfg, kFp8Roles), unfused(be, cfg, kFp8Roles);
  const int64_t slot = Fp8ScalingState::slot(0, Fp8Role::kGradOutput);  // e5m2
  if (!cs.current) {
    fused.scale().data_as<float>()[slot] = 1024.0f;
    unfused.scale().data_as<float>()[slot] = 1024.0f;
  }
  const DType qd = DType::kF8E5M2;
  Tensor q = be.empty({rows, cols}, qd, MemoryKind::kOther), qt = be.empty({cols, rows}, qd, MemoryKind::kOther);
  Tensor q_ref = be.empty({rows, cols}, qd, MemoryKind::kOther),
         qt_ref = be.empty({cols, rows}, qd, MemoryKind::kOther);
  Tensor dbias = Tensor::cpu({cols}), dbias_ref = Tensor::cpu({cols});
  for (int64_t c = 0; c < cols; ++c) dbias.data_as<float>()[c] = dbias_ref.data_as<float>()[c] = 0.25f * c;

  be.fp8_cast(Fp8Source(x, cs.prologue, cs.gelu, aux), q, qt, fused.quantization(slot), dbias, GradWrite::kAccumulate);
  be.fp8_quantize(v, q_ref, qt_ref, unfused.quantization(slot));
  be.bias_grad(v, dbias_ref, GradWrite::kAccumulate);

  EXPECT_EQ(0, std::memcmp(q.data(), q_ref.data(), static_cast<size_t>(q.nbytes()))) << "codes";
  EXPECT_EQ(0, std::memcmp(qt.data(), qt_ref.data(), static_cast<size_t>(qt.nbytes()))) << "transposed codes";
  EXPECT_EQ(fused.amax_to_reduce().data_as<float>()[slot], unfused.amax_to_reduce().data_as<float>()[slot]);
  EXPECT_EQ(fused.scale().data_as<float>()[slot], unfused.scale().data_as<float>()[slot]);
  EXPECT_EQ(values(dbias), values(dbias_ref));

  // Against double precision: each decoded code is v to e5m2's rounding (2 mantissa bits: half
  // a step is 1/8 relative) or below its smallest normal; dbias to fp32 summation error.
  const float sc = fused.scale().data_as<float>()[slot];
  const float si = fused.scale_inv().data_as<float>()[slot * Fp8ScalingState::kScaleInvStride];
  EXPECT_EQ(si, 1.0f / sc);
  double amax = 0.0;
  std::vector<double> sums(static_cast<size_t>(cols), 0.0);
  for (int64_t i = 0; i < rows * cols; ++i) {
    const double xi = test::get(x, i), ai = test::get(aux, i);
    double want = xi;
    if (cs.prologue == Fp8Prologue::kGelu) want = gelu_ref(xi, cs.gelu);
    if (cs.prologue == Fp8Prologue::kGeluGrad) want = xi * gelu_grad_ref(ai, cs.gelu);
    amax = std::max(amax, std::fabs(want));
    sums[static_cast<size_t>(i % cols)] += want;
    const double got = fp8_to_float(q.data_as<uint8_t>()[i], Fp8Format::kE5M2) * static_cast<double>(si);
    const double tiny = std::ldexp(1.0, -14) * si;  // e5m2's smallest normal, dequantized
    ASSERT_NEAR(got, want, std::fabs(want) / 8 + tiny + 1e-6 * std::fabs(want)) << "element " << i;
  }
  EXPECT_NEAR(fused.amax_to_reduce().data_as<float>()[slot], amax, 1e-5 * amax);
  for (int64_t c = 0; c < cols; ++c) {
    EXPECT_NEAR(dbias.data_as<float>()[c], 0.25 * c + sums[static_cast<size_t>(c)],
                1e-4 * (1 + std::fabs(sums[static_cast<size_t>(c)])));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuFp8Cast,
                         ::testing::Values(Case{Fp8Prologue::kIdentity, Gelu::kTanh, DType::kBF16, true},
                                           Case{Fp8Prologue::kGelu, Gelu::kTanh, DType::kBF16, true},
                                           Case{Fp8Prologue::kGelu, Gelu::kExact, DType::kF32, false},
                                           Case{Fp8Prologue::kGeluGrad, Gelu::kTanh, DType::kBF16, false},
                                           Case{Fp8Prologue::kGeluGrad, Gelu::kExact, DType::kF16, true}));

// Overwriting the bias gradient, and the current scale following max |v| (not max |x|): GELU
// sends large negative inputs to about 0, so a tensor whose largest |x| is negative gets the
// scale of its largest positive value.
TEST(CpuFp8Cast, CurrentScaleFollowsTheActivationAndOverwriteWrites) {
  CpuBackend be;
  Tensor x = Tensor::cpu({2, 2});
  const float xs[] = {-50.0f, 1.0f, 2.0f, -0.5f};
  for (int i = 0; i < 4; ++i) x.data_as<float>()[i] = xs[i];
  Fp8Config cfg;
  cfg.recipe = Fp8Recipe::kTensorwise;
  Fp8ScalingState st(be, cfg, kFp8Roles);
  Tensor q = be.empty({2, 2}, DType::kF8E4M3, MemoryKind::kOther), none;
  Tensor dbias = Tensor::cpu({2});
  dbias.data_as<float>()[0] = dbias.data_as<float>()[1] = 100.0f;
  be.fp8_cast(Fp8Source(x, Fp8Prologue::kGelu, Gelu::kExact), q, none, st.quantization(0), dbias,
              GradWrite::kOverwrite);
  const double g2 = gelu_erf_ref(2.0);
  EXPECT_NEAR(st.amax_to_reduce().data_as<float>()[0], g2, 1e-6);
  EXPECT_NEAR(st.scale().data_as<float>()[0], 448.0 / g2, 1e-3);
  EXPECT_NEAR(dbias.data_as<float>()[0], gelu_erf_ref(-50.0) + g2, 1e-6);
  EXPECT_NEAR(dbias.data_as<float>()[1], gelu_erf_ref(1.0) + gelu_erf_ref(-0.5), 1e-6);
}

}  // namespace
}  // namespace megatron::backend
