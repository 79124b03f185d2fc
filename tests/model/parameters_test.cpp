// model/parameters: the counter-based initialisation. philox_normal is Box-Muller over the
// stream's uniforms 2i and 2i + 1 (core/rng.h's philox_uniform numbering) whichever way it
// evaluates them; initialize() writes those values, rounded to the model dtype, at every
// parameter's place, independent of how the set is laid out.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "backend/ops.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "model/parameters.h"

namespace megatron::model {
namespace {

float reference_normal(uint64_t seed, uint64_t stream, uint64_t i) {
  const float u1 = 1.0f - philox_uniform(seed, stream, 2 * i);
  const float u2 = philox_uniform(seed, stream, 2 * i + 1);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.283185307179586f * u2);
}

TEST(Parameters, PhiloxNormalIsBoxMullerOfTheStreamsUniforms) {
  for (uint64_t seed : {0ull, 1234ull, 0x123456789abcdefull}) {
    for (uint64_t stream : {0ull, 7ull, 1ull << 40}) {
      for (uint64_t i : {0ull, 1ull, 2ull, 3ull, 1000001ull, (1ull << 33) + 5}) {
        EXPECT_EQ(philox_normal(seed, stream, i), reference_normal(seed, stream, i))
            << "seed " << seed << " stream " << stream << " index " << i;
      }
    }
  }
}

TEST(Parameters, InitializeWritesEachParametersOwnStreamRoundedToTheModelDtype) {
  auto cpu = backend::make_cpu_backend();
  for (DType dt : {DType::kF32, DType::kBF16}) {
    ParameterSet ps;
    const int64_t w = ps.add("w", {3, 5}, Init::kNormal);
    const int64_t b = ps.add("b", {5}, Init::kZeros);
    const int64_t g = ps.add("g", {5}, Init::kOnes);
    const int64_t o = ps.add("o", {4, 3}, Init::kScaledNormal);
    ps.allocate(*cpu, dt);
    const float std = 0.02f;
    const int64_t layers = 8;
    ps.initialize(*cpu, 99, std, layers);
    auto value = [&](int64_t p, int64_t k) {
      const Tensor& t = ps[p].value;
      return dt == DType::kF32 ? t.data_as<const float>()[k] : bf16_to_float(t.data_as<const uint16_t>()[k]);
    };
    const float scaled = std / std::sqrt(2.0f * static_cast<float>(layers));
    for (int64_t k = 0; k < 15; ++k) {
      EXPECT_EQ(value(w, k), round_to(dt, std * reference_normal(99, static_cast<uint64_t>(ps[w].init_stream), k)));
    }
    for (int64_t k = 0; k < 12; ++k) {
      EXPECT_EQ(value(o, k), round_to(dt, scaled * reference_normal(99, static_cast<uint64_t>(ps[o].init_stream), k)));
    }
    for (int64_t k = 0; k < 5; ++k) {
      EXPECT_EQ(value(b, k), 0.0f);
      EXPECT_EQ(value(g, k), 1.0f);
    }
    EXPECT_NE(ps[w].init_stream, ps[o].init_stream);
  }
}

}  // namespace
}  // namespace megatron::model
