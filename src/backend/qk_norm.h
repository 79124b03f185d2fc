// Megatron-Core's --qk-layernorm: q_layernorm and k_layernorm normalise every query head and
// every key head of the fused QKV buffer over its head_dim d, before rotary embeddings
// (LayerNorm or RMSNorm as --normalization, eps --norm-epsilon, with --apply-layernorm-1p the
// scale 1 + weight formed in fp32). One weight [d] (and LayerNorm bias [d]) for all query heads,
// one for all key heads; the value columns are untouched.
//
// qkv [s, b, width] has the attention layout (ops.h AttentionParams, qkv_layout.h). With
// n = s*b rows, H query heads and G groups, the saved pre-norm input x [n*(H+G)*d] (qkv's dtype)
// holds the queries first, [n, H, d] (row r, head j at (r*H + j)*d), then the keys [n, G, d]
// (row r, group g at n*H*d + (r*G + g)*d); mean (LayerNorm only) and rstd [n*(H+G)] fp32 follow
// the same order (one statistic per vector). The arithmetic of each vector is
// Backend::layernorm_forward/backward's over a [*, d] row (the CPU reference calls them on the
// gathered vectors; mean undefined selects RMSNorm).
//
// These are free functions over a Backend rather than Backend methods: the CPU reference and the
// CUDA kernel (backend/cuda/cuda_qk_norm.cu) are picked by the backend's device, and a
// ProfilingBackend times them as a region ("qk_norm_forward", "qk_norm_backward") around its
// wrapped backend's.
#pragma once

#include <cstdint>

#include "backend/ops.h"
#include "backend/qkv_layout.h"

namespace megatron::backend {

struct QkNormParams {
  int64_t heads = 0;         // query heads of this call (AttentionParams::heads)
  int64_t query_groups = 0;  // as AttentionParams::query_groups (0: heads)
  int64_t head_dim = 0;
  float eps = 1e-5f;
  bool zero_centered = false;  // scale = 1 + weight (--apply-layernorm-1p)
  int64_t groups() const { return query_groups > 0 ? query_groups : heads; }
};

// In place on qkv's query and key columns: y = xhat * scale + bias, with xhat the vector's
// normalised value. x (above) receives the input, mean and rstd the statistics (mean undefined:
// RMSNorm, and the biases must be undefined too). Weights and biases [d], any float dtype.
void qk_norm_forward(Backend& backend, Tensor& qkv, const Tensor& q_weight, const Tensor& q_bias,
                     const Tensor& k_weight, const Tensor& k_bias, Tensor& x, Tensor& mean, Tensor& rstd,
                     const QkNormParams& params);
// In place on dqkv's query and key columns (qkv's layout): d(y) -> d(input), from the forward's x,
// mean and rstd; dq_weight, dq_bias, dk_weight, dk_bias [d] fp32 (+=, as `write` says; the biases
// undefined for RMSNorm). The value columns are untouched.
void qk_norm_backward(Backend& backend, Tensor& dqkv, const Tensor& x, const Tensor& q_weight, const Tensor& k_weight,
                      const Tensor& mean, const Tensor& rstd, Tensor& dq_weight, Tensor& dq_bias, Tensor& dk_weight,
                      Tensor& dk_bias, const QkNormParams& params, GradWrite write = GradWrite::kAccumulate);

// The shape contract both implementations check (each adds its own device and dtype checks):
// qkv [s, b, width] for params' heads and groups, x of qkv's dtype with n*(H+G)*d elements, the
// weights [d], rstd (and mean if defined) [n*(H+G)]. `what` names qkv (or dqkv) in the message.
QkvLayout check_qk_norm_shapes(const Tensor& qkv, const Tensor& x, const Tensor& q_weight, const Tensor& k_weight,
                               const Tensor& mean, const Tensor& rstd, const QkNormParams& params, const char* what);

// The CPU reference and the CUDA implementation (the latter throws in a build without CUDA).
void cpu_qk_norm_forward(Backend& backend, Tensor& qkv, const Tensor& q_weight, const Tensor& q_bias,
                         const Tensor& k_weight, const Tensor& k_bias, Tensor& x, Tensor& mean, Tensor& rstd,
                         const QkNormParams& params);
void cpu_qk_norm_backward(Backend& backend, Tensor& dqkv, const Tensor& x, const Tensor& q_weight,
                          const Tensor& k_weight, const Tensor& mean, const Tensor& rstd, Tensor& dq_weight,
                          Tensor& dq_bias, Tensor& dk_weight, Tensor& dk_bias, const QkNormParams& params,
                          GradWrite write);
void cuda_qk_norm_forward(Backend& backend, Tensor& qkv, const Tensor& q_weight, const Tensor& q_bias,
                          const Tensor& k_weight, const Tensor& k_bias, Tensor& x, Tensor& mean, Tensor& rstd,
                          const QkNormParams& params);
void cuda_qk_norm_backward(Backend& backend, Tensor& dqkv, const Tensor& x, const Tensor& q_weight,
                           const Tensor& k_weight, const Tensor& mean, const Tensor& rstd, Tensor& dq_weight,
                           Tensor& dq_bias, Tensor& dk_weight, Tensor& dk_bias, const QkNormParams& params,
                           GradWrite write);

}  // namespace megatron::backend
