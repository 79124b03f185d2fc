// The whole GPT with FP8 linears (GPTConfig::fp8: QKV, projection, FC1, FC2 through
// backend/fp8_linear.h) on the GPU against the CPU backend's emulation of the same recipe: a
// tiny GPT and a tiny Llama (RMSNorm, SwiGLU, rotary embeddings, 2 key/value groups, no
// biases), --fp8-format hybrid with the delayed and the tensorwise recipe, the same initial
// weights and batch, 3 iterations each of forward, backward, the FP8 update
// (GPTModel::fp8_update) and an optimizer step. Skipped without a GPU.
//
// Why the two agree closely with the GEMMs on the fp32 fallback (the CPU's arithmetic; the
// cuBLASLt kernels are checked with loose bounds, see compare()): the quantization is bit for
// bit the CPU's for equal inputs and equal scales (tests/backend/cuda/cuda_fp8_test.cpp), and
// the codes' products are exact; what differs is the fp32 summation order of the GEMMs and
// reductions (cuBLAS's tiles vs BLAS).
// In fp32 those differences are ~1e-6 relative, so an operand lands on the other side of an FP8
// rounding boundary (2^-3 or 2^-2 of its magnitude apart) for about one element in 10^5. The
// first forward therefore agrees to ~1e-5 relative, far below what FP8 itself changes (~1e-3 of
// the loss), which checks that FP8 is on on the GPU. A flip, once it happens, moves the row it
// feeds by a few %, which flips more codes downstream; under the tensorwise recipe a flip that
// reaches a tensor's largest element rescales the whole tensor (scale = fp8_max / amax), and a
// % of its codes flip at once. How far that carries the gradients and later steps depends on
// the shape, so each comparison's bound also takes a measured reference: a CPU run whose
// weights start one unit in the last place away (Run's nudge). In bf16 both sides round their
// activations to 8 bits after differently ordered sums, which alone moves the loss ~1e-2
// (tests/backend/cuda/gpu_model_test.cpp's bf16 tolerances), and the same reference applies.
//
// And once recorded: FP8 steps run as CUDA graphs (GPTModel::set_recording; the scales live on
// the device, so a replay reads each step's) give the unrecorded run's bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/attention_impl.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemm_tuning.h"
#include "backend/device.h"
#include "backend/fp8_recipe.h"
#include "backend/ops.h"
#include "model/gpt_model.h"
#include "optim/loss_scaler.h"
#include "parallel/optimizer.h"

