// The whole GPT against finite differences, and the claims model/gpt_model.h makes:
// dropout masks are a pure function of (seed, iteration, micro-batch), the tied output
// layer shares the word embedding's gradient, 16-bit models track the fp32 one, and a tiny
// model can memorise a batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/error.h"
#include "model/gpt_model.h"
#include "model/memory_plan.h"
#include "optim/loss_scaler.h"
#include "parallel/optimizer.h"
#include "support/micro_batches.h"

namespace megatron::model {
namespace {

using test::random_micro_batch;
using test::tiny_gpt_config;

// Central differences of the loss against the analytic gradient on a spread of elements of
// every parameter. fp32 forward: with step 1e-2 the truncation error is ~eps^2 * f''' / 6
// ~ 2e-5 and the rounding error ~ 2 * 3e-7 * |loss| / (2 * eps) ~ 1e-4, so |fd - grad| must
// stay under 5e-4 + 2e-2 * |grad|; a wrong backward is off by O(|grad|), far beyond that.
void check_gradients(const GPTConfig& config, const MicroBatch& mb, const DropoutContext& ctx) {
  auto backend = backend::make_cpu_backend();
  GPTModel model(config, *backend, DType::kF32, mb.batch);
  model.parameters().initialize(*backend, 7, config.init_method_std, config.num_layers);
  Tensor grads = model.parameters().grads();
  backend->fill(grads, 0.0f);
  model.forward(mb, ctx);
  model.backward(1.0f, 1.0f);

  const float eps = 1e-2f;
  int checked = 0, nonzero = 0;
  for (const Parameter& p : model.parameters().params()) {
    float* value = p.value.data_as<float>();
    const float* grad = p.grad.data_as<float>();
    const int64_t n = p.numel();
    const int64_t stride = std::max<int64_t>(1, n / 6);
    for (int64_t k = (p.offset * 7) % stride; k < n; k += stride) {
      const float saved = value[k];
      value[k] = saved + eps;
      const double up = model.forward(mb, ctx);
      value[k] = saved - eps;
      const double down = model.forward(mb, ctx);
      value[k] = saved;
      const double fd = (up - down) / (2.0 * eps);
      EXPECT_NEAR(fd, grad[k], 5e-4 + 2e-2 * std::fabs(grad[k])) << p.name << "[" << k << "]";
      ++checked;
      nonzero += std::fabs(grad[k]) > 1e-3;
    }
  }
  EXPECT_GT(checked, 100);
  EXPECT_GT(nonzero, checked / 2) << "most checked gradients should be clearly non-zero";
}

TEST(GPTModel, GradientsMatchFiniteDifferences) {
  const GPTConfig c = tiny_gpt_config();
  check_gradients(c, random_micro_batch(2, c.seq_length, c.vocab_size, 1, /*partial_mask=*/true), {});
}

TEST(GPTModel, GradientsMatchFiniteDifferencesWithDropout) {
  GPTConfig c = tiny_gpt_config();
  c.attention_dropout = 0.2f;
  c.hidden_dropout = 0.1f;
  DropoutContext ctx;
  ctx.seed = 99;
  ctx.iteration = 3;
  ctx.micro_batch = 1;
  check_gradients(c, random_micro_batch(2, c.seq_length, c.vocab_size, 2, false), ctx);
}

TEST(GPTModel, GradientsMatchFiniteDifferencesUntiedNoBiasExactGelu) {
  GPTConfig c = tiny_gpt_config();
  c.untie_embeddings_and_output_weights = true;
  c.add_bias_linear = false;
  c.gelu = Gelu::kExact;
  c.kv_channels = 3;  // heads * kv_channels != hidden
  check_gradients(c, random_micro_batch(3, c.seq_length, c.vocab_size, 3, true), {});
}

// Megatron's Llama-style pieces: RMSNorm (no bias, no centring) and the SwiGLU MLP, with and
// without linear biases, with dropout.
TEST(GPTModel, GradientsMatchFiniteDifferencesRmsNormSwiglu) {
  GPTConfig c = tiny_gpt_config();
  c.normalization = Normalization::kRMSNorm;
  c.swiglu = true;
  check_gradients(c, random_micro_batch(2, c.seq_length, c.vocab_size, 4, true), {});
  c.add_bias_linear = false;
  c.untie_embeddings_and_output_weights = true;
  c.attention_dropout = 0.2f;
  c.hidden_dropout = 0.1f;
  DropoutContext ctx;
  ctx.seed = 5;
  ctx.iteration = 2;
  check_gradients(c, random_micro_batch(2, c.seq_length, c.vocab_size, 5, false), ctx);
}

// --qk-layernorm on the Llama attention (rotary embeddings, 2 key/value groups for 4 heads):
// LayerNorm with linear biases, RMSNorm with SwiGLU, and LayerNorm scaling by 1 + weight, whose
// query/key norm weights start at zero.
TEST(GPTModel, GradientsMatchFiniteDifferencesQkLayernorm) {
  GPTConfig c = tiny_gpt_config();
  c.hidden_size = 8;
  c.num_attention_heads = 4;
  c.kv_channels = 4;  // heads * kv_channels != hidden
  c.num_query_groups = 2;
  c.position_embedding = PositionEmbedding::kRope;
  c.rotary.base = 100.0f;
  c.qk_layernorm = true;
  check_gradients(c, random_micro_batch(2, c.seq_length, c.vocab_size, 6, true), {});
  c.normalization = Normalization::kRMSNorm;
  c.swiglu = true;
  c.add_bias_linear = false;
  check_gradients(c, random_micro_batch(2, c.seq_length, c.vocab_size, 7, true), {});
  c.normalization = Normalization::kLayerNorm;
  c.swiglu = false;
  c.apply_layernorm_1p = true;
  check_gradients(c, random_micro_batch(2, c.seq_length, c.vocab_size, 8, false), {});
}

// --qk-layernorm declares q_layernorm and k_layernorm [kv_channels] per layer after the output
// projection (weight, and bias for LayerNorm), and changes the loss even at their init values.
TEST(GPTModel, QkLayernormDeclaresItsNormsAndChangesTheModel) {
  GPTConfig base = tiny_gpt_config();
  base.kv_channels = 3;
  const MicroBatch mb = random_micro_batch(2, base.seq_length, base.vocab_size, 9, false);
  for (Normalization norm : {Normalization::kLayerNorm, Normalization::kRMSNorm}) {
    GPTConfig c = base;
    c.normalization = norm;
    auto backend = backend::make_cpu_backend();
    GPTModel plain(c, *backend, DType::kF32, mb.batch);
    plain.parameters().initialize(*backend, 7, c.init_method_std, c.num_layers);
    c.qk_layernorm = true;
    GPTModel qk(c, *backend, DType::kF32, mb.batch);
    qk.parameters().initialize(*backend, 7, c.init_method_std, c.num_layers);
    const int64_t per_norm = c.layernorm_bias() ? 2 : 1;
    EXPECT_EQ(qk.parameters().total_numel() - plain.parameters().total_numel(),
              c.num_layers * 2 * per_norm * c.kv_channels);
    EXPECT_EQ(qk.parameters().total_numel(), gpt_num_parameters(c, 1));
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const std::string pre = "decoder.layers." + std::to_string(l) + ".self_attention.";
      const ParameterSet& ps = qk.parameters();
      const int64_t proj = ps.require(pre + "linear_proj.bias");
      for (const char* name : {"q_layernorm", "k_layernorm"}) {
        const Parameter* w = ps.find(pre + name + ".weight");
        ASSERT_NE(w, nullptr) << pre << name;
        EXPECT_EQ(w->global_shape, Shape{c.kv_channels});
        EXPECT_FALSE(w->partition.split()) << "replicated over TP";
        EXPECT_EQ(w->value.data_as<float>()[0], 1.0f);
        EXPECT_GT(ps.index_of(pre + name + ".weight"), proj);
        const Parameter* b = ps.find(pre + name + ".bias");
        EXPECT_EQ(b != nullptr, c.layernorm_bias()) << pre << name;
      }
    }
    EXPECT_NE(plain.forward(mb, {}), qk.forward(mb, {}));
  }
}

// Each variant alone changes the loss (the flags reach the model), and RMSNorm's parameters are
// the weights alone.
TEST(GPTModel, RmsNormAndSwigluChangeTheModel) {
  const GPTConfig base = tiny_gpt_config();
  const MicroBatch mb = random_micro_batch(2, base.seq_length, base.vocab_size, 8, false);
  auto loss_of = [&](const GPTConfig& c, int64_t* numel) {
    auto backend = backend::make_cpu_backend();
    GPTModel model(c, *backend, DType::kF32, mb.batch);
    model.parameters().initialize(*backend, 7, c.init_method_std, c.num_layers);
    *numel = model.parameters().total_numel();
    for (const Parameter& p : model.parameters().params()) {
      if (c.normalization == Normalization::kRMSNorm)
        EXPECT_EQ(p.name.find("layernorm.bias"), std::string::npos) << p.name;
      if (p.name.find("linear_fc1.weight") != std::string::npos) {
        EXPECT_EQ(p.global_shape[0], c.fc1_out_size()) << p.name;
      }
    }
    return model.forward(mb, {});
  };
  int64_t n0 = 0, n_rms = 0, n_swiglu = 0;
  GPTConfig rms = base, swiglu = base;
  rms.normalization = Normalization::kRMSNorm;
  swiglu.swiglu = true;
  const float l0 = loss_of(base, &n0), l_rms = loss_of(rms, &n_rms), l_swiglu = loss_of(swiglu, &n_swiglu);
  EXPECT_NE(l0, l_rms);
  EXPECT_NE(l0, l_swiglu);
  const int64_t h = base.hidden_size, f = base.ffn_hidden_size;
  EXPECT_EQ(n0 - n_rms, (2 * base.num_layers + 1) * h) << "one bias [h] per LayerNorm";
  EXPECT_EQ(n_swiglu - n0, base.num_layers * (f * h + f)) << "fc1's up half: [f, h] and its bias";
}

TEST(GPTModel, DropoutIsAFunctionOfTheContext) {
  GPTConfig c = tiny_gpt_config();
  c.attention_dropout = 0.3f;
  c.hidden_dropout = 0.3f;
  auto backend = backend::make_cpu_backend();
  GPTModel model(c, *backend, DType::kF32, 2);
  model.parameters().initialize(*backend, 1, c.init_method_std, c.num_layers);
  const MicroBatch mb = random_micro_batch(2, c.seq_length, c.vocab_size, 4, false);
  DropoutContext a;
  a.seed = 5;
  a.iteration = 1;
  DropoutContext b = a;
  b.micro_batch = 1;
  DropoutContext off;
  off.training = false;
  const float la = model.forward(mb, a);
  EXPECT_EQ(la, model.forward(mb, a));  // same context, same masks, bit for bit
  EXPECT_NE(la, model.forward(mb, b));  // another micro-batch draws other masks
  EXPECT_NE(la, model.forward(mb, off));
}

// Full recomputation re-runs each recomputed layer's forward from its kept input with the same
// dropout masks, so loss and every gradient equal the run that keeps all activations bit for
// bit — for uniform chunks (including a partial last chunk: 5 layers in chunks of 2) and for
// the block method, in fp32 and bf16, with dropout on.
TEST(GPTModel, RecomputeGivesBitIdenticalGradients) {
  GPTConfig base = tiny_gpt_config();
  base.num_layers = 5;
  base.attention_dropout = 0.2f;
  base.hidden_dropout = 0.2f;
  const MicroBatch mb = random_micro_batch(2, base.seq_length, base.vocab_size, 6, true);
  DropoutContext ctx;
  ctx.seed = 11;
  ctx.iteration = 3;
  // fp32, bf16, bf16 with RMSNorm + SwiGLU, bf16 with --qk-layernorm and rotary embeddings
  for (int variant = 0; variant < 4; ++variant) {
    const DType dtype = variant == 0 ? DType::kF32 : DType::kBF16;
    auto run = [&](Recompute method, int64_t layers, float* loss) {
      GPTConfig c = base;
      if (variant == 2) {
        c.normalization = Normalization::kRMSNorm;
        c.swiglu = true;
      }
      if (variant == 3) {
        c.qk_layernorm = true;
        c.position_embedding = PositionEmbedding::kRope;
      }
      c.recompute = method;
      c.recompute_num_layers = layers;
      auto backend = backend::make_cpu_backend();
      GPTModel model(c, *backend, dtype, mb.batch);
      model.parameters().initialize(*backend, 7, c.init_method_std, c.num_layers);
      Tensor grads = model.parameters().grads();
      backend->fill(grads, 0.0f);
      *loss = model.forward(mb, ctx);
      model.backward(1.0f, 1.0f);
      std::vector<float> g(static_cast<size_t>(grads.numel()));
      std::memcpy(g.data(), grads.data(), g.size() * sizeof(float));
      return g;
    };
    float loss_ref = 0.0f;
    const std::vector<float> ref = run(Recompute::kNone, 1, &loss_ref);
    for (auto [method, layers] :
         {std::pair{Recompute::kUniform, int64_t{1}}, std::pair{Recompute::kUniform, int64_t{2}},
          std::pair{Recompute::kUniform, int64_t{5}}, std::pair{Recompute::kBlock, int64_t{3}}}) {
      float loss = 0.0f;
      const std::vector<float> g = run(method, layers, &loss);
      const std::string what = std::string(dtype_name(dtype)) +
                               (variant == 2   ? " rmsnorm swiglu"
                                : variant == 3 ? " qk layernorm"
                                               : "") +
                               (method == Recompute::kUniform ? " uniform " : " block ") + std::to_string(layers);
      EXPECT_EQ(loss, loss_ref) << what;
      ASSERT_EQ(g.size(), ref.size());
      EXPECT_EQ(std::memcmp(g.data(), ref.data(), g.size() * sizeof(float)), 0) << what << ": gradients differ";
    }
  }
}

TEST(GPTModel, InitialLossIsNearLogVocab) {
  GPTConfig c = tiny_gpt_config();
  c.init_method_std = 0.02f;
  c.padded_vocab_size = 512;
  c.vocab_size = 500;
  auto backend = backend::make_cpu_backend();
  GPTModel model(c, *backend, DType::kF32, 4);
  model.parameters().initialize(*backend, 3, c.init_method_std, c.num_layers);
  const float loss = model.forward(random_micro_batch(4, c.seq_length, c.vocab_size, 5, false), {});
  EXPECT_NEAR(loss, std::log(512.0), 0.05);  // near-uniform logits over the padded vocabulary
}

TEST(GPTModel, SixteenBitModelsTrackFp32) {
  const GPTConfig c = tiny_gpt_config();
  const MicroBatch mb = random_micro_batch(2, c.seq_length, c.vocab_size, 6, false);
  auto backend = backend::make_cpu_backend();
  GPTModel ref(c, *backend, DType::kF32, 2);
  ref.parameters().initialize(*backend, 11, c.init_method_std, c.num_layers);
  const float loss32 = ref.forward(mb, {});
  for (DType dt : {DType::kBF16, DType::kF16}) {
    GPTModel m(c, *backend, dt, 2);
    m.parameters().initialize(*backend, 11, c.init_method_std, c.num_layers);
    const float loss16 = m.forward(mb, {});
    // bf16 keeps 8 bits of mantissa (relative 4e-3 per rounding); a few roundings per path.
    EXPECT_NEAR(loss16, loss32, (dt == DType::kBF16 ? 3e-2 : 5e-3) * loss32) << dtype_name(dt);
    EXPECT_NE(loss16, loss32) << "16-bit storage must actually round";
  }
}

TEST(GPTModel, MemorisesAFixedBatch) {
  GPTConfig c = tiny_gpt_config();
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.kv_channels = 8;
  c.ffn_hidden_size = 64;
  c.seq_length = 8;
  c.max_position_embeddings = 8;
  c.init_method_std = 0.02f;
  auto backend = backend::make_cpu_backend();
  GPTModel model(c, *backend, DType::kF32, 4);
  model.parameters().initialize(*backend, 1, c.init_method_std, c.num_layers);
  parallel::OptimizerConfig oc;
  parallel::MixedPrecisionOptimizer opt(model.parameters(), *backend, oc, optim::GradScaler::constant(1.0f));
  const MicroBatch mb = random_micro_batch(4, c.seq_length, c.vocab_size, 8, false);
  float first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    opt.zero_grads();
    last = model.forward(mb, {});
    if (step == 0) first = last;
    model.backward(1.0f, 1.0f);
    ASSERT_TRUE(opt.step(3e-3f, 0.0f).success);
  }
  EXPECT_GT(first, 2.0f);
  EXPECT_LT(last, 0.05f) << "a 2-layer model must memorise 32 random tokens";
}

