#include <cstdio>

#include "backend/cuda/cuda_check.h"
#include "backend/device.h"

namespace megatron::backend {

bool built_with_cuda() { return true; }

int cuda_device_count() {
  int n = 0;
  // No driver or no GPU is a normal answer here (CI machines), not an error.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string describe_cuda_devices() {
  std::string out;
  for (int i = 0, n = cuda_device_count(); i < n; ++i) {
    cudaDeviceProp prop{};
    MT_CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
    char line[512];
    std::snprintf(line, sizeof(line), "cuda:%d %s, sm_%d%d, %.1f GiB, %d SMs\n", i, prop.name, prop.major,
                  prop.minor, static_cast<double>(prop.totalGlobalMem) / (1 << 30), prop.multiProcessorCount);
    out += line;
  }
  return out;
}

}  // namespace megatron::backend
