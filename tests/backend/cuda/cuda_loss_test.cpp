// CUDA backend cross-entropy (backend/cuda/cuda_loss.cu) against the CPU reference on the
// padded GPT vocabulary (V = 50304) and awkward sizes, in fp32, bf16 and fp16: lse and losses
// within the stated tolerances, dlogits in place, and bit-identical reruns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
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

// [rows, V]: 2048 rows of the padded GPT-2 vocabulary (a 2048-token micro-batch), V not a
// multiple of 4 (scalar path), and awkward sizes.
const std::vector<std::pair<int64_t, int64_t>> kLossShapes = {{1, 1},       {7, 7},     {129, 127},   {127, 129},
                                                              {1000, 1000}, {3, 50303}, {2048, 50304}};

Tensor random_labels(int64_t n, int64_t vocab, uint64_t seed) {
  Tensor t = Tensor::cpu({n}, DType::kI32);
  uint64_t state = seed;
  for (int64_t i = 0; i < n; ++i) {
    t.data_as<int32_t>()[i] = static_cast<int32_t>(splitmix64(state) % static_cast<uint64_t>(vocab));
  }
  return t;
}

TEST(CudaLoss, CrossEntropyForwardMatchesTheCpu) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  uint64_t seed = 17;
  for (const auto& [n, vocab] : kLossShapes) {
    for (DType dt : kFloatTypes) {
      const std::string what = shape_name({n, vocab}, dt);
      // Logits in +-[0.1, 8]: softmax probabilities spread over ~7 orders of magnitude.
      const Tensor logits = host_random({n, vocab}, dt, ++seed, 0.1f, 8.0f);
      const Tensor labels = random_labels(n, vocab, ++seed);
      Tensor want_loss = cpu->empty({n}, DType::kF32, MemoryKind::kOther);
      Tensor want_lse = cpu->empty({n}, DType::kF32, MemoryKind::kOther);
      cpu->cross_entropy_forward(logits, labels, want_loss, want_lse);
      Tensor ld = to_device(*gpu, logits), labd = to_device(*gpu, labels);
      Tensor lossd = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
      Tensor lsed = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
      gpu->cross_entropy_forward(ld, labd, lossd, lsed);
      const Tensor got_loss = to_host(*gpu, lossd), got_lse = to_host(*gpu, lsed);
      // lse = max + log(sum of exp(l - max)), lse ~ 8-19 here. The GPU sums in fp32 (the CPU in
      // double) with the hardware exp2 of (l - max) log2 e (cuda_loss.cu: relative error
      // ~1.2e-7 |l - max| + 2.4e-7 per term, the largest terms the most accurate): the sum is
      // within ~1e-6 relative, so log(sum) within ~1e-6 absolute; the final addition rounds to
      // an ulp of lse (~1e-6). Tolerance 1e-6 + 2e-6 |lse| (~4e-5 at 19, ~20 ulps). loss =
      // lse - logit[label] carries the same absolute error.
      for (int64_t r = 0; r < n; ++r) {
        const double scale = 1e-6 + 2e-6 * std::abs(get(want_lse, r));
        ASSERT_NEAR(get(got_lse, r), get(want_lse, r), scale) << "lse row " << r << " of " << what;
        ASSERT_NEAR(get(got_loss, r), get(want_loss, r), scale) << "loss row " << r << " of " << what;
      }
      Tensor loss2 = gpu->empty({n}, DType::kF32, MemoryKind::kOther),
             lse2 = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
      gpu->cross_entropy_forward(ld, labd, loss2, lse2);
      EXPECT_TRUE(bitwise(to_host(*gpu, loss2), got_loss, "cross_entropy loss rerun " + what));
      EXPECT_TRUE(bitwise(to_host(*gpu, lse2), got_lse, "cross_entropy lse rerun " + what));
    }
  }
}

