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
// and for FC1 / FC2 the fused forms the engine runs there:
//   fwd gelu     FC1: linear_gelu_forward, y = gelu(x W^T + b) with the pre-activation saved
//                (cuBLASLt's GELU_AUX_BIAS epilogue: a second [n, out] output)
//   dgelu bwd    FC2: linear_dgelu_backward, dpre = (dy W) gelu'(pre) (the DGELU epilogue,
//                reading pre [n, in]), dW and the bias gradient: two GEMMs
// Each form runs on two backends: cuBLASLt's heuristic algorithm (the default) and the
// autotuned one (MEGATRON_GEMM_AUTOTUNE, gemm_tuning.h): the fastest of its top candidates.
// Inputs are random in [-1, 1] (constant inputs toggle fewer bits, draw less power and run
// faster than training data does). Prints ms per call (mean of REPEATS after 3 warm-up calls,
// CUDA-synchronised) and TFLOP/s of the GEMM.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/gemm_tuning.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "bench_cuda.h"
#include "core/dtype.h"
#include "core/memory.h"
#include "core/tensor.h"

namespace {

using namespace megatron;
using bench::time_ms;

}  // namespace

int main(int argc, char** argv) {
  if (!bench::have_cuda_device("gemm_bench")) return 1;
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 8192;
  const int64_t h = argc > 2 ? std::atoll(argv[2]) : 2048;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 20;
  auto be = backend::make_cuda_backend(0);
  auto tuned = backend::make_cuda_backend(0);
  backend::set_gemm_autotune(*be, false);
  backend::set_gemm_autotune(*tuned, true);
  std::printf("gemm_bench on %s: tokens %lld, hidden %lld\n", backend::cuda_device_name(0).c_str(),
              static_cast<long long>(n), static_cast<long long>(h));
  std::printf("%-6s %6s %6s  %-13s %9s %9s %9s %9s\n", "gemm", "in", "out", "form", "ms", "TFLOP/s", "tuned ms",
              "TFLOP/s");
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
    const Tensor dy = make({n, l.out}, DType::kBF16), b = make({l.out}, DType::kBF16);
    Tensor y = make({n, l.out}, DType::kBF16), dx = make({n, l.in}, DType::kBF16);
    Tensor dw32 = make({l.out, l.in}, DType::kF32), dw16 = make({l.out, l.in}, DType::kBF16);
    Tensor dwt32 = make({l.in, l.out}, DType::kF32), db = make({l.out}, DType::kF32), no_dx;
    const bool fc1 = l.out == 4 * h, fc2 = l.in == 4 * h;
    Tensor pre_out = fc1 ? make({n, l.out}, DType::kBF16) : Tensor();  // FC1's saved pre-activation
    Tensor pre_in = fc2 ? make({n, l.in}, DType::kBF16) : Tensor();    // FC2's input's pre-activation
    const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(l.in) * static_cast<double>(l.out);
    using Form = std::function<void(backend::Backend&)>;
    std::vector<std::tuple<const char*, Form, double>> forms = {
        {"fwd", [&](backend::Backend& e) { e.linear_forward(x, w, Tensor(), y); }, flops},
        {"dgrad", [&](backend::Backend& e) { e.matmul(dy, false, w, false, dx); }, flops},
        {"wgrad fp32", [&](backend::Backend& e) { e.matmul(dy, true, x, false, dw32); }, flops},
        {"wgrad bf16", [&](backend::Backend& e) { e.matmul(dy, true, x, false, dw16); }, flops},
        {"wgrad^T fp32", [&](backend::Backend& e) { e.matmul(x, true, dy, false, dwt32); }, flops},
        {"dW + dbias",
         [&](backend::Backend& e) { e.linear_backward(dy, x, w, no_dx, dw32, db, backend::GradWrite::kOverwrite); },
         flops},
    };
    if (fc1) {
      forms.emplace_back(
          "fwd gelu", [&](backend::Backend& e) { e.linear_gelu_forward(x, w, b, pre_out, y, backend::Gelu::kTanh); },
          flops);
    }
    if (fc2) {
      forms.emplace_back(
          "dgelu bwd",
          [&](backend::Backend& e) {
            e.linear_dgelu_backward(dy, x, w, pre_in, dx, dw32, db, backend::Gelu::kTanh,
                                    backend::GradWrite::kOverwrite);
          },
          2.0 * flops);
    }
    for (const auto& [form, f, form_flops] : forms) {
      const double ms = time_ms(*be, repeats, [&, &f = f] { f(*be); });
      const double tuned_ms = time_ms(*tuned, repeats, [&, &f = f] { f(*tuned); });
      std::printf("%-6s %6lld %6lld  %-13s %9.4f %9.1f %9.4f %9.1f\n", l.name, static_cast<long long>(l.in),
                  static_cast<long long>(l.out), form, ms, form_flops / (ms * 1e-3) / 1e12, tuned_ms,
                  form_flops / (tuned_ms * 1e-3) / 1e12);
    }
  }
  return 0;
}
