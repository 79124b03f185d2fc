// The CPU-vs-CUDA test harness shared by tests/backend/cuda/*_test.cpp: skip without a GPU,
// reproducible random host tensors, host <-> device copies, and elementwise / bitwise
// comparisons that report the worst element. Built on tests/backend/cpu/cpu_test_util.h.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "backend/cpu/cpu_test_util.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "core/dtype.h"
#include "core/tensor.h"

#define MT_REQUIRE_CUDA() \
  if (!built_with_cuda() || cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

namespace megatron::backend {

constexpr DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// splitmix64: fast enough to fill 10^8 elements, reproducible from the seed.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A host tensor of values uniform in +-[lo, hi] (random sign, never zero), rounded to dtype.
inline Tensor host_random(Shape shape, DType dtype, uint64_t seed, float lo = 0.1f, float hi = 1.0f) {
  Tensor t = Tensor::cpu(std::move(shape), dtype);
  uint64_t state = seed;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const uint64_t r = splitmix64(state);
    const float mag = lo + (hi - lo) * static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
    test::set(t, i, (r & 1) ? mag : -mag);
  }
  return t;
}

inline Tensor to_device(Backend& gpu, const Tensor& host) {
  Tensor d = gpu.empty(host.shape(), host.dtype(), MemoryKind::kOther);
  gpu.copy(host, d);
  return d;
}

// An fp32 device tensor filled with v (NaN shows any read of a gradient that must be overwritten).
inline Tensor device_filled(Backend& gpu, Shape shape, float v) {
  Tensor t = gpu.empty(std::move(shape), DType::kF32, MemoryKind::kOther);
  gpu.fill(t, v);
  return t;
}

inline Tensor to_host(Backend& gpu, const Tensor& device) {
  Tensor h = Tensor::cpu(device.shape(), device.dtype());
  gpu.copy(device, h);
  gpu.synchronize();
  return h;
}

// Position of a 16-bit float's bits on the number line (+0 and -0 both 0), so that adjacent
// representable values differ by 1.
inline int32_t ordered16(uint16_t bits) {
  const int32_t mag = bits & 0x7FFF;
  return (bits & 0x8000) ? -mag : mag;
}

// got (the GPU's result, on the host) against want (the CPU's) elementwise: passes where
// |got - want| <= atol + rtol |want|, or, for 16-bit tensors, where got is within max_ulps
// representable values of want (the CPU's rounded result). Reports the misses, the worst
// element and the shape.
inline ::testing::AssertionResult close(const Tensor& got, const Tensor& want, double atol, double rtol, int max_ulps,
                                        const std::string& what) {
  if (got.dtype() != want.dtype() || got.numel() != want.numel()) {
    return ::testing::AssertionFailure() << what << ": got " << got.describe() << ", want " << want.describe();
  }
  const bool is16 = got.dtype() == DType::kBF16 || got.dtype() == DType::kF16;
  int64_t misses = 0, worst = -1;
  double worst_excess = 0.0, max_err = 0.0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = test::get(got, i), w = test::get(want, i);
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
                                       << test::get(got, worst) << ", want " << test::get(want, worst);
}

// Bit-for-bit equality, reporting the first differing element and the largest difference.
inline ::testing::AssertionResult bitwise(const Tensor& got, const Tensor& want, const std::string& what) {
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
      if (is_float(got.dtype())) max_err = std::max(max_err, std::abs(test::get(got, i) - test::get(want, i)));
    }
  }
  if (count == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " " << want.describe() << ": " << count << " of " << got.numel()
                                       << " elements differ in their bits; first " << first << ": got "
                                       << test::get(got, first) << ", want " << test::get(want, first)
                                       << "; max difference " << max_err;
}

inline std::string shape_name(const Shape& shape, DType dtype) {
  return std::string(dtype_name(dtype)) + shape_string(shape);
}

// Documents packed into each batch row (--reset-attention-mask): host int32 key_start [b, s]
// (AttentionParams::key_start). Lengths cycle through one-token documents, documents inside a
// 64-row tile, across tile boundaries and longer than two tiles, starting at another point for
// each row.
inline Tensor document_key_starts(int64_t b, int64_t s) {
  const int64_t lengths[] = {1, 37, 64, 5, 130, 2, 90, 1, 1, 63, 200, 17};
  Tensor t = Tensor::cpu({b, s}, DType::kI32);
  for (int64_t bi = 0; bi < b; ++bi) {
    int64_t start = 0, next = 3 * bi;
    for (int64_t i = 0; i < s; ++i) {
      if (i == start + lengths[next % 12]) {
        start = i;
        ++next;
      }
      t.data_as<int32_t>()[bi * s + i] = static_cast<int32_t>(start);
    }
  }
  return t;
}

}  // namespace megatron::backend
