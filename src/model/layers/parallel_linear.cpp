#include "model/layers/parallel_linear.h"

#include <memory>

#include "tensor_parallel/mappings.h"

namespace megatron::model {

Tensor column_input(const LayerContext& ctx, const Tensor& ln_out) {
  if (!ctx.sequence_parallel) return ln_out;
  tensor_parallel::gather_sequence(*ctx.tp, ln_out, ctx.ws->full);
  ctx.ws->full_rows_of = ln_out.data();
  return ctx.ws->full;
}

Tensor reduce_rows(const LayerContext& ctx, Tensor& partial) {
  if (!ctx.sequence_parallel) {
    tensor_parallel::all_reduce_tp(*ctx.tp, partial);
    return partial;
  }
  Tensor shard = tensor_parallel::sequence_shard(*ctx.tp, partial);
  tensor_parallel::reduce_scatter_sequence(*ctx.tp, partial, shard);
  return shard;
}

Tensor gather_rows(const LayerContext& ctx, const Tensor& shard, Tensor& full) {
  if (!ctx.sequence_parallel) return shard;
  tensor_parallel::gather_sequence(*ctx.tp, shard, full);
  return full;
}

Tensor local_rows(const LayerContext& ctx, const Tensor& full) {
  return ctx.sequence_parallel ? tensor_parallel::sequence_shard(*ctx.tp, full) : full;
}

Tensor through_dropout(const LayerContext& ctx, const Tensor& dy, Tensor& buffer,
                       const backend::DropoutParams& dropout) {
  if (dropout.p == 0.0f) return dy;  // the identity: no copy
  ctx.backend->dropout_backward(dy, buffer, dropout);
  return buffer;
}

void ColumnParallelLinear::forward(const LayerContext& ctx, const Tensor& x, Tensor& y) const {
  ctx.backend->linear_forward(column_input(ctx, x), ctx.param(weight), ctx.optional_param(bias), y);
}

void ColumnParallelLinear::forward_gelu(const LayerContext& ctx, const Tensor& x, Tensor& pre, Tensor& act,
                                        backend::Gelu gelu) const {
  ctx.backend->linear_gelu_forward(column_input(ctx, x), ctx.param(weight), ctx.optional_param(bias), pre, act, gelu);
}

Tensor ColumnParallelLinear::backward(const LayerContext& ctx, const Tensor& dy, const Tensor& x,
                                      Tensor& dx_partial) const {
  backend::Backend& be = *ctx.backend;
  const backend::GradWrite write = ctx.claim_grads(weight, bias);
  Tensor db = ctx.optional_grad(bias);
  if (ctx.tp->size() == 1) {
    be.linear_backward(dy, x, ctx.param(weight), dx_partial, ctx.grad(weight), db, write);
    return dx_partial;
  }
  const bool sp = ctx.sequence_parallel;
  LayerWorkspace& ws = *ctx.ws;
  std::unique_ptr<comm::PendingCollective> gathered = std::make_unique<comm::FinishedCollective>();
  if (sp && ws.full_rows_of != x.data()) {
    gathered = tensor_parallel::start_gather_sequence(*ctx.tp, x, ws.full);
    ws.full_rows_of = x.data();
  }
  const Tensor in = sp ? ws.full : x;
  be.matmul(dy, false, ctx.param(weight), false, dx_partial);  // dX = dy W, this rank's part of the sum
  Tensor shard = sp ? tensor_parallel::sequence_shard(*ctx.tp, dx_partial) : dx_partial;
  std::unique_ptr<comm::PendingCollective> sum =
      sp ? tensor_parallel::start_reduce_scatter_sequence(*ctx.tp, dx_partial, shard)
         : tensor_parallel::start_all_reduce_tp(*ctx.tp, dx_partial);
  gathered->wait();
  Tensor no_dx;
  be.linear_backward(dy, in, ctx.param(weight), no_dx, ctx.grad(weight), db, write);
  sum->wait();
  return shard;
}

void RowParallelLinear::forward_residual(const LayerContext& ctx, const Tensor& in, const Tensor& residual, Tensor& out,
                                         const backend::DropoutParams& dropout) const {
  if (ctx.tp->size() == 1 && dropout.p == 0.0f) {
    ctx.backend->linear_residual_forward(in, ctx.param(weight), ctx.optional_param(bias), residual, out);
    return;
  }
  Tensor& partial = ctx.ws->h1;
  ctx.backend->linear_forward(in, ctx.param(weight), Tensor(), partial);
  ctx.backend->bias_dropout_add(reduce_rows(ctx, partial), ctx.optional_param(bias), residual, out, dropout);
}

Tensor branch_output_grad(const LayerContext& ctx, const Tensor& g, const backend::DropoutParams& dropout,
                          const BranchGradTaken& taken) {
  Tensor h1 = local_rows(ctx, ctx.ws->h1);
  if (taken.grad_in_h1) return h1;
  return gather_rows(ctx, through_dropout(ctx, g, h1, dropout), ctx.ws->h1);
}

}  // namespace megatron::model
