// The whole GPT on the GPU against the CPU reference: same initial weights, same batch; the
// loss and every parameter gradient agree (fp32: to fp32 rounding; bf16: within bf16
// tolerance), and a few optimizer steps keep the two in step. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/attention_impl.h"
#include "backend/cuda/gemm_tuning.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "model/gpt_model.h"
#include "optim/loss_scaler.h"
#include "parallel/optimizer.h"
#include "train/micro_batch_documents.h"

namespace megatron::model {
namespace {

GPTConfig config(float dropout) {
  GPTConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.kv_channels = 16;
  c.ffn_hidden_size = 256;
  c.seq_length = 32;
  c.max_position_embeddings = 32;
  c.vocab_size = 500;
  c.padded_vocab_size = 512;
  c.init_method_std = 0.05f;
  c.attention_dropout = dropout;
  c.hidden_dropout = dropout;
  return c;
}

constexpr int32_t kEod = 499;  // the last id of config()'s vocabulary

// Random tokens; with documents (c.reset_*) about one in 7 is the end of a document.
MicroBatch batch(const GPTConfig& c, int64_t b) {
  std::mt19937 rng(17);
  MicroBatch mb;
  mb.batch = b;
  mb.seq = c.seq_length;
  const bool documents = c.reset_position_ids || c.reset_attention_mask;
  for (int64_t i = 0; i < b * c.seq_length; ++i) {
    const int32_t t = static_cast<int32_t>(rng() % c.vocab_size);
    mb.tokens.push_back(documents && t % 7 == 0 ? kEod : t);
    mb.labels.push_back(static_cast<int32_t>(rng() % c.vocab_size));
    mb.loss_mask.push_back(i % 5 == 0 ? 0.0f : 1.0f);
  }
  train::mark_documents(c, kEod, &mb);
  return mb;
}

// ||a - b|| / ||b|| over a parameter's gradient (host copies).
double rel_error(backend::Backend& ga, const Tensor& a, backend::Backend& gb, const Tensor& b) {
  Tensor ha = Tensor::cpu(a.shape()), hb = Tensor::cpu(b.shape());
  ga.copy(a, ha);
  gb.copy(b, hb);
  double num = 0, den = 0;
  for (int64_t i = 0; i < ha.numel(); ++i) {
    const double d = static_cast<double>(ha.data_as<float>()[i]) - hb.data_as<float>()[i];
    num += d * d;
    den += static_cast<double>(hb.data_as<float>()[i]) * hb.data_as<float>()[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// ||t|| (host copy).
double l2_norm(backend::Backend& be, const Tensor& t) {
  Tensor h = Tensor::cpu(t.shape());
  be.copy(t, h);
  double sum = 0;
  for (int64_t i = 0; i < h.numel(); ++i) sum += static_cast<double>(h.data_as<float>()[i]) * h.data_as<float>()[i];
  return std::sqrt(sum);
}

// The gradient of `name` in `params`.
const Tensor& grad_of(const std::vector<Parameter>& params, const std::string& name) {
  for (const Parameter& p : params) {
    if (p.name == name) return p.grad;
  }
  throw std::runtime_error("no parameter " + name);
}

// heads: 4 of 16 (our SIMT kernels), or 1 of 64 (the tensor-core ones in bf16/fp16).
// rms_swiglu: --normalization RMSNorm --swiglu (ffn 256 = 2 x 128 halves).
// groups > 0: the Llama attention besides, rotary embeddings (base 100: visibly different angles
// over 32 positions) and that many key/value groups, no biases.
// qk: --qk-layernorm (the query/key norms before the rotary embeddings).
void compare(DType dtype, double loss_tol, double grad_tol, float dropout = 0.1f, bool documents = false,
             int64_t heads = 4, bool rms_swiglu = false, int64_t groups = 0, bool qk = false) {
  if (!backend::built_with_cuda() || backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  GPTConfig c = config(dropout);
  c.qk_layernorm = qk;
  if (rms_swiglu) {
    c.normalization = Normalization::kRMSNorm;
    c.swiglu = true;
  }
  if (groups > 0) {
    c.position_embedding = PositionEmbedding::kRope;
    c.rotary.base = 100.0f;
    c.num_query_groups = groups;
    c.add_bias_linear = false;
  }
  c.num_attention_heads = heads;
  c.kv_channels = c.hidden_size / heads;
  c.reset_position_ids = c.reset_attention_mask = documents;
  auto cpu = backend::make_cpu_backend();
  auto gpu = backend::make_cuda_backend(0);
  // The CPU's dropout masks need our attention kernels (cuDNN draws its own; see below).
  if (dropout > 0.0f) backend::set_attention_impl(*gpu, backend::AttentionImpl::kOwn);
  GPTModel mc(c, *cpu, dtype, 2), mg(c, *gpu, dtype, 2);
  mc.parameters().initialize(*cpu, 3, c.init_method_std, c.num_layers);
  mg.parameters().initialize(*gpu, 3, c.init_method_std, c.num_layers);
  parallel::MixedPrecisionOptimizer oc(mc.parameters(), *cpu, {}, optim::GradScaler::constant(1.0f));
  parallel::MixedPrecisionOptimizer og(mg.parameters(), *gpu, {}, optim::GradScaler::constant(1.0f));
  const MicroBatch mb = batch(c, 2);
  for (int step = 0; step < 3; ++step) {
    DropoutContext d;
    d.seed = 5;
    d.iteration = step;
    oc.zero_grads();
    og.zero_grads();
    const float lc = mc.forward(mb, d), lg = mg.forward(mb, d);
    EXPECT_NEAR(lg, lc, loss_tol * std::fabs(lc)) << "step " << step;
    mc.backward(1.0f, 1.0f);
    mg.backward(1.0f, 1.0f);
    for (size_t i = 0; i < mc.parameters().params().size(); ++i) {
      const Parameter& pc = mc.parameters().params()[i];
      const Parameter& pg = mg.parameters().params()[i];
      // Without rotary embeddings, a bias added to every key shifts all of a query's scores by one
      // constant, which the softmax cancels: the key norm's bias gradient is zero but for rounding
      // on both sides, so it is checked to be negligible against the query norm's bias gradient.
      if (qk && groups == 0 && pc.name.ends_with("k_layernorm.bias")) {
        std::string q_name = pc.name;
        q_name.replace(q_name.rfind("k_layernorm"), 1, "q");
        const double scale = l2_norm(*cpu, grad_of(mc.parameters().params(), q_name));
        ASSERT_GT(scale, 0.0) << q_name;
        EXPECT_LT(l2_norm(*cpu, pc.grad), 1e-3 * scale) << pc.name << " step " << step;
        EXPECT_LT(l2_norm(*gpu, pg.grad), 1e-3 * scale) << pc.name << " step " << step;
        continue;
      }
      EXPECT_LT(rel_error(*gpu, pg.grad, *cpu, pc.grad), grad_tol) << pc.name << " step " << step;
    }
    const parallel::StepResult rc = oc.step(1e-3f, 0.01f), rg = og.step(1e-3f, 0.01f);
    ASSERT_TRUE(rc.grad_norm && rg.grad_norm);
    EXPECT_NEAR(*rg.grad_norm, *rc.grad_norm, grad_tol * *rc.grad_norm);
  }
}

// fp32: both backends compute in fp32 with different summation orders (BLAS vs cuBLASLt tiles,
// block reductions); after two layers and the vocabulary softmax the relative differences stay
// within a few 1e-6 for the loss and ~1e-4 for gradients (small components accumulate more).
TEST(GpuModel, Fp32MatchesTheCpuReference) { compare(DType::kF32, 1e-5, 2e-3); }

// bf16: activations are rounded to 8 mantissa bits on both sides, but a one-ulp difference in
// an intermediate (different fp32 order before rounding) propagates: ~1e-2 relative.
TEST(GpuModel, Bf16MatchesTheCpuReference) { compare(DType::kBF16, 1e-2, 5e-2); }

// Without dropout (the benchmark setting), the paths that only run then: cuDNN attention in
// bf16, the residual add in the projection / FC2 GEMM epilogues, and their bias gradients as
// column sums inside the LayerNorm backward (layernorm_backward_colsum; layer 0's FC2 from
// layer 1's LayerNorm 1, layer 1's FC2 by its own pass after the final LayerNorm).
TEST(GpuModel, Fp32WithoutDropoutMatchesTheCpuReference) { compare(DType::kF32, 1e-5, 2e-3, 0.0f); }
TEST(GpuModel, Bf16WithoutDropoutMatchesTheCpuReference) { compare(DType::kBF16, 1e-2, 5e-2, 0.0f); }

// Documents packed into the samples (--reset-position-ids, --reset-attention-mask): position
// ids into the embedding and its gradient, the key starts into every layer's attention: our
// SIMT kernels (fp32, dropout), the tensor-core ones (bf16, head_dim 64, dropout: our kernels
// draw the CPU's masks), and cuDNN's graph with the documents' bias (bf16, no dropout; s = 32
// falls back to our kernels on cuDNN <= 9.15, see cudnn_attention.cpp).
TEST(GpuModel, Fp32WithDocumentsMatchesTheCpuReference) { compare(DType::kF32, 1e-5, 2e-3, 0.1f, true); }
TEST(GpuModel, Bf16WithDocumentsOnTensorCoresMatchesTheCpuReference) {
  compare(DType::kBF16, 1e-2, 5e-2, 0.1f, true, /*heads=*/1);
}
TEST(GpuModel, Bf16WithDocumentsMatchesTheCpuReference) { compare(DType::kBF16, 1e-2, 5e-2, 0.0f, true); }

// RMSNorm and SwiGLU: the RMS forms of every LayerNorm kernel (with dropout: the backward's
// dropout column sums; without: the fused bias column sums and cuDNN in bf16), SwiGLU's
// kernels and FC2's unfused backward, at the tolerances of the LayerNorm / GELU model above.
// The Llama layer: rotary embeddings and 2 key/value groups for 4 heads (our kernels in fp32;
// bf16 without dropout runs attention on cuDNN with fewer key/value heads than query heads),
// with packed documents (positions restart per document) and without.
TEST(GpuModel, Fp32LlamaMatchesTheCpuReference) { compare(DType::kF32, 1e-5, 2e-3, 0.1f, false, 4, true, 2); }
TEST(GpuModel, Fp32LlamaWithDocumentsMatchesTheCpuReference) {
  compare(DType::kF32, 1e-5, 2e-3, 0.0f, true, 4, true, 2);
}
TEST(GpuModel, Bf16LlamaMatchesTheCpuReference) { compare(DType::kBF16, 1e-2, 5e-2, 0.0f, false, 4, true, 2); }
TEST(GpuModel, Bf16LlamaOnTensorCoresMatchesTheCpuReference) {
  compare(DType::kBF16, 1e-2, 5e-2, 0.0f, true, 1, true, 1);
}

// --qk-layernorm: the query/key norm kernels and their weight gradients (summed over every
// head and row) on the Llama layer (RMSNorm) and the GPT one (LayerNorm with biases).
TEST(GpuModel, Fp32LlamaQkLayernormMatchesTheCpuReference) {
  compare(DType::kF32, 1e-5, 2e-3, 0.1f, false, 4, true, 2, true);
}
TEST(GpuModel, Bf16LlamaQkLayernormMatchesTheCpuReference) {
  compare(DType::kBF16, 1e-2, 5e-2, 0.0f, false, 4, true, 2, true);
}
TEST(GpuModel, Fp32QkLayernormMatchesTheCpuReference) {
  compare(DType::kF32, 1e-5, 2e-3, 0.1f, false, 4, false, 0, true);
}

TEST(GpuModel, Fp32RmsNormSwigluMatchesTheCpuReference) { compare(DType::kF32, 1e-5, 2e-3, 0.1f, false, 4, true); }
TEST(GpuModel, Bf16RmsNormSwigluMatchesTheCpuReference) { compare(DType::kBF16, 1e-2, 5e-2, 0.1f, false, 4, true); }
TEST(GpuModel, Bf16RmsNormSwigluWithoutDropoutMatchesTheCpuReference) {
  compare(DType::kBF16, 1e-2, 5e-2, 0.0f, false, 4, true);
}

// The host copy of a device tensor's bytes.
std::vector<char> bytes_of(backend::Backend& be, const Tensor& t) {
  Tensor h = Tensor::cpu(t.shape(), t.dtype());
  be.copy(t, h);
  std::vector<char> out(static_cast<size_t>(h.nbytes()));
  std::memcpy(out.data(), h.data(), out.size());
  return out;
}

// Training steps of two micro-batches each, as the trainer runs them (forward_chunk with the
// loss head's backward, backward_chunk, the losses read once per step). Returns the model
// after `steps` with each step's loss in *losses. Deterministic kernels (cuDNN's attention
// backward without atomics, the cuBLASLt heuristic) so that two models can agree bit for bit.
struct Trained {
  std::unique_ptr<backend::Backend> be;
  std::unique_ptr<GPTModel> model;
  std::vector<double> losses;
};
// hooks: parameter hooks that do nothing (as the data-parallel overlaps set them), under which
// the model records its work in segments between the hook calls.
Trained train_steps(const GPTConfig& c, bool recording, int steps, bool hooks = false) {
  Trained t;
  t.be = backend::make_cuda_backend(0);
  backend::set_attention_deterministic(*t.be, true);
  backend::set_gemm_autotune(*t.be, false);
  t.model = std::make_unique<GPTModel>(c, *t.be, DType::kBF16, 2);
  GPTModel& m = *t.model;
  m.set_recording(recording);
  if (hooks) m.set_param_hooks(ParamHooks{[](int64_t) {}, [](int64_t) {}});
  m.parameters().initialize(*t.be, 3, c.init_method_std, c.num_layers);
  parallel::MixedPrecisionOptimizer opt(m.parameters(), *t.be, {}, optim::GradScaler::constant(1.0f));
  MicroBatch mbs[2] = {batch(c, 2), batch(c, 2)};
  std::reverse(mbs[1].tokens.begin(), mbs[1].tokens.end());  // another batch, another mask sum
  mbs[1].loss_mask[3] = 0.0f;
  train::mark_documents(c, kEod, &mbs[1]);  // and (with documents) other position ids and key starts
  for (int step = 0; step < steps; ++step) {
    opt.zero_grads();
    HeadBackward head;
    head.grad_scale = 0.5f;
    for (int k = 0; k < 2; ++k) {
      DropoutContext d;
      d.seed = 5;
      d.iteration = step;
      d.micro_batch = k;
      m.forward_chunk(0, 0, &mbs[k], d, &head);
      m.backward_chunk(0, 0);
    }
    t.losses.push_back(m.take_losses());
    opt.step(1e-3f, 0.01f);
  }
  t.be->synchronize();
  return t;
}
Trained train_steps(float dropout, bool recording, int steps) { return train_steps(config(dropout), recording, steps); }

// `rec`'s losses at every step and its weights and gradients after them are `plain`'s, bit for
// bit (`what` names the case in failures).
void expect_same_bits(const Trained& plain, const Trained& rec, const std::string& what) {
  ASSERT_EQ(plain.losses.size(), rec.losses.size()) << what;
  for (size_t step = 0; step < plain.losses.size(); ++step) {
    EXPECT_EQ(plain.losses[step], rec.losses[step]) << what << " step " << step;
  }
  const auto& pp = plain.model->parameters().params();
  const auto& rp = rec.model->parameters().params();
  for (size_t i = 0; i < pp.size(); ++i) {
    EXPECT_EQ(bytes_of(*plain.be, pp[i].value), bytes_of(*rec.be, rp[i].value)) << pp[i].name << " " << what;
    EXPECT_EQ(bytes_of(*plain.be, pp[i].grad), bytes_of(*rec.be, rp[i].grad)) << pp[i].name << " " << what;
  }
}

// Recorded work (CUDA graphs) replays the same kernels with the same arguments: the losses of
// every step and the weights and gradients after them are the unrecorded run's bits. Step 0
// runs each micro-batch's work unrecorded, step 1 records it (micro-batch 0 overwrites the
// gradients, micro-batch 1 accumulates: different recordings), steps 2-4 replay.
TEST(GpuModel, RecordedStepsGiveTheBitsOfUnrecordedOnes) {
  if (!backend::built_with_cuda() || backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  constexpr int kSteps = 5;
  const Trained plain = train_steps(0.0f, false, kSteps);
  const Trained rec = train_steps(0.0f, true, kSteps);
  EXPECT_EQ(plain.model->replays(), 0);
  ASSERT_EQ(rec.model->recording_failure(), "");
  // Forward and backward of 2 micro-batches, replayed in steps 1-4 (step 1 runs its recordings).
  EXPECT_EQ(rec.model->replays(), 4 * (kSteps - 1));
  expect_same_bits(plain, rec, "");
  EXPECT_GT(plain.losses.front(), plain.losses.back());  // the steps train
}

// With parameter hooks each segment between them is recorded and replayed (train_steps' hooks):
// the bits of the unrecorded run, with and without dropout (whose FC2 gradient one layer's
// backward leaves in a buffer for the next: state a replay must restore).
TEST(GpuModel, RecordedSegmentsBetweenHooksGiveTheBitsOfUnrecordedSteps) {
  if (!backend::built_with_cuda() || backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (float dropout : {0.0f, 0.1f}) {
    constexpr int kSteps = 4;
    const Trained plain = train_steps(config(dropout), false, kSteps);
    const Trained rec = train_steps(config(dropout), true, kSteps, /*hooks=*/true);
    ASSERT_EQ(rec.model->recording_failure(), "") << "dropout " << dropout;
    EXPECT_GT(rec.model->replays(), 4 * (kSteps - 1)) << "more replays than whole chunks";
    expect_same_bits(plain, rec, "dropout " + std::to_string(dropout));
  }
}

// RMSNorm + SwiGLU steps recorded and replayed: the unrecorded run's bits.
TEST(GpuModel, RecordedRmsNormSwigluStepsGiveTheBitsOfUnrecordedOnes) {
  if (!backend::built_with_cuda() || backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  GPTConfig c = config(0.0f);
  c.normalization = Normalization::kRMSNorm;
  c.swiglu = true;
  constexpr int kSteps = 4;
  const Trained plain = train_steps(c, false, kSteps);
  const Trained rec = train_steps(c, true, kSteps);
  ASSERT_EQ(rec.model->recording_failure(), "");
  EXPECT_GT(rec.model->replays(), 0);
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_EQ(plain.losses[static_cast<size_t>(step)], rec.losses[static_cast<size_t>(step)]) << "step " << step;
  }
  EXPECT_GT(plain.losses.front(), plain.losses.back());
  const auto& pp = plain.model->parameters().params();
  const auto& rp = rec.model->parameters().params();
  for (size_t i = 0; i < pp.size(); ++i) {
    EXPECT_EQ(bytes_of(*plain.be, pp[i].value), bytes_of(*rec.be, rp[i].value)) << pp[i].name;
  }
}

// Llama steps (rotary embeddings, 2 key/value groups) recorded and replayed: the unrecorded bits.
TEST(GpuModel, RecordedLlamaStepsGiveTheBitsOfUnrecordedOnes) {
  if (!backend::built_with_cuda() || backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  GPTConfig c = config(0.0f);
  c.normalization = Normalization::kRMSNorm;
  c.swiglu = true;
  c.position_embedding = PositionEmbedding::kRope;
  c.num_query_groups = 2;
  constexpr int kSteps = 4;
  const Trained plain = train_steps(c, false, kSteps);
  const Trained rec = train_steps(c, true, kSteps);
  ASSERT_EQ(rec.model->recording_failure(), "");
  EXPECT_GT(rec.model->replays(), 0);
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_EQ(plain.losses[static_cast<size_t>(step)], rec.losses[static_cast<size_t>(step)]) << "step " << step;
  }
  EXPECT_GT(plain.losses.front(), plain.losses.back());
}

// The same with --qk-layernorm: the query/key norms record and replay too.
TEST(GpuModel, RecordedQkLayernormStepsGiveTheBitsOfUnrecordedOnes) {
  if (!backend::built_with_cuda() || backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  GPTConfig c = config(0.0f);
  c.normalization = Normalization::kRMSNorm;
  c.swiglu = true;
  c.position_embedding = PositionEmbedding::kRope;
  c.num_query_groups = 2;
  c.qk_layernorm = true;
  constexpr int kSteps = 4;
  const Trained plain = train_steps(c, false, kSteps);
  const Trained rec = train_steps(c, true, kSteps);
  ASSERT_EQ(rec.model->recording_failure(), "");
  EXPECT_GT(rec.model->replays(), 0);
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_EQ(plain.losses[static_cast<size_t>(step)], rec.losses[static_cast<size_t>(step)]) << "step " << step;
  }
  EXPECT_GT(plain.losses.front(), plain.losses.back());
}

// With documents, the recordings read each micro-batch's position ids and key starts from
// their buffers when replayed (the two micro-batches have different documents).
TEST(GpuModel, RecordedStepsWithDocumentsGiveTheBitsOfUnrecordedOnes) {
  if (!backend::built_with_cuda() || backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  GPTConfig c = config(0.0f);
  c.reset_position_ids = c.reset_attention_mask = true;
  constexpr int kSteps = 4;
  const Trained plain = train_steps(c, false, kSteps);
  const Trained rec = train_steps(c, true, kSteps);
  ASSERT_EQ(rec.model->recording_failure(), "");
  EXPECT_EQ(rec.model->replays(), 4 * (kSteps - 1));
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_EQ(plain.losses[static_cast<size_t>(step)], rec.losses[static_cast<size_t>(step)]) << "step " << step;
  }
  const auto& pp = plain.model->parameters().params();
  const auto& rp = rec.model->parameters().params();
  for (size_t i = 0; i < pp.size(); ++i) {
    EXPECT_EQ(bytes_of(*plain.be, pp[i].grad), bytes_of(*rec.be, rp[i].grad)) << pp[i].name;
  }
}

// Attention dropout on cuDNN (bf16, s = 128: cuDNN draws its own masks, keyed by the seed and
// the (iteration, micro-batch, layer) stream). Full recompute runs each layer's forward again
// before its backward, which must draw the forward's masks again: the losses, weights and
// gradients are the bits of the run that keeps its activations, and differ from a run
// without dropout.
TEST(GpuModel, RecomputeRedrawsCudnnDropoutMasks) {
  if (!backend::built_with_cuda() || backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  GPTConfig c = config(0.1f);
  c.seq_length = c.max_position_embeddings = 128;
  {
    auto be = backend::make_cuda_backend(0);
    backend::AttentionParams a;
    a.heads = c.num_attention_heads;
    a.head_dim = c.kv_channels;
    a.softmax_scale = 0.25f;
    a.dropout.p = c.attention_dropout;
    ASSERT_EQ(backend::cudnn_attention_unavailable(*be, DType::kBF16, c.seq_length, 2, a), "")
        << "this test needs cuDNN's attention dropout";
  }
  GPTConfig recomputed = c;
  recomputed.recompute = Recompute::kUniform;
  GPTConfig no_dropout = c;
  no_dropout.attention_dropout = no_dropout.hidden_dropout = 0.0f;
  const Trained kept = train_steps(c, false, 3), again = train_steps(recomputed, false, 3);
  const Trained plain = train_steps(no_dropout, false, 3);
  EXPECT_EQ(kept.losses, again.losses);
  EXPECT_NE(kept.losses[0], plain.losses[0]) << "dropout changed nothing";
  const auto& kp = kept.model->parameters().params();
  const auto& ap = again.model->parameters().params();
  for (size_t i = 0; i < kp.size(); ++i) {
    EXPECT_EQ(bytes_of(*kept.be, kp[i].value), bytes_of(*again.be, ap[i].value)) << kp[i].name;
    EXPECT_EQ(bytes_of(*kept.be, kp[i].grad), bytes_of(*again.be, ap[i].grad)) << kp[i].name;
  }
}

// With dropout the recordings read each replay's (iteration, micro-batch) from the activation
// set's dropout stream (DropoutParams::stream_add): every step's loss and the weights and
// gradients after them are the unrecorded run's bits, with the masks changing each step. At
// s = 32 attention runs our kernels (cuDNN 9.14 takes s % 128 == 0), at s = 128 cuDNN's with
// its RNG node; the hidden dropouts run the elementwise and LayerNorm kernels either way.
TEST(GpuModel, RecordedStepsWithDropoutGiveTheBitsOfUnrecordedOnes) {
  if (!backend::built_with_cuda() || backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  constexpr int kSteps = 4;
  for (int64_t seq : {32, 128}) {
    GPTConfig c = config(0.1f);
    c.seq_length = c.max_position_embeddings = seq;
    const Trained plain = train_steps(c, false, kSteps);
    const Trained rec = train_steps(c, true, kSteps);
    ASSERT_EQ(rec.model->recording_failure(), "") << "s " << seq;
    EXPECT_EQ(rec.model->replays(), 4 * (kSteps - 1)) << "s " << seq;
    expect_same_bits(plain, rec, "s " + std::to_string(seq));
  }
}

}  // namespace
}  // namespace megatron::model
