// CUDA GEMMs (cuBLASLt) vs the CPU reference (OpenBLAS on the same, already-rounded inputs):
// matmul with every transpose, alpha/beta and dtype mix, linear_forward with the bias epilogue
// (aligned, misaligned and of another dtype), the GELU-fused linear pair, linear_backward with "(+=)" accumulation into
// fp32 main gradients, GPT shapes (h = 768, 3h, 4h, V = 50304) and awkward sizes. Skips without
// a GPU.
//
// Tolerances, as ||gpu - cpu|| / ||cpu|| over the whole output (u32 = 2^-24):
//  - fp32 inputs, fp32 output: both sides are true fp32 GEMMs with different summation orders;
//    a random-sign sum of k terms carries a relative error ~ sqrt(k) u32 on each side, so
//    tol = 2e-6 + 4 sqrt(k) u32 (k = 768: 8.6e-6, k = 50304: 5.5e-5). TF32 (10-bit mantissas,
//    u = 2^-11 ~ 4.9e-4 relative per product) would miss this by 10-100x: TF32 must be off.
//  - bf16/fp16 inputs, fp32 output (dW into the main gradient): products of 16-bit values are
//    exact in fp32, so only the accumulation differs; tensor-core MMA accumulation is fp32
//    but not strictly round-to-nearest inside an instruction (it truncates alignment bits),
//    which adds an error growing about linearly with k/16: tol = 1e-5 + k u32
//    (k = 2048: 1.3e-4). A bf16 accumulator would be off by ~1e-2.
//  - bf16/fp16 output: both sides round the nearly equal fp32 results once; they differ by
//    at most one ulp (<= 2^-7 relative for bf16, 2^-10 for fp16), and only where the two fp32
//    values straddle a rounding boundary, so even if every element did, the norm error stays
//    below tol = 2^-7 (bf16, ~7.8e-3) or 2^-10 (fp16, ~9.8e-4), plus the fp32 term. In practice
//    it is far below; rounding inputs or accumulating in 16 bits would exceed it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/gemm_tuning.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "core/dtype.h"
#include "core/memory.h"
#include "core/tensor.h"

namespace megatron::backend {
namespace {

using test::get;
using test::random_tensor;
using test::test_rng;

constexpr DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

std::string name(DType d) { return std::string(dtype_name(d)); }

double tol_for(DType in, DType out, int64_t k) {
  const double u32 = std::ldexp(1.0, -24);
  const double acc =
      in == DType::kF32 ? 2e-6 + 4.0 * std::sqrt(static_cast<double>(k)) * u32 : 1e-5 + static_cast<double>(k) * u32;
  if (out == DType::kBF16) return acc + std::ldexp(1.0, -7);
  if (out == DType::kF16) return acc + std::ldexp(1.0, -10);
  return acc;
}

// ||actual - expected|| / ||expected|| with the worst element, for the failure message.
struct Diff {
  double rel = 0.0, max_abs = 0.0;
  int64_t worst = -1;
  double got = 0.0, want = 0.0;
};
Diff compare(const Tensor& actual, const Tensor& expected) {
  Diff d;
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double a = get(actual, i), e = get(expected, i);
    const double err = std::abs(a - e);
    num += err * err;
    den += e * e;
    if (!(err <= d.max_abs)) {  // also catches NaN
      d.max_abs = err;
      d.worst = i;
      d.got = a;
      d.want = e;
    }
  }
  d.rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  if (!std::isfinite(d.rel)) d.rel = INFINITY;
  return d;
}

void expect_rel(const Tensor& actual, const Tensor& expected, double tol, const std::string& what) {
  ASSERT_EQ(actual.numel(), expected.numel()) << what;
  const Diff d = compare(actual, expected);
  EXPECT_LE(d.rel, tol) << what << ": relative norm error " << d.rel << " > " << tol << "; max |error| " << d.max_abs
                        << " at flat index " << d.worst << " (got " << d.got << ", expected " << d.want << ") of "
                        << expected.describe();
}

class CudaGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    cpu_ = make_cpu_backend();
    gpu_ = make_cuda_backend(0);
  }
  Tensor to_gpu(const Tensor& host) { return to_device(*gpu_, host); }
  Tensor to_cpu(const Tensor& dev) { return to_host(*gpu_, dev); }
  // One matmul on both backends from the same host inputs (c random, never zero).
  void check_matmul(std::mt19937_64& rng, DType in, DType out, int64_t m, int64_t k, int64_t n, bool ta, bool tb,
                    float alpha, float beta);

  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> gpu_;
};

