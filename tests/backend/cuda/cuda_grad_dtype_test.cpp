// 16-bit "(+=)" gradients (a 16-bit gradient buffer, parallel/grad_buffer.h) on the CUDA backend
// against the CPU's (cpu_grad_dtype_test.cpp: the fp32 result plus the old value, rounded once):
// the bias, LayerNorm / RMSNorm and embedding gradients within one 16-bit ulp (the fp32 sums'
// order differs, so a rounding may land on the neighbour), for kAccumulate and kOverwrite; AdamW
// over a 16-bit gradient (grad_unscale and grad_scale) bit for bit (the same fp32 operations).
// The GEMM weight gradients into 16-bit grads are cuda_gemm_test's (LinearBackward), FP8's
// cuda_fp8_test's, the query/key norms' cuda_qk_norm_test's.
#include <gtest/gtest.h>

#include <cmath>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/ops.h"
#include "core/dtype.h"

namespace megatron::backend {
namespace {

using namespace megatron::test;

// write(backend, grads, mode) runs the op on `backend` (inputs already there); grads start as
// the same random 16-bit values on both.
void check_against_cpu(Backend& cpu, Backend& gpu, const std::string& what, const std::vector<Shape>& shapes,
                       const std::function<void(Backend&, std::vector<Tensor>&, GradWrite)>& write, double atol,
                       bool has_mode = true) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (GradWrite mode : {GradWrite::kAccumulate, GradWrite::kOverwrite}) {
      if (!has_mode && mode == GradWrite::kOverwrite) continue;
      const std::string where =
          what + " " + std::string(dtype_name(dtype)) + (mode == GradWrite::kAccumulate ? " accumulate" : " overwrite");
      std::vector<Tensor> host, dev;
      uint64_t seed = 40;
      for (const Shape& s : shapes) {
        host.push_back(host_random(s, dtype, ++seed, -1.0f, 1.0f));
        dev.push_back(to_device(gpu, host.back()));
      }
      write(cpu, host, mode);
      write(gpu, dev, mode);
      for (size_t k = 0; k < shapes.size(); ++k) {
        ASSERT_EQ(dev[k].dtype(), dtype);
        EXPECT_TRUE(close(to_host(gpu, dev[k]), host[k], atol, 0.0, 1, where + " output " + std::to_string(k)));
      }
    }
  }
}

TEST(CudaGradDtype, SixteenBitGradientsMatchTheCpu) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  for (const auto& [n, h] : std::vector<std::pair<int64_t, int64_t>>{{4096, 768}, {129, 65}, {1, 8}}) {
    const std::string shape = std::to_string(n) + "x" + std::to_string(h);
    const Tensor x = host_random({n, h}, DType::kBF16, 1, -1.0f, 1.0f);
    const Tensor dy = host_random({n, h}, DType::kBF16, 2, -1.0f, 1.0f);
    const Tensor gamma = host_random({h}, DType::kF32, 3, 0.5f, 1.5f), beta = host_random({h}, DType::kF32, 4);
    const Tensor xd = to_device(*gpu, x), dyd = to_device(*gpu, dy), gd = to_device(*gpu, gamma);
    // fp32 sums of n terms below 1: the two orders differ by a few fp32 ulps of the sum.
    const double atol = 1e-6 * static_cast<double>(n);
    check_against_cpu(
        *cpu, *gpu, "bias_grad " + shape, {{h}},
        [&](Backend& be, std::vector<Tensor>& g, GradWrite m) { be.bias_grad(&be == cpu.get() ? dy : dyd, g[0], m); },
        atol);
    for (bool rms : {false, true}) {
      // The CPU's statistics on both, so that only the gradient reductions differ.
      Tensor out = Tensor::cpu({n, h}, DType::kBF16), mean = rms ? Tensor() : Tensor::cpu({n}, DType::kF32);
      Tensor rstd = Tensor::cpu({n}, DType::kF32);
      cpu->layernorm_forward(x, gamma, rms ? Tensor() : beta, 1e-5f, out, mean, rstd);
      const Tensor meand = rms ? Tensor() : to_device(*gpu, mean), rstdd = to_device(*gpu, rstd);
      std::vector<Shape> shapes = {{h}};
      if (!rms) shapes.push_back({h});
      shapes.push_back({h});  // the colsum
      check_against_cpu(
          *cpu, *gpu, std::string(rms ? "rmsnorm" : "layernorm") + " backward colsum " + shape, shapes,
          [&](Backend& be, std::vector<Tensor>& g, GradWrite m) {
            const bool on_cpu = &be == cpu.get();
            Tensor dx = be.empty({n, h}, DType::kBF16, MemoryKind::kOther), none;
            Tensor& dbeta = rms ? none : g[1];
            be.layernorm_backward_colsum(on_cpu ? dy : dyd, on_cpu ? x : xd, on_cpu ? gamma : gd, on_cpu ? mean : meand,
                                         on_cpu ? rstd : rstdd, dx, g[0], dbeta, g.back(), m, GradWrite::kOverwrite, m);
          },
          atol);
    }
  }
  // Embeddings: repeated tokens (sorted runs on CUDA) and every position, accumulated.
  const int64_t b = 4, s = 64, vocab = 50, h = 96;
  Tensor tokens = Tensor::cpu({b, s}, DType::kI32);
  for (int64_t i = 0; i < b * s; ++i) tokens.data_as<int32_t>()[i] = static_cast<int32_t>((i * 7) % vocab);
  const Tensor dout = host_random({s, b, h}, DType::kBF16, 9, -1.0f, 1.0f);
  const Tensor tokd = to_device(*gpu, tokens), doutd = to_device(*gpu, dout);
  check_against_cpu(
      *cpu, *gpu, "embedding_backward", {{vocab, h}, {s, h}},
      [&](Backend& be, std::vector<Tensor>& g, GradWrite) {
        const bool on_cpu = &be == cpu.get();
        be.embedding_backward(on_cpu ? tokens : tokd, Tensor(), on_cpu ? dout : doutd, g[0], g[1]);
      },
      1e-6 * static_cast<double>(b * s), /*has_mode=*/false);
}

