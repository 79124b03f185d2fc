// backend/profiler_marks.h on CUDA builds.
#include "backend/profiler_marks.h"

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

namespace megatron::backend {

std::string cuda_profiler_start() {
  const cudaError_t rc = cudaProfilerStart();
  return rc == cudaSuccess ? "" : cudaGetErrorString(rc);
}

std::string cuda_profiler_stop() {
  const cudaError_t rc = cudaProfilerStop();
  return rc == cudaSuccess ? "" : cudaGetErrorString(rc);
}

void nvtx_push(const char* name) { nvtxRangePushA(name); }
void nvtx_pop() { nvtxRangePop(); }

}  // namespace megatron::backend
