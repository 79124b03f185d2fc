// The CUDA backend: every op of backend/ops.h on one GPU, on one stream, Hopper first (sm_90a).
// The class is declared once here and implemented by op family:
//   cuda_backend.cu      construction, memory, copy/convert, fill, reductions, elementwise
//                        add/scale, bias_grad, count_zeros, adamw_update
//   cuda_gemm.cu         matmul, linear_forward/backward through cuBLASLt (fp32 accumulation;
//                        bias epilogue; dW accumulated into fp32 with beta = 1)
//   cuda_elementwise.cu  dropout, bias-dropout-add, bias-GELU forward/backward
//   cuda_norm.cu         layernorm forward/backward, embedding forward/backward
//   cuda_loss.cu         cross-entropy forward/backward
//   cuda_attention.cu    causal attention forward/backward (flash-style, lse saved), KV cache
//   cuda_rotary.cu       rotary position embeddings in place on qkv, forward and backward
//   cuda_fp8.cu          FP8 quantize (amax, scale, cast, transpose) and the FP8 cuBLASLt GEMM
//   cuda_recording.cpp   recorded work: stream capture into CUDA graphs, replay
//   cudnn_attention.cpp  the same attention through cuDNN's fused flash attention, chosen per
//                        case (attention_impl.h: MEGATRON_ATTENTION_IMPL=auto|cudnn|own)
// Numerics contract (what tests/backend/cuda/ checks against the CPU backend): the same
// function of the inputs; fp32 accumulation everywhere; outputs rounded RNE to their dtype;
// dropout masks bit-identical to the CPU's (core/rng.h Philox, the same element index), except
// attention dropout on cuDNN (cuDNN's own Philox; MEGATRON_ATTENTION_IMPL=own keeps ours);
// "(+=)" outputs accumulate; deterministic results run to run (no float atomics in
// reductions whose order would vary), except cuDNN's attention backward, which accumulates dQ
// with fp32 atomics unless set_attention_deterministic(true) (cudnn_attention.h).
// Every CUDA/cuBLAS call is checked; every kernel launch is followed by a launch check.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "backend/cuda/attention_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/ops.h"

#define MT_CUBLAS_CHECK(call)                                                                                    \
  do {                                                                                                           \
    cublasStatus_t mt_st_ = (call);                                                                              \
    if (mt_st_ != CUBLAS_STATUS_SUCCESS) {                                                                       \
      ::megatron::throw_error(#call, " failed: cuBLAS status ", static_cast<int>(mt_st_), " at ", __FILE__, ":", \
                              __LINE__);                                                                         \
    }                                                                                                            \
  } while (0)

// After a kernel launch: the launch itself succeeded.
#define MT_CUDA_LAUNCH_CHECK() MT_CUDA_CHECK(cudaGetLastError())

namespace megatron::backend {

// cuBLASLt algorithms chosen by the heuristic, per GEMM problem (cuda_gemm.cu): key =
// (m, n, k, trans_a, trans_b, A/B dtype, C/D dtype, epilogue, alignment of A, B, D, bias,
// aux, and of C where it is not D (0 when it is)).
using GemmAlgoKey = std::tuple<int64_t, int64_t, int64_t, int, int, int, int, int, int, int, int, int, int, int>;
// nullopt: cuBLASLt ran none of its algorithms for the problem (FP8 only: the fallback GEMM takes it).
using GemmAlgoCache = std::map<GemmAlgoKey, std::optional<cublasLtMatmulAlgo_t>>;

class CudnnAttention;  // cudnn_attention.h
struct CudnnAttentionDeleter {
  void operator()(CudnnAttention* p) const;  // defined in cudnn_attention.cpp
};
// MEGATRON_ATTENTION_IMPL (attention_impl.h): kAuto when unset; megatron::Error naming the
// variable for anything but auto, cudnn or own. Defined in cudnn_attention.cpp.
AttentionImpl attention_impl_from_env();
// An on/off environment variable (MEGATRON_GEMM_AUTOTUNE, gemm_tuning.h;
// MEGATRON_LN_WARP_FORWARD, layernorm_paths.h): `fallback` when unset or empty, false for 0,
// true for 1, megatron::Error naming the variable for anything else. Defined in cuda_backend.cu.
bool env_switch(const char* name, bool fallback = false);
// The integer in environment variable `name`, `fallback` when unset or empty; megatron::Error
// naming the variable when it is not an integer in [lo, hi].
int64_t env_count(const char* name, int64_t fallback, int64_t lo, int64_t hi);
// Writes cuDNN's dropout seed for `dropout` (its seed and stream, the stream read at run time
// when stream_add is set) to bytes [0, 8) of device memory `dst` and offset 0 to bytes [16, 24),
// in stream order (one thread; cudnn_attention.h). Defined in cuda_backend.cu.
void store_cudnn_dropout_seed(void* dst, const DropoutParams& dropout, cudaStream_t stream);

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  Device device() const override { return Device::kCUDA; }
  cudaStream_t stream() const { return stream_; }
  int device_index() const { return device_; }

