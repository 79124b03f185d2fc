// MT_CUDA_CHECK(call): every CUDA runtime call is checked (docs/design.md, "Errors"); a failure
// throws megatron::Error with the call's text, the error string and file:line.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

#define MT_CUDA_CHECK(call)                                                                                      \
  do {                                                                                                           \
    cudaError_t mt_err_ = (call);                                                                                \
    if (mt_err_ != cudaSuccess) {                                                                                \
      ::megatron::throw_error(#call, " failed: ", cudaGetErrorString(mt_err_), " at ", __FILE__, ":", __LINE__); \
    }                                                                                                            \
  } while (0)
