// CUDA FP8 ops vs the CPU backend's emulation (which tests/core/fp8_test.cpp and
// tests/backend/fp8_linear_test.cpp check against independent references):
//  - fp8_quantize: the hardware's saturating conversion gives the CPU's codes bit for bit, in
//    both layouts, for fp32 and bf16 inputs and special values (NaN, inf, out of range,
//    subnormal), with the same amax, scale and scale_inv, under both recipes;
//  - fp8_gemm: the fp32 fallback on the decoded codes vs the CPU: the codes' products are exact,
//    so they differ only by fp32 summation order: ||gpu - cpu|| / ||cpu|| <= 1e-5 + k 2^-24 for
//    fp32 output, one ulp for bf16. cuBLASLt's FP8 kernels vs the CPU: Hopper's FP8 tensor cores
//    keep fewer than fp32's bits inside each MMA before the split accumulation promotes the partial
//    sum (about 14, DeepSeek-V3's report, section 3.3.2), so each element is checked against
//    2^-10 sum_k |a||b| (scaled) plus its output rounding: far below what a wrong scale, operand
//    or transpose gives, and above what the hardware's accumulation measured (2^-12 at most);
//  - the FP8 linear's forward and backward end to end.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/device.h"
#include "backend/fp8_linear.h"
#include "backend/fp8_recipe.h"
#include "backend/ops.h"

namespace megatron::backend {
namespace {

DType fp8_dtype(Fp8Format f) { return f == Fp8Format::kE4M3 ? DType::kF8E4M3 : DType::kF8E5M2; }

double norm_rel_error(const Tensor& got, const Tensor& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = test::get(got, i), w = test::get(want, i);
    num += (g - w) * (g - w);
    den += w * w;
  }
  return std::sqrt(num / (den > 0 ? den : 1e-300));
}

struct Pair {
  std::unique_ptr<Backend> cpu, gpu;
};
Pair backends() { return {make_cpu_backend(), make_cuda_backend(0)}; }

// The same recipe state on both backends (fresh: scales 1, history 0) and one slot's
// quantization of it; `scale` (if > 0) preset for the delayed recipe.
struct States {
  Fp8ScalingState cpu, gpu;
  States(Pair& p, const Fp8Config& cfg, int64_t operands) : cpu(*p.cpu, cfg, operands), gpu(*p.gpu, cfg, operands) {}
  void set_scale(Pair& p, int64_t slot, float s) {
    cpu.scale().data_as<float>()[slot] = s;
    p.gpu->copy(cpu.scale(), gpu.scale());
  }
  void expect_equal(Pair& p) {
    EXPECT_TRUE(bitwise(to_host(*p.gpu, gpu.scale()), cpu.scale(), "scale"));
    EXPECT_TRUE(bitwise(to_host(*p.gpu, gpu.scale_inv()), cpu.scale_inv(), "scale_inv"));
    EXPECT_TRUE(bitwise(to_host(*p.gpu, gpu.amax_history()), cpu.amax_history(), "amax_history"));
  }
};

void quantize_both(Pair& p, States& st, const Tensor& x_host, int64_t slot) {
  const Fp8Format f = st.cpu.format(slot);
  const int64_t cols = x_host.dim(-1), rows = x_host.numel() / cols;
  Tensor q = p.cpu->empty({rows, cols}, fp8_dtype(f), MemoryKind::kOther);
  Tensor qt = p.cpu->empty({cols, rows}, fp8_dtype(f), MemoryKind::kOther);
  p.cpu->fp8_quantize(x_host, q, qt, st.cpu.quantization(slot));
  Tensor x = to_device(*p.gpu, x_host);
  Tensor gq = p.gpu->empty({rows, cols}, fp8_dtype(f), MemoryKind::kOther);
  Tensor gqt = p.gpu->empty({cols, rows}, fp8_dtype(f), MemoryKind::kOther);
  p.gpu->fp8_quantize(x, gq, gqt, st.gpu.quantization(slot));
  EXPECT_TRUE(bitwise(to_host(*p.gpu, gq), q, "q"));
  EXPECT_TRUE(bitwise(to_host(*p.gpu, gqt), qt, "qt"));
  // One layout alone gives the same codes.
  Tensor only_t = p.gpu->empty({cols, rows}, fp8_dtype(f), MemoryKind::kOther), none;
  p.gpu->fp8_quantize(x, none, only_t, st.gpu.quantization(slot));
  p.cpu->fp8_quantize(x_host, none, qt, st.cpu.quantization(slot));
  EXPECT_TRUE(bitwise(to_host(*p.gpu, only_t), qt, "qt alone"));
  st.expect_equal(p);
}

TEST(CudaFp8, QuantizeMatchesCpuBitForBit) {
  MT_REQUIRE_CUDA();
  Pair p = backends();
  // {67, 45}: the element-wise kernel (odd sizes, partial tiles). {136, 200} and {64, 8}:
  // the vectorized one (multiples of 8, partial and whole 64 x 64 tiles).
  const Shape shapes[] = {{67, 45}, {136, 200}, {64, 8}};
  for (const Shape& shape : shapes) {
    for (Fp8Recipe recipe : {Fp8Recipe::kTensorwise, Fp8Recipe::kDelayed}) {
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
        SCOPED_TRACE(testing::Message() << shape[0] << " x " << shape[1] << " " << dtype_name(dt) << " "
                                        << (recipe == Fp8Recipe::kDelayed ? "delayed" : "tensorwise"));
        Fp8Config cfg;
        cfg.recipe = recipe;
        cfg.format = Fp8Mix::kHybrid;
        States st(p, cfg, kFp8Roles);
        // Values across many binades.
        Tensor x =
            host_random(shape, dt, 11 + static_cast<uint64_t>(dt) + static_cast<uint64_t>(shape[1]), 1e-4f, 30.0f);
        if (recipe == Fp8Recipe::kDelayed) {
          st.set_scale(p, 0, 20.0f);    // 30 * 20 = 600 > 448: saturates
          st.set_scale(p, 2, 3000.0f);  // e5m2: 30 * 3000 > 57344, small ones subnormal
        }
        quantize_both(p, st, x, 0);  // e4m3
        quantize_both(p, st, x, 2);  // e5m2 (hybrid gradient)
        // A second quantization keeps the larger recorded amax (delayed: max with the slot).
        quantize_both(p, st, x, 0);
      }
    }
  }
}