TEST(CudaLoss, CrossEntropyBackwardMatchesTheCpuAndRunsInPlace) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  uint64_t seed = 170;
  for (const auto& [n, vocab] : kLossShapes) {
    for (DType dt : kFloatTypes) {
      const std::string what = shape_name({n, vocab}, dt);
      const Tensor logits = host_random({n, vocab}, dt, ++seed, 0.1f, 8.0f);
      const Tensor labels = random_labels(n, vocab, ++seed);
      const Tensor dlosses = host_random({n}, DType::kF32, ++seed);
      // The CPU's lse feeds both backwards, so only the backward is compared.
      Tensor loss = cpu->empty({n}, DType::kF32, MemoryKind::kOther),
             lse = cpu->empty({n}, DType::kF32, MemoryKind::kOther);
      cpu->cross_entropy_forward(logits, labels, loss, lse);
      Tensor want = cpu->empty({n, vocab}, dt, MemoryKind::kOther);
      cpu->cross_entropy_backward(logits, labels, lse, dlosses, want);
      Tensor ld = to_device(*gpu, logits), labd = to_device(*gpu, labels);
      Tensor lsed = to_device(*gpu, lse), dld = to_device(*gpu, dlosses);
      Tensor dd = gpu->empty({n, vocab}, dt, MemoryKind::kOther);
      gpu->cross_entropy_backward(ld, labd, lsed, dld, dd);
      const Tensor got = to_host(*gpu, dd);
      // p = exp(l - lse) from the same fp32 difference d: the GPU's 2^(d log2 e) is within
      // 1.2e-7 |d| + 2.4e-7 relative (the product's rounding, then ex2.approx's 2 ulp), glibc's
      // exp within 1 ulp, then one subtraction (label) and one multiply: <= 2e-6 relative for
      // |d| <= 13 (p >= 2e-6); below, p (1.2e-7 |d| + ...) < 1e-11 absolute here (|d| < 30).
      // So rtol 2e-6, atol 1e-11. 16-bit: 1 ulp of the CPU's rounded value.
      EXPECT_TRUE(close(got, want, 1e-11, 2e-6, 1, "cross_entropy dlogits " + what));
      // In place: dlogits aliasing logits gives the same bits.
      gpu->cross_entropy_backward(ld, labd, lsed, dld, ld);
      EXPECT_TRUE(bitwise(to_host(*gpu, ld), got, "cross_entropy dlogits in place " + what));
    }
  }
}

// The typed kernels read 16-byte vectors when every row is 16-byte aligned and the same chunks
// element by element otherwise, in the same order: logits viewed one element into their
// buffer give the aligned run's bits (forward and backward). dlogits of another dtype than
// the logits take the generic backward, within the tolerances above.
TEST(CudaLoss, CrossEntropyOnMisalignedViewsAndMixedDtypes) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  const int64_t n = 33, vocab = 50304;
  uint64_t seed = 700;
  for (DType dt : kFloatTypes) {
    const std::string what = shape_name({n, vocab}, dt);
    const Tensor logits = host_random({n, vocab}, dt, ++seed, 0.1f, 8.0f);
    const Tensor labels = random_labels(n, vocab, ++seed);
    const Tensor dlosses = host_random({n}, DType::kF32, ++seed);
    Tensor ld = to_device(*gpu, logits), labd = to_device(*gpu, labels), dld = to_device(*gpu, dlosses);
    Tensor loss = gpu->empty({n}, DType::kF32, MemoryKind::kOther),
           lse = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
    gpu->cross_entropy_forward(ld, labd, loss, lse);
    Tensor dd = gpu->empty({n, vocab}, dt, MemoryKind::kOther);
    gpu->cross_entropy_backward(ld, labd, lse, dld, dd);

    Tensor buf = gpu->empty({n * vocab + 1}, dt, MemoryKind::kOther);
    Tensor lv = buf.flat_view(1, {n, vocab});
    gpu->copy(logits, lv);
    Tensor loss2 = gpu->empty({n}, DType::kF32, MemoryKind::kOther),
           lse2 = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
    gpu->cross_entropy_forward(lv, labd, loss2, lse2);
    EXPECT_TRUE(bitwise(to_host(*gpu, loss2), to_host(*gpu, loss), "cross_entropy loss misaligned " + what));
    EXPECT_TRUE(bitwise(to_host(*gpu, lse2), to_host(*gpu, lse), "cross_entropy lse misaligned " + what));
    gpu->cross_entropy_backward(lv, labd, lse, dld, lv);  // in place on the misaligned view
    EXPECT_TRUE(bitwise(to_host(*gpu, lv), to_host(*gpu, dd), "cross_entropy dlogits misaligned " + what));

    // fp32 dlogits from 16-bit logits (and 16-bit from fp32): the generic backward, against the
    // CPU with CrossEntropyBackwardMatchesTheCpuAndRunsInPlace's tolerance.
    const DType other = dt == DType::kF32 ? DType::kBF16 : DType::kF32;
    Tensor cpu_loss = cpu->empty({n}, DType::kF32, MemoryKind::kOther),
           cpu_lse = cpu->empty({n}, DType::kF32, MemoryKind::kOther);
    cpu->cross_entropy_forward(logits, labels, cpu_loss, cpu_lse);
    Tensor want = cpu->empty({n, vocab}, other, MemoryKind::kOther);
    cpu->cross_entropy_backward(logits, labels, cpu_lse, dlosses, want);
    Tensor lsed = to_device(*gpu, cpu_lse);
    Tensor dother = gpu->empty({n, vocab}, other, MemoryKind::kOther);
    gpu->cross_entropy_backward(ld, labd, lsed, dld, dother);
    EXPECT_TRUE(close(to_host(*gpu, dother), want, 1e-11, 2e-6, 1,
                      "cross_entropy dlogits " + std::string(dtype_name(other)) + " from " + what));
  }
}

