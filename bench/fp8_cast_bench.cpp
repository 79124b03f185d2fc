// Speed of the FP8 casts a GPT layer's FP8 linears run (Backend::fp8_cast on the CUDA backend),
// each at the shape and in the form the engine issues it, against the bytes it must move. Not a
// test: speed is measured here, never in ctest.
//   fp8_cast_bench [TOKENS=8192] [HIDDEN=2560] [REPEATS=20]
// Per layer (x [n, in] of each linear, dy [n, out], W [out, in]; ffn 4h, GELU MLP):
//   x qkv, x proj, x fc1      identity, row-major codes (the forward GEMM's A)
//   x fc2 gelu                gelu(fc1 out), row-major and transposed codes (the forward's A and
//                             the saved wgrad operand)
//   w (each)                  identity, both layouts (the forward's B, dgrad's B^T)
//   dy (each)                 identity, both layouts, with the bias gradient summed
//   dy fc1 gelu'              d(act) * gelu'(fc1 out), both layouts and the bias gradient
// under each recipe: delayed (one pass, the amax recorded inside it) and tensorwise (an amax
// pass, then the cast). Bytes = what the cast reads (16-bit x, and aux) plus writes (1-byte
// codes per layout); GB/s = bytes / time. Prints ms per call (mean of REPEATS after 3 warm-up
// calls, CUDA-synchronised) and GB/s.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/device.h"
#include "backend/ops.h"
#include "bench_cuda.h"
#include "core/dtype.h"
#include "core/memory.h"
#include "core/tensor.h"

namespace {

using namespace megatron;
using bench::time_ms;

Tensor scalar(backend::Backend& be, float v) {
  Tensor host = Tensor::cpu({1}, DType::kF32);
  host.data_as<float>()[0] = v;
  Tensor t = be.empty({1}, DType::kF32, MemoryKind::kOther);
  be.copy(host, t);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::have_cuda_device("fp8_cast_bench")) return 1;
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 8192;
  const int64_t h = argc > 2 ? std::atoll(argv[2]) : 2560;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 20;
  auto be = backend::make_cuda_backend(0);
  std::printf("fp8_cast_bench on %s: tokens %lld, hidden %lld\n", backend::cuda_device_name(0).c_str(),
              static_cast<long long>(n), static_cast<long long>(h));
  std::printf("%-16s %6s %6s  %-10s %9s %8s %9s\n", "cast", "rows", "cols", "recipe", "ms", "MB", "GB/s");
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto make = [&](Shape s) {
    Tensor host = Tensor::cpu(s, DType::kF32);
    float* p = host.data_as<float>();
    for (int64_t i = 0; i < host.numel(); ++i) p[i] = normal(rng);
    Tensor t = be->empty(s, DType::kBF16, MemoryKind::kOther);
    be->copy(host, t);
    return t;
  };
  struct Cast {
    const char* name;
    int64_t rows, cols;
    backend::Fp8Prologue prologue;
    bool row_major, transposed, dbias;
    Fp8Format format;
  };
  using P = backend::Fp8Prologue;
  const int64_t f = 4 * h;
  const Cast casts[] = {
      {"x qkv/proj/fc1", n, h, P::kIdentity, true, false, false, Fp8Format::kE4M3},
      {"x fc2 gelu", n, f, P::kGelu, true, true, false, Fp8Format::kE4M3},
      {"w qkv", 3 * h, h, P::kIdentity, true, true, false, Fp8Format::kE4M3},
      {"w proj", h, h, P::kIdentity, true, true, false, Fp8Format::kE4M3},
      {"w fc1", f, h, P::kIdentity, true, true, false, Fp8Format::kE4M3},
      {"w fc2", h, f, P::kIdentity, true, true, false, Fp8Format::kE4M3},
      {"dy qkv", n, 3 * h, P::kIdentity, true, true, true, Fp8Format::kE5M2},
      {"dy proj/fc2", n, h, P::kIdentity, true, true, true, Fp8Format::kE5M2},
      {"dy fc1 gelu'", n, f, P::kGeluGrad, true, true, true, Fp8Format::kE5M2},
  };
  double total_ms[2] = {0.0, 0.0};
  for (const Cast& c : casts) {
    const Tensor x = make({c.rows, c.cols});
    const Tensor aux = c.prologue == P::kGeluGrad ? make({c.rows, c.cols}) : Tensor();
    const DType qd = c.format == Fp8Format::kE4M3 ? DType::kF8E4M3 : DType::kF8E5M2;
    Tensor q = c.row_major ? be->empty({c.rows, c.cols}, qd, MemoryKind::kOther) : Tensor();
    Tensor qt = c.transposed ? be->empty({c.cols, c.rows}, qd, MemoryKind::kOther) : Tensor();
    Tensor db = c.dbias ? be->empty({c.cols}, DType::kF32, MemoryKind::kOther) : Tensor();
    const double elements = static_cast<double>(c.rows) * static_cast<double>(c.cols);
    const double bytes = elements * (2.0 * (aux.defined() ? 2 : 1) + (c.row_major ? 1 : 0) + (c.transposed ? 1 : 0));
    const backend::Fp8Source src(x, c.prologue, backend::Gelu::kTanh, aux);
    for (int current = 0; current < 2; ++current) {
      backend::Fp8Quantization s;
      s.format = c.format;
      s.current = current == 1;
      s.scale = scalar(*be, 16.0f);
      s.scale_inv = scalar(*be, 1.0f / 16.0f);
      s.amax = scalar(*be, 0.0f);
      const double ms = time_ms(*be, repeats, [&] { be->fp8_cast(src, q, qt, s, db, backend::GradWrite::kOverwrite); });
      // Per layer: the x cast runs for three linears, the dy cast of proj/fc2 for two.
      const int per_layer = std::string(c.name) == "x qkv/proj/fc1" ? 3 : std::string(c.name) == "dy proj/fc2" ? 2 : 1;
      total_ms[current] += per_layer * ms;
      std::printf("%-16s %6lld %6lld  %-10s %9.4f %8.1f %9.1f\n", c.name, static_cast<long long>(c.rows),
                  static_cast<long long>(c.cols), current ? "tensorwise" : "delayed", ms, bytes / 1e6,
                  bytes / (ms * 1e-3) / 1e9);
    }
  }
  std::printf("one layer's casts: delayed %.3f ms, tensorwise %.3f ms\n", total_ms[0], total_ms[1]);
  return 0;
}
