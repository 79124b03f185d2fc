// MixedPrecisionOptimizer's parameter groups: --decoupled-lr gives the parameters marked
// embedding_or_output (Megatron's is_embedding_or_output_parameter) their own learning rate and
// leaves everything else as it is. Checked against a hand-written AdamW step in double (the
// first step of Adam with bias correction moves each element by lr * g / (|g| + eps), plus the
// decoupled decay lr * wd * p for decayed parameters), replicated and sharded, and bit for bit
// against the one-group optimizer when the two rates are equal.
#include "parallel/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <tuple>
#include <vector>

#include "core/dtype.h"

namespace megatron::parallel {
namespace {

// A tiny GPT-shaped set: word embedding, position embedding, a layer, the untied output layer.
model::ParameterSet make_params(backend::Backend& backend, DType dtype) {
  model::ParameterSet ps;
  ps.add("embedding.word_embeddings.weight", {6, 2}, model::Init::kNormal);        // [0, 12)
  ps.add("embedding.position_embeddings.weight", {4, 2}, model::Init::kNormal);    // [12, 20)
  ps.add("decoder.layers.0.mlp.linear_fc1.weight", {3, 2}, model::Init::kNormal);  // [20, 26)
  ps.add("decoder.layers.0.mlp.linear_fc1.bias", {3}, model::Init::kZeros);        // [26, 29)
  ps.add("output_layer.weight", {6, 2}, model::Init::kNormal);                     // [29, 41)
  ps[0].embedding_or_output = true;
  ps[4].embedding_or_output = true;
  ps[3].no_weight_decay = true;
  ps.allocate(backend, dtype);
  ps.initialize(backend, 5, 0.5f, 1);
  return ps;
}

void fill_grads(model::ParameterSet& ps) {
  float* g = ps.grads().data_as<float>();
  for (int64_t i = 0; i < ps.total_numel(); ++i) g[i] = 0.013f * static_cast<float>((i * 5) % 9) - 0.05f;
}

std::vector<float> main_values(const model::ParameterSet& ps) {
  const float* v = ps.values().data_as<float>();
  return std::vector<float>(v, v + ps.total_numel());
}

// One step of each optimizer (fp32 model: the values are the main parameters).
struct StepRun {
  std::vector<float> before, after;
};

StepRun run_step(bool decoupled, bool distributed, float lr, std::optional<float> decoupled_lr, float wd) {
  auto backend = backend::make_cpu_backend();
  model::ParameterSet ps = make_params(*backend, DType::kF32);
  OptimizerConfig oc;
  oc.clip_grad = 0.0;
  oc.decoupled_lr = decoupled;
  // One rank; buckets of 5: with the distributed optimizer parameters split across shards, so each group's table covers
  // fragments.
  MixedPrecisionOptimizer opt(ps, *backend, oc, optim::GradScaler::constant(1.0f), {nullptr, distributed, 5});
  StepRun r;
  r.before = main_values(ps);
  fill_grads(ps);
  opt.reduce_gradients();
  opt.step(lr, wd, decoupled_lr);
  r.after = main_values(ps);
  return r;
}

TEST(MixedPrecisionOptimizer, DecoupledLrUpdatesTheEmbeddingAndOutputLayerAtTheirOwnRate) {
  const float lr = 0.01f, dlr = 0.25f, wd = 0.1f;
  auto backend = backend::make_cpu_backend();
  model::ParameterSet ref = make_params(*backend, DType::kF32);
  fill_grads(ref);
  const float* g = ref.grads().data_as<float>();
  for (bool distributed : {false, true}) {
    const StepRun r = run_step(/*decoupled=*/true, distributed, lr, dlr, wd);
    for (const model::Parameter& p : ref.params()) {
      const double rate = p.embedding_or_output ? dlr : lr;
      const double decay = p.no_weight_decay ? 0.0 : wd;
      for (int64_t i = p.offset; i < p.offset + p.numel(); ++i) {
        const auto k = static_cast<size_t>(i);
        const double gi = g[i], pi = r.before[k];
        const double expected = pi - rate * (gi / (std::fabs(gi) + 1e-8) + decay * pi);
        EXPECT_NEAR(r.after[k], expected, 1e-6 * std::fabs(pi) + 1e-7)
            << p.name << " element " << i - p.offset << (distributed ? " (distributed)" : "");
      }
    }
  }
}

TEST(MixedPrecisionOptimizer, DecoupledLrEqualToLrIsTheOneGroupStepBitForBit) {
  for (bool distributed : {false, true}) {
    const StepRun one = run_step(/*decoupled=*/false, distributed, 0.01f, std::nullopt, 0.1f);
    const StepRun two = run_step(/*decoupled=*/true, distributed, 0.01f, 0.01f, 0.1f);
    ASSERT_EQ(one.after.size(), two.after.size());
    EXPECT_EQ(std::memcmp(one.after.data(), two.after.data(), 4 * one.after.size()), 0);
    // And a different rate moves exactly the embedding and output elements away from it.
    const StepRun other = run_step(/*decoupled=*/true, distributed, 0.01f, 0.02f, 0.1f);
    for (size_t i = 0; i < one.after.size(); ++i) {
      const bool marked = i < 12 || i >= 29;
      EXPECT_EQ(one.after[i] != other.after[i], marked) << "element " << i;
    }
  }
}

TEST(MixedPrecisionOptimizer, Bf16ModelCopyOfEachGroupIsWritten) {
  auto backend = backend::make_cpu_backend();
  model::ParameterSet ps = make_params(*backend, DType::kBF16);
  OptimizerConfig oc;
  oc.clip_grad = 0.0;
  oc.decoupled_lr = true;
  MixedPrecisionOptimizer opt(ps, *backend, oc, optim::GradScaler::constant(1.0f), {nullptr, false, 0});
  std::vector<uint16_t> before(static_cast<size_t>(ps.total_numel()));
  std::memcpy(before.data(), ps.values().data(), 2 * before.size());
  fill_grads(ps);
  opt.reduce_gradients();
  opt.step(0.01f, 0.0f, 0.5f);
  const auto* after = static_cast<const uint16_t*>(ps.values().data());
  for (const model::Parameter& p : ps.params()) {
    int64_t changed = 0;
    for (int64_t i = p.offset; i < p.offset + p.numel(); ++i) changed += after[i] != before[static_cast<size_t>(i)];
    EXPECT_GT(changed, 0) << p.name;
  }
}

// A 16-bit gradient buffer (--fp16 without --accumulate-allreduce-grads-in-fp32) read in place:
// the same steps as an fp32 buffer holding the same (fp16) values, unscaled in place - what
// Megatron does with its fp32 copies of the 16-bit main_grad. With a power-of-two loss scale
// every product is exact, so parameters, moments, norm and zero count are the same bits; with
// another scale AdamW still reads the same rounded quotients (the same parameters), the norm is
// that of the exact quotients (parallel/optimizer.h: within 1e-7 relative). An inf skips both.
TEST(MixedPrecisionOptimizer, SixteenBitGradientsStepAsTheirFp32Copies) {
  auto backend = backend::make_cpu_backend();
  for (float scale : {1024.0f, 1000.0f}) {
    for (bool distributed : {false, true}) {
      SCOPED_TRACE(testing::Message() << "loss scale " << scale << " distributed " << distributed);
      OptimizerConfig oc;
      oc.clip_grad = 0.05;  // clips: the factor applies after the unscale
      oc.count_zeros = true;
      auto grads = [&](int64_t i) { return scale * (0.013f * static_cast<float>((i * 5) % 9) - 0.05f); };
      auto run = [&](DType grad_dtype, bool with_inf) {
        model::ParameterSet ps;
        ps.add("embedding.word_embeddings.weight", {6, 2}, model::Init::kNormal);
        ps.add("decoder.layers.0.mlp.linear_fc1.bias", {3}, model::Init::kZeros);
        ps.add("output_layer.weight", {6, 2}, model::Init::kNormal);
        ps[1].no_weight_decay = true;
        ps.allocate(*backend, DType::kF16, grad_dtype);
        ps.initialize(*backend, 5, 0.5f, 1);
        DataParallelOptions dp{nullptr, distributed, 5};
        dp.grad_dtype = grad_dtype;
        MixedPrecisionOptimizer opt(ps, *backend, oc, optim::GradScaler::constant(scale), dp);
        // The backward's gradients: fp16 values (rounded once), in the buffer's dtype.
        Tensor g = Tensor::cpu({ps.total_numel()}, DType::kF32);
        for (int64_t i = 0; i < ps.total_numel(); ++i) g.data_as<float>()[i] = round_to(DType::kF16, grads(i));
        if (with_inf) g.data_as<float>()[7] = INFINITY;
        Tensor buffer = ps.grads();
        backend->copy(g, buffer);
        opt.reduce_gradients();
        const StepResult r = opt.step(0.01f, 0.1f);
        Tensor main = opt.gather_param_state(ps[0], StateKind::kMainParams);
        Tensor m = opt.gather_param_state(ps[2], StateKind::kExpAvg);
        std::vector<uint16_t> values(static_cast<size_t>(ps.total_numel()));
        std::memcpy(values.data(), ps.values().data(), values.size() * 2);
        return std::make_tuple(r, values, std::vector<float>(main.data_as<float>(), main.data_as<float>() + 12),
                               std::vector<float>(m.data_as<float>(), m.data_as<float>() + 12));
      };
      const auto [r16, v16, main16, m16] = run(DType::kF16, false);
      const auto [r32, v32, main32, m32] = run(DType::kF32, false);
      ASSERT_TRUE(r16.success && r32.success && r16.grad_norm && r32.grad_norm);
      EXPECT_GT(*r32.grad_norm, 0.05) << "clipping is active";
      if (scale == 1024.0f) {
        EXPECT_EQ(*r16.grad_norm, *r32.grad_norm);
      } else {
        EXPECT_NEAR(*r16.grad_norm, *r32.grad_norm, 1e-7 * *r32.grad_norm);
      }
      EXPECT_EQ(r16.num_zeros, r32.num_zeros);
      EXPECT_EQ(v16, v32) << "the fp16 model values";
      EXPECT_EQ(main16, main32);
      EXPECT_EQ(m16, m32);
      const auto [i16, iv16, imain16, im16] = run(DType::kF16, true);
      const auto [i32, iv32, imain32, im32] = run(DType::kF32, true);
      EXPECT_FALSE(i16.success);
      EXPECT_FALSE(i32.success);
    }
  }
}

}  // namespace
}  // namespace megatron::parallel