std::string mm_name(DType in, DType out, int64_t m, int64_t k, int64_t n, bool ta, bool tb, float alpha, float beta) {
  std::ostringstream os;
  os << "matmul " << name(in) << "->" << name(out) << " m=" << m << " k=" << k << " n=" << n << (ta ? " A^T" : "")
     << (tb ? " B^T" : "") << " alpha=" << alpha << " beta=" << beta;
  return os.str();
}

void CudaGemmTest::check_matmul(std::mt19937_64& rng, DType in, DType out, int64_t m, int64_t k, int64_t n, bool ta,
                                bool tb, float alpha, float beta) {
  const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, rng, in);
  const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, rng, in);
  const Tensor c0 = random_tensor({m, n}, rng, out);
  Tensor c_cpu = test::clone(c0);
  cpu_->matmul(a, ta, b, tb, c_cpu, alpha, beta);
  Tensor cd = to_gpu(c0);
  gpu_->matmul(to_gpu(a), ta, to_gpu(b), tb, cd, alpha, beta);
  expect_rel(to_cpu(cd), c_cpu, tol_for(in, out, k), mm_name(in, out, m, k, n, ta, tb, alpha, beta));
}

// ---- matmul ----------------------------------------------------------------------------------

TEST_F(CudaGemmTest, MatmulAllTransposesAwkwardSizes) {
  auto rng = test_rng();
  const std::tuple<int64_t, int64_t, int64_t> shapes[] = {
      {1, 1, 1}, {1, 7, 1}, {7, 129, 127}, {127, 7, 1000}, {129, 1000, 7}, {1000, 127, 129}, {1, 768, 2304}};
  for (DType dtype : kFloatTypes) {
    for (auto [m, k, n] : shapes) {
      for (int t = 0; t < 4; ++t) {
        check_matmul(rng, dtype, dtype, m, k, n, t & 1, t & 2, 1.0f, 0.0f);
        check_matmul(rng, dtype, dtype, m, k, n, t & 1, t & 2, 0.75f, 0.5f);
      }
    }
  }
}

TEST_F(CudaGemmTest, MatmulGptShapes) {
  auto rng = test_rng();
  // (rows n = s*b, k, out): QKV, proj, FC1, FC2 for GPT-2 small with 2048 tokens.
  const std::tuple<int64_t, int64_t, int64_t> shapes[] = {
      {2048, 768, 2304}, {2048, 768, 768}, {2048, 768, 3072}, {2048, 3072, 768}};
  for (DType dtype : kFloatTypes) {
    for (auto [m, k, n] : shapes) {
      check_matmul(rng, dtype, dtype, m, k, n, false, true, 1.0f, 0.0f);   // x W^T
      check_matmul(rng, dtype, dtype, m, n, k, false, false, 1.0f, 0.0f);  // dy W
    }
  }
}

TEST_F(CudaGemmTest, MatmulSixteenBitIntoFp32Accumulates) {
  auto rng = test_rng();
  for (DType in : {DType::kBF16, DType::kF16}) {
    // dW[out, in] += dy^T x: k is the number of tokens.
    check_matmul(rng, in, DType::kF32, 768, 2048, 2304, true, false, 1.0f, 1.0f);
    check_matmul(rng, in, DType::kF32, 3072, 2048, 768, true, false, 1.0f, 1.0f);
    check_matmul(rng, in, DType::kF32, 127, 129, 7, true, false, 1.0f, 1.0f);
    check_matmul(rng, in, DType::kF32, 1, 1000, 1, false, true, 0.5f, 1.0f);
  }
}

TEST_F(CudaGemmTest, MatmulBetaOneReallyAccumulates) {
  auto rng = test_rng();
  for (DType dtype : kFloatTypes) {
    const Tensor a = random_tensor({129, 127}, rng, dtype), b = random_tensor({127, 7}, rng, dtype);
    const Tensor c0 = random_tensor({129, 7}, rng, DType::kF32);
    Tensor c_cpu = test::clone(c0);
    cpu_->matmul(a, false, b, false, c_cpu, 1.0f, 1.0f);
    cpu_->matmul(a, false, b, false, c_cpu, 1.0f, 1.0f);
    const Tensor ad = to_gpu(a), bd = to_gpu(b);
    Tensor cd = to_gpu(c0);
    gpu_->matmul(ad, false, bd, false, cd, 1.0f, 1.0f);
    gpu_->matmul(ad, false, bd, false, cd, 1.0f, 1.0f);
    expect_rel(to_cpu(cd), c_cpu, tol_for(dtype, DType::kF32, 127), "c += a b twice, " + name(dtype));
  }
}