// zero_grads() marks the gradients stale instead of filling the buffer (GradWrite): the
// backward's first write of each overwrites it, later ones accumulate. Over a buffer full of
// NaN, two micro-batches must give (a) the bits of the same backwards over a zero-filled
// buffer and (b) the sum of the two micro-batches' gradients taken one step each, for the
// tied model (the output layer writes the word embedding's gradient first, the lookup then
// adds to it) and the untied one with biases off.
TEST(GPTModel, ZeroGradsWithoutAFillGivesTheGradientsOfAZeroedBuffer) {
  for (bool untied : {false, true}) {
    GPTConfig c = tiny_gpt_config();
    c.untie_embeddings_and_output_weights = untied;
    c.add_bias_linear = !untied;
    auto backend = backend::make_cpu_backend();
    const MicroBatch mbs[2] = {random_micro_batch(2, c.seq_length, c.vocab_size, 1, true),
                               random_micro_batch(2, c.seq_length, c.vocab_size, 2, false)};
    // The gradients after backwards over mbs[first, last), the buffer NaN + stale or zeroed.
    auto grads_after = [&](int first, int last, bool stale_buffer) {
      GPTModel model(c, *backend, DType::kF32, 2);
      model.parameters().initialize(*backend, 5, c.init_method_std, c.num_layers);
      parallel::OptimizerConfig oc;
      parallel::MixedPrecisionOptimizer opt(model.parameters(), *backend, oc, optim::GradScaler::constant(1.0f));
      Tensor g = model.parameters().grads();
      if (stale_buffer) {
        backend->fill(g, std::nanf(""));
        opt.zero_grads();
      } else {
        backend->fill(g, 0.0f);  // written (not stale): every op accumulates
      }
      for (int k = first; k < last; ++k) {
        model.forward(mbs[k], {});
        model.backward(1.0f, 0.5f);
      }
      EXPECT_EQ(model.parameters().first_stale_grad(), -1);
      std::vector<float> out(static_cast<size_t>(g.numel()));
      std::memcpy(out.data(), g.data(), out.size() * sizeof(float));
      return out;
    };
    const std::vector<float> fresh = grads_after(0, 2, true);
    const std::vector<float> zeroed = grads_after(0, 2, false);
    const std::vector<float> one = grads_after(0, 1, true), two = grads_after(1, 2, true);
    ASSERT_EQ(fresh.size(), zeroed.size());
    for (size_t i = 0; i < fresh.size(); ++i) {
      ASSERT_EQ(fresh[i], zeroed[i]) << "untied " << untied << ", gradient element " << i;
      // The accumulating GEMMs add in their own order: fp32 rounding of a few terms.
      const float sum = one[i] + two[i];
      ASSERT_NEAR(fresh[i], sum, 1e-6f + 1e-5f * std::fabs(sum)) << "untied " << untied << ", element " << i;
    }
  }
}

