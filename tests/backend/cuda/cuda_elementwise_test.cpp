// CUDA backend elementwise ops (backend/cuda/cuda_elementwise.cu) against the CPU reference:
// dropout masks bit-identical to the CPU's (core/rng.h Philox, flat element index), values
// within the stated tolerances, on GPT shapes and awkward sizes, in fp32, bf16 and fp16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace megatron::backend {
namespace {

using namespace megatron::test;

// ---- tests ------------------------------------------------------------------------------------

// Real shapes: [s*b, h] activations of GPT-345M/1.3B/2.7B, the MLP's [rows, 4h]; awkward
// sizes around the 4-element vector group (1, 7, 127, 129, 1000).
const std::vector<Shape> kDropoutShapes = {{1}, {7}, {127}, {129}, {1000}, {2048, 1024}, {8192, 768}, {2048, 2048}};

// Element i dropped on the CPU iff dropped on the GPU, checked through the zeros of dropout(x)
// (x has no zeros).
::testing::AssertionResult same_zeros(const Tensor& got, const Tensor& want, const std::string& what) {
  int64_t mismatches = 0, first = -1, zeros = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const bool zg = get(got, i) == 0.0, zw = get(want, i) == 0.0;
    zeros += zw;
    if (zg != zw) {
      if (first < 0) first = i;
      ++mismatches;
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": the dropout mask differs at " << mismatches << " of "
                                       << want.numel() << " elements (CPU drops " << zeros << "); first " << first;
}

TEST(CudaElementwise, DropoutForwardAndBackwardEqualTheCpuBitForBit) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  uint64_t seed = 11;
  for (const Shape& shape : kDropoutShapes) {
    for (DType dt : kFloatTypes) {
      // Seeds and streams above 2^32 check that both halves of the Philox key and counter
      // are used as on the CPU.
      for (const DropoutParams& dp : {DropoutParams{0.1f, 0x0123456789ABCDEFull, 0xFEDCBA9876543210ull},
                                      DropoutParams{0.5f, 1234, 7}, DropoutParams{0.0f, 1, 1}}) {
        const std::string what = "dropout p=" + std::to_string(dp.p) + " " + shape_name(shape, dt);
        const Tensor x = host_random(shape, dt, ++seed);
        Tensor want = cpu->empty(shape, dt, MemoryKind::kOther);
        cpu->dropout_forward(x, want, dp);
        Tensor xd = to_device(*gpu, x);
        Tensor outd = gpu->empty(shape, dt, MemoryKind::kOther);
        gpu->dropout_forward(xd, outd, dp);
        const Tensor got = to_host(*gpu, outd);
        EXPECT_TRUE(same_zeros(got, want, what));
        // One fp32 multiply by the same 1/(1-p), rounded RNE: no room for any difference.
        EXPECT_TRUE(bitwise(got, want, what));
        // backward is forward on dy: the same mask regenerated.
        Tensor dxd = gpu->empty(shape, dt, MemoryKind::kOther);
        gpu->dropout_backward(xd, dxd, dp);
        EXPECT_TRUE(bitwise(to_host(*gpu, dxd), want, what + " backward"));
        if (dp.p > 0.0f && x.numel() >= 1000000) {
          // The keep rate is 1 - p within 5 sigma (sigma = sqrt(p (1 - p) / n) < 5e-4).
          int64_t zeros = 0;
          for (int64_t i = 0; i < got.numel(); ++i) zeros += get(got, i) == 0.0;
          EXPECT_NEAR(static_cast<double>(zeros) / static_cast<double>(got.numel()), dp.p, 2.5e-3) << what;
        }
      }
    }
  }
}

// Sequence-parallel shards: a global element offset (a multiple of 4, one Philox block per 4
// elements; or not, two blocks) gives the CPU's mask at the same global indices, in the vector
// and the scalar kernels, for dropout and bias-dropout-add.
// scale (a 16-bit gradient buffer's 1/dp) equals the CPU bit for bit: one fp32 multiply and
// one RNE rounding, on values around every rounding case (uniform values in [-1, 1) at several
// scales: fp16 subnormals and overflow included), vector and scalar kernels (offset views).
TEST(CudaElementwise, ScaleEqualsTheCpuBitForBit) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  for (const Shape& shape : std::vector<Shape>{{1}, {7}, {1000}, {4096, 257}}) {
    for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
      for (float alpha : {1.0f, 0.5f, 1.0f / 3.0f, 1.0f / 8.0f}) {
        for (float magnitude : {1e-6f, 1.0f, 3e4f, 1e5f}) {
          Tensor x = host_random(shape, DType::kF32, 5, -1.0f, 1.0f);
          for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] *= magnitude;
          Tensor want = cpu->empty(shape, dt, MemoryKind::kOther);
          cpu->copy(x, want);
          for (int64_t skip : {int64_t{0}, int64_t{1}}) {  // 1: an unaligned view (scalar kernel)
            if (skip >= x.numel()) continue;
            Tensor w = want.flat_view(skip, {want.numel() - skip});
            Tensor xd = to_device(*gpu, w);
            cpu->scale(w, alpha);
            gpu->scale(xd, alpha);
            EXPECT_TRUE(bitwise(to_host(*gpu, xd), w,
                                "scale " + shape_name(shape, dt) + " alpha " + std::to_string(alpha) + " magnitude " +
                                    std::to_string(magnitude) + " skip " + std::to_string(skip)));
          }
        }
      }
    }
  }
}