// MEGATRON_GEMM_AUTOTUNE: timing the candidate algorithms on the first call must leave the
// result as one call's: beta = 1 (dW += dy^T x into fp32) adds the product exactly once, beta = 0
// overwrites, and the epilogues (bias, GELU with aux) hold; each problem large enough that the
// heuristic offers several candidates. Then a second call (the cached winner) agrees bit for bit.
TEST_F(CudaGemmTest, AutotunedAlgorithmsComputeTheSameProducts) {
  set_gemm_autotune(*gpu_, true);
  auto rng = test_rng();
  for (DType in : {DType::kBF16, DType::kF16}) {
    check_matmul(rng, in, DType::kF32, 768, 2048, 2304, true, false, 1.0f, 1.0f);
    check_matmul(rng, in, DType::kF32, 3072, 2048, 768, true, false, 1.0f, 1.0f);
    check_matmul(rng, in, in, 2048, 768, 3072, false, true, 1.0f, 0.0f);
    check_matmul(rng, in, in, 2048, 3072, 768, false, false, 1.0f, 0.0f);
  }
  check_matmul(rng, DType::kF32, DType::kF32, 512, 768, 256, false, true, 1.0f, 0.5f);

  const Tensor x = random_tensor({1024, 768}, rng, DType::kBF16), w = random_tensor({3072, 768}, rng, DType::kBF16);
  const Tensor bias = random_tensor({3072}, rng, DType::kBF16);
  Tensor pre_cpu = Tensor::cpu({1024, 3072}, DType::kBF16), out_cpu = Tensor::cpu({1024, 3072}, DType::kBF16);
  cpu_->linear_gelu_forward(x, w, bias, pre_cpu, out_cpu, Gelu::kTanh);
  const Tensor xd = to_gpu(x), wd = to_gpu(w), bd = to_gpu(bias);
  Tensor pre = gpu_->empty({1024, 3072}, DType::kBF16, MemoryKind::kOther);
  Tensor out = gpu_->empty({1024, 3072}, DType::kBF16, MemoryKind::kOther);
  gpu_->linear_gelu_forward(xd, wd, bd, pre, out, Gelu::kTanh);
  const Tensor first = to_cpu(out);
  expect_rel(first, out_cpu, tol_for(DType::kBF16, DType::kBF16, 768) + std::ldexp(1.0, -10),
             "autotuned linear_gelu_forward");
  expect_rel(to_cpu(pre), pre_cpu, tol_for(DType::kBF16, DType::kBF16, 768), "autotuned linear_gelu_forward: pre");
  gpu_->linear_gelu_forward(xd, wd, bd, pre, out, Gelu::kTanh);
  EXPECT_TRUE(test::bitwise_equal(to_cpu(out), first)) << "the cached winner gives the tuned call's bits";
}

TEST_F(CudaGemmTest, MatmulMixedDtypesAndHigherRank) {
  auto rng = test_rng();
  // a bf16 and b fp32 into fp16 c: no cuBLASLt type combination, converted to fp32 first.
  {
    const Tensor a = random_tensor({4, 32, 129}, rng, DType::kBF16);  // read as [128, 129]
    const Tensor b = random_tensor({127, 129}, rng, DType::kF32);
    const Tensor c0 = random_tensor({128, 127}, rng, DType::kF16);
    Tensor c_cpu = test::clone(c0);
    cpu_->matmul(a, false, b, true, c_cpu, 1.0f, 0.25f);
    Tensor cd = to_gpu(c0);
    gpu_->matmul(to_gpu(a), false, to_gpu(b), true, cd, 1.0f, 0.25f);
    expect_rel(to_cpu(cd), c_cpu, tol_for(DType::kF32, DType::kF16, 129), "mixed bf16 @ fp32 -> fp16");
  }
  // fp32 inputs into a bf16 output.
  {
    const Tensor a = random_tensor({1000, 7}, rng, DType::kF32), b = random_tensor({7, 3, 43}, rng, DType::kF32);
    Tensor c_cpu = Tensor::cpu({1000, 129}, DType::kBF16);
    cpu_->matmul(a, false, b.view({7, 129}), false, c_cpu, 1.0f, 0.0f);
    Tensor cd = gpu_->empty({1000, 129}, DType::kBF16, MemoryKind::kOther);
    gpu_->matmul(to_gpu(a), false, to_gpu(b.view({7, 129})), false, cd, 1.0f, 0.0f);
    expect_rel(to_cpu(cd), c_cpu, tol_for(DType::kF32, DType::kBF16, 7), "fp32 @ fp32 -> bf16");
  }
}