TEST(CudaFp8, QuantizeSpecialValues) {
  MT_REQUIRE_CUDA();
  Pair p = backends();
  Fp8Config cfg;
  cfg.recipe = Fp8Recipe::kDelayed;
  States st(p, cfg, kFp8Roles);
  st.set_scale(p, 0, 1.0f);
  st.set_scale(p, 2, 1.0f);
  const float specials[] = {NAN,      -NAN,    INFINITY,  -INFINITY, 0.0f,       -0.0f,    448.0f,
                            449.0f,   464.0f,  465.0f,    -1e6f,     57344.0f,   61440.0f, 1e-7f,
                            0x1p-10f, 0x1p-9f, 0x1.8p-9f, 0x1p-17f,  0x1.8p-16f, 3.4e38f,  1.0625f,
                            1.1875f,  1.125f,  0.3f,      -0.4f,     0x1.ep-7f,  7e-45f,   65520.0f};
  const int64_t n = static_cast<int64_t>(sizeof(specials) / sizeof(specials[0]));
  Tensor x = Tensor::cpu({1, n});
  for (int64_t i = 0; i < n; ++i) x.data_as<float>()[i] = specials[i];
  quantize_both(p, st, x, 0);
  quantize_both(p, st, x, 2);
  // The same values through the vectorized kernel: [8, 8 n], each row a rotation of them.
  Tensor wide = Tensor::cpu({8, 8 * n});
  for (int64_t i = 0; i < wide.numel(); ++i) wide.data_as<float>()[i] = specials[(i + i / (8 * n)) % n];
  quantize_both(p, st, wide, 0);
  quantize_both(p, st, wide, 2);
}