  Tensor empty(Shape shape, DType dtype, MemoryKind kind) override;
  void fill(Tensor& t, float value) override;
  void init_normal(Tensor& t, const NormalInit& init) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void synchronize() override;
  Tensor host_staging(Shape shape, DType dtype) override;
  void copy_to_host_async(const Tensor& src, Tensor& dst) override;
  // Recorded work (cuda_recording.cpp): stream capture into CUDA graphs.
  bool can_record() const override { return record_; }
  void begin_recording() override;
  std::unique_ptr<Recording> end_recording() override;
  void replay(const Recording& recording) override;

  void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha,
              float beta) override;
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y) override;
  void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias,
                       GradWrite write = GradWrite::kAccumulate) override;
  void linear_residual_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                               Tensor& y) override;
  void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& pre, Tensor& y,
                           Gelu kind) override;
  void fp8_cast(const Fp8Source& src, Tensor& q, Tensor& qt, const Fp8Quantization& s, Tensor& dbias,
                GradWrite write = GradWrite::kAccumulate) override;
  void fp8_gemm(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv,
                const Tensor& bias, Tensor& c, GradWrite write = GradWrite::kOverwrite,
                Fp8Accumulation acc = Fp8Accumulation::kSplit) override;
  void linear_dgelu_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& pre, Tensor& dpre,
                             Tensor& dw, Tensor& dbias, Gelu kind, GradWrite write = GradWrite::kAccumulate) override;

  void add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void scale(Tensor& x, float alpha) override;
  void bias_dropout_add(const Tensor& x, const Tensor& bias, const Tensor& residual, Tensor& out,
                        const DropoutParams& dropout) override;
  void dropout_backward(const Tensor& dy, Tensor& dx, const DropoutParams& dropout) override;
  void dropout_forward(const Tensor& x, Tensor& out, const DropoutParams& dropout) override;
  void bias_grad(const Tensor& dy, Tensor& dbias, GradWrite write = GradWrite::kAccumulate) override;
  void bias_gelu_forward(const Tensor& x, const Tensor& bias, Tensor& out, Gelu kind) override;
  void bias_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx, Gelu kind) override;
  void swiglu_forward(const Tensor& x, Tensor& out) override;
  void swiglu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) override;

  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& out, Tensor& mean,
                         Tensor& rstd) override;
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                          const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                          GradWrite write = GradWrite::kAccumulate,
                          GradWrite dx_write = GradWrite::kOverwrite) override;
  void layernorm_backward_colsum(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                 const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta, Tensor& dx_colsum,
                                 GradWrite write, GradWrite dx_write, GradWrite colsum_write) override;
  void layernorm_backward_dropout_colsum(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                         const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta, Tensor& dz,
                                         Tensor& dz_colsum, const DropoutParams& dropout, GradWrite write,
                                         GradWrite dx_write, GradWrite colsum_write) override;

  void embedding_forward(const Tensor& tokens, const Tensor& positions, const Tensor& wte, const Tensor& wpe,
                         Tensor& out) override;
  void embedding_backward(const Tensor& tokens, const Tensor& positions, const Tensor& dout, Tensor& dwte,
                          Tensor& dwpe) override;

  void attention_forward(const Tensor& qkv, Tensor& out, Tensor& lse, const AttentionParams& params) override;
  void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse, Tensor& dqkv,
                          const AttentionParams& params) override;
  void attention_kv_cache(const Tensor& qkv, Tensor& k_cache, Tensor& v_cache, int64_t past, Tensor& out,
                          const AttentionParams& params) override;

  void rotary_forward(Tensor& qkv, const RotaryParams& params) override;
  void rotary_backward(Tensor& dqkv, const RotaryParams& params) override;

  void cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& losses, Tensor& lse) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& lse, const Tensor& dlosses,
                              Tensor& dlogits) override;
  void cross_entropy_fused(const Tensor& logits, const Tensor& labels, const Tensor& dlosses, Tensor& losses,
                           Tensor& lse, Tensor& dlogits) override;
  void vocab_parallel_ce_terms(const Tensor& max_lse, const Tensor& labels, Tensor& lse, Tensor& losses) override;
  void vocab_parallel_ce_finish(const Tensor& max_lse, Tensor& lse, Tensor& losses) override;

  double sum_squares(const Tensor& x) override;
  std::vector<double> sum_squares_each(const std::vector<Tensor>& xs) override;
  bool all_finite(const Tensor& x) override;
  int64_t count_zeros(const Tensor& x) override;
  void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                    const AdamWStep& step) override;
  void adamw_update_segments(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                             const Tensor& segments, const AdamWStep& step, Tensor& model_copy) override;

  // For cuda_gemm.cu: the cuBLASLt handle and a workspace on this stream.
  cublasLtHandle_t lt() const { return lt_; }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  // Device scratch reused by reductions (at least 64 KiB, fp64-aligned).
  void* scratch() const { return scratch_; }

  // Attention implementation (attention_impl.h); initially from MEGATRON_ATTENTION_IMPL.
  void set_attention_impl(AttentionImpl impl) { attention_impl_ = impl; }
  AttentionImpl attention_impl() const { return attention_impl_; }
  void set_attention_deterministic(bool on) { attention_deterministic_ = on; }
  // GEMM algorithm choice (gemm_tuning.h).
  void set_gemm_autotune(bool on) { gemm_autotune_ = on; }
  bool gemm_autotune() const { return gemm_autotune_; }
  // fp8_gemm through cuBLASLt's FP8 kernels (true, the default) or always through its fp32
  // fallback on the decoded codes (tests compare the two).
  void set_fp8_gemm_cublaslt(bool on) { fp8_gemm_cublaslt_ = on; }
  int gemm_tune_candidates() const { return gemm_tune_candidates_; }
  // Multiprocessors of the device (grids that only need to fill the GPU once, whose results do
  // not depend on the grid).
  int64_t sm_count() const { return sm_count_; }
  // LayerNorm forward kernel choice (layernorm_paths.h).
  void set_layernorm_warp_forward(bool on) { layernorm_warp_forward_ = on; }
  int64_t layernorm_backward_blocks() const { return layernorm_backward_blocks_; }
  bool layernorm_group_sync() const { return layernorm_group_sync_; }
  // "" if attention of this case would run on cuDNN (both directions), else why not.
  std::string cudnn_attention_unavailable(DType dtype, int64_t s, int64_t b, const AttentionParams& params);
  // cuDNN's version, engines and workspace for this case (cudnn_attention.h describe()).
  std::string describe_cudnn_attention(DType dtype, int64_t s, int64_t b, const AttentionParams& params);

 private:
  // Queues x's sum of squares (sum_squares' two kernels) into device double *result, which must
  // lie outside scratch doubles [0, kMaxSumBlocks) (the partials, overwritten by every call) and
  // is valid once the stream has been synchronised.
  void queue_sum_squares(const Tensor& x, double* result);
  // cudnn_attention.cpp: runs the op on cuDNN and returns true when this case goes there (see
  // attention_impl.h); false means "use our kernels" (a fallback already reported), and under
  // AttentionImpl::kCudnn a case cuDNN cannot run throws instead.
  bool cudnn_attention_forward(const Tensor& qkv, Tensor& out, Tensor& lse, const AttentionParams& params);
  bool cudnn_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                Tensor& dqkv, const AttentionParams& params);
  // Why this case cannot run on cuDNN ("" if it can); `io` are the tensors cuDNN would touch.
  std::string cudnn_attention_reason(DType dtype, int64_t s, int64_t b, const AttentionParams& params,
                                     std::initializer_list<const Tensor*> io);
  bool use_cudnn_attention(const std::string& reason, DType dtype, int64_t s, int64_t b, const AttentionParams& params);

  int device_;
  int64_t sm_count_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  GemmAlgoCache gemm_algos_;  // filled lazily by cuda_gemm.cu
  AttentionImpl attention_impl_ = AttentionImpl::kAuto;
  bool attention_deterministic_ = false;
  bool gemm_autotune_ = true;  // gemm_tuning.h
  bool fp8_gemm_cublaslt_ = true;
  // [8] fp32: the two scales of an FP8 GEMM copied to 16-byte aligned slots (0 and 4), which
  // cuBLASLt requires; allocated at the first FP8 GEMM (cuda_gemm.cu, fp8_gemm).
  Tensor fp8_scale_slots_;
  int gemm_tune_candidates_ = 32;  // gemm_tuning.h
  bool layernorm_warp_forward_ = true;
  bool record_ = true;  // MEGATRON_CUDA_GRAPHS (cuda_recording.cpp)
  // LayerNorm row-group kernels (cuda_norm.cu): a row's warps synchronise among themselves
  // (named barriers), not with the block (MEGATRON_LN_GROUP_SYNC=0: the block). H100
  // (bench/results/2026-11-24.md, "CUDA graphs for the step, LayerNorm row-group barriers", call
  // 3): the LayerNorm backwards per step 3.48 -> 3.32 ms at 350M, 3.86 -> 3.77 at 1.3B.
  bool layernorm_group_sync_ = true;
  // Blocks of the fused LayerNorm backward (cuda_norm.cu): the rows are split into this many
  // parts whatever the device, so the summation order depends only on (n, h, dtype, this).
  // MEGATRON_LN_BACKWARD_BLOCKS sets it for measurements.
  int64_t layernorm_backward_blocks_ = 256;
  std::unique_ptr<CudnnAttention, CudnnAttentionDeleter> cudnn_attention_;  // created on first use
  std::set<std::string> attention_fallbacks_reported_;                      // stderr lines already printed
};

// `backend` as the CUDA backend it must be; megatron::Error "<what>: the backend is not a CUDA
// backend" otherwise (the free setters of attention_impl.h, gemm_tuning.h, layernorm_paths.h).
CudaBackend& as_cuda(Backend& backend, const char* what);

// Device-side helpers shared by the .cu files (defined in cuda_common.cuh).
}  // namespace megatron::backend
