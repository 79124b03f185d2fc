// Speed of the CUDA backend's LayerNorm kernels at the row counts and widths training runs
// them: bf16 x [n, h], gamma and beta (the model's parameters), fp32 mean, rstd and parameter
// gradients, as the engine's layers call them. Not a test: speed is measured here, never in
// ctest.
//   layernorm_bench [REPEATS=50] [N:H ...]      (default: the shapes below)
// For each shape: forward, backward (dx = residual gradient + LayerNorm gradient, dgamma and
// dbeta accumulated: the engine's call) and backward with dx's column sums (the bias gradient
// of the linear before, layernorm_backward_colsum). Prints microseconds per call (CUDA events
// around REPEATS back-to-back calls after 3 warm-up calls, queued behind a long fill so that the
// host's launches are hidden) and the bandwidth of the bytes each
// call must move at least: forward reads x and writes out (2 n h e), the backward reads dy, x
// and the residual gradient and writes dx (4 n h e).
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/device.h"
#include "backend/ops.h"
#include "backend/profiling_backend.h"
#include "bench_cuda.h"
#include "core/dtype.h"
#include "core/memory.h"
#include "core/tensor.h"

namespace {

using namespace megatron;

// GPU microseconds per call of f: `repeats` calls between two CUDA events (the profiling
// backend's region timer), queued while the GPU is still busy filling `busy` (so that the host's
// launch time is hidden, as under the engine's CUDA graphs).
double time_us(backend::ProfilingBackend& prof, Tensor& busy, int repeats, const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  prof.synchronize();
  prof.reset();
  prof.set_enabled(false);
  for (int i = 0; i < 8; ++i) prof.fill(busy, 0.0f);
  prof.set_enabled(true);
  prof.time_region("calls", [&] {
    for (int i = 0; i < repeats; ++i) f();
  });
  prof.set_enabled(false);
  const backend::OpProfile r = prof.report();
  for (const backend::OpProfileRow& row : r.ops)
    if (row.op == "calls") return 1e3 * row.total_ms / repeats;
  std::fprintf(stderr, "layernorm_bench: no timing recorded\n");
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::have_cuda_device("layernorm_bench")) return 1;
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 50;
  // Rows x width: 124M/350M (16 x 1024 tokens), 1.3B and 2.7B (4 x 2048), 13B at micro-batch
  // 1 and 2 and its TP4 + SP shard (2048 / 4 rows), 175B's width at micro-batch 1 and its
  // TP8 + SP shard.
  std::vector<std::pair<int64_t, int64_t>> shapes = {{16384, 768}, {16384, 1024}, {8192, 2048},
                                                     {8192, 2560}, {2048, 5120},  {4096, 5120},
                                                     {512, 5120},  {2048, 12288}, {256, 12288}};
  if (argc > 2) {
    shapes.clear();
    for (int i = 2; i < argc; ++i) {
      long long n = 0, h = 0;
      if (std::sscanf(argv[i], "%lld:%lld", &n, &h) != 2 || n <= 0 || h <= 0) {
        std::fprintf(stderr, "layernorm_bench: shape '%s' is not N:H\n", argv[i]);
        return 1;
      }
      shapes.emplace_back(n, h);
    }
  }
  backend::ProfilingBackend prof(backend::make_cuda_backend(0));
  backend::Backend& inner = prof.inner();
  backend::Backend* be = &inner;  // the ops run untimed on the CUDA backend itself
  Tensor busy = be->empty({int64_t{1} << 28}, DType::kF32, MemoryKind::kOther);
  std::printf("layernorm_bench on %s, %d calls per figure\n", backend::cuda_device_name(0).c_str(), repeats);
  std::printf("%7s %6s  %12s %8s  %12s %8s  %12s %8s\n", "rows", "h", "forward us", "GB/s", "backward us", "GB/s",
              "+colsum us", "GB/s");
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const auto& [n, h] : shapes) {
    auto make = [&](Shape s, DType d) {
      Tensor host = Tensor::cpu(s, DType::kF32);
      float* p = host.data_as<float>();
      for (int64_t i = 0; i < host.numel(); ++i) p[i] = uniform(rng);
      Tensor t = be->empty(s, d, MemoryKind::kOther);
      be->copy(host, t);
      return t;
    };
    const Tensor x = make({n, h}, DType::kBF16), dy = make({n, h}, DType::kBF16);
    const Tensor gamma = make({h}, DType::kBF16), beta = make({h}, DType::kBF16);
    Tensor out = make({n, h}, DType::kBF16), dx = make({n, h}, DType::kBF16);
    Tensor mean = make({n}, DType::kF32), rstd = make({n}, DType::kF32);
    Tensor dgamma = make({h}, DType::kF32), dbeta = make({h}, DType::kF32), colsum = make({h}, DType::kF32);
    be->layernorm_forward(x, gamma, beta, 1e-5f, out, mean, rstd);  // real statistics for the backward
    const double e = 2.0, nh = static_cast<double>(n) * static_cast<double>(h);
    const double fwd =
        time_us(prof, busy, repeats, [&] { be->layernorm_forward(x, gamma, beta, 1e-5f, out, mean, rstd); });
    const double bwd = time_us(prof, busy, repeats, [&] {
      be->layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, backend::GradWrite::kAccumulate,
                             backend::GradWrite::kAccumulate);
    });
    const double bwd_colsum = time_us(prof, busy, repeats, [&] {
      be->layernorm_backward_colsum(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, colsum,
                                    backend::GradWrite::kAccumulate, backend::GradWrite::kAccumulate,
                                    backend::GradWrite::kAccumulate);
    });
    std::printf("%7lld %6lld  %12.2f %8.0f  %12.2f %8.0f  %12.2f %8.0f\n", static_cast<long long>(n),
                static_cast<long long>(h), fwd, 2 * e * nh / (fwd * 1e3), bwd, 4 * e * nh / (bwd * 1e3), bwd_colsum,
                4 * e * nh / (bwd_colsum * 1e3));
  }
  return 0;
}