// AdamW over a 16-bit gradient (adamw_update_segments and adamw_update): the CPU's bits, with
// the unscale and the clipping factor applied in that order; a shard offset (not 16-byte
// aligned) takes the element path.
TEST(CudaGradDtype, AdamWOverA16BitGradientEqualsTheCpu) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t skip : {int64_t{0}, int64_t{4}, int64_t{3}}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " skip " << skip);
      const int64_t P = 70001 + skip;
      Tensor p = host_random({P}, DType::kF32, 1, 0.01f, 1.0f), m = host_random({P}, DType::kF32, 2, 0.001f, 0.1f);
      // host_random draws +-[lo, hi]: the second moments are made non-negative, as Adam's are.
      Tensor v = host_random({P}, DType::kF32, 3, 0.001f, 0.1f), g = host_random({P}, dtype, 4, 0.01f, 300.0f);
      for (int64_t i = 0; i < P; ++i) v.data_as<float>()[i] = std::fabs(v.data_as<float>()[i]);
      auto view = [&](Tensor& t) { return t.flat_view(skip, {P - skip}); };
      const int64_t n = P - skip;
      Tensor segments = Tensor::cpu({2, 3}, DType::kI64);
      const int64_t seg[] = {0, n / 2, 1, n / 2, n - n / 2, 0};
      std::memcpy(segments.data(), seg, sizeof(seg));
      AdamWStep step;
      step.lr = 1e-3f;
      step.weight_decay = 0.1f;
      step.step = 5;
      step.grad_unscale = 1.0f / 1000.0f;
      step.grad_scale = 0.7f;
      Tensor pd = to_device(*gpu, p), md = to_device(*gpu, m), vd = to_device(*gpu, v), gd = to_device(*gpu, g);
      Tensor segd = to_device(*gpu, segments);
      Tensor copy_h = Tensor::cpu({n}, DType::kBF16), copy_d = gpu->empty({n}, DType::kBF16, MemoryKind::kOther);
      Tensor ph = view(p), mh = view(m), vh = view(v), pdv = view(pd), mdv = view(md), vdv = view(vd);
      cpu->adamw_update_segments(ph, view(g), mh, vh, segments, step, copy_h);
      gpu->adamw_update_segments(pdv, view(gd), mdv, vdv, segd, step, copy_d);
      EXPECT_TRUE(bitwise(to_host(*gpu, pdv), ph, "param"));
      EXPECT_TRUE(bitwise(to_host(*gpu, mdv), mh, "exp_avg"));
      EXPECT_TRUE(bitwise(to_host(*gpu, vdv), vh, "exp_avg_sq"));
      EXPECT_TRUE(bitwise(to_host(*gpu, copy_d), copy_h, "model copy"));
      cpu->adamw_update(ph, view(g), mh, vh, step);
      gpu->adamw_update(pdv, view(gd), mdv, vdv, step);
      EXPECT_TRUE(bitwise(to_host(*gpu, pdv), ph, "adamw_update param"));
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(ph.data_as<float>()[i])) << "param " << i;
    }
  }
}

}  // namespace
}  // namespace megatron::backend
