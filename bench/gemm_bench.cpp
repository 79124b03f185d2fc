// Throughput of the GPT layer GEMMs on the CUDA backend, each problem in the forms a training
// step could run it, to decide which form the engine should use. Not a test: speed is
// measured here, never in ctest.
//   gemm_bench [TOKENS=8192] [HIDDEN=2048] [REPEATS=20]
// For each layer GEMM (QKV h -> 3h, projection h -> h, FC1 h -> 4h, FC2 4h -> h) with x [n, in],
// W [out, in], dy [n, out]:
//   fwd          y = x W^T                     bf16 out (the forward)
//   dgrad        dx = dy W                     bf16 out
//   wgrad fp32   dW = dy^T x                   fp32 out (the main gradient, what the engine runs)
//   wgrad bf16   dW = dy^T x                   bf16 out (Megatron without gradient-accumulation
//                                              fusion: then added into the fp32 main gradient)
//   wgrad^T fp32 dW^T = x^T dy                 fp32 out (the same product, other layout)
//   dW + dbias   linear_backward without dx: wgrad fp32 and the bias gradient (the column
//                sums of dy, by the fixed-order reduction kernel), as the engine runs them
// Inputs are random in [-1, 1] (constant inputs toggle fewer bits, draw less power and run
// faster than training data does). Prints ms per call (mean of REPEATS after 3 warm-up calls,
// CUDA-synchronised) and TFLOP/s of the GEMM.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>

#include "backend/device.h"
#include "backend/ops.h"
#include "core/dtype.h"
#include "core/memory.h"
#include "core/tensor.h"

namespace {

using namespace megatron;
using Clock = std::chrono::steady_clock;

double time_ms(backend::Backend& be, int repeats, const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  be.synchronize();
  const auto t0 = Clock::now();
  for (int i = 0; i < repeats; ++i) f();
  be.synchronize();
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / repeats;
}

}  // namespace

int main(int argc, char** argv) {
  if (backend::cuda_device_count() == 0) {
    std::fprintf(stderr, "gemm_bench: no CUDA device (this build %s CUDA)\n",
                 backend::built_with_cuda() ? "has" : "has no");
    return 1;
  }
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 8192;
  const int64_t h = argc > 2 ? std::atoll(argv[2]) : 2048;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 20;
  auto be = backend::make_cuda_backend(0);
  std::printf("gemm_bench on %s: tokens %lld, hidden %lld\n", backend::cuda_device_name(0).c_str(),
              static_cast<long long>(n), static_cast<long long>(h));
  std::printf("%-6s %6s %6s  %-13s %9s %9s\n", "gemm", "in", "out", "form", "ms", "TFLOP/s");
  struct Layer {
    const char* name;
    int64_t in, out;
  };
  const Layer layers[] = {{"qkv", h, 3 * h}, {"proj", h, h}, {"fc1", h, 4 * h}, {"fc2", 4 * h, h}};
  for (const Layer& l : layers) {
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    auto make = [&](Shape s, DType d) {
      Tensor host = Tensor::cpu(s, DType::kF32);
      float* p = host.data_as<float>();
      for (int64_t i = 0; i < host.numel(); ++i) p[i] = uniform(rng);
      Tensor t = be->empty(s, d, MemoryKind::kOther);
      be->copy(host, t);
      return t;
    };
    const Tensor x = make({n, l.in}, DType::kBF16), w = make({l.out, l.in}, DType::kBF16);
    const Tensor dy = make({n, l.out}, DType::kBF16);
    Tensor y = make({n, l.out}, DType::kBF16), dx = make({n, l.in}, DType::kBF16);
    Tensor dw32 = make({l.out, l.in}, DType::kF32), dw16 = make({l.out, l.in}, DType::kBF16);
    Tensor dwt32 = make({l.in, l.out}, DType::kF32), db = make({l.out}, DType::kF32), no_dx;
    const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(l.in) * static_cast<double>(l.out);
    const std::pair<const char*, std::function<void()>> forms[] = {
        {"fwd", [&] { be->linear_forward(x, w, Tensor(), y); }},
        {"dgrad", [&] { be->matmul(dy, false, w, false, dx); }},
        {"wgrad fp32", [&] { be->matmul(dy, true, x, false, dw32); }},
        {"wgrad bf16", [&] { be->matmul(dy, true, x, false, dw16); }},
        {"wgrad^T fp32", [&] { be->matmul(x, true, dy, false, dwt32); }},
        {"dW + dbias", [&] { be->linear_backward(dy, x, w, no_dx, dw32, db, backend::GradWrite::kOverwrite); }},
    };
    for (const auto& [form, f] : forms) {
      const double ms = time_ms(*be, repeats, f);
      std::printf("%-6s %6lld %6lld  %-13s %9.4f %9.1f\n", l.name, static_cast<long long>(l.in),
                  static_cast<long long>(l.out), form, ms, flops / (ms * 1e-3) / 1e12);
    }
  }
  return 0;
}
