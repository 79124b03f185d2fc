#include "plan/gpu_spec.h"

#include "core/error.h"

namespace megatron::plan {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
}  // namespace

const std::vector<GpuSpec>& gpu_specs() {
  // name, peak TFLOP/s, HBM B/s, memory B, NVLink B/s (one direction), IB B/s per GPU, GEMM ceiling,
  // INT32 TOPS, bf16, SMs, FP8 TFLOP/s
  static const std::vector<GpuSpec> kSpecs = {
      {"h100-80gb", 989.0, 3.35e12, 81559 * kMiB, 450e9, 50e9, 0.803, 16.7, true, 132, 1979.0},
      {"h200-141gb", 989.0, 4.8e12, 143771 * kMiB, 450e9, 50e9, 0.803, 16.7, true, 132, 1979.0},
      {"a100-40gb", 312.0, 1.555e12, 40960 * kMiB, 300e9, 25e9, 0.869, 9.75, true, 108},
      {"a100-80gb", 312.0, 2.039e12, 81920 * kMiB, 300e9, 25e9, 0.869, 9.75, true, 108},
      {"v100-16gb", 125.0, 0.9e12, 16160 * kMiB, 150e9, 6.25e9, 0.80, 7.83, false, 80},
      {"v100-32gb", 125.0, 0.9e12, 32510 * kMiB, 150e9, 6.25e9, 0.80, 7.83, false, 80},
  };
  return kSpecs;
}

std::string gpu_names() {
  std::string out;
  for (const GpuSpec& g : gpu_specs()) out += (out.empty() ? "" : ", ") + std::string(g.name);
  return out;
}

const GpuSpec& find_gpu(const std::string& name) {
  for (const GpuSpec& g : gpu_specs()) {
    if (name == g.name) return g;
  }
  throw_error("[--gpu] unknown GPU '", name, "' (choose from ", gpu_names(), ")");
}

std::optional<std::string> gpu_for_device_name(const std::string& n) {
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  // Other parts of the same names: the GH200 superchip (H100-class memory), the NVL and PCIe
  // cards (other clocks and power), MIG slices (a fraction of the GPU).
  if (has("GH200") || has("NVL") || has("PCIe") || has("PCIE") || has("MIG")) return std::nullopt;
  if (has("H200")) return "h200-141gb";
  if (has("H100") && (has("HBM3") || has("SXM"))) return "h100-80gb";
  if (has("A100") && has("80GB")) return "a100-80gb";
  if (has("A100") && has("40GB")) return "a100-40gb";
  if (has("V100") && has("32GB")) return "v100-32gb";
  if (has("V100") && has("16GB")) return "v100-16gb";
  return std::nullopt;
}

}  // namespace megatron::plan