TEST(CudaElementwise, DropoutWithAnOffsetEqualsTheCpu) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  uint64_t seed = 5;
  for (DType dt : kFloatTypes) {
    for (uint64_t offset : {uint64_t{0}, uint64_t{4096}, uint64_t{6}, uint64_t{1} << 33}) {
      for (const Shape& shape : {Shape{1000}, Shape{64, 96}}) {
        DropoutParams dp{0.3f, 77, 9};
        dp.offset = offset;
        const std::string what = "dropout offset " + std::to_string(offset) + " " + shape_name(shape, dt);
        const Tensor x = host_random(shape, dt, ++seed);
        Tensor want = cpu->empty(shape, dt, MemoryKind::kOther);
        cpu->dropout_forward(x, want, dp);
        Tensor xd = to_device(*gpu, x);
        Tensor outd = gpu->empty(shape, dt, MemoryKind::kOther);
        gpu->dropout_forward(xd, outd, dp);
        EXPECT_TRUE(bitwise(to_host(*gpu, outd), want, what));
        const Tensor res = host_random(shape, dt, ++seed);
        cpu->bias_dropout_add(x, Tensor(), res, want, dp);
        Tensor resd = to_device(*gpu, res);
        gpu->bias_dropout_add(xd, Tensor(), resd, outd, dp);
        EXPECT_TRUE(bitwise(to_host(*gpu, outd), want, what + " bias_dropout_add"));
      }
    }
  }
}

TEST(CudaElementwise, DropoutOnUnalignedViewsUsesTheScalarPathWithTheSameMask) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  const DropoutParams dp{0.25f, 99, 5};
  for (DType dt : kFloatTypes) {
    for (int64_t n : {1, 5, 1001, 65537}) {
      const std::string what = "dropout on views at element 1, " + shape_name({n}, dt);
      const Tensor x = host_random({n}, dt, static_cast<uint64_t>(n) * 3 + 1);
      Tensor want = cpu->empty({n}, dt, MemoryKind::kOther);
      cpu->dropout_forward(x, want, dp);
      // Views one element into their storage: not 8/16-byte aligned, so no vector access.
      Tensor xbuf = gpu->empty({n + 1}, dt, MemoryKind::kOther), obuf = gpu->empty({n + 1}, dt, MemoryKind::kOther);
      Tensor xd = xbuf.flat_view(1, {n}), outd = obuf.flat_view(1, {n});
      gpu->copy(x, xd);
      gpu->dropout_forward(xd, outd, dp);
      EXPECT_TRUE(bitwise(to_host(*gpu, outd), want, what));
    }
  }
}

