// Which implementation runs causal attention (ops.h attention_forward/attention_backward) on a
// CUDA backend: cuDNN's fused flash attention (cudnn_attention.h) or our own kernels
// (cuda_attention.cu). A plain C++ header, so that tests and tools without CUDA headers can
// choose; builds without CUDA get stubs that throw (no_cuda.cpp).
//
// The choice is read once from the environment when a CUDA backend is constructed:
//   MEGATRON_ATTENTION_IMPL=auto   (default) cuDNN where it can run the case, ours elsewhere
//                                  (fp32, dropout over a tensor-parallel share of the heads,
//                                  shapes or versions cuDNN refuses), each reason reported
//                                  once on stderr. With dropout, cuDNN draws its own masks
//                                  (not the CPU's bits; the same statistics)
//   MEGATRON_ATTENTION_IMPL=cudnn  cuDNN only: a case it cannot run is an error
//   MEGATRON_ATTENTION_IMPL=own    our kernels only: dropout masks bit-identical to the CPU's
// The KV-cache attention (generation) always runs our kernels.
#pragma once

#include <cstdint>
#include <string>

#include "backend/ops.h"

namespace megatron::backend {

enum class AttentionImpl : uint8_t { kAuto, kCudnn, kOwn };

// The largest head_dim our kernels take (cuda_attention.cu); past it only cuDNN runs attention,
// and a case it cannot run is an error naming the flags.
constexpr int64_t kOwnAttentionMaxHeadDim = 128;

// Selects the attention implementation of `backend`, which must be a CUDA backend (throws
// megatron::Error otherwise, and always in builds without CUDA).
void set_attention_impl(Backend& backend, AttentionImpl impl);

// Asks cuDNN for a deterministic backward (no fp32 atomics in the dQ accumulation; cuDNN then
// keeps a [b, heads, s, s] 16-bit dP in its workspace). Off by default. `backend` as above.
void set_attention_deterministic(Backend& backend, bool deterministic);

// "" when `backend` would run attention of this case (qkv [s, b, heads*3*head_dim] of `dtype`,
// 16-byte aligned tensors) on cuDNN in both directions; otherwise why not. Builds and caches the
// cuDNN plans for the case. `backend` as above.
std::string cudnn_attention_unavailable(Backend& backend, DType dtype, int64_t s, int64_t b,
                                        const AttentionParams& params);

// Builds cuDNN's forward and backward attention graphs of this case without a GPU (descriptor
// attributes, shapes of every matmul and pointwise operation, the operation graphs): "" or the
// first error. For CI machines without a GPU; in builds without CUDA: "no CUDA backend".
std::string check_cudnn_attention_graphs(DType dtype, int64_t s, int64_t b, const AttentionParams& params,
                                         bool deterministic);

// For logs and tests: the cuDNN version, the engines chosen for this case and their numerical
// notes, and the workspace; or why cuDNN does not run it. `backend` as above.
std::string describe_cudnn_attention(Backend& backend, DType dtype, int64_t s, int64_t b,
                                     const AttentionParams& params);

}  // namespace megatron::backend
