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
#include "core/dtype.h"

namespace megatron::backend {
namespace {

using namespace megatron::test;

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

// No rows (an empty micro-batch shard): overwriting writes the empty sum, zeros, in every
// output (the GEMM's k == 0 path, bias_grad's and layernorm_backward's early fills); fp32 too.
TEST(CudaGradWrite, OverwriteWithNoRowsWritesZeros) {
  MT_REQUIRE_CUDA();
  auto gpu = make_cuda_backend();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const int64_t in = 24, out = 40, h = 24;
    const Tensor x = gpu->empty({0, in}, dt, MemoryKind::kOther), dy = gpu->empty({0, out}, dt, MemoryKind::kOther);
    const Tensor w = to_device(*gpu, host_random({out, in}, dt, 5));
    Tensor dx = gpu->empty({0, in}, dt, MemoryKind::kOther);
    Tensor dw = device_filled(*gpu, {out, in}, nan), db = device_filled(*gpu, {out}, nan);
    gpu->linear_backward(dy, x, w, dx, dw, db, GradWrite::kOverwrite);
    const Tensor gamma = to_device(*gpu, host_random({h}, dt, 6));
    const Tensor mean = gpu->empty({0}, DType::kF32, MemoryKind::kOther);
    const Tensor rstd = gpu->empty({0}, DType::kF32, MemoryKind::kOther);
    Tensor dg = device_filled(*gpu, {h}, nan), dbeta = device_filled(*gpu, {h}, nan);
    Tensor dln = gpu->empty({0, h}, dt, MemoryKind::kOther);
    gpu->layernorm_backward(dy.view({0, h}), x.view({0, h}), gamma, mean, rstd, dln, dg, dbeta, GradWrite::kOverwrite);
    for (const Tensor* t : {&dw, &db, &dg, &dbeta}) {
      const Tensor host = to_host(*gpu, *t);
      for (int64_t i = 0; i < host.numel(); ++i) ASSERT_EQ(get(host, i), 0.0) << dtype_name(dt) << " " << t->describe();
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
    Tensor out = gpu->empty({n, h}, DType::kBF16, MemoryKind::kOther),
           dx = gpu->empty({n, h}, DType::kBF16, MemoryKind::kOther);
    Tensor mean = gpu->empty({n}, DType::kF32, MemoryKind::kOther),
           rstd = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
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
