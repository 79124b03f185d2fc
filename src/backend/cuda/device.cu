#include <cstdio>

#include <utility>

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
    std::snprintf(line, sizeof(line), "cuda:%d %s, sm_%d%d, %.1f GiB, %d SMs\n", i, prop.name, prop.major, prop.minor,
                  static_cast<double>(prop.totalGlobalMem) / (1 << 30), prop.multiProcessorCount);
    out += line;
  }
  return out;
}

std::string cuda_device_name(int device) {
  cudaDeviceProp prop{};
  MT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

namespace {
// cudaMemGetInfo of `device` (free, total), the current device left as it was.
std::pair<int64_t, int64_t> memory_info(int device) {
  int previous = 0;
  MT_CUDA_CHECK(cudaGetDevice(&previous));
  MT_CUDA_CHECK(cudaSetDevice(device));
  size_t free_bytes = 0, total_bytes = 0;
  MT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  MT_CUDA_CHECK(cudaSetDevice(previous));
  return {static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
}
}  // namespace

int64_t cuda_device_memory_used(int device) {
  const auto [free_bytes, total_bytes] = memory_info(device);
  return total_bytes - free_bytes;
}

int64_t cuda_device_memory_total(int device) { return memory_info(device).second; }

}  // namespace megatron::backend