// A gradient the backward never wrote would be garbage: reduce_gradients() refuses it.
TEST(GPTModel, ReduceGradientsRefusesAGradientTheBackwardDidNotWrite) {
  GPTConfig c = tiny_gpt_config();
  auto backend = backend::make_cpu_backend();
  GPTModel model(c, *backend, DType::kF32, 2);
  parallel::OptimizerConfig oc;
  parallel::MixedPrecisionOptimizer opt(model.parameters(), *backend, oc, optim::GradScaler::constant(1.0f));
  opt.zero_grads();
  model.forward(random_micro_batch(2, c.seq_length, c.vocab_size, 3, false), {});
  try {
    opt.reduce_gradients();
    FAIL() << "no backward ran, yet reduce_gradients accepted the stale gradients";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("embedding.word_embeddings.weight"), std::string::npos) << e.what();
  }
  model.backward(1.0f, 1.0f);
  EXPECT_NO_THROW(opt.reduce_gradients());
}

}  // namespace
}  // namespace megatron::model

namespace megatron::model {
namespace {

// Pipeline stages in one process, the activations and gradients handed over by copies:
// PP2 with 2 chunks per stage (virtual stages 0..3 of one layer each), two micro-batches in
// flight per chunk in the 1F1B-like order F0 F1 B0 B1, dropout and full recomputation on,
// gives the whole model's losses and gradients bit for bit (same ops on the same values; the
// dropout streams use the global layer index), except the tied word embedding, whose two
// partial gradients (lookup on stage 0, output layer on stage 1) add up to the whole one.
// forward_chunk queues each micro-batch loss; take_losses() returns their sum in run order
// (floats added in double, as the pipeline executor adds them) and empties the queue. The
// values are those forward() returns one at a time.
TEST(GPTModel, QueuedLossesAreTakenOnceInRunOrder) {
  auto backend = backend::make_cpu_backend();
  const GPTConfig c = tiny_gpt_config();
  GPTModel model(c, *backend, DType::kF32, 2);
  model.parameters().initialize(*backend, 3, c.init_method_std, c.num_layers);
  std::vector<MicroBatch> mbs;
  for (uint32_t k = 0; k < 3; ++k) mbs.push_back(random_micro_batch(2, c.seq_length, c.vocab_size, 20 + k, true));
  double expected = 0.0;
  for (const MicroBatch& mb : mbs) expected += model.forward(mb, {});
  EXPECT_EQ(model.take_losses(), 0.0) << "forward() takes its own loss";
  for (const MicroBatch& mb : mbs) model.forward_chunk(0, 0, &mb, {});
  EXPECT_EQ(model.take_losses(), expected);
  EXPECT_EQ(model.take_losses(), 0.0) << "the queue is empty after a take";
  model.forward_chunk(0, 0, &mbs[0], {});
  EXPECT_DEATH(model.forward(mbs[1], {}), "queued losses not taken");
}

TEST(GPTModel, PipelineStagesEqualTheWholeModel) {
  GPTConfig c = tiny_gpt_config();
  c.num_layers = 4;
  c.attention_dropout = 0.1f;
  c.hidden_dropout = 0.1f;
  c.recompute = Recompute::kUniform;
  c.recompute_num_layers = 1;
  auto backend = backend::make_cpu_backend();
  const MicroBatch mbs[2] = {random_micro_batch(2, c.seq_length, c.vocab_size, 1, true),
                             random_micro_batch(2, c.seq_length, c.vocab_size, 2, false)};
  DropoutContext d[2];
  for (int k = 0; k < 2; ++k) {
    d[k].seed = 3;
    d[k].iteration = 4;
    d[k].micro_batch = k;
  }
  GPTModel whole(c, *backend, DType::kF32, 2);
  whole.parameters().initialize(*backend, 7, c.init_method_std, c.num_layers);
  Tensor wg = whole.parameters().grads();
  backend->fill(wg, 0.0f);
  float whole_loss[2];
  for (int k = 0; k < 2; ++k) {
    whole_loss[k] = whole.forward(mbs[k], d[k]);
    whole.backward(1.0f, 0.5f);
  }

  std::vector<std::unique_ptr<GPTModel>> st;
  for (int64_t s = 0; s < 2; ++s) {
    PipelineStageOptions p;
    p.pp = 2;
    p.stage = s;
    p.virtual_chunks = 2;
    p.activation_sets = 4;  // both micro-batches of both chunks in flight: set k + 2 * chunk
    st.push_back(std::make_unique<GPTModel>(c, *backend, DType::kF32, 2, TensorParallelOptions{}, p));
    st.back()->parameters().initialize(*backend, 7, c.init_method_std, c.num_layers);
    Tensor g = st.back()->parameters().grads();
    backend->fill(g, 0.0f);
  }
  // Virtual stage v = chunk * 2 + stage.
  auto model_of = [&](int64_t v) -> GPTModel& { return *st[static_cast<size_t>(v % 2)]; };
  const HeadBackward head{1.0f, 0.5f};
  float stage_loss[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    for (int64_t v = 0; v < 4; ++v) {
      if (v > 0) {
        backend->copy(model_of(v - 1).output((v - 1) / 2, k + (v - 1) / 2 * 2),
                      model_of(v).input_buffer(v / 2, k + v / 2 * 2));
      }
      model_of(v).forward_chunk(v / 2, k + v / 2 * 2, &mbs[k], d[k], &head);
      stage_loss[k] += static_cast<float>(model_of(v).take_losses());  // 0 but on the last virtual stage
    }
  }
  for (int k = 0; k < 2; ++k) {
    for (int64_t v = 3; v >= 0; --v) {
      if (v < 3) backend->copy(model_of(v + 1).input_grad(), model_of(v).output_grad_buffer());
      model_of(v).backward_chunk(v / 2, k + v / 2 * 2);
    }
  }
  for (int k = 0; k < 2; ++k) EXPECT_EQ(stage_loss[k], whole_loss[k]);

  auto host = [&](const Tensor& t) {
    Tensor h = Tensor::cpu(t.shape(), DType::kF32);
    backend->copy(t, h);
    return std::vector<float>(h.data_as<float>(), h.data_as<float>() + h.numel());
  };
  int64_t compared = 0;
  for (const Parameter& p : whole.parameters().params()) {
    std::vector<float> want = host(p.grad), got(want.size(), 0.0f);
    int64_t holders = 0;
    for (auto& m : st) {
      const Parameter* q = m->parameters().find(p.name);
      if (!q) continue;
      ++holders;
      const std::vector<float> part = host(q->grad);
      for (size_t i = 0; i < got.size(); ++i) got[i] += part[i];
    }
    const bool tied = p.name == "embedding.word_embeddings.weight";
    ASSERT_EQ(holders, tied ? 2 : 1) << p.name;
    for (size_t i = 0; i < want.size(); ++i) {
      // The tied embedding: two partial sums added once (a few ulps of the largest term).
      if (tied) {
        ASSERT_NEAR(got[i], want[i], 1e-6f + 1e-5f * std::abs(want[i])) << p.name << " [" << i << "]";
      } else {
        ASSERT_EQ(got[i], want[i]) << p.name << " [" << i << "]";
      }
    }
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int64_t>(whole.parameters().params().size()));
  // The last stage's copy of the embedding starts from the same values and is marked shared.
  const Parameter* copy = st[1]->parameters().find("embedding.word_embeddings.weight");
  ASSERT_NE(copy, nullptr);
  EXPECT_TRUE(copy->pipeline_shared);
  EXPECT_EQ(host(copy->value), host(whole.parameters().find("embedding.word_embeddings.weight")->value));
}

// Megatron's is_embedding_or_output_parameter (language_module.py
// setup_embeddings_and_output_layer): the word embedding on the first stage and the output
// layer's weight on the last (the untied one, or the tied embedding's copy there), never the
// position embedding; with one stage and tied weights the word embedding is both.
TEST(GPTModel, EmbeddingAndOutputParametersAreMarkedPerStage) {
  auto marked = [](const GPTConfig& c, int64_t pp, int64_t stage) {
    ParameterSet ps;
    PipelineStageOptions p;
    p.pp = pp;
    p.stage = stage;
    GPTModel::declare_stage_parameters(c, p, &ps);
    std::vector<std::string> names;
    for (const Parameter& q : ps.params()) {
      if (q.embedding_or_output) names.push_back(q.name + (q.pipeline_shared ? " (shared)" : ""));
    }
    return names;
  };
  GPTConfig c = tiny_gpt_config();
  c.num_layers = 2;
  ASSERT_TRUE(c.learned_positions());
  using Names = std::vector<std::string>;
  EXPECT_EQ(marked(c, 1, 0), Names{"embedding.word_embeddings.weight"});
  EXPECT_EQ(marked(c, 2, 0), Names{"embedding.word_embeddings.weight"});
  EXPECT_EQ(marked(c, 2, 1), Names{"embedding.word_embeddings.weight (shared)"});
  c.untie_embeddings_and_output_weights = true;
  EXPECT_EQ(marked(c, 1, 0), (Names{"embedding.word_embeddings.weight", "output_layer.weight"}));
  EXPECT_EQ(marked(c, 2, 0), Names{"embedding.word_embeddings.weight"});
  EXPECT_EQ(marked(c, 2, 1), Names{"output_layer.weight"});
}

}  // namespace
}  // namespace megatron::model
