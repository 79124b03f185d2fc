// Helpers shared by the CPU backend tests: random tensors, double copies, finite differences.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/dtype.h"
#include "core/fp8.h"
#include "core/tensor.h"

namespace megatron::test {

// GELU in double, the references for the ops that compute it: Megatron's tanh approximation
// and the exact erf form.
inline double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
inline double gelu_erf_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

// A fresh generator per test, seeded from the test's name so that every test draws
// different numbers but reruns are reproducible.
inline std::mt19937_64 test_rng() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = std::string(info->test_suite_name()) + "." + info->name();
  return std::mt19937_64(std::hash<std::string>{}(name));
}

// Values uniform in +-[lo, hi] (random sign): never zero, so no term of a check can vanish.
inline float random_value(std::mt19937_64& rng, float lo = 0.1f, float hi = 1.0f) {
  std::uniform_real_distribution<float> mag(lo, hi);
  const float m = mag(rng);
  return (rng() & 1) ? m : -m;
}

inline double get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32:
      return t.data_as<const float>()[i];
    case DType::kBF16:
      return bf16_to_float(t.data_as<const uint16_t>()[i]);
    case DType::kF16:
      return fp16_to_float(t.data_as<const uint16_t>()[i]);
    case DType::kI32:
      return t.data_as<const int32_t>()[i];
    case DType::kI64:
      return static_cast<double>(t.data_as<const int64_t>()[i]);
    case DType::kF8E4M3:
      return fp8_to_float(t.data_as<const uint8_t>()[i], Fp8Format::kE4M3);
    case DType::kF8E5M2:
      return fp8_to_float(t.data_as<const uint8_t>()[i], Fp8Format::kE5M2);
  }
  return 0.0;
}

inline void set(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kF32:
      t.data_as<float>()[i] = static_cast<float>(v);
      break;
    case DType::kBF16:
      t.data_as<uint16_t>()[i] = float_to_bf16(static_cast<float>(v));
      break;
    case DType::kF16:
      t.data_as<uint16_t>()[i] = float_to_fp16(static_cast<float>(v));
      break;
    case DType::kI32:
      t.data_as<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    case DType::kI64:
      t.data_as<int64_t>()[i] = static_cast<int64_t>(v);
      break;
    case DType::kF8E4M3:
      t.data_as<uint8_t>()[i] = float_to_fp8(static_cast<float>(v), Fp8Format::kE4M3);
      break;
    case DType::kF8E5M2:
      t.data_as<uint8_t>()[i] = float_to_fp8(static_cast<float>(v), Fp8Format::kE5M2);
      break;
  }
}

inline std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = get(t, i);
  return v;
}

inline Tensor random_tensor(Shape shape, std::mt19937_64& rng, DType dtype = DType::kF32, float lo = 0.1f,
                            float hi = 1.0f) {
  Tensor t = Tensor::cpu(std::move(shape), dtype);
  for (int64_t i = 0; i < t.numel(); ++i) set(t, i, random_value(rng, lo, hi));
  return t;
}

inline Tensor tensor_from(const std::vector<double>& v, Shape shape, DType dtype = DType::kF32) {
  Tensor t = Tensor::cpu(std::move(shape), dtype);
  EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) set(t, i, v[static_cast<size_t>(i)]);
  return t;
}

inline Tensor clone(const Tensor& t) {
  Tensor c = Tensor::cpu(t.shape(), t.dtype());
  std::memcpy(c.data(), t.data(), static_cast<size_t>(t.nbytes()));
  return c;
}

// An fp32 copy of t (exact for 16-bit t).
inline Tensor to_f32(const Tensor& t) { return tensor_from(values(t), t.shape(), DType::kF32); }

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.nbytes())) == 0;
}

// |actual - expected| <= atol + rtol |expected| elementwise; reports the first few misses.
inline void expect_close(const std::vector<double>& actual, const std::vector<double>& expected, double atol,
                         double rtol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::abs(actual[i] - expected[i]);
    if (!(err <= atol + rtol * std::abs(expected[i]))) {
      if (++misses <= 5) {
        ADD_FAILURE() << what << "[" << i << "]: got " << actual[i] << ", expected " << expected[i] << " (error " << err
                      << ")";
      }
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << actual.size() << " elements out of tolerance";
}
inline void expect_close(const Tensor& actual, const std::vector<double>& expected, double atol, double rtol,
                         const std::string& what) {
  expect_close(values(actual), expected, atol, rtol, what);
}

// Sum of out * r in double: the scalar objective whose gradient the backward ops compute
// when given dy = r.
inline double dot(const Tensor& out, const Tensor& r) {
  double s = 0.0;
  for (int64_t i = 0; i < out.numel(); ++i) s += get(out, i) * get(r, i);
  return s;
}

// Central finite differences of objective() with respect to every element of the fp32
// tensor `input` (perturbed in place and restored): (L(x + h) - L(x - h)) / 2h.
inline std::vector<double> finite_difference(Tensor& input, double h, const std::function<double()>& objective) {
  EXPECT_EQ(input.dtype(), DType::kF32);
  float* p = input.data_as<float>();
  std::vector<double> g(static_cast<size_t>(input.numel()));
  for (int64_t i = 0; i < input.numel(); ++i) {
    const float x0 = p[i];
    p[i] = static_cast<float>(x0 + h);
    const double up = objective();
    const double dx_up = static_cast<double>(p[i]) - x0;  // the step actually taken in fp32
    p[i] = static_cast<float>(x0 - h);
    const double down = objective();
    const double dx_down = x0 - static_cast<double>(p[i]);
    p[i] = x0;
    g[static_cast<size_t>(i)] = (up - down) / (dx_up + dx_down);
  }
  return g;
}

inline std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

}  // namespace megatron::test
