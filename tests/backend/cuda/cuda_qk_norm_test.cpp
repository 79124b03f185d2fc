// The CUDA query/key norms (src/backend/cuda/cuda_qk_norm.cu) against the CPU reference
// (cpu_qk_norm.cpp): forward (qkv in place, the saved x, mean and rstd) and backward (dqkv in
// place, the four parameter gradients overwritten and accumulated) on the fused qkv layout with
// query groups, LayerNorm and RMSNorm, with and without 1 + weight, every float dtype; the value
// columns keep their bits. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>

#include "backend/cpu/cpu_test_util.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "backend/qk_norm.h"
#include "backend/qkv_layout.h"

namespace megatron::backend {
namespace {

struct Case {
  int64_t s, b, heads, groups, head_dim;
  bool layernorm;
  bool zero_centered;
};

std::string case_name(const Case& c) {
  std::ostringstream n;
  n << "s" << c.s << "_b" << c.b << "_h" << c.heads << "_g" << c.groups << "_d" << c.head_dim
    << (c.layernorm ? "_layernorm" : "_rmsnorm") << (c.zero_centered ? "_1p" : "");
  return n.str();
}

class CudaQkNorm : public ::testing::TestWithParam<Case> {};

TEST_P(CudaQkNorm, ForwardAndBackwardMatchCpu) {
  MT_REQUIRE_CUDA();
  const Case c = GetParam();
  SCOPED_TRACE(case_name(c));
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  QkNormParams p;
  p.heads = c.heads;
  p.query_groups = c.groups;
  p.head_dim = c.head_dim;
  p.eps = 1e-5f;
  p.zero_centered = c.zero_centered;
  const QkvLayout L(c.heads, c.groups, c.head_dim);
  const int64_t n = c.s * c.b, vectors = n * (c.heads + c.groups), d = c.head_dim;
  for (const DType dt : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dt));
    const uint64_t seed = 17 + static_cast<uint64_t>(c.s * 31 + c.head_dim);
    // Weights near their init value (1, or 0 with 1 + weight); the biases small.
    const float w0 = c.zero_centered ? 0.0f : 1.0f;
    Tensor qw = host_random({d}, dt, seed + 1, 0.0f, 0.5f), kw = host_random({d}, dt, seed + 2, 0.0f, 0.5f);
    for (Tensor* w : {&qw, &kw}) {
      for (int64_t j = 0; j < d; ++j) test::set(*w, j, w0 + static_cast<float>(test::get(*w, j)));
    }
    Tensor qb, kb;
    if (c.layernorm) {
      qb = host_random({d}, dt, seed + 3, 0.0f, 0.3f);
      kb = host_random({d}, dt, seed + 4, 0.0f, 0.3f);
    }
    const Tensor qkv = host_random({c.s, c.b, L.width()}, dt, seed, 0.1f, 3.0f);