namespace megatron::model {
namespace {

bool no_gpu() { return !backend::built_with_cuda() || backend::cuda_device_count() == 0; }

// Every FP8 GEMM dimension a multiple of 16 (cuBLASLt's FP8 kernels): h 64, n = 2 x 32, QKV 192
// (GPT) or 128 (Llama: 4 heads and 2 groups of 16), FFN 256 (SwiGLU's FC1 512).
GPTConfig config(bool llama, backend::Fp8Recipe recipe) {
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
  c.attention_dropout = 0.0f;
  c.hidden_dropout = 0.0f;
  if (llama) {
    c.normalization = Normalization::kRMSNorm;
    c.swiglu = true;
    c.position_embedding = PositionEmbedding::kRope;
    c.rotary.base = 100.0f;
    c.num_query_groups = 2;
    c.add_bias_linear = false;
    c.untie_embeddings_and_output_weights = true;
  }
  backend::Fp8Config f;
  f.format = backend::Fp8Mix::kHybrid;
  f.recipe = recipe;
  f.amax_history_len = 2;  // delayed: the scales from the max of the last two amaxes
  f.amax_compute_algo = backend::Fp8AmaxAlgo::kMax;
  c.fp8 = f;
  return c;
}

MicroBatch batch(const GPTConfig& c, int64_t b, uint32_t seed = 17) {
  std::mt19937 rng(seed);
  MicroBatch mb;
  mb.batch = b;
  mb.seq = c.seq_length;
  for (int64_t i = 0; i < b * c.seq_length; ++i) {
    mb.tokens.push_back(static_cast<int32_t>(rng() % c.vocab_size));
    mb.labels.push_back(static_cast<int32_t>(rng() % c.vocab_size));
    mb.loss_mask.push_back(i % 5 == 0 ? 0.0f : 1.0f);
  }
  return mb;
}

// The host fp32 copy of a tensor (any float dtype).
std::vector<float> host(backend::Backend& be, const Tensor& t) {
  Tensor h = Tensor::cpu(t.shape());
  be.copy(t, h);
  return std::vector<float>(h.data_as<float>(), h.data_as<float>() + h.numel());
}

// ||a - b|| / ||b||.
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// One model on one backend, its optimizer, and the steps it has taken.
struct Run {
  std::unique_ptr<GPTModel> model;
  std::unique_ptr<parallel::MixedPrecisionOptimizer> opt;
  // nudge (a seed, 0: none): every parameter element moved by one unit in its dtype's last
  // place (fp32: each, up or down at random; 16-bit: one in 16), CPU only: the size of the differences a
  // differently ordered sum leaves, for the rounding-noise reference of compare().
  Run(const GPTConfig& c, backend::Backend& be, DType dtype, uint32_t nudge = 0) {
    model = std::make_unique<GPTModel>(c, be, dtype, 2);
    model->parameters().initialize(be, 3, c.init_method_std, c.num_layers);
    if (nudge != 0) nudge_parameters(dtype, nudge);
    opt = std::make_unique<parallel::MixedPrecisionOptimizer>(model->parameters(), be, parallel::OptimizerConfig{},
                                                              optim::GradScaler::constant(1.0f));
  }
  // Forward and backward of `mb`, then the FP8 update (as train_step: after the last backward,
  // before the optimizer). Returns the loss; step() finishes the iteration.
  float forward_backward(const MicroBatch& mb, int64_t iteration) {
    DropoutContext d;
    d.seed = 5;
    d.iteration = iteration;
    opt->zero_grads();
    const float loss = model->forward(mb, d);
    model->backward(1.0f, 1.0f);
    model->fp8_update(nullptr);
    return loss;
  }
  void step() { opt->step(1e-3f, 0.01f); }
  void nudge_parameters(DType dtype, uint32_t seed) {
    std::mt19937 rng(seed);
    for (auto& p : model->parameters().params()) {
      Tensor& v = p.value;
      MT_CHECK(v.device() == Device::kCPU) << "nudge on the CPU only";
      for (int64_t i = 0; i < v.numel(); ++i) {
        const bool up = (rng() & 1u) != 0;
        if (dtype == DType::kF32) {
          float& x = v.data_as<float>()[i];
          x = std::nextafter(x, up ? INFINITY : -INFINITY);
        } else if (rng() % 16 == 0) {
          uint16_t& bits = static_cast<uint16_t*>(v.data())[i];
          if ((bits & 0x7fffu) != 0) bits = static_cast<uint16_t>(up ? bits + 1 : bits - 1);  // next magnitude
        }
      }
    }
  }
};

// 3 iterations on the GPU and on the CPU with FP8, and on the CPU without it (the reference of
// how much FP8 moves the loss). Each iteration: the losses within loss_tol (relative), every
// parameter gradient within grad_tol, the scaling state (every slot's scale and amax history)
// within scale_tol, or within the rounding noise measured on the way (see the loop). With
// `fp8_on_check`, the GPU's first loss is closer to the CPU's FP8 loss than a quarter of FP8's
// own effect on it.
// cublaslt: the GEMMs on cuBLASLt's FP8 kernels, whose accumulation keeps fewer bits than fp32
// inside each MMA: the amaxes of their outputs then differ from the CPU's, and so do the scales
// and every code quantized with them, so only loose tolerances hold (a wrong operand, scale or
// transpose is still O(1)). Without it, the fp32 fallback on the decoded codes: the CPU's
// arithmetic but for summation order, and the tight tolerances.
void compare(DType dtype, bool llama, backend::Fp8Recipe recipe, double loss_tol, double grad_tol, double scale_tol,
             bool fp8_on_check, bool cublaslt = false) {
  if (no_gpu()) GTEST_SKIP() << "no CUDA device";
  const GPTConfig c = config(llama, recipe);
  GPTConfig plain_config = c;
  plain_config.fp8.reset();
  auto cpu = backend::make_cpu_backend();
  auto gpu = backend::make_cuda_backend(0);
  static_cast<backend::CudaBackend&>(*gpu).set_fp8_gemm_cublaslt(cublaslt);
  Run rc(c, *cpu, dtype), rg(c, *gpu, dtype), rp(plain_config, *cpu, dtype);
  Run nudged[2] = {Run(c, *cpu, dtype, 99), Run(c, *cpu, dtype, 100)};
  ASSERT_NE(rc.model->fp8_state(), nullptr);
  ASSERT_NE(rg.model->fp8_state(), nullptr);
  const MicroBatch mb = batch(c, 2);
  double gpu_vs_cpu = 0, fp8_effect = 0;
  // Each bound is the larger of the fixed tolerance and kNoise x the farther of two nudged CPU
  // runs' distances from the CPU run in the same quantity: one rounding-boundary flip moves an element by an
  // FP8 step (2^-3, 2^-2), and under the tensorwise recipe a flip in a tensor's largest element
  // rescales the whole tensor, so how far rounding noise alone carries a run depends on the
  // shape and the step; the nudged run measures it here. A wrong operand, scale or transpose
  // is O(1) and exceeds both.
  constexpr double kNoise = 3.0;
  auto bound = [&](double tol, double noise) { return std::max(tol, kNoise * noise); };
  // The farther nudged run's distance from `want` of the quantity `of` picks out of a Run.
  auto noise = [&](const std::vector<float>& want, auto of) {
    double far = 0;
    for (Run& r : nudged) far = std::max(far, rel_error(of(r), want));
    return far;
  };
  for (int step = 0; step < 3; ++step) {
    const float lc = rc.forward_backward(mb, step), lg = rg.forward_backward(mb, step);
    const float lp = rp.forward_backward(mb, step);
    double loss_noise = 0;
    for (Run& r : nudged)
      loss_noise = std::max(loss_noise, std::fabs(static_cast<double>(r.forward_backward(mb, step)) - lc));
    EXPECT_LE(std::fabs(lg - lc), bound(loss_tol * std::fabs(lc), loss_noise)) << "loss, step " << step;
    if (step == 0) {  // the first forward: the same weights, before any gradient noise
      gpu_vs_cpu = std::fabs(static_cast<double>(lg) - lc);
      fp8_effect = std::fabs(static_cast<double>(lc) - lp);
    }
    const auto& pc = rc.model->parameters().params();
    const auto& pg = rg.model->parameters().params();
    for (size_t i = 0; i < pc.size(); ++i) {
      const std::vector<float> want = host(*cpu, pc[i].grad);
      const double n = noise(want, [&](Run& r) { return host(*cpu, r.model->parameters().params()[i].grad); });
      EXPECT_LT(rel_error(host(*gpu, pg[i].grad), want), bound(grad_tol, n)) << pc[i].name << " step " << step;
    }
    backend::Fp8ScalingState& sc = *rc.model->fp8_state();
    backend::Fp8ScalingState& sg = *rg.model->fp8_state();
    const std::vector<float> scales = host(*cpu, sc.scale()), amaxes = host(*cpu, sc.amax_history());
    const double scale_noise = noise(scales, [&](Run& r) { return host(*cpu, r.model->fp8_state()->scale()); });
    const double amax_noise = noise(amaxes, [&](Run& r) { return host(*cpu, r.model->fp8_state()->amax_history()); });
    EXPECT_LT(rel_error(host(*gpu, sg.scale()), scales), bound(scale_tol, scale_noise)) << "scales, step " << step;
    EXPECT_LT(rel_error(host(*gpu, sg.amax_history()), amaxes), bound(scale_tol, amax_noise))
        << "amax history, step " << step;
    rc.step();
    rg.step();
    rp.step();
    for (Run& r : nudged) r.step();
  }
  // The delayed recipe moved its scales off their initial 1 (the amaxes of these operands are
  // far from fp8_max).
  if (recipe == backend::Fp8Recipe::kDelayed) {
    const std::vector<float> scales = host(*cpu, rc.model->fp8_state()->scale());
    for (float s : scales) EXPECT_NE(s, 1.0f);
  }
  EXPECT_GT(fp8_effect, 0.0) << "FP8 changed nothing on the CPU";
  if (fp8_on_check) {
    EXPECT_LT(gpu_vs_cpu, 0.25 * fp8_effect) << "the GPU's first loss is not the CPU's FP8 loss";
  }
}

// fp32 model dtype (FP8 linears, everything else in fp32): losses within 1e-4 relative (the
// ~1e-5 the summation order and rare FP8 flips leave, with room), gradients 5e-3, scales and
// amaxes 1e-4 (amax is a max of values equal to fp32 rounding; scale = fp8_max / amax).
TEST(GpuModelFp8, Fp32GptDelayedMatchesTheCpuEmulation) {
  compare(DType::kF32, false, backend::Fp8Recipe::kDelayed, 1e-4, 5e-3, 1e-4, true);
}
TEST(GpuModelFp8, Fp32GptTensorwiseMatchesTheCpuEmulation) {
  compare(DType::kF32, false, backend::Fp8Recipe::kTensorwise, 1e-4, 5e-3, 1e-4, true);
}
TEST(GpuModelFp8, Fp32LlamaDelayedMatchesTheCpuEmulation) {
  compare(DType::kF32, true, backend::Fp8Recipe::kDelayed, 1e-4, 5e-3, 1e-4, true);
}
TEST(GpuModelFp8, Fp32LlamaTensorwiseMatchesTheCpuEmulation) {
  compare(DType::kF32, true, backend::Fp8Recipe::kTensorwise, 1e-4, 5e-3, 1e-4, true);
}

// bf16 (the training setting): gpu_model_test's bf16 tolerances, 1e-2 for the loss; gradients
// 8e-2 (5e-2 there: FP8 flips on top); scales and amaxes 2e-2 (an amax is a bf16 value that may
// be one bf16 ulp, 2^-8, apart).
TEST(GpuModelFp8, Bf16GptDelayedMatchesTheCpuEmulation) {
  compare(DType::kBF16, false, backend::Fp8Recipe::kDelayed, 1e-2, 8e-2, 2e-2, false);
}
TEST(GpuModelFp8, Bf16GptTensorwiseMatchesTheCpuEmulation) {
  compare(DType::kBF16, false, backend::Fp8Recipe::kTensorwise, 1e-2, 8e-2, 2e-2, false);
}
TEST(GpuModelFp8, Bf16LlamaDelayedMatchesTheCpuEmulation) {
  compare(DType::kBF16, true, backend::Fp8Recipe::kDelayed, 1e-2, 8e-2, 2e-2, false);
}
TEST(GpuModelFp8, Bf16LlamaTensorwiseMatchesTheCpuEmulation) {
  compare(DType::kBF16, true, backend::Fp8Recipe::kTensorwise, 1e-2, 8e-2, 2e-2, false);
}

// cuBLASLt's FP8 kernels (see compare): losses within 2e-2, gradients 0.25, scales 0.1.
TEST(GpuModelFp8, CublasLtGptAndLlamaFollowTheCpuEmulation) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const bool llama : {false, true}) {
      for (const backend::Fp8Recipe r : {backend::Fp8Recipe::kDelayed, backend::Fp8Recipe::kTensorwise}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + (llama ? " llama " : " gpt ") +
                     std::string(backend::fp8_recipe_name(r)));
        compare(dtype, llama, r, 2e-2, 0.25, 0.1, false, true);
      }
    }
  }
}