TEST_F(CudaGemmTest, MatmulWithEmptyInnerDimensionScalesC) {
  auto rng = test_rng();
  const Tensor a = Tensor::cpu({0, 5}), b = Tensor::cpu({0, 3});
  const Tensor c0 = random_tensor({5, 3}, rng);
  Tensor c_cpu = test::clone(c0);
  cpu_->matmul(a, true, b, false, c_cpu, 1.0f, 0.5f);
  Tensor cd = to_gpu(c0);
  gpu_->matmul(gpu_->empty({0, 5}, DType::kF32, MemoryKind::kOther), true,
               gpu_->empty({0, 3}, DType::kF32, MemoryKind::kOther), false, cd, 1.0f, 0.5f);
  expect_rel(to_cpu(cd), c_cpu, 0.0, "k = 0");
}

// ---- linear ----------------------------------------------------------------------------------

struct LinearShape {
  Shape x;  // [.., in]
  int64_t in, out;
};

const LinearShape kLinearShapes[] = {
    {{1, 1}, 1, 1},
    {{7, 129}, 129, 127},
    {{1000, 127}, 127, 129},
    {{1, 1000}, 1000, 7},
    {{512, 4, 768}, 768, 2304},
    {{2048, 768}, 768, 768},
    {{2048, 768}, 768, 3072},
    {{1024, 2, 3072}, 3072, 768},
    {{256, 768}, 768, 50304},  // LM head (tied embedding): V = 50304 outputs
};

TEST_F(CudaGemmTest, LinearForwardMatchesCpu) {
  auto rng = test_rng();
  for (DType dtype : kFloatTypes) {
    for (const LinearShape& s : kLinearShapes) {
      for (bool with_bias : {true, false}) {
        const Tensor x = random_tensor(s.x, rng, dtype), w = random_tensor({s.out, s.in}, rng, dtype);
        const Tensor bias = with_bias ? random_tensor({s.out}, rng, dtype) : Tensor();
        Shape y_shape = s.x;
        y_shape.back() = s.out;
        Tensor y_cpu = Tensor::cpu(y_shape, dtype);
        cpu_->linear_forward(x, w, bias, y_cpu);
        Tensor yd = gpu_->empty(y_shape, dtype, MemoryKind::kOther);
        gpu_->linear_forward(to_gpu(x), to_gpu(w), with_bias ? to_gpu(bias) : Tensor(), yd);
        expect_rel(to_cpu(yd), y_cpu, tol_for(dtype, dtype, s.in),
                   "linear_forward " + name(dtype) + " x" + shape_string(s.x) + " out=" + std::to_string(s.out) +
                       (with_bias ? " +bias" : ""));
      }
    }
  }
}

// Biases carved out of a flat parameter buffer at an odd offset (not 16-byte aligned), and a
// bias of another dtype than the output, take the fallback paths.
TEST_F(CudaGemmTest, LinearForwardMisalignedAndMixedBias) {
  auto rng = test_rng();
  for (DType dtype : kFloatTypes) {
    for (auto [n, in, out] : {std::tuple<int64_t, int64_t, int64_t>{2048, 768, 2304}, {7, 129, 127}}) {
      const Tensor x = random_tensor({n, in}, rng, dtype), w = random_tensor({out, in}, rng, dtype);
      const Tensor flat = random_tensor({out + 3}, rng, dtype);
      const Tensor bias = flat.flat_view(1, {out});
      Tensor y_cpu = Tensor::cpu({n, out}, dtype);
      cpu_->linear_forward(x, w, bias, y_cpu);
      const Tensor flat_d = to_gpu(flat);
      Tensor yd = gpu_->empty({n, out}, dtype, MemoryKind::kOther);
      gpu_->linear_forward(to_gpu(x), to_gpu(w), flat_d.flat_view(1, {out}), yd);
      expect_rel(to_cpu(yd), y_cpu, tol_for(dtype, dtype, in), "misaligned bias " + name(dtype));

      // Weights and inputs carved out of flat buffers at odd offsets too (2- or 4-byte aligned
      // operands: the heuristic is told the real alignment).
      const Tensor wflat = random_tensor({out * in + 1}, rng, dtype), xflat = random_tensor({n * in + 3}, rng, dtype);
      const Tensor wv = wflat.flat_view(1, {out, in}), xv = xflat.flat_view(3, {n, in});
      Tensor yv_cpu = Tensor::cpu({n, out}, dtype);
      cpu_->linear_forward(xv, wv, bias, yv_cpu);
      const Tensor wflat_d = to_gpu(wflat), xflat_d = to_gpu(xflat);
      Tensor yv_d = gpu_->empty({n + 1, out}, dtype, MemoryKind::kOther).flat_view(out / 2 + 1, {n, out});
      gpu_->linear_forward(xflat_d.flat_view(3, {n, in}), wflat_d.flat_view(1, {out, in}), flat_d.flat_view(1, {out}),
                           yv_d);
      expect_rel(to_cpu(yv_d), yv_cpu, tol_for(dtype, dtype, in), "misaligned x, w, y and bias " + name(dtype));

      const Tensor bias32 = random_tensor({out}, rng, DType::kF32);
      cpu_->linear_forward(x, w, bias32, y_cpu);
      gpu_->linear_forward(to_gpu(x), to_gpu(w), to_gpu(bias32), yd);
      expect_rel(to_cpu(yd), y_cpu, tol_for(dtype, dtype, in), "fp32 bias, " + name(dtype) + " output");
    }
  }
}