// cross_entropy_fused reads each chunk in the forward's order and applies the backward's
// arithmetic, so it must give the unfused CUDA pair's bits: losses, lse and dlogits, into a
// separate buffer and in place, on aligned and misaligned (element-wise) rows. Rows of up to
// 112 KB are staged in shared memory (16-bit V = 50304); longer rows (fp32 at 50304, 16-bit at
// 60000) take the re-reading variant. A label outside [0, V) gives a NaN loss and no one-hot
// term, as in the pair. dlogits of another dtype fall back to the pair itself.
TEST(CudaLoss, CrossEntropyFusedGivesThePairsBits) {
  MT_REQUIRE_CUDA();
  auto gpu = make_cuda_backend();
  std::vector<std::pair<int64_t, int64_t>> shapes = kLossShapes;
  shapes.push_back({9, 60000});
  uint64_t seed = 900;
  for (const auto& [n, vocab] : shapes) {
    for (DType dt : kFloatTypes) {
      const std::string what = shape_name({n, vocab}, dt);
      const Tensor logits = host_random({n, vocab}, dt, ++seed, 0.1f, 8.0f);
      Tensor labels = random_labels(n, vocab, ++seed);
      labels.data_as<int32_t>()[n - 1] = -1;  // another shard's id
      const Tensor dlosses = host_random({n}, DType::kF32, ++seed);
      Tensor ld = to_device(*gpu, logits), labd = to_device(*gpu, labels), dld = to_device(*gpu, dlosses);
      auto f32 = [&] { return gpu->empty({n}, DType::kF32, MemoryKind::kOther); };
      Tensor loss = f32(), lse = f32();
      gpu->cross_entropy_forward(ld, labd, loss, lse);
      Tensor dd = gpu->empty({n, vocab}, dt, MemoryKind::kOther);
      gpu->cross_entropy_backward(ld, labd, lse, dld, dd);
      const Tensor want_loss = to_host(*gpu, loss), want_lse = to_host(*gpu, lse), want_d = to_host(*gpu, dd);
      ASSERT_TRUE(std::isnan(get(want_loss, n - 1))) << what;

      Tensor floss = f32(), flse = f32();
      Tensor fd = gpu->empty({n, vocab}, dt, MemoryKind::kOther);
      gpu->cross_entropy_fused(ld, labd, dld, floss, flse, fd);
      EXPECT_TRUE(bitwise(to_host(*gpu, floss), want_loss, "fused loss " + what));
      EXPECT_TRUE(bitwise(to_host(*gpu, flse), want_lse, "fused lse " + what));
      EXPECT_TRUE(bitwise(to_host(*gpu, fd), want_d, "fused dlogits " + what));

      // In place on a view one element into its buffer (rows not 16-byte aligned).
      Tensor buf = gpu->empty({n * vocab + 1}, dt, MemoryKind::kOther);
      Tensor lv = buf.flat_view(1, {n, vocab});
      gpu->copy(ld, lv);
      Tensor mloss = f32(), mlse = f32();
      gpu->cross_entropy_fused(lv, labd, dld, mloss, mlse, lv);
      EXPECT_TRUE(bitwise(to_host(*gpu, mloss), want_loss, "fused loss misaligned " + what));
      EXPECT_TRUE(bitwise(to_host(*gpu, mlse), want_lse, "fused lse misaligned " + what));
      EXPECT_TRUE(bitwise(to_host(*gpu, lv), want_d, "fused dlogits in place, misaligned " + what));
      // In place, aligned.
      gpu->cross_entropy_fused(ld, labd, dld, floss, flse, ld);
      EXPECT_TRUE(bitwise(to_host(*gpu, ld), want_d, "fused dlogits in place " + what));
    }
  }
  // Another dtype for dlogits: the pair.
  const int64_t n = 5, vocab = 1000;
  const Tensor logits = host_random({n, vocab}, DType::kBF16, 4242, 0.1f, 8.0f);
  Tensor ld = to_device(*gpu, logits), labd = to_device(*gpu, random_labels(n, vocab, 4243));
  Tensor dld = to_device(*gpu, host_random({n}, DType::kF32, 4244));
  Tensor loss = gpu->empty({n}, DType::kF32, MemoryKind::kOther),
         lse = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
  gpu->cross_entropy_forward(ld, labd, loss, lse);
  Tensor want = gpu->empty({n, vocab}, DType::kF32, MemoryKind::kOther);
  gpu->cross_entropy_backward(ld, labd, lse, dld, want);
  Tensor got = gpu->empty({n, vocab}, DType::kF32, MemoryKind::kOther);
  gpu->cross_entropy_fused(ld, labd, dld, loss, lse, got);
  EXPECT_TRUE(bitwise(to_host(*gpu, got), to_host(*gpu, want), "fused fp32 dlogits from bf16"));
}

