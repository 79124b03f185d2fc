// Megatron-Core's tensor-parallel linears over the residual stream's rows, and the row
// choreography of sequence parallelism (docs/design.md, "Parallelism is data layout plus
// collectives"; the collectives are tensor_parallel/mappings.h).
//
// ColumnParallelLinear: weight [out/T, in] (+ bias [out/T]) on rank r, y = x W^T + b for the
// whole sequence: under sequence parallelism its input rows [n_local, in] are first all-gathered
// into ws.full (and again in backward, as Megatron). Its input gradient is a partial sum over TP,
// reduced like a row-parallel output.
// RowParallelLinear: weight [out, in/T] on rank r, its output all-reduced (or reduce-scattered
// into the sequence shard), then the replicated bias added once; it always feeds the residual
// stream through Megatron's bias-dropout-add.
#pragma once

#include <cstdint>

#include "model/layers/layer_context.h"

namespace megatron::model {

// The input of a column-parallel linear from its norm's output [n_local, h]: the rows gathered
// into ws.full under sequence parallelism (recording whose rows they are), else `ln_out`.
Tensor column_input(const LayerContext& ctx, const Tensor& ln_out);
// A row-parallel partial output [n, h] summed over TP: all-reduced in place (returns
// `partial`), or reduce-scattered into its sequence shard (returns that view).
Tensor reduce_rows(const LayerContext& ctx, Tensor& partial);
// The whole [n, h] rows from this rank's `shard` (gathered into `full`), or `shard` itself
// without sequence parallelism.
Tensor gather_rows(const LayerContext& ctx, const Tensor& shard, Tensor& full);
// A [n_local, h] buffer inside `full` [n, h]: this rank's sequence shard, or all of it.
Tensor local_rows(const LayerContext& ctx, const Tensor& full);
// d(input) of a dropout from its output gradient dy: dy itself without dropout, else the masked
// gradient written into `buffer`.
Tensor through_dropout(const LayerContext& ctx, const Tensor& dy, Tensor& buffer,
                       const backend::DropoutParams& dropout);

// FP8 (GPTConfig::fp8): a linear whose `fp8` index is >= 0 runs its three GEMMs through
// backend/fp8_linear.h when ctx.fp8 is set, its operands scaled by the slots
// Fp8ScalingState::slot(fp8, role); otherwise through the model dtype's linear ops.
bool uses_fp8(const LayerContext& ctx, int64_t fp8);
// Where an FP8 linear keeps its input's transposed codes between the forward and the backward
// of one micro-batch (backend::Fp8LinearBuffers::saved_xt): `bytes` (an activation buffer the
// FP8 path does not otherwise write) holds the [in, n] codes, then at a 16-byte boundary the
// fp32 scale_inv. Undefined: the backward quantizes x again.
struct Fp8SavedInput {
  Tensor bytes;
};

// y = x w^T + bias of linear `fp8` (bias may be undefined): FP8 or the model dtype's op. x and
// dy may carry a prologue (backend::Fp8Source) only where the linear runs in FP8.
void any_linear_forward(const LayerContext& ctx, int64_t fp8, const backend::Fp8Source& x, const Tensor& w,
                        const Tensor& bias, Tensor& y, const Fp8SavedInput& saved = {});
// Backend::linear_backward's contract for linear `fp8`, in FP8 where it uses it.
void any_linear_backward(const LayerContext& ctx, int64_t fp8, const backend::Fp8Source& dy,
                         const backend::Fp8Source& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias,
                         backend::GradWrite write, const Fp8SavedInput& saved = {});

struct ColumnParallelLinear {
  int64_t weight = -1, bias = -1;  // parameter indices (bias -1: none)
  int64_t fp8 = -1;                // its index in the stage's FP8 scaling state (-1: never FP8)

  // y [n, out/T] from the norm output x [n_local, in].
  void forward(const LayerContext& ctx, const Tensor& x, Tensor& y) const;
  // The same with the GELU epilogue: pre [n, out/T] (bias included) and act = gelu(pre).
  void forward_gelu(const LayerContext& ctx, const Tensor& x, Tensor& pre, Tensor& act, backend::Gelu gelu) const;
  // From dy [n, out/T] and the forward's x [n_local, in]: the weight (and bias) gradients, and
  // d(x) summed over TP as reduce_rows() does (the return value; dx_partial [n, in] holds the
  // partial sum). Under TP the sum is started right after the dX GEMM and waited for after the
  // weight-gradient GEMM, which runs beside it (Megatron's asynchronous input-gradient
  // all-reduce / reduce-scatter); under sequence parallelism the input rows are gathered again,
  // started before the dX GEMM and waited for before the weight-gradient GEMM that reads them
  // (Megatron's asynchronous all-gather), unless ws.full still holds them (ws.full_rows_of): the
  // loss head's, whose backward follows its forward, and a recomputed layer's FC1 input.
  // dy may carry a prologue (the MLP's GELU gradient) when this linear runs in FP8.
  Tensor backward(const LayerContext& ctx, const backend::Fp8Source& dy, const Tensor& x, Tensor& dx_partial) const;
};

struct RowParallelLinear {
  int64_t weight = -1, bias = -1;
  int64_t fp8 = -1;  // as ColumnParallelLinear::fp8

  // Megatron's bias-dropout-add after the linear: out = residual + dropout(reduce_rows(in W^T)
  // + b), out and residual [n_local, out], in [n, in/T]. Without TP and dropout nothing sits
  // between the GEMM and the add, so they run as one (Backend::linear_residual_forward: the
  // product is not rounded before the add); otherwise (FP8 included) the partial product goes
  // through ws.h1.
  // `in` may carry a prologue (the MLP's GELU) when this linear runs in FP8.
  void forward_residual(const LayerContext& ctx, const backend::Fp8Source& in, const Tensor& residual, Tensor& out,
                        const backend::DropoutParams& dropout, const Fp8SavedInput& saved = {}) const;
  // Whether the bias gradient is taken by the norm backward that produces this linear's
  // residual gradient (the fusion of Norm::backward_into): a bias and one tensor-parallel rank
  // (no reduction in between).
  bool bias_grad_in_next_norm(const LayerContext& ctx) const { return bias >= 0 && ctx.tp->size() == 1; }
  // The bias to pass to Backend ops' gradients: -1 when the norm backward took it.
  int64_t bias_unless(bool taken) const { return taken ? -1 : bias; }
};

// What the norm backward that produced a residual gradient g did for the residual branch whose
// output was added there (the fusion contract between a RowParallelLinear's bias-dropout-add and
// the norm below it in backward order, Norm::backward_into): it took the branch's bias gradient
// (g's column sums, or those of dropout's backward of g), and with dropout it also wrote the
// branch's output gradient (that backward) into ws.h1's local rows.
struct BranchGradTaken {
  bool bias = false;
  bool grad_in_h1 = false;
};

// The gradient of a residual branch's row-parallel output from g = d(residual out) [n_local, h]:
// through its dropout and gathered to all n rows (the backward of the reduce-scatter), unless the
// norm backward already left it in ws.h1 (taken.grad_in_h1).
Tensor branch_output_grad(const LayerContext& ctx, const Tensor& g, const backend::DropoutParams& dropout,
                          const BranchGradTaken& taken);

}  // namespace megatron::model