// dx (overwritten), dw (+=, fp32 main grad or model dtype), dbias (+=) from random non-zero
// starting values, so that an overwrite instead of an accumulation shows as an O(1) error.
TEST_F(CudaGemmTest, LinearBackwardMatchesCpuAndAccumulates) {
  auto rng = test_rng();
  for (DType dtype : kFloatTypes) {
    for (const LinearShape& s : kLinearShapes) {
      std::vector<DType> grad_dtypes = {DType::kF32};  // the fp32 main grad, or the model dtype
      if (dtype != DType::kF32) grad_dtypes.push_back(dtype);
      for (DType grad_dtype : grad_dtypes) {
        const int64_t n = shape_numel(s.x) / s.in;
        Shape y_shape = s.x;
        y_shape.back() = s.out;
        const Tensor x = random_tensor(s.x, rng, dtype), w = random_tensor({s.out, s.in}, rng, dtype);
        const Tensor dy = random_tensor(y_shape, rng, dtype);
        const Tensor dw0 = random_tensor({s.out, s.in}, rng, grad_dtype);
        const Tensor db0 = random_tensor({s.out}, rng, grad_dtype);
        Tensor dx_cpu = Tensor::cpu(s.x, dtype), dw_cpu = test::clone(dw0), db_cpu = test::clone(db0);
        cpu_->linear_backward(dy, x, w, dx_cpu, dw_cpu, db_cpu);

        const Tensor dyd = to_gpu(dy), xd = to_gpu(x), wd = to_gpu(w);
        Tensor dxd = gpu_->empty(s.x, dtype, MemoryKind::kOther), dwd = to_gpu(dw0), dbd = to_gpu(db0);
        gpu_->linear_backward(dyd, xd, wd, dxd, dwd, dbd);
        const std::string what = "linear_backward " + name(dtype) + " grads " + name(grad_dtype) + " x" +
                                 shape_string(s.x) + " out=" + std::to_string(s.out);
        const Tensor dx_gpu = to_cpu(dxd), dw_gpu = to_cpu(dwd), db_gpu = to_cpu(dbd);
        expect_rel(dx_gpu, dx_cpu, tol_for(dtype, dtype, s.out), what + ": dx");
        expect_rel(dw_gpu, dw_cpu, tol_for(dtype, grad_dtype, n), what + ": dw");
        // dbias: fp32 column sums of n terms in different orders (see cuda_backend_test).
        expect_rel(db_gpu, db_cpu, tol_for(DType::kF32, grad_dtype, n), what + ": dbias");

        // Deterministic: the same call from the same state gives the same bits.
        Tensor dxd2 = gpu_->empty(s.x, dtype, MemoryKind::kOther), dwd2 = to_gpu(dw0), dbd2 = to_gpu(db0);
        gpu_->linear_backward(dyd, xd, wd, dxd2, dwd2, dbd2);
        EXPECT_TRUE(test::bitwise_equal(to_cpu(dxd2), dx_gpu)) << what << ": dx not deterministic";
        EXPECT_TRUE(test::bitwise_equal(to_cpu(dwd2), dw_gpu)) << what << ": dw not deterministic";
        EXPECT_TRUE(test::bitwise_equal(to_cpu(dbd2), db_gpu)) << what << ": dbias not deterministic";
      }
    }
  }
}

