// What accelerators this build can use. Built without CUDA, the answers are
// "none" (backend/cuda/no_cuda.cpp), so callers need no #ifdef.
#pragma once

#include <string>

namespace megatron::backend {

bool built_with_cuda();
// Number of CUDA devices visible to this process (0 without CUDA, a driver or a GPU).
int cuda_device_count();
// One line per visible device: "cuda:0 NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB".
std::string describe_cuda_devices();

}  // namespace megatron::backend