    // Forward.
    Tensor y = Tensor::cpu(qkv.shape(), dt);
    cpu->copy(qkv, y);
    Tensor x = Tensor::cpu({vectors * d}, dt), rstd = Tensor::cpu({vectors}, DType::kF32);
    Tensor mean = c.layernorm ? Tensor::cpu({vectors}, DType::kF32) : Tensor();
    qk_norm_forward(*cpu, y, qw, qb, kw, kb, x, mean, rstd, p);
    Tensor yd = to_device(*gpu, qkv);
    const Tensor qwd = to_device(*gpu, qw), kwd = to_device(*gpu, kw);
    const Tensor qbd = c.layernorm ? to_device(*gpu, qb) : Tensor(), kbd = c.layernorm ? to_device(*gpu, kb) : Tensor();
    Tensor xd = gpu->empty(x.shape(), dt, MemoryKind::kOther);
    Tensor rstdd = gpu->empty(rstd.shape(), DType::kF32, MemoryKind::kOther);
    Tensor meand = c.layernorm ? gpu->empty(mean.shape(), DType::kF32, MemoryKind::kOther) : Tensor();
    qk_norm_forward(*gpu, yd, qwd, qbd, kwd, kbd, xd, meand, rstdd, p);
    EXPECT_TRUE(bitwise(to_host(*gpu, xd), x, "qk norm saved x"));
    if (c.layernorm) EXPECT_TRUE(close(to_host(*gpu, meand), mean, 1e-6, 2e-6, 0, "qk norm mean"));
    EXPECT_TRUE(close(to_host(*gpu, rstdd), rstd, 0.0, 1e-5, 0, "qk norm rstd"));
    // Normalised values are O(1): the layernorm kernels' bounds (cuda_norm_test.cpp).
    const Tensor y_gpu = to_host(*gpu, yd);
    EXPECT_TRUE(close(y_gpu, y, 3e-5, 1e-5, 1, "qk norm out"));
    // The value columns are the input's bits.
    const int64_t es = dtype_size(dt);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t g = 0; g < c.groups; ++g) {
        const int64_t col = L.v_col(g);
        const auto* got = static_cast<const char*>(y_gpu.data()) + (r * L.width() + col) * es;
        const auto* want = static_cast<const char*>(qkv.data()) + (r * L.width() + col) * es;
        ASSERT_EQ(std::memcmp(got, want, static_cast<size_t>(d * es)), 0) << "value of row " << r << " group " << g;
      }
    }

    // Backward from the same saved tensors on both (the CPU's), written then accumulated.
    const Tensor dy = host_random(qkv.shape(), dt, seed + 5, 0.1f, 1.0f);
    // The weight gradients in fp32, and in the model dtype (a 16-bit gradient buffer: one
    // rounding of the fp32 sum, so within 1 ulp of the CPU's).
    std::vector<DType> grad_dtypes = {DType::kF32};
    if (dt != DType::kF32) grad_dtypes.push_back(dt);
    for (const DType gdt : grad_dtypes)
      for (const GradWrite write : {GradWrite::kOverwrite, GradWrite::kAccumulate}) {
        SCOPED_TRACE(testing::Message() << (write == GradWrite::kOverwrite ? "overwrite" : "accumulate") << " grads "
                                        << dtype_name(gdt));
        const int ulps = gdt == DType::kF32 ? 0 : 1;
        Tensor dx = Tensor::cpu(dy.shape(), dt);
        cpu->copy(dy, dx);
        const float start = write == GradWrite::kOverwrite ? 0.0f : 0.5f;
        auto grad = [&](bool defined) {
          Tensor g = defined ? Tensor::cpu({d}, gdt) : Tensor();
          if (defined) cpu->fill(g, start);
          return g;
        };
        Tensor dqw = grad(true), dkw = grad(true), dqb = grad(c.layernorm), dkb = grad(c.layernorm);
        qk_norm_backward(*cpu, dx, x, qw, kw, mean, rstd, dqw, dqb, dkw, dkb, p, write);
        Tensor dxd = to_device(*gpu, dy);
        const Tensor xs = to_device(*gpu, x), ms = c.layernorm ? to_device(*gpu, mean) : Tensor();
        const Tensor rs = to_device(*gpu, rstd);
        // Overwritten gradients start as NaN: any read of them shows.
        const float dev_start = write == GradWrite::kOverwrite ? std::nanf("") : start;
        auto filled = [&] {
          Tensor t = gpu->empty({d}, gdt, MemoryKind::kOther);
          gpu->fill(t, dev_start);
          return t;
        };
        Tensor dqwd = filled(), dkwd = filled();
        Tensor dqbd = c.layernorm ? filled() : Tensor();
        Tensor dkbd = c.layernorm ? filled() : Tensor();
        qk_norm_backward(*gpu, dxd, xs, qwd, kwd, ms, rs, dqwd, dqbd, dkwd, dkbd, p, write);
        EXPECT_TRUE(close(to_host(*gpu, dxd), dx, 1e-5, 1e-5, 1, "qk norm dx"));
        // Sums over n * H (or n * G) vectors of O(1) terms: relative 1e-5 of the sum's scale.
        const double atol = 2e-5 * static_cast<double>(n * c.heads);
        EXPECT_TRUE(close(to_host(*gpu, dqwd), dqw, atol, 1e-5, ulps, "qk norm dq_weight"));
        EXPECT_TRUE(close(to_host(*gpu, dkwd), dkw, atol, 1e-5, ulps, "qk norm dk_weight"));
        if (c.layernorm) {
          EXPECT_TRUE(close(to_host(*gpu, dqbd), dqb, atol, 1e-5, ulps, "qk norm dq_bias"));
          EXPECT_TRUE(close(to_host(*gpu, dkbd), dkb, atol, 1e-5, ulps, "qk norm dk_bias"));
        }
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaQkNorm,
                         ::testing::Values(
                             // Llama-like heads (128, 64) in groups, MHA / GQA / MQA, both norms, 1p.
                             Case{128, 2, 8, 2, 128, false, false}, Case{64, 2, 8, 8, 64, true, false},
                             Case{33, 3, 6, 1, 128, true, true}, Case{100, 1, 4, 2, 128, false, true},
                             // A head_dim that is not a multiple of the vector width; a single row.
                             Case{17, 2, 4, 2, 6, true, false}, Case{1, 1, 2, 1, 8, false, false}),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

}  // namespace
}  // namespace megatron::backend