// a [m, k] and b [n, k] quantized on the CPU (the codes both sides use), then fp8_gemm on
// both backends.
void gemm_case(Pair& p, int64_t m, int64_t n, int64_t k, Fp8Format fa, Fp8Format fb, DType out, bool bias,
               GradWrite write, bool cublaslt, Fp8Accumulation acc = Fp8Accumulation::kSplit) {
  SCOPED_TRACE(testing::Message() << "m " << m << " n " << n << " k " << k << " a " << fp8_format_name(fa) << " b "
                                  << fp8_format_name(fb) << " out " << dtype_name(out) << (bias ? " bias" : "")
                                  << (write == GradWrite::kAccumulate ? " accumulate" : "")
                                  << (cublaslt ? " cublaslt" : " fallback")
                                  << (acc == Fp8Accumulation::kFast ? " fast" : ""));
  static_cast<CudaBackend&>(*p.gpu).set_fp8_gemm_cublaslt(cublaslt);
  Tensor a32 = host_random({m, k}, DType::kF32, 3 + static_cast<uint64_t>(m), 0.01f, 4.0f);
  Tensor b32 = host_random({n, k}, DType::kF32, 5 + static_cast<uint64_t>(n), 0.01f, 4.0f);
  Tensor qa = Tensor::cpu({m, k}, fp8_dtype(fa)), qb = Tensor::cpu({n, k}, fp8_dtype(fb)), none;
  Fp8Quantization sa, sb;
  sa.format = fa;
  sb.format = fb;
  sa.current = sb.current = true;
  sa.scale = Tensor::cpu({1});
  sa.scale_inv = Tensor::cpu({1});
  sb.scale = Tensor::cpu({1});
  sb.scale_inv = Tensor::cpu({1});
  p.cpu->fp8_quantize(a32, qa, none, sa);
  p.cpu->fp8_quantize(b32, qb, none, sb);
  Tensor bias_h = bias ? host_random({n}, out, 9) : Tensor();
  Tensor c = host_random({m, n}, out, 13);
  Tensor gc = to_device(*p.gpu, c);
  p.cpu->fp8_gemm(qa, sa.scale_inv, qb, sb.scale_inv, bias_h, c, write);
  Tensor gbias = bias ? to_device(*p.gpu, bias_h) : Tensor();
  p.gpu->fp8_gemm(to_device(*p.gpu, qa), to_device(*p.gpu, sa.scale_inv), to_device(*p.gpu, qb),
                  to_device(*p.gpu, sb.scale_inv), gbias, gc, write, acc);
  const Tensor got = to_host(*p.gpu, gc);
  if (!cublaslt) {
    if (out == DType::kF32) {
      const double tol = 1e-5 + static_cast<double>(k) * 0x1p-24;
      EXPECT_LE(norm_rel_error(got, c), tol);
    } else {
      EXPECT_TRUE(close(got, c, 0.0, 0.0, 1, "c"));
    }
  } else {
    // sum_k |a_ik| |b_jk| sa sb: the codes with their sign bits (bit 7 in both formats) cleared.
    Tensor abs_a = Tensor::cpu({m, k}, qa.dtype()), abs_b = Tensor::cpu({n, k}, qb.dtype());
    Tensor magnitude = Tensor::cpu({m, n});
    std::memcpy(abs_a.data(), qa.data(), static_cast<size_t>(qa.nbytes()));
    std::memcpy(abs_b.data(), qb.data(), static_cast<size_t>(qb.nbytes()));
    for (int64_t i = 0; i < abs_a.numel(); ++i) abs_a.data_as<uint8_t>()[i] &= 0x7F;
    for (int64_t i = 0; i < abs_b.numel(); ++i) abs_b.data_as<uint8_t>()[i] &= 0x7F;
    p.cpu->fp8_gemm(abs_a, sa.scale_inv, abs_b, sb.scale_inv, Tensor(), magnitude, GradWrite::kOverwrite);
    const double ulp = out == DType::kF32 ? 0x1p-23 : 0x1p-7;
    // Fast accumulation keeps the tensor core's narrower sum over all of k: 4x the bound.
    const double sum_bound = acc == Fp8Accumulation::kFast ? 0x1p-8 : 0x1p-10;
    int64_t bad = 0;
    for (int64_t i = 0; i < m * n; ++i) {
      const double g = test::get(got, i), w = test::get(c, i);
      const double accumulated = write == GradWrite::kAccumulate ? std::fabs(w) : 0.0;
      if (std::fabs(g - w) > sum_bound * test::get(magnitude, i) + ulp * (std::fabs(w) + accumulated)) {
        if (bad++ < 3) ADD_FAILURE() << "element " << i << ": got " << g << ", want " << w;
      }
    }
    EXPECT_EQ(bad, 0);
  }
  static_cast<CudaBackend&>(*p.gpu).set_fp8_gemm_cublaslt(true);
}