// The host copy of a device tensor's bytes.
std::vector<char> bytes_of(backend::Backend& be, const Tensor& t) {
  Tensor h = Tensor::cpu(t.shape(), t.dtype());
  be.copy(t, h);
  std::vector<char> out(static_cast<size_t>(h.nbytes()));
  std::memcpy(out.data(), h.data(), out.size());
  return out;
}

struct Trained {
  std::unique_ptr<backend::Backend> be;
  std::unique_ptr<GPTModel> model;
  std::vector<double> losses;
};

// `steps` iterations of two micro-batches each through forward_chunk / backward_chunk (what the
// trainer runs, its work recorded from the second time on with `recording`), the FP8 update
// after the last backward, then AdamW. Deterministic kernels (cuDNN's attention backward
// without atomics, the cuBLASLt heuristic), so that two runs can agree bit for bit.
Trained train_steps(const GPTConfig& c, bool recording, int steps) {
  Trained t;
  t.be = backend::make_cuda_backend(0);
  backend::set_attention_deterministic(*t.be, true);
  backend::set_gemm_autotune(*t.be, false);
  t.model = std::make_unique<GPTModel>(c, *t.be, DType::kBF16, 2);
  GPTModel& m = *t.model;
  m.set_recording(recording);
  m.parameters().initialize(*t.be, 3, c.init_method_std, c.num_layers);
  parallel::MixedPrecisionOptimizer opt(m.parameters(), *t.be, {}, optim::GradScaler::constant(1.0f));
  const MicroBatch mbs[2] = {batch(c, 2), batch(c, 2, 29)};
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
    m.fp8_update(nullptr);
    opt.step(1e-3f, 0.01f);
  }
  t.be->synchronize();
  return t;
}

