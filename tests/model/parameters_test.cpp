// model/parameters: the counter-based initialisation. initialize() writes std (or the scaled
// std) times philox_normal (core/rng.h, tested in tests/core/rng_test.cpp) of each element's
// global index in its parameter's own stream, rounded to the model dtype, on every backend.
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

// Megatron's default groups leave biases and 1-D parameters out of weight decay;
// apply_weight_decay_to_qk_layernorm puts the q/k layernorms' (weight and bias) back in and
// nothing else.
TEST(Parameters, WeightDecayGroupsWithAndWithoutTheQkLayernormRule) {
  ParameterSet ps;
  const int64_t qkv = ps.add("decoder.layers.0.self_attention.linear_qkv.weight", {6, 4}, Init::kNormal);
  const int64_t qkv_bias = ps.add("decoder.layers.0.self_attention.linear_qkv.bias", {6}, Init::kZeros);
  const int64_t qw = ps.add("decoder.layers.0.self_attention.q_layernorm.weight", {2}, Init::kOnes);
  const int64_t qb = ps.add("decoder.layers.0.self_attention.q_layernorm.bias", {2}, Init::kZeros);
  const int64_t kw = ps.add("decoder.layers.0.self_attention.k_layernorm.weight", {2}, Init::kOnes);
  const int64_t ln = ps.add("decoder.layers.0.input_layernorm.weight", {4}, Init::kOnes);
  EXPECT_FALSE(ps[qkv].no_weight_decay);
  for (int64_t p : {qkv_bias, qw, qb, kw, ln}) EXPECT_TRUE(ps[p].no_weight_decay) << ps[p].name;
  ps.apply_weight_decay_to_qk_layernorm();
  for (int64_t p : {qkv, qw, qb, kw}) EXPECT_FALSE(ps[p].no_weight_decay) << ps[p].name;
  for (int64_t p : {qkv_bias, ln}) EXPECT_TRUE(ps[p].no_weight_decay) << ps[p].name;
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
      EXPECT_EQ(value(w, k), round_to(dt, std * philox_normal(99, static_cast<uint64_t>(ps[w].init_stream), k)));
    }
    for (int64_t k = 0; k < 12; ++k) {
      EXPECT_EQ(value(o, k), round_to(dt, scaled * philox_normal(99, static_cast<uint64_t>(ps[o].init_stream), k)));
    }
    for (int64_t k = 0; k < 5; ++k) {
      EXPECT_EQ(value(b, k), 0.0f);
      EXPECT_EQ(value(g, k), 1.0f);
    }
    EXPECT_NE(ps[w].init_stream, ps[o].init_stream);
  }
}

// A set holding one parameter `global` (split along `dim`) as tensor-parallel rank `rank` of
// `size`, initialised with seed `seed`, std `std` and `layers` layers.
ParameterSet one_parameter(backend::Backend& be, const Shape& global, Init init, int dim, DType dt, int64_t rank,
                           int64_t size, uint64_t seed, float std, int64_t layers) {
  ParameterSet ps;
  ps.set_tensor_parallel(rank, size);
  ps.add("w", global, init, dim);
  ps.allocate(be, dt);
  ps.initialize(be, seed, std, layers);
  return ps;
}

// A tensor-parallel shard takes its elements' global indices: rank 1 of 2 of a [4, 3]
// parameter split along dim 0 holds the single process's rows 2 and 3; fp16 rounds the same
// values.
TEST(Parameters, TensorParallelShardsHoldTheirGlobalElements) {
  auto cpu = backend::make_cpu_backend();
  const ParameterSet whole = one_parameter(*cpu, {4, 3}, Init::kNormal, 0, DType::kF16, 0, 1, 3, 1.0f, 2);
  const ParameterSet shard = one_parameter(*cpu, {4, 3}, Init::kNormal, 0, DType::kF16, 1, 2, 3, 1.0f, 2);
  ASSERT_EQ(shard[0].shape, (Shape{2, 3}));
  const uint16_t* a = whole.values().data_as<const uint16_t>();
  const uint16_t* b = shard.values().data_as<const uint16_t>();
  for (int64_t k = 0; k < 6; ++k) {
    EXPECT_EQ(b[k], a[6 + k]) << k;
    EXPECT_EQ(b[k], float_to_fp16(philox_normal(3, 0, static_cast<uint64_t>(6 + k)))) << k;
  }
}

// A row-parallel weight [3, 4] split along dim 1 over 2 ranks: rank 1 holds columns 2 and 3
// of every row, i.e. global elements 2, 3, 6, 7, 10, 11.
TEST(Parameters, ColumnShardsHoldTheirGlobalElements) {
  auto cpu = backend::make_cpu_backend();
  const ParameterSet whole = one_parameter(*cpu, {3, 4}, Init::kScaledNormal, 1, DType::kF32, 0, 1, 8, 0.5f, 4);
  const ParameterSet shard = one_parameter(*cpu, {3, 4}, Init::kScaledNormal, 1, DType::kF32, 1, 2, 8, 0.5f, 4);
  ASSERT_EQ(shard[0].shape, (Shape{3, 2}));
  const float* a = whole.values().data_as<const float>();
  const float* b = shard.values().data_as<const float>();
  const int64_t global[] = {2, 3, 6, 7, 10, 11};
  for (int64_t k = 0; k < 6; ++k) EXPECT_EQ(b[k], a[global[k]]) << k;
}

}  // namespace
}  // namespace megatron::model
