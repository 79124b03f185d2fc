// ProfilingBackend: a Backend that owns another one, forwards every op to it unchanged and
// times each call by op name (`megatron bench --profile-ops`). GEMM ops (matmul,
// linear_forward, linear_backward and their GELU-fused forms) are also broken down by shape, with their FLOPs, so the
// report shows the achieved TFLOP/s of each GEMM problem.
//
// Timing (backend/cuda/cuda_op_timer.h): CUDA events on the wrapped CudaBackend's stream
// (GPU time of each op, read back lazily, no sync per op), host std::chrono on the CPU.
// Results are bitwise those of the wrapped backend: nothing but the timer runs around each op.
//
// Construct the model and optimizer on the ProfilingBackend itself: they call ops on the
// Backend& they were built with (empty()/copy() forward too, so allocation works).
// device(), synchronize() and host_staging() are forwarded untimed; every other op is timed
// while enabled().
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_op_timer.h"
#include "backend/ops.h"
#include "backend/region_timer.h"

namespace megatron::backend {

// One line of a profile: an op (shape empty) or one GEMM shape of an op.
struct OpProfileRow {
  std::string op;     // "linear_forward"
  std::string shape;  // GEMM rows: "x bf16[4096, 768] w bf16[2304, 768] +bias (m=4096 n=2304 k=768)"
  int64_t calls = 0;
  double total_ms = 0.0;
  double flops = 0.0;  // total FLOPs of these calls (GEMM ops; 0 for the others)
};

struct OpProfile {
  std::string clock;                // how times were taken
  std::vector<OpProfileRow> ops;    // per op name, by total time, largest first
  std::vector<OpProfileRow> gemms;  // per GEMM op and shape, by total time, largest first
  double total_ms = 0.0;            // sum over ops
};

// The per-op table and the GEMM-shape table as text. `iterations` (>= 1) divides totals into
// per-iteration times; `step_ms` (the measured time of one iteration) gives each op's share
// and the time spent outside ops; pass 0 to leave the share out.
std::string format_op_profile(const OpProfile& profile, int64_t iterations, double step_ms);
// JSON arrays (one line each): per op [{"op", "calls", "total_ms", "ms_per_iter",
// "percent_of_step", "gflop"}, ...] and per GEMM shape [{"op", "shape", "calls", "total_ms",
// "ms_per_iter", "percent_of_step", "gflop_per_call", "tflops"}, ...], in the tables' order.
std::string op_profile_json_ops(const OpProfile& profile, int64_t iterations, double step_ms);
std::string op_profile_json_gemms(const OpProfile& profile, int64_t iterations, double step_ms);
// `s` as a quoted JSON string.
std::string profile_json_string(const std::string& s);

class ProfilingBackend final : public Backend, public RegionTimer {
 public:
  explicit ProfilingBackend(std::unique_ptr<Backend> inner);
  ~ProfilingBackend() override;

  Backend& inner() { return *inner_; }
  // While disabled, ops are forwarded without timing (e.g. warm-up iterations).
  void set_enabled(bool enabled) { enabled_ = enabled; }
  bool enabled() const { return enabled_; }
  // Forgets every time recorded so far.
  void reset();
  // The totals so far (waits for queued GPU work to be measured).
  OpProfile report();
  // RegionTimer: `f` timed as a row of its own in the op table (e.g. a collective,
  // "all_gather [tp]"). Untimed while disabled.
  void time_region(const std::string& name, const std::function<void()>& f) override;

  Device device() const override { return inner_->device(); }
  Tensor empty(Shape shape, DType dtype, MemoryKind kind) override;
  void fill(Tensor& t, float value) override;
  void init_normal(Tensor& t, const NormalInit& init) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void synchronize() override { inner_->synchronize(); }
  Tensor host_staging(Shape shape, DType dtype) override { return inner_->host_staging(std::move(shape), dtype); }
  void copy_to_host_async(const Tensor& src, Tensor& dst) override;

  void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha,
              float beta) override;
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y) override;
  void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias,
                       GradWrite write = GradWrite::kAccumulate) override;
  void linear_residual_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                               Tensor& y) override;
  void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& pre, Tensor& y,
                           Gelu kind) override;
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
  void fp8_cast(const Fp8Source& src, Tensor& q, Tensor& qt, const Fp8Quantization& s, Tensor& dbias,
                GradWrite write = GradWrite::kAccumulate) override;
  void fp8_gemm(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv,
                const Tensor& bias, Tensor& c, GradWrite write = GradWrite::kOverwrite,
                Fp8Accumulation acc = Fp8Accumulation::kSplit) override;

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

  // Op ids (timer keys below kNumOps); GEMM shapes get keys from kNumOps up.
  enum Op : int {
    kEmpty,
    kFill,
    kCopy,
    kMatmul,
    kLinearForward,
    kLinearBackward,
    kAdd,
    kScale,
    kBiasDropoutAdd,
    kDropoutBackward,
    kDropoutForward,
    kBiasGrad,
    kBiasGeluForward,
    kBiasGeluBackward,
    kLayernormForward,
    kLayernormBackward,
    kEmbeddingForward,
    kEmbeddingBackward,
    kAttentionForward,
    kAttentionBackward,
    kAttentionKvCache,
    kCrossEntropyForward,
    kCrossEntropyBackward,
    kSumSquares,
    kAllFinite,
    kCountZeros,
    kAdamwUpdate,
    kLinearGeluForward,
    kLinearDgeluBackward,
    kAdamwUpdateSegments,
    kLinearResidualForward,
    kCrossEntropyFused,
    kLayernormBackwardColsum,
    kLayernormBackwardDropoutColsum,
    kInitNormal,
    kVocabParallelCeTerms,
    kVocabParallelCeFinish,
    kSwigluForward,
    kSwigluBackward,
    kRotaryForward,
    kRotaryBackward,
    kFp8Quantize,
    kFp8Gemm,
    kFp8QuantizeDbias,  // fp8_cast summing a bias gradient (dy's casts): its own row
    kNumOps
  };
  static const char* op_name(int op);

 private:
  // A GEMM problem: op, the 2-D operand shapes, transposes, dtypes and which optional
  // operands are present (bias / dx / dbias, or beta != 0 for matmul).
  // [op, rows/cols of the three operands (2-D views), three dtypes, three flags].
  using GemmKey = std::array<int64_t, 13>;
  struct GemmInfo {
    int op = 0;  // -1: a named region (time_region), `shape` holding its name
    std::string shape;
    double flops_per_call = 0.0;
  };
  // The timer key of a GEMM problem, registered on first sight.
  int gemm_key(const GemmKey& key, double flops_per_call);
  // The timer key of a linear op (`op`: a forward or a backward kind), by GEMM shape when enabled.
  int linear_forward_key(int op, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y);
  int linear_backward_key(int op, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                          const Tensor& dw, const Tensor& dbias);

  template <class F>
  auto timed(int key, F&& f) -> decltype(f());

  std::unique_ptr<Backend> inner_;
  std::unique_ptr<OpTimer> timer_;
  bool enabled_ = true;
  std::map<GemmKey, int> gemm_keys_;
  std::vector<GemmInfo> gemms_;  // by key - kNumOps (GEMM shapes and named regions)
  std::map<std::string, int> region_keys_;
};

}  // namespace megatron::backend
