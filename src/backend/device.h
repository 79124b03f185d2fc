// What accelerators this build can use. Built without CUDA, the answers are
// "none" (backend/cuda/no_cuda.cpp), so callers need no #ifdef.
#pragma once

#include <cstdint>
#include <string>

namespace megatron::backend {

bool built_with_cuda();
// Number of CUDA devices visible to this process (0 without CUDA, a driver or a GPU).
int cuda_device_count();
// One line per visible device: "cuda:0 NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB".
std::string describe_cuda_devices();
// The device's name ("NVIDIA H100 80GB HBM3"), or "" without CUDA.
std::string cuda_device_name(int device);
// Bytes in use on the device (total - free, as the driver reports it: all processes).
int64_t cuda_device_memory_used(int device);
// The device's memory in bytes (cudaMemGetInfo's total), or 0 without CUDA.
int64_t cuda_device_memory_total(int device);

}  // namespace megatron::backend