TEST_F(CudaGemmTest, LinearBackwardWithoutDxOrBiasAccumulatesTwice) {
  auto rng = test_rng();
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    const Tensor x = random_tensor({2048, 768}, rng, dtype), w = random_tensor({3072, 768}, rng, dtype);
    const Tensor dy = random_tensor({2048, 3072}, rng, dtype);
    const Tensor dw0 = random_tensor({3072, 768}, rng, DType::kF32);
    Tensor none_cpu, dw_cpu = test::clone(dw0);
    cpu_->linear_backward(dy, x, w, none_cpu, dw_cpu, none_cpu);
    cpu_->linear_backward(dy, x, w, none_cpu, dw_cpu, none_cpu);
    Tensor none_gpu, dwd = to_gpu(dw0);
    const Tensor dyd = to_gpu(dy), xd = to_gpu(x), wd = to_gpu(w);
    gpu_->linear_backward(dyd, xd, wd, none_gpu, dwd, none_gpu);
    gpu_->linear_backward(dyd, xd, wd, none_gpu, dwd, none_gpu);
    expect_rel(to_cpu(dwd), dw_cpu, tol_for(dtype, DType::kF32, 2048), "dw accumulated twice, " + name(dtype));
  }
}

// linear_gelu_forward / linear_dgelu_backward (cuBLASLt GELU_AUX_BIAS and DGELU epilogues for
// 16-bit tanh GELU; the unfused ops for fp32, exact GELU and widths cuBLASLt cannot take) vs the
// CPU's fused reference. Tolerance: the GEMM's (tol_for) plus 2^-10 for the GELU itself, whose
// tanh inside cuBLASLt's epilogue need not be correctly rounded (hardware tanh.approx has a
// relative error below 2^-10.9), and for the unfused path's extra rounding of the product
// (fp16: 2^-11; bf16 is covered by its 2^-7 output term).
struct GeluShape {
  int64_t n, in, out;
};
const GeluShape kGeluShapes[] = {{2048, 768, 3072}, {1024, 1024, 4096}, {7, 129, 127}, {33, 64, 40}, {1, 8, 8}};

TEST_F(CudaGemmTest, LinearGeluForwardMatchesCpu) {
  auto rng = test_rng();
  for (DType dtype : kFloatTypes) {
    for (const GeluShape& s : kGeluShapes) {
      for (Gelu kind : {Gelu::kTanh, Gelu::kExact}) {
        for (bool with_bias : {true, false}) {
          const Tensor x = random_tensor({s.n, s.in}, rng, dtype), w = random_tensor({s.out, s.in}, rng, dtype);
          const Tensor bias = with_bias ? random_tensor({s.out}, rng, dtype) : Tensor();
          Tensor pre_cpu = Tensor::cpu({s.n, s.out}, dtype), y_cpu = Tensor::cpu({s.n, s.out}, dtype);
          cpu_->linear_gelu_forward(x, w, bias, pre_cpu, y_cpu, kind);
          Tensor pre_d = gpu_->empty({s.n, s.out}, dtype, MemoryKind::kOther);
          Tensor y_d = gpu_->empty({s.n, s.out}, dtype, MemoryKind::kOther);
          gpu_->linear_gelu_forward(to_gpu(x), to_gpu(w), with_bias ? to_gpu(bias) : Tensor(), pre_d, y_d, kind);
          const std::string what = "linear_gelu_forward " + name(dtype) + " n=" + std::to_string(s.n) +
                                   " in=" + std::to_string(s.in) + " out=" + std::to_string(s.out) +
                                   (kind == Gelu::kTanh ? " tanh" : " erf") + (with_bias ? " +bias" : "");
          expect_rel(to_cpu(pre_d), pre_cpu, tol_for(dtype, dtype, s.in), what + ": pre");
          expect_rel(to_cpu(y_d), y_cpu, tol_for(dtype, dtype, s.in) + std::ldexp(1.0, -10), what + ": y");
        }
      }
    }
  }
}