TEST(CudaElementwise, BiasDropoutAddMatchesTheCpu) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  const std::vector<Shape> shapes = {{1, 1, 1},    {7, 1, 7},       {1, 1, 127},    {3, 43, 129},
                                     {1, 1, 1000}, {2048, 1, 1024}, {1024, 8, 768}, {2048, 1, 12288}};
  uint64_t seed = 101;
  for (const Shape& shape : shapes) {
    for (DType dt : kFloatTypes) {
      for (bool with_bias : {true, false}) {
        for (float p : {0.1f, 0.0f}) {
          if ((!with_bias || p == 0.0f) && shape_numel(shape) > 1000000) continue;  // big: one case
          const DropoutParams dp{p, 777, 42};
          const std::string what = std::string("bias_dropout_add p=") + std::to_string(p) +
                                   (with_bias ? " bias " : " no bias ") + shape_name(shape, dt);
          const Tensor x = host_random(shape, dt, ++seed), res = host_random(shape, dt, ++seed);
          const Tensor bias = with_bias ? host_random({shape.back()}, dt, ++seed) : Tensor();
          Tensor want = cpu->empty(shape, dt, MemoryKind::kOther);
          cpu->bias_dropout_add(x, bias, res, want, dp);
          Tensor xd = to_device(*gpu, x), resd = to_device(*gpu, res);
          Tensor biasd = with_bias ? to_device(*gpu, bias) : Tensor();
          Tensor outd = gpu->empty(shape, dt, MemoryKind::kOther);
          gpu->bias_dropout_add(xd, biasd, resd, outd, dp);
          const Tensor got = to_host(*gpu, outd);
          // The GPU does the CPU's three fp32 operations in its order without fused
          // multiply-adds, so fp32 results should agree bit for bit; 1e-6 (~8 ulps of values
          // <= 4) leaves room only for a CPU compiler that contracts r + v * scale into an FMA.
          // 16-bit: 1 ulp of the CPU's rounded value.
          EXPECT_TRUE(close(got, want, 1e-6, 1e-6, 1, what));
          if (dt == DType::kF32 && p > 0.0f) {
            // Mask: an element is dropped iff out == residual exactly (the same arithmetic).
            int64_t mismatches = 0;
            for (int64_t i = 0; i < x.numel(); ++i) {
              mismatches += (get(got, i) == get(res, i)) != (get(want, i) == get(res, i));
            }
            EXPECT_EQ(mismatches, 0) << what << ": dropped elements differ from the CPU's";
          }
          // Determinism.
          Tensor again = gpu->empty(shape, dt, MemoryKind::kOther);
          gpu->bias_dropout_add(xd, biasd, resd, again, dp);
          EXPECT_TRUE(bitwise(to_host(*gpu, again), got, what + " rerun"));
        }
      }
    }
  }
}

TEST(CudaElementwise, BiasDropoutAddInPlaceOnTheResidual) {
  MT_REQUIRE_CUDA();
  auto gpu = make_cuda_backend();
  const Shape shape = {129, 3, 1000};
  const DropoutParams dp{0.1f, 5, 6};
  for (DType dt : kFloatTypes) {
    const Tensor x = host_random(shape, dt, 1), res = host_random(shape, dt, 2), bias = host_random({1000}, dt, 3);
    Tensor xd = to_device(*gpu, x), resd = to_device(*gpu, res), biasd = to_device(*gpu, bias);
    Tensor outd = gpu->empty(shape, dt, MemoryKind::kOther);
    gpu->bias_dropout_add(xd, biasd, resd, outd, dp);
    gpu->bias_dropout_add(xd, biasd, resd, resd, dp);  // out aliases residual
    EXPECT_TRUE(
        bitwise(to_host(*gpu, resd), to_host(*gpu, outd), "in-place bias_dropout_add " + shape_name(shape, dt)));
  }
}

