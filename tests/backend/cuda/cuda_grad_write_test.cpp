// GradWrite (backend/ops.h) on the CUDA backend, bf16 GPT shapes and awkward ones: over a
// gradient full of NaN, kOverwrite gives the same values as kAccumulate over zeros (the
// weight GEMM with beta = 0 may run another cuBLASLt algorithm than with beta = 1, so it is
// compared within fp32 summation-order tolerance; the bias and LayerNorm reductions are the
// same kernels and must match bit for bit), and no NaN survives anywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/ops.h"

namespace megatron::backend {
namespace {

using namespace megatron::test;

Tensor device_filled(Backend& gpu, Shape shape, float v) {
  Tensor t = gpu.empty(std::move(shape), DType::kF32, MemoryKind::kOther);
  gpu.fill(t, v);
  return t;
}

// [n, in] -> [n, out] linears: GPT-2 124M's QKV and FC2 at 16 x 1024 rows, and sizes one off
// the tiles.
const std::vector<std::tuple<int64_t, int64_t, int64_t>> kLinearShapes = {
    {16384, 768, 2304}, {8192, 3072, 768}, {129, 65, 127}, {1, 8, 8}};

TEST(CudaGradWrite, OverwriteGivesTheValuesOfAccumulatingIntoZeros) {
  MT_REQUIRE_CUDA();
  auto gpu = make_cuda_backend();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  uint64_t seed = 11;
  for (const auto& [n, in, out] : kLinearShapes) {
    const std::string what = std::to_string(n) + "x" + std::to_string(in) + "->" + std::to_string(out);
    const Tensor x = to_device(*gpu, host_random({n, in}, DType::kBF16, ++seed));
    const Tensor dy = to_device(*gpu, host_random({n, out}, DType::kBF16, ++seed));
    const Tensor w = to_device(*gpu, host_random({out, in}, DType::kBF16, ++seed));
    const Tensor pre = to_device(*gpu, host_random({n, in}, DType::kBF16, ++seed));
    Tensor dx = gpu->empty({n, in}, DType::kBF16, MemoryKind::kOther);
    // fp32 sums of n products of values below 1: order effects of a few ulps of the result.
    const double atol = 1e-5 * static_cast<double>(n), rtol = 1e-5;
    for (bool gelu : {false, true}) {
      Tensor dw_over = device_filled(*gpu, {out, in}, nan), db_over = device_filled(*gpu, {out}, nan);
      Tensor dw_acc = device_filled(*gpu, {out, in}, 0.0f), db_acc = device_filled(*gpu, {out}, 0.0f);
      if (gelu) {
        gpu->linear_dgelu_backward(dy, x, w, pre, dx, dw_over, db_over, Gelu::kTanh, GradWrite::kOverwrite);
        gpu->linear_dgelu_backward(dy, x, w, pre, dx, dw_acc, db_acc, Gelu::kTanh, GradWrite::kAccumulate);
      } else {
        gpu->linear_backward(dy, x, w, dx, dw_over, db_over, GradWrite::kOverwrite);
        gpu->linear_backward(dy, x, w, dx, dw_acc, db_acc, GradWrite::kAccumulate);
      }
      const std::string op = what + (gelu ? " dgelu" : "");
      EXPECT_TRUE(close(to_host(*gpu, dw_over), to_host(*gpu, dw_acc), atol, rtol, 0, op + " dw"));
      EXPECT_TRUE(bitwise(to_host(*gpu, db_over), to_host(*gpu, db_acc), op + " dbias"));
    }
    // bias_grad alone, and accumulation on top of an overwrite doubles it exactly.
    Tensor db = device_filled(*gpu, {out}, nan);
    gpu->bias_grad(dy, db, GradWrite::kOverwrite);
    const Tensor once = to_host(*gpu, db);
    gpu->bias_grad(dy, db, GradWrite::kAccumulate);
    const Tensor twice = to_host(*gpu, db);
    for (int64_t i = 0; i < out; ++i) {
      ASSERT_FALSE(std::isnan(get(once, i))) << what << " bias_grad " << i;
      ASSERT_EQ(get(twice, i), 2.0 * get(once, i)) << what << " bias_grad " << i;
    }
  }
}

TEST(CudaGradWrite, LayernormOverwriteIsTheAccumulationIntoZerosBitForBit) {
  MT_REQUIRE_CUDA();
  auto gpu = make_cuda_backend();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  uint64_t seed = 29;
  // The fast path (h 768, 2048) and the generic one (h 25000).
  for (const auto& [n, h] : std::vector<std::pair<int64_t, int64_t>>{{8192, 768}, {4096, 2048}, {3, 25000}}) {
    const std::string what = std::to_string(n) + "x" + std::to_string(h);
    const Tensor x = to_device(*gpu, host_random({n, h}, DType::kBF16, ++seed));
    const Tensor dy = to_device(*gpu, host_random({n, h}, DType::kBF16, ++seed));
    const Tensor gamma = to_device(*gpu, host_random({h}, DType::kBF16, ++seed));
    const Tensor beta = to_device(*gpu, host_random({h}, DType::kBF16, ++seed));
    Tensor out = gpu->empty({n, h}, DType::kBF16, MemoryKind::kOther), dx = gpu->empty({n, h}, DType::kBF16, MemoryKind::kOther);
    Tensor mean = gpu->empty({n}, DType::kF32, MemoryKind::kOther), rstd = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
    gpu->layernorm_forward(x, gamma, beta, 1e-5f, out, mean, rstd);
    Tensor dg_over = device_filled(*gpu, {h}, nan), db_over = device_filled(*gpu, {h}, nan);
    Tensor dg_acc = device_filled(*gpu, {h}, 0.0f), db_acc = device_filled(*gpu, {h}, 0.0f);
    gpu->layernorm_backward(dy, x, gamma, mean, rstd, dx, dg_over, db_over, GradWrite::kOverwrite);
    gpu->layernorm_backward(dy, x, gamma, mean, rstd, dx, dg_acc, db_acc, GradWrite::kAccumulate);
    EXPECT_TRUE(bitwise(to_host(*gpu, dg_over), to_host(*gpu, dg_acc), what + " dgamma"));
    EXPECT_TRUE(bitwise(to_host(*gpu, db_over), to_host(*gpu, db_acc), what + " dbeta"));
  }
}

}  // namespace
}  // namespace megatron::backend
