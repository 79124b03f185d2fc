// Stubs used when the CUDA backend is not built (MT_BUILD_CUDA=OFF or no nvcc).
#include "backend/cuda/attention_impl.h"
#include "backend/cuda/cuda_op_timer.h"
#include "backend/cuda/gemm_tuning.h"
#include "backend/cuda/layernorm_paths.h"
#include "backend/cuda/normal_math_check.h"
#include "backend/device.h"
#include "backend/gpu_telemetry.h"
#include "backend/ops.h"
#include "backend/profiler_marks.h"
#include "backend/qk_norm.h"
#include "core/error.h"

namespace megatron::backend {

bool built_with_cuda() { return false; }
std::string cuda_profiler_start() { return "this build of megatron has no CUDA backend"; }
std::string cuda_profiler_stop() { return "this build of megatron has no CUDA backend"; }
void nvtx_push(const char*) {}
void nvtx_pop() {}
std::unique_ptr<TelemetrySampler> start_telemetry(int, int, std::string* why_not) {
  if (why_not != nullptr) *why_not = "this build of megatron has no CUDA backend";
  return nullptr;
}
std::unique_ptr<EnergyCounter> open_energy_counter(int, std::string* why_not) {
  if (why_not != nullptr) *why_not = "this build of megatron has no CUDA backend";
  return nullptr;
}
NormalMathValues normal_math_on_device(int, int64_t) {
  throw_error("normal_math_on_device: this build of megatron has no CUDA backend");
}
int cuda_device_count() { return 0; }
std::string describe_cuda_devices() { return ""; }

std::string cuda_device_name(int) { return ""; }
int64_t cuda_device_memory_used(int) { return 0; }
int64_t cuda_device_memory_total(int) { return 0; }

std::unique_ptr<Backend> make_cuda_backend(int) {
  throw_error("[--device] this build of megatron has no CUDA backend (built without nvcc)");
}

void set_attention_impl(Backend&, AttentionImpl) {
  throw_error("set_attention_impl: this build of megatron has no CUDA backend");
}
void set_attention_deterministic(Backend&, bool) {
  throw_error("set_attention_deterministic: this build of megatron has no CUDA backend");
}
void set_gemm_autotune(Backend&, bool) { throw_error("set_gemm_autotune: this build of megatron has no CUDA backend"); }
void set_layernorm_warp_forward(Backend&, bool) {
  throw_error("set_layernorm_warp_forward: this build of megatron has no CUDA backend");
}
std::string cudnn_attention_unavailable(Backend&, DType, int64_t, int64_t, const AttentionParams&) {
  return "this build of megatron has no CUDA backend";
}
std::string check_cudnn_attention_graphs(DType, int64_t, int64_t, const AttentionParams&, bool) {
  return "this build of megatron has no CUDA backend";
}
std::string describe_cudnn_attention(Backend&, DType, int64_t, int64_t, const AttentionParams&) {
  return "this build of megatron has no CUDA backend";
}

void cuda_qk_norm_forward(Backend&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&,
                          Tensor&, Tensor&, const QkNormParams&) {
  throw_error("qk_norm_forward: this build of megatron has no CUDA backend");
}
void cuda_qk_norm_backward(Backend&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           Tensor&, Tensor&, Tensor&, Tensor&, const QkNormParams&, GradWrite) {
  throw_error("qk_norm_backward: this build of megatron has no CUDA backend");
}

// No CudaBackend exists in this build: every backend is timed on the host.
std::unique_ptr<OpTimer> make_op_timer(Backend&) { return make_chrono_op_timer(); }

}  // namespace megatron::backend
