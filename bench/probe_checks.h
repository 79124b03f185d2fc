// Error checks for the standalone CUDA probes (bench/*_probe.cu, built without the project's
// libraries): a failed CUDA or cuBLASLt call prints where and exits 1.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)
#define CB(x)                                                                              \
  do {                                                                                     \
    cublasStatus_t s_ = (x);                                                               \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
      std::fprintf(stderr, "%s:%d cublas %d\n", __FILE__, __LINE__, static_cast<int>(s_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)
