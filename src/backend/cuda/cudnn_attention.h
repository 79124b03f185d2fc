// cuDNN fused flash attention ("SDPA") for CudaBackend::attention_forward/attention_backward
// (ops.h contract), built on cuDNN 9's C backend graph API (docs/design.md, "GPU speed comes from
// few, fused, large kernels"; cuDNN's C++ frontend is not packaged and we vendor no outside code;
// our kernels in cuda_attention.cu are the fallback, attention_impl.h the switch).
//
// No copies: cuDNN reads Q, K, V in place from Megatron's fused qkv [s, b, heads*3d] and writes
// O, dQ, dK, dV in place, every one described as a 4-D [b, h, s, d] tensor whose strides (in
// elements) walk the Megatron layout. For (batch bi, head j, position i, column t):
//   q at  i*(b*h*3d) + bi*(h*3d) + j*3d + t   -> dims [b, h, s, d], strides [h*3d, 3d, b*h*3d, 1]
//   k, v  the same at + d and + 2d            (K, and V in the backward, enter transposed:
//                                              dims [b, h, d, s], the last two strides swapped)
//   dq, dk, dv in dqkv: strides as q, k, v
//   o, do at i*(b*h*d) + bi*(h*d) + j*d + t   -> strides [h*d, d, b*h*d, 1]
//   stats = our lse [b, h, s] fp32            -> dims [b, h, s, 1], strides [h*s, s, 1, 1]
// e.g. b = 2, h = 12, d = 64: q strides [2304, 192, 4608, 1], k at element offset 64.
// Query groups (GQA/MQA, G < h key/value heads, n = h / G; ops.h): a qkv row holds, per group
// g, its n queries, its key and its value, W = G*(n+2)*d elements. The queries of a group are
// not one stride apart from the next group's (its key and value sit between), but the group
// is one stride from the next batch row's group: row bi*G + g of a batch of b*G starts at
// (bi*G + g)*(n+2)*d. So the graphs fold the groups into the batch: b*G rows of n query heads
// that share one key/value head (multi-query attention per row), everything still in place:
//   q, dq     dims [b*G, n, s, d], strides [(n+2)d, d, b*W, 1]
//   k, v      dims [b*G, 1, s, d] at element offsets n*d, (n+1)*d, strides [(n+2)d, (n+2)d, b*W, 1]
//   o, do     dims [b*G, n, s, d], strides [n*d, d, b*h*d, 1]; stats [b*G, n, s, 1] (= [b, h, s])
// Q K^T and dO V^T broadcast the key/value head over the row's n query heads (the matmuls'
// batch dims). The backward sums each group's dK and dV over its query heads as cuDNN's
// frontend does: dS^T Q and P^T dO into [b*G, n, s, d] virtual tensors (the I/O dtype), reduced
// (ADD) over the heads into dK, dV. With documents the bias [b, 1, s, s] has no stride over
// the folded rows, so there the graphs keep [b, h, s, d] with K, V as [b, G, s, d] (strides
// [W, (n+2)d, b*W, 1]): Q is first gathered into a packed [s, b, h, d] workspace buffer
// (gather_queries, o's strides) and dQ is written to one and scattered back
// (scatter_query_grads), one extra pass over q and dq.
// Forward graph (cuDNN's "flash fused attention fprop" pattern), fp32 between the matmuls:
//   S = Q K^T;  S *= scale;  S = (row >= col) ? S : -inf  (GEN_INDEX rows/cols, CMP_GE,
//   BINARY_SELECT);  M = max_j S;  E = exp(S - M);  L = sum_j E;  Stats = M + log L;
//   P = E / L (bf16/fp16);  O = P V.
// Stats is therefore the natural-log log-sum-exp of the scaled, masked scores: exactly our
// lse, so either implementation's backward can consume the other's forward (without dropout).
// With attention dropout p (cuDNN's pattern): P = E / L in fp32, then P * mask * 1/(1-p)
// (rounded to bf16/fp16) into P V, where mask [b, h, s, s] is a Bernoulli(1 - p) draw of an
// RNG node with int64 seed and offset tensors in device memory. Our seed is a mix of
// DropoutParams (seed, stream), the offset 0; the mask is a function of those and of the
// element's (batch, head, row, column) only, so the backward regenerates it. It is not the
// CPU's mask (core/rng.h): tests check its statistics and that every output is consistent
// with one mask, which a naive masked attention then reproduces. cuDNN 9.14's engine applies
// 1/(1-p) rounded to the I/O dtype (bf16 1.109375 for p = 0.1: kept values 0.16% low; fp16
// 1.111328), in the forward and the backward alike, so the gradients stay those of the
// forward computed.
// Backward graph (P recomputed from Stats):
//   D = sum_t dO*O (fp32, kept in our workspace);  P = exp(mask(scale Q K^T - Stats));
//   dV = P^T dO;  dP = dO V^T;  dS = P (dP - D) scale;  dK = dS^T Q;  dQ = dS K.
// With dropout: D is scaled by 1 - p, P in dV = Pd^T dO is the dropped Pd = P mask / (1-p), and
// dS = P (dP mask - D) / (1-p) scale.
// dQ is accumulated by cuDNN with fp32 atomics into an fp32 workspace tensor and then
// converted (fast; run-to-run bits may differ), unless `deterministic`: then dS K writes dQ
// directly, which makes cuDNN pick its deterministic algorithm (it keeps a 16-bit dP of
// [b, h, s, s] in its workspace) and any engine carrying the NONDETERMINISTIC note is refused.
//
// Plans are built on first use of a case and cached by CudnnAttentionKey; the strides are a
// function of the key (the layout is always Megatron's). One device workspace, counted under
// MemoryKind::kWorkspace, grows to the largest case seen. Everything runs on the backend's stream.
#pragma once

