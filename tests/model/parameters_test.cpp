// model/parameters: the counter-based initialisation. philox_normal is Box-Muller over the
// stream's uniforms 2i and 2i + 1 (core/rng.h's philox_uniform numbering) whichever way it
// evaluates them; initialize() writes those values, rounded to the model dtype, at every
// parameter's place, independent of how the set is laid out.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

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

    // Chunks of 7 elements (cutting parameters in the middle) give the same bytes.
    ParameterSet chunked;
    chunked.add("w", {3, 5}, Init::kNormal);
    chunked.add("b", {5}, Init::kZeros);
    chunked.add("g", {5}, Init::kOnes);
    chunked.add("o", {4, 3}, Init::kScaledNormal);
    chunked.allocate(*cpu, dt);
    chunked.initialize(*cpu, 99, std, layers, /*chunk=*/7);
    ASSERT_EQ(chunked.values().nbytes(), ps.values().nbytes());
    EXPECT_EQ(std::memcmp(chunked.values().data(), ps.values().data(), static_cast<size_t>(ps.values().nbytes())), 0)
        << dtype_name(dt);
  }
}

// A tensor-parallel shard takes its elements' global indices: rank 1 of 2 of a [4, 3]
// parameter split along dim 0 holds the single process's rows 2 and 3; fp16 rounds the same
// values.
TEST(Parameters, TensorParallelShardsHoldTheirGlobalElements) {
  auto cpu = backend::make_cpu_backend();
  ParameterSet whole, shard;
  whole.add("w", {4, 3}, Init::kNormal, 0);
  whole.allocate(*cpu, DType::kF16);
  whole.initialize(*cpu, 3, 1.0f, 2);
  shard.set_tensor_parallel(1, 2);
  shard.add("w", {4, 3}, Init::kNormal, 0);
  shard.allocate(*cpu, DType::kF16);
  shard.initialize(*cpu, 3, 1.0f, 2);
  ASSERT_EQ(shard[0].shape, (Shape{2, 3}));
  const uint16_t* a = whole.values().data_as<const uint16_t>();
  const uint16_t* b = shard.values().data_as<const uint16_t>();
  for (int64_t k = 0; k < 6; ++k) {
    EXPECT_EQ(b[k], a[6 + k]) << k;
    EXPECT_EQ(b[k], float_to_fp16(reference_normal(3, 0, static_cast<uint64_t>(6 + k)))) << k;
  }
}

}  // namespace
}  // namespace megatron::model
