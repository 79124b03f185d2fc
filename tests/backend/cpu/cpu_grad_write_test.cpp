// GradWrite (backend/ops.h) on the CPU backend: kOverwrite ignores what a "(+=)" gradient
// holds (NaN here, so any read of it shows) and gives the bits of kAccumulate into zeros;
// kAccumulate still adds to what is there. Every op that takes a GradWrite is covered (the table
// in grad_writing_ops.h).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/cpu/grad_writing_ops.h"
#include "backend/ops.h"

namespace megatron::backend {
namespace {

using namespace megatron::test;

Tensor filled(Shape shape, double v) {
  Tensor t = Tensor::cpu(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) set(t, i, v);
  return t;
}

// write(grads..., mode) writes the op's gradient outputs. Checks: overwrite over NaN ==
// accumulate over zeros (bit for bit), and accumulate over `base` == base + the fresh values.
void check_grad_write(const std::string& what, std::vector<Shape> shapes,
                      const std::function<void(std::vector<Tensor>&, GradWrite)>& write) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<Tensor> over, zero, base;
  for (const Shape& s : shapes) {
    over.push_back(filled(s, nan));
    zero.push_back(filled(s, 0.0));
    base.push_back(filled(s, 0.25));
  }
  write(over, GradWrite::kOverwrite);
  write(zero, GradWrite::kAccumulate);
  write(base, GradWrite::kAccumulate);
  for (size_t k = 0; k < shapes.size(); ++k) {
    EXPECT_TRUE(bitwise_equal(over[k], zero[k])) << what << " output " << k;
    for (int64_t i = 0; i < zero[k].numel(); ++i) {
      ASSERT_EQ(static_cast<float>(get(base[k], i)), static_cast<float>(get(zero[k], i)) + 0.25f)
          << what << " output " << k << " element " << i;
    }
  }
}

TEST(CpuGradWrite, OverwriteIgnoresTheOldGradientAndAccumulateAddsToIt) {
  auto cpu = make_cpu_backend();
  auto rng = test_rng();
  for (const GradWritingOp& op : grad_writing_ops(*cpu, DType::kF32, rng))
    check_grad_write(op.name, op.grads, op.write);
  // No rows: overwrite still writes zeros, the GEMM's empty sum.
  const int64_t in = 24, out = 20;
  const Tensor w = random_tensor({out, in}, rng);
  check_grad_write("linear_backward, 0 rows", {{out, in}, {out}}, [&](std::vector<Tensor>& g, GradWrite m) {
    const Tensor x0 = Tensor::cpu({0, in}, DType::kF32), dy0 = Tensor::cpu({0, out}, DType::kF32);
    Tensor dx0 = Tensor::cpu({0, in}, DType::kF32);
    cpu->linear_backward(dy0, x0, w, dx0, g[0], g[1], m);
  });
}

}  // namespace
}  // namespace megatron::backend