TEST(CudaFp8, GemmMatchesCpu) {
  MT_REQUIRE_CUDA();
  Pair p = backends();
  const Fp8Format e4 = Fp8Format::kE4M3, e5 = Fp8Format::kE5M2;
  for (bool lt : {true, false}) {
    gemm_case(p, 64, 48, 96, e4, e4, DType::kBF16, false, GradWrite::kOverwrite, lt);
    gemm_case(p, 64, 48, 96, e4, e4, DType::kBF16, true, GradWrite::kOverwrite, lt);
    gemm_case(p, 128, 64, 256, e5, e4, DType::kBF16, false, GradWrite::kOverwrite, lt);  // dgrad: dy x w^T
    gemm_case(p, 64, 128, 512, e5, e4, DType::kF32, false, GradWrite::kAccumulate, lt);  // wgrad into main_grad
    // wgrad into a 16-bit main_grad (--fp16, --bf16 --grad-reduce-in-bf16): one rounding of the sum.
    gemm_case(p, 64, 128, 512, e5, e4, DType::kBF16, false, GradWrite::kAccumulate, lt);
    gemm_case(p, 64, 128, 512, e5, e4, DType::kF16, false, GradWrite::kAccumulate, lt);
    gemm_case(p, 96, 32, 64, e4, e5, DType::kF32, false, GradWrite::kOverwrite, lt);
    gemm_case(p, 256, 768, 768, e4, e4, DType::kBF16, true, GradWrite::kOverwrite, lt);  // a GPT-2 shape
    // Sizes cuBLASLt's FP8 kernels may refuse (k not a multiple of 16): the fallback.
    gemm_case(p, 7, 5, 20, e4, e4, DType::kF32, false, GradWrite::kOverwrite, lt);
  }
  // The forward GEMM's fast accumulation (the fallback ignores it), long k included.
  const Fp8Accumulation fast = Fp8Accumulation::kFast;
  gemm_case(p, 64, 48, 96, e4, e4, DType::kBF16, true, GradWrite::kOverwrite, true, fast);
  gemm_case(p, 256, 768, 768, e4, e4, DType::kBF16, true, GradWrite::kOverwrite, true, fast);
  gemm_case(p, 128, 256, 8192, e4, e4, DType::kBF16, false, GradWrite::kOverwrite, true, fast);
  gemm_case(p, 7, 5, 20, e4, e4, DType::kF32, false, GradWrite::kOverwrite, false, fast);
}

