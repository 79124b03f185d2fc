// --profile (Megatron's nsys hooks): the CUDA profiler's capture range, so that
// `nsys profile --capture-range=cudaProfilerApi megatron train ... --profile` records only the
// chosen iterations, and NVTX ranges that name the training phases on its timeline. NVTX is
// header-only (the calls cost nothing unless a profiler is attached). Built without CUDA,
// every function does nothing (backend/cuda/no_cuda.cpp).
#pragma once

#include <string>

namespace megatron::backend {

// cudaProfilerStart / cudaProfilerStop on the current device. "" on success, else why not.
std::string cuda_profiler_start();
std::string cuda_profiler_stop();
// An NVTX range on this thread's timeline: pushes nest, each pop closes the latest push.
void nvtx_push(const char* name);
void nvtx_pop();

}  // namespace megatron::backend