// Recorded FP8 steps (step 0 unrecorded, step 1 records, steps 2-3 replay) give the unrecorded
// run's losses, weights, gradients and scaling state bit for bit, under both recipes, for the
// GPT and the Llama: the delayed scales change every step and the replays read them.
TEST(GpuModelFp8, RecordedFp8StepsGiveTheBitsOfUnrecordedOnes) {
  if (no_gpu()) GTEST_SKIP() << "no CUDA device";
  constexpr int kSteps = 4;
  for (const bool llama : {false, true}) {
    for (const backend::Fp8Recipe recipe : {backend::Fp8Recipe::kDelayed, backend::Fp8Recipe::kTensorwise}) {
      const std::string what = std::string(llama ? "llama " : "gpt ") + std::string(backend::fp8_recipe_name(recipe));
      const GPTConfig c = config(llama, recipe);
      const Trained plain = train_steps(c, false, kSteps), rec = train_steps(c, true, kSteps);
      ASSERT_EQ(rec.model->recording_failure(), "") << what;
      EXPECT_EQ(plain.model->replays(), 0) << what;
      EXPECT_EQ(rec.model->replays(), 4 * (kSteps - 1)) << what;  // 2 forwards + 2 backwards a step
      ASSERT_EQ(plain.losses.size(), rec.losses.size());
      for (size_t s = 0; s < plain.losses.size(); ++s) EXPECT_EQ(plain.losses[s], rec.losses[s]) << what << s;
      EXPECT_GT(plain.losses.front(), plain.losses.back()) << what << ": the steps train";
      const auto& pp = plain.model->parameters().params();
      const auto& rp = rec.model->parameters().params();
      for (size_t i = 0; i < pp.size(); ++i) {
        EXPECT_EQ(bytes_of(*plain.be, pp[i].value), bytes_of(*rec.be, rp[i].value)) << pp[i].name << " " << what;
        EXPECT_EQ(bytes_of(*plain.be, pp[i].grad), bytes_of(*rec.be, rp[i].grad)) << pp[i].name << " " << what;
      }
      backend::Fp8ScalingState& sp = *plain.model->fp8_state();
      backend::Fp8ScalingState& sr = *rec.model->fp8_state();
      EXPECT_EQ(bytes_of(*plain.be, sp.scale()), bytes_of(*rec.be, sr.scale())) << what;
      EXPECT_EQ(bytes_of(*plain.be, sp.amax_history()), bytes_of(*rec.be, sr.amax_history())) << what;
    }
  }
}

}  // namespace
}  // namespace megatron::model