// The vocab-parallel cross-entropy's per-row steps (ops.h) give the CPU's bits: both compute
// in double from the same fp32 inputs and round once, and CUDA's double exp and log (within an
// ulp of double) differ from the host's only where a double lies within an ulp of an fp32
// rounding boundary (odds ~2^-28 per value). Row counts around the grid's sizes, -inf edges.
TEST(CudaLoss, VocabParallelStepsMatchTheCpuBitForBit) {
  MT_REQUIRE_CUDA();
  auto gpu = make_cuda_backend();
  auto cpu = make_cpu_backend();
  const float inf = std::numeric_limits<float>::infinity();
  uint64_t seed = 7100;
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{255}, int64_t{257}, int64_t{8195}}) {
    const std::string what = "n " + std::to_string(n);
    Tensor lse = host_random({n}, DType::kF32, ++seed, 0.1f, 12.0f);
    Tensor max_lse = host_random({n}, DType::kF32, ++seed, 0.1f, 2.0f);
    for (int64_t i = 0; i < n; ++i) {  // max_lse >= lse, as the all-reduced MAX is
      max_lse.data_as<float>()[i] = std::max(lse.data_as<float>()[i], 0.0f) + std::fabs(max_lse.data_as<float>()[i]);
    }
    Tensor losses = host_random({n}, DType::kF32, ++seed, 0.1f, 9.0f);
    Tensor labels = random_labels(n, 50304, ++seed);
    for (int64_t i = 0; i < n; i += 3) labels.data_as<int32_t>()[i] = -1;  // other ranks' ids
    lse.data_as<float>()[0] = -inf;  // a slice of -inf logits: 0, or 1 when the maximum is -inf too
    if (n > 1) {
      lse.data_as<float>()[1] = -inf;
      max_lse.data_as<float>()[1] = -inf;
      labels.data_as<int32_t>()[1] = -1;  // (an owned label there would make the loss -inf - -inf: NaN)
    }
    Tensor gm = to_device(*gpu, max_lse), gl = to_device(*gpu, lse), gloss = to_device(*gpu, losses);
    Tensor glab = to_device(*gpu, labels);
    cpu->vocab_parallel_ce_terms(max_lse, labels, lse, losses);
    gpu->vocab_parallel_ce_terms(gm, glab, gl, gloss);
    EXPECT_TRUE(bitwise(to_host(*gpu, gl), lse, "terms: exp " + what));
    EXPECT_TRUE(bitwise(to_host(*gpu, gloss), losses, "terms: target " + what));
    // Sums of a few ranks' terms, then the finish.
    for (int64_t i = 0; i < n; ++i) lse.data_as<float>()[i] += 1.5f;
    gl = to_device(*gpu, lse);
    cpu->vocab_parallel_ce_finish(max_lse, lse, losses);
    gpu->vocab_parallel_ce_finish(gm, gl, gloss);
    EXPECT_TRUE(bitwise(to_host(*gpu, gl), lse, "finish: lse " + what));
    EXPECT_TRUE(bitwise(to_host(*gpu, gloss), losses, "finish: losses " + what));
  }
  // A slice whose logits are all -inf has lse -inf on both backends (what the terms step takes).
  for (DType dt : kFloatTypes) {
    const int64_t vocab = 1000;
    Tensor slice = Tensor::cpu({2, vocab}, dt);
    for (int64_t i = 0; i < 2 * vocab; ++i) set(slice, i, i < vocab ? -inf : 0.001 * static_cast<double>(i % 7));
    Tensor labels = Tensor::cpu({2}, DType::kI32);
    labels.data_as<int32_t>()[0] = -1;
    labels.data_as<int32_t>()[1] = 3;
    Tensor cl = Tensor::cpu({2}, DType::kF32), clse = Tensor::cpu({2}, DType::kF32);
    cpu->cross_entropy_forward(slice, labels, cl, clse);
    Tensor gl2 = gpu->empty({2}, DType::kF32, MemoryKind::kOther),
           glse = gpu->empty({2}, DType::kF32, MemoryKind::kOther);
    gpu->cross_entropy_forward(to_device(*gpu, slice), to_device(*gpu, labels), gl2, glse);
    EXPECT_EQ(get(clse, 0), -inf) << dtype_name(dt);
    EXPECT_EQ(get(to_host(*gpu, glse), 0), -inf) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace megatron::backend
