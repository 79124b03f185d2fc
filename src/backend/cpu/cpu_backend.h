// The CPU reference backend: the readable fp32 oracle every CUDA kernel is tested against
// (docs/design.md, "Two backends, one set of ops"), and the backend CI runs the model on.
//
// How it computes:
//  - Every op converts its 16-bit (bf16/fp16) inputs to fp32 first, computes in fp32
//    (row reductions accumulate in double for a more accurate oracle) and rounds 16-bit
//    outputs once, round-to-nearest-even (core/dtype.h). "(+=)" outputs of any float dtype
//    are read, accumulated in fp32 and rounded back.
//  - GEMMs go to OpenBLAS (cblas_sgemm) on fp32 scratch copies of 16-bit operands.
//  - Loops are OpenMP-parallel, but every output element (and every reduction) is computed
//    by one thread in a fixed order, and whole-tensor reductions combine fixed-size chunks in
//    a fixed order, so results are bitwise independent of the thread count.
//  - Dropout: element i of a tensor is kept iff dropout_keep(seed, stream, i, p), i the flat
//    index in the tensor the dropout applies to (x for bias_dropout_add / dropout_forward,
//    dy / dx for dropout_backward). In attention, dropout applies to the [b, heads, s, s]
//    probability tensor: element (b, head, i, j) (query i, key j) has index
//    ((b * heads + head) * s + i) * s + j. Masked (j > i) entries draw nothing.
//  - Attention saves lse[b, heads, s]; backward recomputes the probabilities from it and
//    regenerates the dropout mask, and computes rowsum(P * dP) from the recomputed
//    probabilities rather than from the saved `out` (exact, even when `out` is 16-bit).
//
// Ops live in cpu_backend.cpp (memory, GEMM, reductions), cpu_elementwise.cpp (add, scale,
// dropout, bias, GELU), cpu_norm.cpp (layernorm, embeddings), cpu_attention.cpp,
// cpu_rotary.cpp (rotary position embeddings), cpu_loss.cpp (cross-entropy) and cpu_fp8.cpp
// (FP8 quantization and GEMM, emulated: codes decoded to fp32, products exact).
#pragma once

#include "backend/ops.h"

namespace megatron::backend {

class CpuBackend : public Backend {
 public:
  Device device() const override { return Device::kCPU; }

  Tensor empty(Shape shape, DType dtype, MemoryKind kind) override;
  void fill(Tensor& t, float value) override;
  void init_normal(Tensor& t, const NormalInit& init) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void synchronize() override {}
  Tensor host_staging(Shape shape, DType dtype) override;
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

  void fp8_cast(const Fp8Source& src, Tensor& q, Tensor& qt, const Fp8Quantization& s, Tensor& dbias,
                GradWrite write = GradWrite::kAccumulate) override;
  void fp8_gemm(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv,
                const Tensor& bias, Tensor& c, GradWrite write = GradWrite::kOverwrite,
                Fp8Accumulation acc = Fp8Accumulation::kSplit) override;

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
  bool all_finite(const Tensor& x) override;
  int64_t count_zeros(const Tensor& x) override;
  void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                    const AdamWStep& step) override;
  void adamw_update_segments(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                             const Tensor& segments, const AdamWStep& step, Tensor& model_copy) override;
};

}  // namespace megatron::backend
