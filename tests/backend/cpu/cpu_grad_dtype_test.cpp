// 16-bit "(+=)" gradients (backend/ops.h; a 16-bit gradient buffer, parallel/grad_buffer.h) on
// the CPU backend: every op that writes parameter gradients (grad_writing_ops.h's table, and
// those without a GradWrite), into bf16 or fp16 gradients, gives
// the same op into fp32 gradients holding the same old values, rounded once to the dtype (the
// fp32 result plus the old value, one rounding), for kAccumulate and kOverwrite. AdamW reads a
// 16-bit gradient as its fp32 widening, grad_unscale and grad_scale applied in that order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/cpu/grad_writing_ops.h"
#include "backend/ops.h"
#include "backend/qk_norm.h"
#include "backend/qkv_layout.h"
#include "core/dtype.h"

namespace megatron::backend {
namespace {

using namespace megatron::test;

// write(grads, mode) writes the op's gradient outputs (of the shapes given, each of the
// tensors' dtype). For bf16 and fp16, both modes: 16-bit gradients from random 16-bit values end
// as the fp32 run from the same values, each element rounded once; some of the roundings change
// a value (so that a missed or doubled rounding shows).
void check_grad_dtype(const std::string& what, const std::vector<Shape>& shapes,
                      const std::function<void(std::vector<Tensor>&, GradWrite)>& write, bool has_mode = true) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (GradWrite mode : {GradWrite::kAccumulate, GradWrite::kOverwrite}) {
      if (!has_mode && mode == GradWrite::kOverwrite) continue;
      const std::string where =
          what + " " + std::string(dtype_name(dtype)) + (mode == GradWrite::kAccumulate ? " accumulate" : " overwrite");
      auto rng = test_rng();
      std::vector<Tensor> g16, g32;
      for (const Shape& s : shapes) {
        g16.push_back(random_tensor(s, rng, dtype, -1.0f, 1.0f));
        g32.push_back(to_f32(g16.back()));
      }
      write(g32, mode);
      write(g16, mode);
      int64_t changed = 0, total = 0;
      for (size_t k = 0; k < shapes.size(); ++k) {
        ASSERT_EQ(g16[k].dtype(), dtype) << where;
        for (int64_t i = 0; i < g16[k].numel(); ++i) {
          const auto exact = static_cast<float>(get(g32[k], i));
          const float want = round_to(dtype, exact);
          ASSERT_EQ(static_cast<float>(get(g16[k], i)), want) << where << " output " << k << " element " << i;
          changed += want != exact;
          ++total;
        }
      }
      EXPECT_GT(changed, total / 4) << where << ": the roundings should show";
    }
  }
}

TEST(CpuGradDtype, SixteenBitGradientsAreTheFp32ResultRoundedOnce) {
  auto cpu = make_cpu_backend();
  auto rng = test_rng();
  const int64_t n = 37, in = 24;
  const Tensor x = random_tensor({n, in}, rng, DType::kBF16);

  for (const GradWritingOp& op : grad_writing_ops(*cpu, DType::kBF16, rng))
    check_grad_dtype(op.name, op.grads, op.write);

  const int64_t h = in;
  const Tensor gamma = random_tensor({h}, rng);
  Tensor ln_out = Tensor::cpu({n, h}, DType::kBF16), rstd = Tensor::cpu({n}, DType::kF32);
  const Tensor dln = random_tensor({n, h}, rng, DType::kBF16);
  // RMSNorm: dgamma alone.
  Tensor no_mean;
  cpu->layernorm_forward(x, gamma, Tensor(), 1e-5f, ln_out, no_mean, rstd);
  check_grad_dtype("rmsnorm backward", {{h}}, [&](std::vector<Tensor>& g, GradWrite m) {
    Tensor dx = Tensor::cpu({n, h}, DType::kBF16), none;
    cpu->layernorm_backward(dln, x, gamma, Tensor(), rstd, dx, g[0], none, m);
  });

  // Embeddings (always accumulated): repeated tokens sum in fp32 first, one rounding per row.
  const int64_t b = 2, s = 6, vocab = 5;
  Tensor tokens = Tensor::cpu({b, s}, DType::kI32);
  for (int64_t i = 0; i < b * s; ++i) tokens.data_as<int32_t>()[i] = static_cast<int32_t>((i * 3) % vocab);
  const Tensor dout = random_tensor({s, b, h}, rng, DType::kBF16);
  check_grad_dtype(
      "embedding_backward", {{vocab, h}, {s, h}},
      [&](std::vector<Tensor>& g, GradWrite) { cpu->embedding_backward(tokens, Tensor(), dout, g[0], g[1]); },
      /*has_mode=*/false);

  // Query/key norms (--qk-layernorm): their four weight and bias gradients.
  QkNormParams p;
  p.heads = 2;
  p.query_groups = 1;
  p.head_dim = 8;
  const QkvLayout L(p.heads, p.groups(), p.head_dim);
  const int64_t qs = 3, qb = 2, vectors = qs * qb * (p.heads + p.groups());
  Tensor qkv = random_tensor({qs, qb, L.width()}, rng, DType::kBF16, -2.0f, 2.0f);
  const Tensor qw = random_tensor({p.head_dim}, rng), kw = random_tensor({p.head_dim}, rng);
  const Tensor qbias = random_tensor({p.head_dim}, rng), kbias = random_tensor({p.head_dim}, rng);
  Tensor qx = Tensor::cpu({vectors * p.head_dim}, DType::kBF16), qmean = Tensor::cpu({vectors}, DType::kF32);
  Tensor qrstd = Tensor::cpu({vectors}, DType::kF32);
  qk_norm_forward(*cpu, qkv, qw, qbias, kw, kbias, qx, qmean, qrstd, p);
  const Tensor dqkv = random_tensor(qkv.shape(), rng, DType::kBF16, -1.0f, 1.0f);
  check_grad_dtype("qk_norm_backward", {{p.head_dim}, {p.head_dim}, {p.head_dim}, {p.head_dim}},
                   [&](std::vector<Tensor>& g, GradWrite m) {
                     Tensor d = clone(dqkv);
                     qk_norm_backward(*cpu, d, qx, qw, kw, qmean, qrstd, g[0], g[1], g[2], g[3], p, m);
                   });
}