#include <cudnn_graph.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "backend/ops.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace megatron::backend {

class CudaBackend;

struct CudnnAttentionKey {
  int64_t b = 0, s = 0, heads = 0, head_dim = 0;
  int64_t groups = 0;          // key/value heads G (heads: multi-head attention)
  DType dtype = DType::kBF16;  // of qkv, out, dout and dqkv alike
  uint32_t scale_bits = 0;     // the softmax scale's fp32 bit pattern
  uint32_t dropout_bits = 0;   // the attention dropout probability's fp32 bits (0: no dropout)
  bool deterministic = false;
  // Documents (AttentionParams::key_start): keys before each query's document start are masked
  // too, by an attention bias [b, 1, s, s] of the I/O dtype (write_document_bias) added to the
  // scaled scores. (cuDNN 9.14's engines refuse the cheaper form, the key starts as an int32
  // [b, 1, s, 1] operand of the mask's comparison.)
  bool documents = false;
  float dropout_p() const {
    float p;
    std::memcpy(&p, &dropout_bits, sizeof(p));
    return p;
  }
  bool operator<(const CudnnAttentionKey& o) const {
    return std::tie(b, s, heads, groups, head_dim, dtype, scale_bits, dropout_bits, deterministic, documents) <
           std::tie(o.b, o.s, o.heads, o.groups, o.head_dim, o.dtype, o.scale_bits, o.dropout_bits, o.deterministic,
                    o.documents);
  }
};

// bias[bi, i, j] = 0 where key j is in query i's document (j >= key_start[bi, i]), else the
// lowest finite value of `dtype` (bf16/fp16): device int32 key_start [b, s], bias [b, s, s],
// written in stream order (cuda_attention.cu).
void write_document_bias(const int32_t* key_start, int64_t b, int64_t s, DType dtype, void* bias, cudaStream_t stream);

// Query groups with documents on cuDNN (cuda_attention.cu), in stream order, 16-bit `dtype` elements:
// q[s, b, heads, d] (packed) = the query columns of qkv[s, b, G * (heads/G + 2) * d], and back:
// the query columns of dqkv = dq[s, b, heads, d] (dqkv's key/value columns untouched).
void gather_queries(const void* qkv, int64_t s, int64_t b, int64_t heads, int64_t groups, int64_t d, DType dtype,
                    void* q, cudaStream_t stream);
void scatter_query_grads(const void* dq, int64_t s, int64_t b, int64_t heads, int64_t groups, int64_t d, DType dtype,
                         void* dqkv, cudaStream_t stream);

class CudnnAttention {
 public:
  explicit CudnnAttention(CudaBackend& backend);  // creates the cuDNN handle; never throws
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // "" when cuDNN runs both directions of `key` (the forward and backward plans are then built,
  // cached and the workspace sized), else the reason it cannot. Built once per key.
  const std::string& unavailable(const CudnnAttentionKey& key);

  // Both require unavailable(key) == "". Device pointers: qkv [s, b, h*3d], out and dout
  // [s, b, h*d], dqkv [s, b, h*3d] (all of key.dtype, 16-byte aligned), lse [b, h, s] fp32.
  // With dropout, cuDNN's Philox seed of the mask is a mix of `dropout`'s seed and stream
  // (store_cudnn_dropout_seed, on the device: stream_add is read there); the backward of a
  // forward passes the same.
  // key_start: the device int32 [b, s] of key.documents (else null).
  void forward(const CudnnAttentionKey& key, const void* qkv, void* out, float* lse, const DropoutParams& dropout,
               const int32_t* key_start);
  void backward(const CudnnAttentionKey& key, const void* dout, const void* qkv, const void* out, const float* lse,
                void* dqkv, const DropoutParams& dropout, const int32_t* key_start);

  // cuDNN version, the engines chosen for `key` and their notes, workspace bytes (for logs/tests).
  std::string describe(const CudnnAttentionKey& key);
  // "9.19.0" (the library loaded at run time).
  std::string version_string() const;

  // Builds the forward and backward graphs of `key` without a handle or a GPU: every tensor and
  // operation descriptor, attribute by attribute, and the operation graphs. "" or the first
  // error. (Whether an engine takes the graphs is only known on a GPU.)
  static std::string check_graphs(const CudnnAttentionKey& key);

  struct Entry;  // cached plans of one key (cudnn_attention.cu)

 private:
  Entry& entry(const CudnnAttentionKey& key);
  void* workspace(int64_t bytes);
  // The device copies of the dropout seed (bytes [0, 8)) and offset (bytes [16, 24)), written
  // in stream order before each execution that draws a mask.
  void* rng_state(const DropoutParams& dropout);

  CudaBackend& backend_;
  cudnnHandle_t handle_ = nullptr;
  std::string init_error_;  // why cuDNN cannot be used at all ("" if it can)
  size_t version_ = 0;      // cudnnGetVersion(): 91900 for 9.19.0
  std::map<CudnnAttentionKey, std::unique_ptr<Entry>> entries_;
  Tensor workspace_;  // MemoryKind::kWorkspace, grown to the largest plan's need
  Tensor rng_;        // 32 bytes (MemoryKind::kWorkspace), allocated with the first dropout case's plans
};

}  // namespace megatron::backend