// linear_residual_forward (one cuBLASLt GEMM: C = the residual with beta = 1, D = y, the bias
// epilogue; the fp32 product and the CPU's bias-dropout-add arithmetic where it cannot) vs the
// CPU's fused reference. Tolerance: the GEMM's (tol_for); cuBLASLt adds C and the bias to the
// fp32 product in its own order, an fp32 ulp at most before the output's rounding, inside it.
TEST_F(CudaGemmTest, LinearResidualForwardMatchesCpu) {
  auto rng = test_rng();
  for (DType dtype : kFloatTypes) {
    for (const GeluShape& s : kGeluShapes) {
      for (bool with_bias : {true, false}) {
        for (bool in_place : {false, true}) {
          const Tensor x = random_tensor({s.n, s.in}, rng, dtype), w = random_tensor({s.out, s.in}, rng, dtype);
          const Tensor bias = with_bias ? random_tensor({s.out}, rng, dtype) : Tensor();
          const Tensor r = random_tensor({s.n, s.out}, rng, dtype);
          Tensor y_cpu = Tensor::cpu({s.n, s.out}, dtype);
          cpu_->linear_residual_forward(x, w, bias, r, y_cpu);
          Tensor r_d = to_gpu(r);
          Tensor y_d = in_place ? r_d : gpu_->empty({s.n, s.out}, dtype, MemoryKind::kOther);
          gpu_->linear_residual_forward(to_gpu(x), to_gpu(w), with_bias ? to_gpu(bias) : Tensor(), r_d, y_d);
          const std::string what = "linear_residual_forward " + name(dtype) + " n=" + std::to_string(s.n) +
                                   " in=" + std::to_string(s.in) + " out=" + std::to_string(s.out) +
                                   (with_bias ? " +bias" : "") + (in_place ? " in place" : "");
          expect_rel(to_cpu(y_d), y_cpu, tol_for(dtype, dtype, s.in), what);
          if (!in_place) expect_rel(to_cpu(r_d), r, 0.0, what + ": residual untouched");
        }
      }
    }
  }
  // A misaligned bias (a view one element into its buffer) and an fp32 bias for 16-bit outputs.
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const int64_t n = 96, in = 768, out = 2304;
    const Tensor x = random_tensor({n, in}, rng, dtype), w = random_tensor({out, in}, rng, dtype);
    const Tensor r = random_tensor({n, out}, rng, dtype);
    for (DType bias_dtype : {dtype, DType::kF32}) {
      const Tensor bias_buf = random_tensor({out + 1}, rng, bias_dtype);
      const Tensor bias = bias_buf.slice(1, out + 1);
      Tensor y_cpu = Tensor::cpu({n, out}, dtype);
      cpu_->linear_residual_forward(x, w, bias, r, y_cpu);
      const Tensor bias_d = to_gpu(bias_buf).slice(1, out + 1);
      Tensor y_d = gpu_->empty({n, out}, dtype, MemoryKind::kOther);
      gpu_->linear_residual_forward(to_gpu(x), to_gpu(w), bias_d, to_gpu(r), y_d);
      expect_rel(to_cpu(y_d), y_cpu, tol_for(dtype, dtype, in),
                 "linear_residual_forward misaligned " + name(bias_dtype) + " bias, " + name(dtype));
    }
  }
}

TEST_F(CudaGemmTest, LinearDgeluBackwardMatchesCpuAndAccumulates) {
  auto rng = test_rng();
  for (DType dtype : kFloatTypes) {
    for (const GeluShape& s : kGeluShapes) {
      for (Gelu kind : {Gelu::kTanh, Gelu::kExact}) {
        // The layer is FC2: x = gelu(pre) [n, in] -> dy [n, out]; w [out, in].
        const Tensor pre = random_tensor({s.n, s.in}, rng, dtype, 0.1f, 3.0f);
        const Tensor x = random_tensor({s.n, s.in}, rng, dtype), w = random_tensor({s.out, s.in}, rng, dtype);
        const Tensor dy = random_tensor({s.n, s.out}, rng, dtype);
        const Tensor dw0 = random_tensor({s.out, s.in}, rng, DType::kF32), db0 = random_tensor({s.out}, rng);
        Tensor dpre_cpu = Tensor::cpu({s.n, s.in}, dtype), dw_cpu = test::clone(dw0), db_cpu = test::clone(db0);
        cpu_->linear_dgelu_backward(dy, x, w, pre, dpre_cpu, dw_cpu, db_cpu, kind);
        Tensor dpre_d = gpu_->empty({s.n, s.in}, dtype, MemoryKind::kOther), dw_d = to_gpu(dw0), db_d = to_gpu(db0);
        gpu_->linear_dgelu_backward(to_gpu(dy), to_gpu(x), to_gpu(w), to_gpu(pre), dpre_d, dw_d, db_d, kind);
        const std::string what = "linear_dgelu_backward " + name(dtype) + " n=" + std::to_string(s.n) +
                                 " in=" + std::to_string(s.in) + " out=" + std::to_string(s.out) +
                                 (kind == Gelu::kTanh ? " tanh" : " erf");
        expect_rel(to_cpu(dpre_d), dpre_cpu, tol_for(dtype, dtype, s.out) + std::ldexp(1.0, -10), what + ": dpre");
        expect_rel(to_cpu(dw_d), dw_cpu, tol_for(dtype, DType::kF32, s.n), what + ": dw");
        expect_rel(to_cpu(db_d), db_cpu, tol_for(DType::kF32, DType::kF32, s.n), what + ": dbias");
      }
    }
  }
}