// fp8_gemm's weight gradient (kAccumulate) into a 16-bit main gradient.
TEST(CpuGradDtype, Fp8GemmAccumulatesIntoA16BitGradient) {
  auto cpu = make_cpu_backend();
  auto rng = test_rng();
  const int64_t m = 12, n = 9, k = 16;
  auto codes = [&](int64_t rows) {
    Tensor t = Tensor::cpu({rows, k}, DType::kF8E4M3);
    auto* p = static_cast<uint8_t*>(t.data());
    for (int64_t i = 0; i < rows * k; ++i) p[i] = static_cast<uint8_t>(rng() & 0xb7);  // finite E4M3 codes
    return t;
  };
  const Tensor a = codes(m), bt = codes(n);
  Tensor sa = Tensor::cpu({1}, DType::kF32), sb = Tensor::cpu({1}, DType::kF32);
  sa.data_as<float>()[0] = 0.375f;
  sb.data_as<float>()[0] = 0.0625f;
  check_grad_dtype(
      "fp8_gemm", {{m, n}},
      [&](std::vector<Tensor>& g, GradWrite) { cpu->fp8_gemm(a, sa, bt, sb, Tensor(), g[0], GradWrite::kAccumulate); },
      /*has_mode=*/false);
}

// AdamW over a 16-bit gradient: the bits of the same update over its fp32 widening, the fp16
// loss scale's 1/scale (grad_unscale) and the clipping factor (grad_scale) each one fp32
// multiply in that order (an fp32 gradient first unscaled in place, then the update).
TEST(CpuGradDtype, AdamWReadsA16BitGradientAsItsWidening) {
  auto cpu = make_cpu_backend();
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    auto rng = test_rng();
    const int64_t P = 1000;
    const Tensor p0 = random_tensor({P}, rng, DType::kF32, -1.0f, 1.0f);
    const Tensor m0 = random_tensor({P}, rng, DType::kF32, -0.1f, 0.1f);
    const Tensor v0 = random_tensor({P}, rng, DType::kF32, 0.0f, 0.1f);
    const Tensor g16 = random_tensor({P}, rng, dtype, -300.0f, 300.0f);
    Tensor segments = Tensor::cpu({2, 3}, DType::kI64);
    const int64_t seg[] = {0, 600, 1, 600, 400, 0};
    std::memcpy(segments.data(), seg, sizeof(seg));
    AdamWStep step;
    step.lr = 1e-3f;
    step.weight_decay = 0.1f;
    step.step = 3;
    const float inv_scale = 1.0f / 1000.0f, clip = 0.7f;

    Tensor pa = clone(p0), ma = clone(m0), va = clone(v0), copy_a = Tensor::cpu({P}, dtype);
    AdamWStep sixteen = step;
    sixteen.grad_unscale = inv_scale;
    sixteen.grad_scale = clip;
    cpu->adamw_update_segments(pa, g16, ma, va, segments, sixteen, copy_a);

    Tensor pb = clone(p0), mb = clone(m0), vb = clone(v0), copy_b = Tensor::cpu({P}, dtype);
    Tensor g32 = to_f32(g16);
    cpu->scale(g32, inv_scale);  // the fp32 buffer's in-place unscale
    AdamWStep fp32 = step;
    fp32.grad_scale = clip;
    cpu->adamw_update_segments(pb, g32, mb, vb, segments, fp32, copy_b);
    EXPECT_TRUE(bitwise_equal(pa, pb)) << dtype_name(dtype);
    EXPECT_TRUE(bitwise_equal(ma, mb)) << dtype_name(dtype);
    EXPECT_TRUE(bitwise_equal(va, vb)) << dtype_name(dtype);
    EXPECT_TRUE(bitwise_equal(copy_a, copy_b)) << dtype_name(dtype);
    EXPECT_FALSE(bitwise_equal(pa, p0)) << "the update moved the parameters";
  }
}

}  // namespace
}  // namespace megatron::backend