// fp8_cast with the MLP's prologues and the fused bias gradient vs the CPU. The GPU's GELU
// (tanhf, erff, contracted multiply-adds) may differ from the CPU's by fp32 ulps, so a code may
// be one step off where v sits at a rounding boundary (rare), and the current scale may differ
// by an ulp; the identity prologue gives the CPU's bits. Shapes: both kernels, and sizes whose
// bias-gradient partials need several tiles per block (more than the scratch holds otherwise).
TEST(CudaFp8, CastProloguesAndBiasGradientMatchCpu) {
  MT_REQUIRE_CUDA();
  Pair p = backends();
  const Shape shapes[] = {{67, 45}, {136, 200}, {64 * 70, 32768}, {32 * 110, 20001}};
  for (const Shape& shape : shapes) {
    const bool big = shape[0] * shape[1] > (int64_t{1} << 24);
    for (Fp8Prologue pro : {Fp8Prologue::kIdentity, Fp8Prologue::kGelu, Fp8Prologue::kGeluGrad}) {
      for (Fp8Recipe recipe : {Fp8Recipe::kTensorwise, Fp8Recipe::kDelayed}) {
        if (big && recipe == Fp8Recipe::kDelayed) continue;
        const Gelu gelu = recipe == Fp8Recipe::kDelayed ? Gelu::kExact : Gelu::kTanh;
        const DType dt = big ? DType::kBF16 : (pro == Fp8Prologue::kGelu ? DType::kF32 : DType::kBF16);
        SCOPED_TRACE(testing::Message() << shape[0] << " x " << shape[1] << " prologue " << static_cast<int>(pro) << " "
                                        << fp8_recipe_name(recipe));
        Fp8Config cfg;
        cfg.recipe = recipe;
        cfg.format = Fp8Mix::kHybrid;
        States st(p, cfg, kFp8Roles);
        if (recipe == Fp8Recipe::kDelayed) st.set_scale(p, 2, 4096.0f);
        const int64_t rows = shape[0], cols = shape[1];
        Tensor x = host_random(shape, dt, 31 + static_cast<uint64_t>(cols), 1e-3f, 4.0f);
        Tensor aux = host_random(shape, dt, 37 + static_cast<uint64_t>(cols), 1e-3f, 4.0f);
        const Fp8Format f = Fp8Format::kE5M2;
        Tensor q = p.cpu->empty({rows, cols}, fp8_dtype(f), MemoryKind::kOther);
        Tensor qt = p.cpu->empty({cols, rows}, fp8_dtype(f), MemoryKind::kOther);
        Tensor db = host_random({cols}, DType::kF32, 41);
        Tensor gdb = to_device(*p.gpu, db);
        p.cpu->fp8_cast(Fp8Source(x, pro, gelu, aux), q, qt, st.cpu.quantization(2), db, GradWrite::kAccumulate);
        Tensor gx = to_device(*p.gpu, x), gaux = to_device(*p.gpu, aux);
        Tensor gq = p.gpu->empty({rows, cols}, fp8_dtype(f), MemoryKind::kOther);
        Tensor gqt = p.gpu->empty({cols, rows}, fp8_dtype(f), MemoryKind::kOther);
        p.gpu->fp8_cast(Fp8Source(gx, pro, gelu, gaux), gq, gqt, st.gpu.quantization(2), gdb, GradWrite::kAccumulate);
        const Tensor hq = to_host(*p.gpu, gq), hqt = to_host(*p.gpu, gqt), hdb = to_host(*p.gpu, gdb);
        if (pro == Fp8Prologue::kIdentity) {
          EXPECT_TRUE(bitwise(hq, q, "q"));
          EXPECT_TRUE(bitwise(hqt, qt, "qt"));
          st.expect_equal(p);
        } else {
          const uint8_t *a = hq.data_as<uint8_t>(), *b = q.data_as<uint8_t>();
          int64_t off = 0, far = 0;
          for (int64_t i = 0; i < rows * cols; ++i) {
            if (a[i] == b[i]) continue;
            ++off;
            // Adjacent codes of the same sign differ by one in their bits.
            if ((a[i] ^ b[i]) & 0x80 || std::abs(int{a[i]} - int{b[i]}) > 1) ++far;
          }
          EXPECT_EQ(far, 0) << off << " codes differ";
          EXPECT_LE(off, rows * cols / 100 + 1);
          for (int64_t c = 0; c < std::min<int64_t>(cols, 64); ++c) {
            for (int64_t r = 0; r < std::min<int64_t>(rows, 64); ++r) {
              ASSERT_EQ(hqt.data_as<uint8_t>()[c * rows + r], a[r * cols + c]) << "transpose at " << r << ", " << c;
            }
          }
          const Tensor gscale = to_host(*p.gpu, st.gpu.scale());
          EXPECT_NEAR(gscale.data_as<float>()[2], st.cpu.scale().data_as<float>()[2],
                      1e-6 * st.cpu.scale().data_as<float>()[2]);
        }
        // dbias: fp32 sums in different orders; rows terms of up to ~4 each.
        for (int64_t c = 0; c < cols; ++c) {
          const double want = test::get(db, c);
          ASSERT_NEAR(test::get(hdb, c), want, 1e-6 * static_cast<double>(rows) * 4.0 + 1e-5 * std::fabs(want))
              << "dbias column " << c;
        }
      }
    }
  }
}

