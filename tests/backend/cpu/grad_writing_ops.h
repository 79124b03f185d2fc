// The CPU backend's ops that write "(+=)" parameter gradients under a GradWrite (backend/ops.h),
// each as a closure over fixed random inputs whose activations are of `dtype`: the one table
// that cpu_grad_write_test (GradWrite's contract) and cpu_grad_dtype_test (16-bit gradients) run.
// write(grads, mode) writes the op's gradient outputs, of the shapes in `grads`.
#pragma once

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/fp8_recipe.h"
#include "backend/ops.h"

namespace megatron::test {

struct GradWritingOp {
  std::string name;
  std::vector<Shape> grads;
  std::function<void(std::vector<Tensor>&, backend::GradWrite)> write;
};

inline std::vector<GradWritingOp> grad_writing_ops(backend::Backend& cpu, DType dtype, std::mt19937_64& rng) {
  using backend::DropoutParams;
  using backend::Gelu;
  using backend::GradWrite;
  const int64_t n = 37, in = 24, out = 20, h = in;
  const Tensor x = random_tensor({n, in}, rng, dtype), dy = random_tensor({n, out}, rng, dtype);
  const Tensor w = random_tensor({out, in}, rng, dtype), pre = random_tensor({n, in}, rng, dtype);
  const Tensor gamma = random_tensor({h}, rng), beta = random_tensor({h}, rng);
  Tensor ln_out = Tensor::cpu({n, h}, dtype), mean = Tensor::cpu({n}), rstd = Tensor::cpu({n});
  cpu.layernorm_forward(x, gamma, beta, 1e-5f, ln_out, mean, rstd);
  const Tensor dln = random_tensor({n, h}, rng, dtype);
  // An FP8 cast's bias gradient (the column sums of its source, here the GELU gradient).
  auto fp8 = std::make_shared<backend::Fp8ScalingState>(cpu, backend::Fp8Config{}, backend::kFp8Roles);
  std::vector<GradWritingOp> ops;
  ops.push_back({"linear_backward", {{out, in}, {out}}, [=, &cpu](std::vector<Tensor>& g, GradWrite m) {
                   Tensor dx = Tensor::cpu({n, in}, dtype);
                   cpu.linear_backward(dy, x, w, dx, g[0], g[1], m);
                 }});
  ops.push_back({"linear_dgelu_backward", {{out, in}, {out}}, [=, &cpu](std::vector<Tensor>& g, GradWrite m) {
                   Tensor dpre = Tensor::cpu({n, in}, dtype);
                   cpu.linear_dgelu_backward(dy, x, w, pre, dpre, g[0], g[1], Gelu::kTanh, m);
                 }});
  ops.push_back({"bias_grad", {{out}}, [=, &cpu](std::vector<Tensor>& g, GradWrite m) { cpu.bias_grad(dy, g[0], m); }});
  ops.push_back({"fp8_cast bias gradient", {{in}}, [=, &cpu](std::vector<Tensor>& g, GradWrite m) {
                   Tensor q = Tensor::cpu({n, in}, DType::kF8E5M2), none;
                   const backend::Fp8Source src(x, backend::Fp8Prologue::kGeluGrad, Gelu::kTanh, pre);
                   cpu.fp8_cast(src, q, none, fp8->quantization(2), g[0], m);
                 }});
  ops.push_back({"layernorm_backward", {{h}, {h}}, [=, &cpu](std::vector<Tensor>& g, GradWrite m) {
                   Tensor dx = Tensor::cpu({n, h}, dtype);
                   cpu.layernorm_backward(dln, x, gamma, mean, rstd, dx, g[0], g[1], m);
                 }});
  ops.push_back({"layernorm_backward_colsum", {{h}, {h}, {h}}, [=, &cpu](std::vector<Tensor>& g, GradWrite m) {
                   Tensor dx = Tensor::cpu({n, h}, dtype);
                   cpu.layernorm_backward_colsum(dln, x, gamma, mean, rstd, dx, g[0], g[1], g[2], m,
                                                 GradWrite::kOverwrite, m);
                 }});
  ops.push_back({"layernorm_backward_dropout_colsum", {{h}, {h}, {h}}, [=, &cpu](std::vector<Tensor>& g, GradWrite m) {
                   Tensor dx = Tensor::cpu({n, h}, dtype), dz = Tensor::cpu({n, h}, dtype);
                   cpu.layernorm_backward_dropout_colsum(dln, x, gamma, mean, rstd, dx, g[0], g[1], dz, g[2],
                                                         DropoutParams{0.3f, 5, 9, 0}, m, GradWrite::kOverwrite, m);
                 }});
  return ops;
}

}  // namespace megatron::test