// The vector fast path needs every tensor (bias included) of one dtype and 16-byte aligned;
// a bias of another dtype, or views one element into their buffers, take the generic kernels.
// Both against the CPU with the tolerances above, and the dropout mask through out == residual.
TEST(CudaElementwise, MisalignedViewsAndMixedBiasDtypesMatchTheCpu) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  const DropoutParams dp{0.1f, 31, 4};
  const Shape shape = {37, 1024};
  const int64_t n = shape_numel(shape);
  uint64_t seed = 2001;
  for (DType dt : kFloatTypes) {
    for (DType bias_dt : kFloatTypes) {
      for (bool misaligned : {false, true}) {
        const std::string what = std::string(misaligned ? "views at element 1, " : "aligned, ") + "bias " +
                                 std::string(dtype_name(bias_dt)) + " " + shape_name(shape, dt);
        const Tensor x = host_random(shape, dt, ++seed, 0.1f, 3.0f), res = host_random(shape, dt, ++seed);
        const Tensor dy = host_random(shape, dt, ++seed), bias = host_random({shape.back()}, bias_dt, ++seed);
        Tensor want = cpu->empty(shape, dt, MemoryKind::kOther), want_g = cpu->empty(shape, dt, MemoryKind::kOther);
        Tensor want_dg = cpu->empty(shape, dt, MemoryKind::kOther);
        cpu->bias_dropout_add(x, bias, res, want, dp);
        cpu->bias_gelu_forward(x, bias, want_g, Gelu::kTanh);
        cpu->bias_gelu_backward(dy, x, bias, want_dg, Gelu::kTanh);
        const int64_t off = misaligned ? 1 : 0;
        auto view = [&](const Tensor* host) {
          Tensor buf = gpu->empty({n + 1}, dt, MemoryKind::kOther);
          Tensor v = buf.flat_view(off, shape);
          if (host) gpu->copy(*host, v);
          return v;
        };
        Tensor xd = view(&x), resd = view(&res), dyd = view(&dy), outd = view(nullptr), gd = view(nullptr),
               dgd = view(nullptr);
        Tensor biasd = to_device(*gpu, bias);
        gpu->bias_dropout_add(xd, biasd, resd, outd, dp);
        gpu->bias_gelu_forward(xd, biasd, gd, Gelu::kTanh);
        gpu->bias_gelu_backward(dyd, xd, biasd, dgd, Gelu::kTanh);
        EXPECT_TRUE(close(to_host(*gpu, outd), want, 1e-6, 1e-6, 1, "bias_dropout_add " + what));
        EXPECT_TRUE(close(to_host(*gpu, gd), want_g, 1e-6, 2e-6, 1, "bias_gelu_forward " + what));
        EXPECT_TRUE(close(to_host(*gpu, dgd), want_dg, 1e-6, 2e-6, 1, "bias_gelu_backward " + what));
        Tensor dropd = view(nullptr);
        Tensor want_drop = cpu->empty(shape, dt, MemoryKind::kOther);
        cpu->dropout_forward(x, want_drop, dp);
        gpu->dropout_forward(xd, dropd, dp);
        EXPECT_TRUE(bitwise(to_host(*gpu, dropd), want_drop, "dropout " + what));
      }
    }
  }
}

// [rows, f] shapes of the MLP (f = 4h for h = 768, 1024, 2048) and awkward ones.
const std::vector<Shape> kGeluShapes = {{1, 1},    {7, 7},       {127, 129},   {129, 127},
                                        {1000, 7}, {2048, 4096}, {8192, 3072}, {2048, 8192}};

