#include "cli/backend_choice.h"

#include "backend/device.h"
#include "core/error.h"

namespace megatron::cli {

void declare_device_flag(Args& args) {
  args.option("--device", "D", "cpu, cuda or auto (CUDA when a GPU is visible)", "auto");
}

bool uses_cuda(const Args& args) {
  const std::string d = args.get_string("--device");
  return d == "cuda" || (d == "auto" && backend::built_with_cuda() && backend::cuda_device_count() > 0);
}

std::unique_ptr<backend::Backend> make_backend(const Args& args, std::ostream& log, int64_t cuda_device) {
  const std::string d = args.get_string("--device");
  if (d != "cpu" && d != "cuda" && d != "auto") throw_error("[--device] expected cpu, cuda or auto, got '", d, "'");
  const bool gpu = backend::built_with_cuda() && backend::cuda_device_count() > 0;
  if (d == "cuda" && !gpu) {
    throw_error("[--device] cuda asked for, but ",
                backend::built_with_cuda() ? "no GPU is visible" : "this build has no CUDA backend");
  }
  if (d == "cuda" || (d == "auto" && gpu)) {
    const int dev = static_cast<int>(cuda_device);
    if (dev >= backend::cuda_device_count()) {
      throw_error("[LOCAL_RANK] ", dev, " but only ", backend::cuda_device_count(), " GPUs are visible");
    }
    log << " > device: cuda:" << dev << " " << backend::cuda_device_name(dev) << '\n';
    return backend::make_cuda_backend(dev);
  }
  log << " > device: cpu (reference backend)\n";
  return backend::make_cpu_backend();
}

}  // namespace megatron::cli
