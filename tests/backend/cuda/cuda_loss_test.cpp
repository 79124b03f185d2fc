// CUDA backend cross-entropy (backend/cuda/cuda_loss.cu) against the CPU reference on the
// padded GPT vocabulary (V = 50304) and awkward sizes, in fp32, bf16 and fp16: lse and losses
// within the stated tolerances, dlogits in place, and bit-identical reruns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace megatron::backend {
namespace {

using namespace megatron::test;

// ---- CPU-vs-CUDA harness (the same block heads each tests/backend/cuda/*_test.cpp) ----------

#define MT_REQUIRE_CUDA()                                                         \
  if (!built_with_cuda() || cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

constexpr DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// splitmix64: fast enough to fill 10^8 elements, reproducible from the seed.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A host tensor of values uniform in +-[lo, hi] (random sign, never zero), rounded to dtype.
Tensor host_random(Shape shape, DType dtype, uint64_t seed, float lo = 0.1f, float hi = 1.0f) {
  Tensor t = Tensor::cpu(std::move(shape), dtype);
  uint64_t state = seed;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const uint64_t r = splitmix64(state);
    const float mag = lo + (hi - lo) * static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
    set(t, i, (r & 1) ? mag : -mag);
  }
  return t;
}

Tensor to_device(Backend& gpu, const Tensor& host) {
  Tensor d = gpu.empty(host.shape(), host.dtype(), MemoryKind::kOther);
  gpu.copy(host, d);
  return d;
}

Tensor to_host(Backend& gpu, const Tensor& device) {
  Tensor h = Tensor::cpu(device.shape(), device.dtype());
  gpu.copy(device, h);
  gpu.synchronize();
  return h;
}

// Position of a 16-bit float's bits on the number line (+0 and -0 both 0), so that adjacent
// representable values differ by 1.
int32_t ordered16(uint16_t bits) {
  const int32_t mag = bits & 0x7FFF;
  return (bits & 0x8000) ? -mag : mag;
}

// got (the GPU's result, on the host) against want (the CPU's) elementwise: passes where
// |got - want| <= atol + rtol |want|, or, for 16-bit tensors, where got is within max_ulps
// representable values of want (the CPU's rounded result). Reports the misses, the worst
// element and the shape.
::testing::AssertionResult close(const Tensor& got, const Tensor& want, double atol, double rtol, int max_ulps,
                                 const std::string& what) {
  if (got.dtype() != want.dtype() || got.numel() != want.numel()) {
    return ::testing::AssertionFailure() << what << ": got " << got.describe() << ", want " << want.describe();
  }
  const bool is16 = got.dtype() == DType::kBF16 || got.dtype() == DType::kF16;
  int64_t misses = 0, worst = -1;
  double worst_excess = 0.0, max_err = 0.0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = get(got, i), w = get(want, i);
    const double err = std::abs(g - w), tol = atol + rtol * std::abs(w);
    if (err > max_err || std::isnan(err)) max_err = err;
    bool ok = err <= tol;
    if (!ok && is16) {
      const int32_t d = ordered16(got.data_as<const uint16_t>()[i]) - ordered16(want.data_as<const uint16_t>()[i]);
      ok = std::abs(d) <= max_ulps;
    }
    if (!ok) {
      ++misses;
      const double excess = std::isnan(err) ? INFINITY : err / (tol > 0 ? tol : 1e-300);
      if (worst < 0 || excess > worst_excess) {
        worst = i;
        worst_excess = excess;
      }
    }
  }
  if (misses == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " " << want.describe() << ": " << misses << " of " << got.numel()
                                       << " elements out of tolerance (atol " << atol << ", rtol " << rtol
                                       << (is16 ? ", or " + std::to_string(max_ulps) + " ulp" : std::string())
                                       << "); max error " << max_err << "; worst element " << worst << ": got "
                                       << get(got, worst) << ", want " << get(want, worst);
}

// Bit-for-bit equality, reporting the first differing element and the largest difference.
::testing::AssertionResult bitwise(const Tensor& got, const Tensor& want, const std::string& what) {
  if (got.dtype() != want.dtype() || got.numel() != want.numel()) {
    return ::testing::AssertionFailure() << what << ": got " << got.describe() << ", want " << want.describe();
  }
  const int64_t es = dtype_size(got.dtype());
  const auto* a = static_cast<const unsigned char*>(got.data());
  const auto* b = static_cast<const unsigned char*>(want.data());
  int64_t first = -1, count = 0;
  double max_err = 0.0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (std::memcmp(a + i * es, b + i * es, static_cast<size_t>(es)) != 0) {
      if (first < 0) first = i;
      ++count;
      if (is_float(got.dtype())) max_err = std::max(max_err, std::abs(get(got, i) - get(want, i)));
    }
  }
  if (count == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " " << want.describe() << ": " << count << " of " << got.numel()
                                       << " elements differ in their bits; first " << first << ": got "
                                       << get(got, first) << ", want " << get(want, first)
                                       << "; max difference " << max_err;
}

std::string shape_name(const Shape& shape, DType dtype) {
  return std::string(dtype_name(dtype)) + shape_string(shape);
}

// ---- tests ------------------------------------------------------------------------------------

// [rows, V]: 2048 rows of the padded GPT-2 vocabulary (a 2048-token micro-batch), V not a
// multiple of 4 (scalar path), and awkward sizes.
const std::vector<std::pair<int64_t, int64_t>> kLossShapes = {
    {1, 1}, {7, 7}, {129, 127}, {127, 129}, {1000, 1000}, {3, 50303}, {2048, 50304}};

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
      // double) with CUDA's expf (2 ulp) and rescales partial sums when a thread's max grows:
      // the sum is within ~1e-6 relative, so log(sum) within ~1e-6 absolute; the final
      // addition rounds to an ulp of lse (~1e-6). Tolerance 1e-6 + 2e-6 |lse| (~4e-5 at 19,
      // ~20 ulps). loss = lse - logit[label] carries the same absolute error.
      for (int64_t r = 0; r < n; ++r) {
        const double scale = 1e-6 + 2e-6 * std::abs(get(want_lse, r));
        ASSERT_NEAR(get(got_lse, r), get(want_lse, r), scale) << "lse row " << r << " of " << what;
        ASSERT_NEAR(get(got_loss, r), get(want_loss, r), scale) << "loss row " << r << " of " << what;
      }
      Tensor loss2 = gpu->empty({n}, DType::kF32, MemoryKind::kOther), lse2 = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
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
      Tensor loss = cpu->empty({n}, DType::kF32, MemoryKind::kOther), lse = cpu->empty({n}, DType::kF32, MemoryKind::kOther);
      cpu->cross_entropy_forward(logits, labels, loss, lse);
      Tensor want = cpu->empty({n, vocab}, dt, MemoryKind::kOther);
      cpu->cross_entropy_backward(logits, labels, lse, dlosses, want);
      Tensor ld = to_device(*gpu, logits), labd = to_device(*gpu, labels);
      Tensor lsed = to_device(*gpu, lse), dld = to_device(*gpu, dlosses);
      Tensor dd = gpu->empty({n, vocab}, dt, MemoryKind::kOther);
      gpu->cross_entropy_backward(ld, labd, lsed, dld, dd);
      const Tensor got = to_host(*gpu, dd);
      // exp(l - lse) from the same fp32 difference: CUDA's expf is within 2 ulp, glibc's
      // within 1, then one subtraction (label) and one multiply: <= ~4 ulps relative, 1e-6
      // (8 ulps) allowed; atol 1e-12 only for probabilities near fp32's underflow.
      // 16-bit: 1 ulp of the CPU's rounded value.
      EXPECT_TRUE(close(got, want, 1e-12, 1e-6, 1, "cross_entropy dlogits " + what));
      // In place: dlogits aliasing logits gives the same bits.
      gpu->cross_entropy_backward(ld, labd, lsed, dld, ld);
      EXPECT_TRUE(bitwise(to_host(*gpu, ld), got, "cross_entropy dlogits in place " + what));
    }
  }
}

}  // namespace
}  // namespace megatron::backend