// The GEMM path of a training step allocates nothing (the memory plan is exact): aligned
// bias, fp32 main-grad accumulation.
TEST_F(CudaGemmTest, LinearAllocatesNothing) {
  auto rng = test_rng();
  const Tensor x = to_gpu(random_tensor({1024, 768}, rng, DType::kBF16));
  const Tensor w = to_gpu(random_tensor({2304, 768}, rng, DType::kBF16));
  const Tensor b = to_gpu(random_tensor({2304}, rng, DType::kBF16));
  const Tensor dy = to_gpu(random_tensor({1024, 2304}, rng, DType::kBF16));
  Tensor y = gpu_->empty({1024, 2304}, DType::kBF16, MemoryKind::kOther);
  Tensor dx = gpu_->empty({1024, 768}, DType::kBF16, MemoryKind::kOther);
  Tensor dw = gpu_->empty({2304, 768}, DType::kF32, MemoryKind::kOther);
  Tensor db = gpu_->empty({2304}, DType::kF32, MemoryKind::kOther);
  gpu_->synchronize();
  memory_tracker(Device::kCUDA).reset_peak();
  const MemorySnapshot before = memory_tracker(Device::kCUDA).snapshot();
  gpu_->linear_forward(x, w, b, y);
  gpu_->linear_backward(dy, x, w, dx, dw, db);
  gpu_->synchronize();
  const MemorySnapshot after = memory_tracker(Device::kCUDA).snapshot();
  EXPECT_EQ(after.peak_total, before.peak_total) << "linear_forward/backward allocated temporaries (a fallback path?)";
  EXPECT_EQ(after.current, before.current);

  // The MLP pair: FC1 [2304, 768] with GELU, then FC2's backward read as [768, 2304] through it.
  Tensor pre = gpu_->empty({1024, 2304}, DType::kBF16, MemoryKind::kOther);
  Tensor dpre = gpu_->empty({1024, 2304}, DType::kBF16, MemoryKind::kOther);
  Tensor dw2 = dw.view({768, 2304}), db2 = db.slice(0, 768);
  gpu_->synchronize();
  memory_tracker(Device::kCUDA).reset_peak();
  const MemorySnapshot before_fused = memory_tracker(Device::kCUDA).snapshot();
  gpu_->linear_gelu_forward(x, w, b, pre, y, Gelu::kTanh);
  gpu_->linear_dgelu_backward(dx, y, w.view({768, 2304}), pre, dpre, dw2, db2, Gelu::kTanh);
  gpu_->synchronize();
  const MemorySnapshot after_fused = memory_tracker(Device::kCUDA).snapshot();
  EXPECT_EQ(after_fused.peak_total, before_fused.peak_total)
      << "linear_gelu_forward/linear_dgelu_backward allocated temporaries";
  EXPECT_EQ(after_fused.current, before_fused.current);

  // The row-parallel linear with the residual add (proj, FC2): one GEMM, no fp32 temporary.
  const Tensor r = to_gpu(random_tensor({1024, 2304}, rng, DType::kBF16));
  gpu_->synchronize();
  memory_tracker(Device::kCUDA).reset_peak();
  const MemorySnapshot before_residual = memory_tracker(Device::kCUDA).snapshot();
  gpu_->linear_residual_forward(x, w, b, r, y);
  gpu_->synchronize();
  const MemorySnapshot after_residual = memory_tracker(Device::kCUDA).snapshot();
  EXPECT_EQ(after_residual.peak_total, before_residual.peak_total)
      << "linear_residual_forward allocated a temporary (the unfused fallback?)";
}

}  // namespace
}  // namespace megatron::backend