TEST(CudaElementwise, BiasGeluForwardAndBackwardMatchTheCpu) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  uint64_t seed = 1001;
  for (const Shape& shape : kGeluShapes) {
    for (DType dt : kFloatTypes) {
      for (Gelu kind : {Gelu::kTanh, Gelu::kExact}) {
        for (bool with_bias : {true, false}) {
          if (!with_bias && shape_numel(shape) > 1000000) continue;  // the bias-free path on small shapes
          const std::string what = std::string(kind == Gelu::kTanh ? "tanh" : "erf") +
                                   (with_bias ? " bias " : " no bias ") + shape_name(shape, dt);
          // x + bias spans about +-4: the curved part of GELU and the tails where
          // 0.5 x (1 + tanh) cancels.
          const Tensor x = host_random(shape, dt, ++seed, 0.1f, 3.0f);
          const Tensor bias = with_bias ? host_random({shape.back()}, dt, ++seed) : Tensor();
          const Tensor dy = host_random(shape, dt, ++seed);
          Tensor want = cpu->empty(shape, dt, MemoryKind::kOther), want_dx = cpu->empty(shape, dt, MemoryKind::kOther);
          cpu->bias_gelu_forward(x, bias, want, kind);
          cpu->bias_gelu_backward(dy, x, bias, want_dx, kind);
          Tensor xd = to_device(*gpu, x), dyd = to_device(*gpu, dy);
          Tensor biasd = with_bias ? to_device(*gpu, bias) : Tensor();
          Tensor outd = gpu->empty(shape, dt, MemoryKind::kOther), dxd = gpu->empty(shape, dt, MemoryKind::kOther);
          gpu->bias_gelu_forward(xd, biasd, outd, kind);
          gpu->bias_gelu_backward(dyd, xd, biasd, dxd, kind);
          const Tensor got = to_host(*gpu, outd), got_dx = to_host(*gpu, dxd);
          // CUDA's tanhf/erff/expf are within 2 ulp of the exact value (CUDA C Programming
          // Guide, accuracy tables), glibc's within 1, and the compiler may fuse a multiply-add:
          // a few fp32 ulps of the O(1) terms 0.5 x (1 + t) and 0.5 (1 + t), amplified up to
          // ~5x where the two terms of gelu' cancel (x + bias in [-1, -0.5]). rtol 2e-6
          // (~16 ulps) covers that; atol 1e-6 covers the zero of gelu' (x ~ -0.75) and the
          // tails, where the result is small but the error is ulps of the O(1) terms.
          // 16-bit outputs: 1 ulp of the CPU's rounded value.
          EXPECT_TRUE(close(got, want, 1e-6, 2e-6, 1, "bias_gelu_forward " + what));
          EXPECT_TRUE(close(got_dx, want_dx, 1e-6, 2e-6, 1, "bias_gelu_backward " + what));
          Tensor again = gpu->empty(shape, dt, MemoryKind::kOther);
          gpu->bias_gelu_backward(dyd, xd, biasd, again, kind);
          EXPECT_TRUE(bitwise(to_host(*gpu, again), got_dx, "bias_gelu_backward rerun " + what));
        }
      }
    }
  }
}

TEST(CudaElementwise, BiasGeluBackwardInPlaceOnDy) {
  MT_REQUIRE_CUDA();
  auto gpu = make_cuda_backend();
  const Shape shape = {127, 4 * 129};
  for (DType dt : kFloatTypes) {
    const Tensor x = host_random(shape, dt, 4, 0.1f, 3.0f), dy = host_random(shape, dt, 5);
    const Tensor bias = host_random({shape.back()}, dt, 6);
    Tensor xd = to_device(*gpu, x), dyd = to_device(*gpu, dy), biasd = to_device(*gpu, bias);
    Tensor dxd = gpu->empty(shape, dt, MemoryKind::kOther);
    gpu->bias_gelu_backward(dyd, xd, biasd, dxd, Gelu::kTanh);
    gpu->bias_gelu_backward(dyd, xd, biasd, dyd, Gelu::kTanh);  // dx aliases dy
    EXPECT_TRUE(
        bitwise(to_host(*gpu, dyd), to_host(*gpu, dxd), "in-place bias_gelu_backward " + shape_name(shape, dt)));
  }
}

}  // namespace
}  // namespace megatron::backend
