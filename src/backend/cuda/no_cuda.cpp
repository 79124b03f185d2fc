// Stubs used when the CUDA backend is not built (MT_BUILD_CUDA=OFF or no nvcc).
#include "backend/device.h"

namespace megatron::backend {

bool built_with_cuda() { return false; }
int cuda_device_count() { return 0; }
std::string describe_cuda_devices() { return ""; }

}  // namespace megatron::backend
