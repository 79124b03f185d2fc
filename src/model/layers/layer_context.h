// What every layer of one model replica runs with: the backend, the tensor-parallel group, the
// parameters (referenced by their ParameterSet index), the micro-batch's shape and the workspace
// the layers share. A layer type (norm.h, parallel_linear.h, attention.h, mlp.h,
// transformer_layer.h, embedding.h, lm_head.h) holds parameter indices and its configuration;
// the activations it saves live with the caller (GPTModel's activation sets), so one layer
// object serves every micro-batch in flight and the generator's KV-cache forward.
#pragma once

#include <vector>

#include <cstdint>

#include "backend/fp8_recipe.h"
#include "backend/ops.h"
#include "comm/communicator.h"
#include "core/tensor.h"
#include "model/parameters.h"

namespace megatron::model {

// Buffers one layer's forward or backward uses and the next one overwrites (shapes per rank; n
// = s*b rows, n_local = n/T under sequence parallelism, else n; q = heads/T * kv_channels, f =
// ffn/T, f1 = f or 2f with SwiGLU):
//   grad [n_local, h]  the gradient of the residual stream, flowing down the layers
//   h1, h2 [n, h]      row-parallel partial sums (h1: forward, and the output gradient of a
//                      residual branch in backward), column-parallel input gradients (h2)
//   qkv [s, b, 3q], q [s, b, q]  attention's input and output gradients
//   f [n, f1], act [n, f] (SwiGLU only)  the MLP's gradients before and after the activation
//   full [n, h] (sequence parallelism only)  a column-parallel linear's gathered input rows;
//   full_rows_of names the norm output they were gathered from (its data pointer), or null.
// and the tables the layers read: rotary_inv_freq [rot_dim / 2] fp32 (rotary position embeddings
// only, constant); with --apply-layernorm-1p, norm_gamma [h] fp32 (1 + the weight of the norm
// being run, written just before each use) and the constant ones [h] fp32.
// With FP8 (GPTConfig::fp8) also the codes of one linear's GEMM operands, shared by all the
// linears (each call quantizes into them and consumes them): fp8_rows (x forward, dy backward),
// fp8_weight (w forward, w^T backward), fp8_rows_t (dy^T), fp8_cols_t (x^T), 1-byte buffers
// of the largest such operand, viewed in the operand's format (fp8_view); and per linear (by
// its fp8 index) fp8_saved_wt [in x out] bytes, the forward's w^T codes that every backward of
// the iteration reads (backend::Fp8LinearBuffers::saved_wt).
struct LayerWorkspace {
  Tensor grad, h1, h2, qkv, q, f, act, full;
  Tensor fp8_rows, fp8_weight, fp8_rows_t, fp8_cols_t;
  std::vector<Tensor> fp8_saved_wt;
  Tensor rotary_inv_freq;
  Tensor norm_gamma, ones;
  const void* full_rows_of = nullptr;
};

struct LayerContext {
  backend::Backend* backend = nullptr;
  comm::Communicator* tp = nullptr;  // one rank without tensor parallelism
  bool sequence_parallel = false;
  // Values are read by every forward; gradients are written by the backward (null for
  // inference: the generator).
  const ParameterSet* values = nullptr;
  ParameterSet* grads = nullptr;
  LayerWorkspace* ws = nullptr;
  // FP8 linears (null: none): the scaling state of this stage's linears (slots
  // Fp8ScalingState::slot(linear, role) of the linears' fp8 indices). Every quantization
  // records its amax, evaluation's included (as Transformer Engine's forward does in eval).
  backend::Fp8ScalingState* fp8 = nullptr;
  int64_t seq = 0, batch = 0, hidden = 0;
  int64_t rows() const { return seq * batch; }
  // The residual stream's rows on this rank: rows() / T under sequence parallelism.
  int64_t local_rows() const { return sequence_parallel ? rows() / tp->size() : rows(); }

  const Tensor& param(int64_t i) const { return (*values)[i].value; }
  // The parameter's value, or an undefined tensor for i < 0 (no bias).
  Tensor optional_param(int64_t i) const { return i >= 0 ? (*values)[i].value : Tensor(); }
  Tensor& grad(int64_t i) const { return (*grads)[i].grad; }
  Tensor optional_grad(int64_t i) const { return i >= 0 ? (*grads)[i].grad : Tensor(); }
  // How an op writes the gradients of parameters a and b (b < 0: none; they are always written
  // together): kOverwrite for the step's first write (ParameterSet::claim_grad).
  backend::GradWrite claim_grads(int64_t a, int64_t b = -1) const;
  // The gradient for an op that can only accumulate (embedding_backward): zero-filled first if
  // it is stale.
  Tensor& accumulable_grad(int64_t i) const;
};

}  // namespace megatron::model
