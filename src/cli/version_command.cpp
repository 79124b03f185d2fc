#include <cstdio>

#include "backend/device.h"
#include "cli/commands.h"

namespace megatron::cli {

int run_version(const CommandArgs&) {
  std::printf("megatron.cpp %s\n", MT_VERSION);
  std::printf("cuda backend: %s\n", backend::built_with_cuda() ? "built" : "not built");
  if (backend::built_with_cuda()) {
    int n = backend::cuda_device_count();
    std::printf("cuda devices: %d\n%s", n, backend::describe_cuda_devices().c_str());
  }
  return 0;
}

}  // namespace megatron::cli
