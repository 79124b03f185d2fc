#include "cli/backend_choice.h"

#include "backend/cuda/attention_impl.h"
#include "backend/cuda/gemm_tuning.h"
#include "backend/device.h"
#include "core/error.h"

namespace megatron::cli {

void declare_device_flag(Args& args) {
  args.option("--device", "D", "cpu, cuda or auto (CUDA when a GPU is visible)", "auto");
  args.flag("--deterministic-mode",
            "bit-identical results run to run on the same GPU: cuDNN's attention backward without atomics "
            "(every other op is always deterministic)");
  args.flag("--deterministic", "the same as --deterministic-mode");
}

bool deterministic(const Args& args) {
  return args.get_flag("--deterministic-mode") || args.get_flag("--deterministic");
}

bool uses_cuda(const Args& args) {
  const std::string d = args.get_string("--device");
  return d == "cuda" || (d == "auto" && backend::built_with_cuda() && backend::cuda_device_count() > 0);
}

bool host_collectives(const Args& args) {
  const std::string b = args.get_string("--distributed-backend");
  if (b == "nccl") return false;
  if (b == "mpi" || b == "gloo") return true;
  throw_error("[--distributed-backend] expected nccl, mpi or gloo, got '", b, "'");
}

bool uses_nccl(const Args& args) { return uses_cuda(args) && !host_collectives(args); }

int64_t cuda_device_for_rank(const Args& args, int64_t local_rank) {
  const int n = backend::cuda_device_count();
  if (!host_collectives(args) || n == 0) return local_rank;
  return local_rank % n;
}

std::string host_collectives_note(const Args& args, int64_t local_ranks) {
  if (!host_collectives(args) || !uses_cuda(args)) return "";
  std::string note = " > collectives: MPI, GPU tensors staged through host memory (--distributed-backend " +
                     args.get_string("--distributed-backend") + ")";
  const int64_t gpus = backend::cuda_device_count();
  if (local_ranks > gpus) {
    note += "; " + std::to_string(local_ranks) + " ranks share " + std::to_string(gpus) +
            " GPU(s): for checking a layout, not for speed (tokens/s and device memory are the shared GPU's)";
  }
  return note + "\n";
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
      throw_error("[LOCAL_RANK] ", dev, " but only ", backend::cuda_device_count(),
                  " GPUs are visible (NCCL needs a GPU per rank; --distributed-backend mpi lets ranks share one)");
    }
    log << " > device: cuda:" << dev << " " << backend::cuda_device_name(dev) << '\n';
    std::unique_ptr<backend::Backend> be = backend::make_cuda_backend(dev);
    if (deterministic(args)) {
      backend::set_attention_deterministic(*be, true);
      backend::set_gemm_autotune(*be, false);  // timing-dependent algorithm choice
      log << " > deterministic mode: cuDNN attention backward without atomics, cuBLASLt heuristic algorithms\n";
    }
    return be;
  }
  log << " > device: cpu (reference backend)\n";
  return backend::make_cpu_backend();
}

}  // namespace megatron::cli
