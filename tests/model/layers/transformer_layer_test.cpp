// Two transformer layers run directly (no GPTModel): the gradients their backward leaves —
// through the fusions between neighbours, the attention projection's bias taken by norm2 and
// the lower layer's FC2 bias taken by the upper layer's norm1 (LayerHandoff) — against central
// finite differences of a scalar loss, on the CPU backend in fp32. Dropout is off (its masks are
// tested through GPTModel), LayerNorm and RMSNorm, GELU and SwiGLU, and the Llama attention:
// rotary embeddings with multi-query attention (one key/value head for both query heads), norms
// scaling by 1 + weight (--apply-layernorm-1p), and the query/key norms (--qk-layernorm) before
// the rotary embeddings.
#include "model/layers/transformer_layer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "comm/self_communicator.h"
#include "model/layers/layer_test_util.h"

namespace megatron::model {
namespace {

struct Case {
  Normalization norm;
  bool swiglu;
  bool rope = false;
  int64_t groups = 0;  // 0: multi-head attention
  bool one_p = false;  // --apply-layernorm-1p
  bool qk = false;     // --qk-layernorm
};

class TransformerLayerGradients : public ::testing::TestWithParam<Case> {};

GPTConfig small_config(const Case& k) {
  GPTConfig c;
  c.num_layers = 2;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.kv_channels = 4;
  c.ffn_hidden_size = 12;
  c.seq_length = 5;
  c.max_position_embeddings = 5;
  c.padded_vocab_size = c.vocab_size = 16;
  c.normalization = k.norm;
  c.swiglu = k.swiglu;
  if (k.rope) {
    c.position_embedding = PositionEmbedding::kRope;
    c.rotary.base = 100.0f;  // turns the positions of a 5-token sequence by visibly different angles
  }
  c.num_query_groups = k.groups;
  c.apply_layernorm_1p = k.one_p;
  c.qk_layernorm = k.qk;
  return c;
}

TEST_P(TransformerLayerGradients, MatchFiniteDifferences) {
  const GPTConfig c = small_config(GetParam());
  auto backend = backend::make_cpu_backend();
  comm::SelfCommunicator tp(*backend, "tp");
  ParameterSet ps;
  std::vector<TransformerLayer> layers = {TransformerLayer::declare(ps, 0, c), TransformerLayer::declare(ps, 1, c)};
  ps.allocate(*backend, DType::kF32);
  ps.initialize(*backend, 11, 0.3f, c.num_layers);
  // Biases and norm weights away from their init values (zeros, ones), so that a dropped
  // gradient cannot pass as a zero one.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (Parameter& p : ps.params()) {
    if (p.name.find("bias") != std::string::npos || p.name.find("layernorm") != std::string::npos) {
      float* v = p.value.data_as<float>();
      for (int64_t i = 0; i < p.value.numel(); ++i) v[i] += u(rng);
    }
  }

  const int64_t s = c.seq_length, b = 2, n = s * b, h = c.hidden_size;
  LayerWorkspace ws;
  LayerContext ctx = test_layer_context(*backend, tp, ps, ws, s, b, h);
  ws.grad = Tensor::cpu({n, h});
  ws.h1 = Tensor::cpu({n, h});
  ws.h2 = Tensor::cpu({n, h});
  layers[0].allocate_workspace(ctx, DType::kF32, ws);
  std::vector<TransformerLayer::Saved> saved = {layers[0].allocate_saved(ctx, DType::kF32),
                                                layers[1].allocate_saved(ctx, DType::kF32)};
  std::vector<Tensor> xs = {Tensor::cpu({n, h}), Tensor::cpu({n, h}), Tensor::cpu({n, h})};
  Tensor r = Tensor::cpu({n, h});
  for (int64_t i = 0; i < n * h; ++i) {
    xs[0].data_as<float>()[i] = u(rng) * 2;
    r.data_as<float>()[i] = u(rng) * 2;
  }
  const TransformerLayer::Run run;  // no dropout, the causal mask alone

  // loss = sum(out * r) in double.
  auto loss = [&] {
    for (int l = 0; l < 2; ++l) layers[static_cast<size_t>(l)].forward(ctx, xs[l], xs[l + 1], saved[l], run);
    double total = 0;
    for (int64_t i = 0; i < n * h; ++i) total += static_cast<double>(xs[2].data_as<float>()[i]) * r.data_as<float>()[i];
    return total;
  };
  loss();
  ps.forget_grads();
  backend->copy(r, ws.grad);
  LayerHandoff handoff;
  layers[1].backward(ctx, ws.grad, xs[1], saved[1], run, &layers[0], {}, handoff);
  // Without TP, the upper layer's norm1 took the lower layer's FC2 bias gradient.
  EXPECT_EQ(handoff.layer, 0);
  EXPECT_TRUE(handoff.taken.bias);
  layers[0].backward(ctx, ws.grad, xs[0], saved[0], run, nullptr, {}, handoff);
  EXPECT_EQ(ps.first_stale_grad(), -1) << "a gradient was never written";

  // Central differences on a few elements of each parameter and of the input.
  const float eps = 1e-2f;
  auto check = [&](float* value, const float* grad, int64_t count, const std::string& what) {
    for (int64_t k = 0; k < count; k += std::max<int64_t>(1, count / 5)) {
      const float keep = value[k];
      value[k] = keep + eps;
      const double up = loss();
      value[k] = keep - eps;
      const double down = loss();
      value[k] = keep;
      const double fd = (up - down) / (2 * eps);
      EXPECT_NEAR(grad[k], fd, 2e-2 * std::max(1.0, std::abs(fd))) << what << "[" << k << "]";
    }
  };
  for (Parameter& p : ps.params()) check(p.value.data_as<float>(), p.grad.data_as<float>(), p.value.numel(), p.name);
  Tensor dx = Tensor::cpu({n, h});
  backend->copy(ws.grad, dx);
  check(xs[0].data_as<float>(), dx.data_as<const float>(), n * h, "d(input)");
}

INSTANTIATE_TEST_SUITE_P(Variants, TransformerLayerGradients,
                         ::testing::Values(Case{Normalization::kLayerNorm, false}, Case{Normalization::kRMSNorm, true},
                                           Case{Normalization::kRMSNorm, true, true, 1},
                                           Case{Normalization::kLayerNorm, false, false, 0, true},
                                           Case{Normalization::kRMSNorm, true, true, 1, true},
                                           Case{Normalization::kRMSNorm, true, true, 1, false, true},
                                           Case{Normalization::kLayerNorm, false, true, 0, false, true},
                                           Case{Normalization::kLayerNorm, false, false, 0, true, true}));

}  // namespace
}  // namespace megatron::model