TEST(CudaFp8, LinearForwardBackwardMatchesCpu) {
  MT_REQUIRE_CUDA();
  Pair p = backends();
  for (Fp8Recipe recipe : {Fp8Recipe::kTensorwise, Fp8Recipe::kDelayed}) {
    SCOPED_TRACE(fp8_recipe_name(recipe));
    Fp8Config cfg;
    cfg.recipe = recipe;
    cfg.amax_history_len = 4;
    cfg.amax_compute_algo = Fp8AmaxAlgo::kMax;
    States st(p, cfg, kFp8Roles);
    const int64_t n = 128, in = 256, out = 192;
    Tensor x = host_random({n, in}, DType::kBF16, 21, 0.01f, 2.0f);
    Tensor w = host_random({out, in}, DType::kBF16, 22, 0.001f, 0.05f);
    Tensor dy = host_random({n, out}, DType::kBF16, 23, 1e-5f, 1e-3f);
    Tensor bias = host_random({out}, DType::kBF16, 24);
    for (int step = 0; step < 2; ++step) {  // the second step of delayed runs on updated scales
      const Fp8LinearScaling sc{st.cpu.quantization(0), st.cpu.quantization(1), st.cpu.quantization(2)};
      const Fp8LinearScaling sg{st.gpu.quantization(0), st.gpu.quantization(1), st.gpu.quantization(2)};
      Tensor y = Tensor::cpu({n, out}, DType::kBF16);
      fp8_linear_forward(*p.cpu, x, w, bias, y, sc);
      Tensor gx = to_device(*p.gpu, x), gw = to_device(*p.gpu, w), gdy = to_device(*p.gpu, dy);
      Tensor gy = p.gpu->empty({n, out}, DType::kBF16, MemoryKind::kOther);
      fp8_linear_forward(*p.gpu, gx, gw, to_device(*p.gpu, bias), gy, sg);
      // cuBLASLt's FP8 accumulation (see the top): normwise 2^-10, where a wrong scale or operand is O(1).
      EXPECT_LE(norm_rel_error(to_host(*p.gpu, gy), y), 0x1p-10) << "y";
      Tensor dx = Tensor::cpu({n, in}, DType::kBF16), dw = Tensor::cpu({out, in}), db = Tensor::cpu({out});
      Tensor gdx = p.gpu->empty({n, in}, DType::kBF16, MemoryKind::kOther);
      Tensor gdw = to_device(*p.gpu, dw), gdb = to_device(*p.gpu, db);
      fp8_linear_backward(*p.cpu, dy, x, w, dx, dw, db, sc, GradWrite::kAccumulate);
      fp8_linear_backward(*p.gpu, gdy, gx, gw, gdx, gdw, gdb, sg, GradWrite::kAccumulate);
      EXPECT_LE(norm_rel_error(to_host(*p.gpu, gdx), dx), 0x1p-10) << "dx";
      EXPECT_LE(norm_rel_error(to_host(*p.gpu, gdw), dw), 0x1p-10) << "dw";
      EXPECT_LE(norm_rel_error(to_host(*p.gpu, gdb), db), 1e-5) << "dbias";
      st.expect_equal(p);
      st.cpu.update();
      st.gpu.update();
      st.expect_equal(p);
    }
  }
}

}  // namespace
}  // namespace megatron::backend
