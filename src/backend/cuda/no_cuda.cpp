// Stubs used when the CUDA backend is not built (MT_BUILD_CUDA=OFF or no nvcc).
#include "backend/cuda/cuda_op_timer.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "core/error.h"

namespace megatron::backend {

bool built_with_cuda() { return false; }
int cuda_device_count() { return 0; }
std::string describe_cuda_devices() { return ""; }

std::string cuda_device_name(int) { return ""; }
int64_t cuda_device_memory_used(int) { return 0; }

std::unique_ptr<Backend> make_cuda_backend(int) {
  throw_error("[--device] this build of megatron has no CUDA backend (built without nvcc)");
}

// No CudaBackend exists in this build: every backend is timed on the host.
std::unique_ptr<OpTimer> make_op_timer(Backend&) { return make_chrono_op_timer(); }

}  // namespace megatron::backend
