#include "model/layers/parallel_linear.h"

#include <memory>

#include "backend/fp8_linear.h"
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

namespace {

// The scalings of linear `fp8`'s three operands.
backend::Fp8LinearScaling fp8_scaling(const LayerContext& ctx, int64_t fp8) {
  using backend::Fp8Role;
  using backend::Fp8ScalingState;
  backend::Fp8LinearScaling s;
  s.input = ctx.fp8->quantization(Fp8ScalingState::slot(fp8, Fp8Role::kInput));
  s.weight = ctx.fp8->quantization(Fp8ScalingState::slot(fp8, Fp8Role::kWeight));
  s.grad_output = ctx.fp8->quantization(Fp8ScalingState::slot(fp8, Fp8Role::kGradOutput));
  return s;
}

DType fp8_dtype(Fp8Format f) { return f == Fp8Format::kE4M3 ? DType::kF8E4M3 : DType::kF8E5M2; }

// `buffer`'s first numel(shape) bytes as `shape` in format f (undefined without the buffer).
Tensor fp8_view(const Tensor& buffer, Shape shape, Fp8Format f) {
  if (!buffer.defined()) return Tensor();
  const Tensor t(buffer.storage(), 0, std::move(shape), fp8_dtype(f));
  MT_CHECK(t.numel() <= buffer.numel()) << "FP8 buffer " << buffer.describe() << " for " << t.describe();
  return t;
}

// The workspace's FP8 buffers as linear [out, in] over n rows needs them.
backend::Fp8LinearBuffers fp8_buffers(const LayerContext& ctx, int64_t fp8, const backend::Fp8LinearScaling& s,
                                      int64_t n, int64_t out, int64_t in, bool forward) {
  const LayerWorkspace& ws = *ctx.ws;
  backend::Fp8LinearBuffers b;
  if (fp8 < static_cast<int64_t>(ws.fp8_saved_wt.size())) {
    b.saved_wt = fp8_view(ws.fp8_saved_wt[static_cast<size_t>(fp8)], {in, out}, s.weight.format);
  }
  if (forward) {
    b.x = fp8_view(ws.fp8_rows, {n, in}, s.input.format);
    b.w = fp8_view(ws.fp8_weight, {out, in}, s.weight.format);
  } else {
    b.dy = fp8_view(ws.fp8_rows, {n, out}, s.grad_output.format);
    b.wt = fp8_view(ws.fp8_weight, {in, out}, s.weight.format);
    b.dyt = fp8_view(ws.fp8_rows_t, {out, n}, s.grad_output.format);
    b.xt = fp8_view(ws.fp8_cols_t, {in, n}, s.input.format);
  }
  return b;
}

// saved.bytes as the [in, n] codes and the scale_inv after them (Fp8SavedInput).
void set_saved_input(const Fp8SavedInput& saved, const backend::Fp8LinearScaling& s, int64_t n, int64_t in,
                     backend::Fp8LinearBuffers& b) {
  if (!saved.bytes.defined()) return;
  const Tensor& buf = saved.bytes;
  const int64_t base = static_cast<const char*>(buf.data()) - static_cast<const char*>(buf.storage()->data());
  const int64_t codes = n * in, scale_at = (base + codes + 15) / 16 * 16;
  MT_CHECK(scale_at + 4 <= base + buf.nbytes())
      << "FP8 saved input " << buf.describe() << " for [" << in << ", " << n << "] codes";
  b.saved_xt = Tensor(buf.storage(), base, {in, n}, fp8_dtype(s.input.format));
  b.saved_x_scale_inv = Tensor(buf.storage(), scale_at / 4, {1}, DType::kF32);
}

}  // namespace

bool uses_fp8(const LayerContext& ctx, int64_t fp8) { return ctx.fp8 != nullptr && fp8 >= 0; }

void any_linear_forward(const LayerContext& ctx, int64_t fp8, const backend::Fp8Source& x, const Tensor& w,
                        const Tensor& bias, Tensor& y, const Fp8SavedInput& saved) {
  if (!uses_fp8(ctx, fp8)) {
    MT_CHECK(x.identity()) << "a prologue on the input of a linear that is not FP8";
    ctx.backend->linear_forward(x.x, w, bias, y);
    return;
  }
  const backend::Fp8LinearScaling s = fp8_scaling(ctx, fp8);
  backend::Fp8LinearBuffers b = fp8_buffers(ctx, fp8, s, x.x.numel() / w.dim(1), w.dim(0), w.dim(1), true);
  set_saved_input(saved, s, x.x.numel() / w.dim(1), w.dim(1), b);
  backend::fp8_linear_forward(*ctx.backend, x, w, bias, y, s, &b);
}

void any_linear_backward(const LayerContext& ctx, int64_t fp8, const backend::Fp8Source& dy,
                         const backend::Fp8Source& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias,
                         backend::GradWrite write, const Fp8SavedInput& saved) {
  if (!uses_fp8(ctx, fp8)) {
    MT_CHECK(dy.identity() && x.identity()) << "a prologue on an operand of a linear that is not FP8";
    ctx.backend->linear_backward(dy.x, x.x, w, dx, dw, dbias, write);
    return;
  }
  const backend::Fp8LinearScaling s = fp8_scaling(ctx, fp8);
  backend::Fp8LinearBuffers b = fp8_buffers(ctx, fp8, s, x.x.numel() / w.dim(1), w.dim(0), w.dim(1), false);
  set_saved_input(saved, s, x.x.numel() / w.dim(1), w.dim(1), b);
  backend::fp8_linear_backward(*ctx.backend, dy, x, w, dx, dw, dbias, s, write, &b);
}

void ColumnParallelLinear::forward(const LayerContext& ctx, const Tensor& x, Tensor& y) const {
  any_linear_forward(ctx, fp8, column_input(ctx, x), ctx.param(weight), ctx.optional_param(bias), y);
}

void ColumnParallelLinear::forward_gelu(const LayerContext& ctx, const Tensor& x, Tensor& pre, Tensor& act,
                                        backend::Gelu gelu) const {
  if (uses_fp8(ctx, fp8)) {  // the FP8 GEMM (bias in its epilogue), then the GELU on the rounded pre
    any_linear_forward(ctx, fp8, column_input(ctx, x), ctx.param(weight), ctx.optional_param(bias), pre);
    ctx.backend->bias_gelu_forward(pre, Tensor(), act, gelu);
    return;
  }
  ctx.backend->linear_gelu_forward(column_input(ctx, x), ctx.param(weight), ctx.optional_param(bias), pre, act, gelu);
}

Tensor ColumnParallelLinear::backward(const LayerContext& ctx, const backend::Fp8Source& dys, const Tensor& x,
                                      Tensor& dx_partial) const {
  backend::Backend& be = *ctx.backend;
  MT_CHECK(dys.identity() || uses_fp8(ctx, fp8)) << "a prologue on the output gradient of a linear that is not FP8";
  const Tensor& dy = dys.x;
  const backend::GradWrite write = ctx.claim_grads(weight, bias);
  Tensor db = ctx.optional_grad(bias);
  if (ctx.tp->size() == 1) {
    any_linear_backward(ctx, fp8, dys, x, ctx.param(weight), dx_partial, ctx.grad(weight), db, write);
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
  if (uses_fp8(ctx, fp8)) {
    // One FP8 backward (dy quantized once for both GEMMs), its sum over TP after it.
    gathered->wait();
    any_linear_backward(ctx, fp8, dys, in, ctx.param(weight), dx_partial, ctx.grad(weight), db, write);
    return reduce_rows(ctx, dx_partial);
  }
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

void RowParallelLinear::forward_residual(const LayerContext& ctx, const backend::Fp8Source& in, const Tensor& residual,
                                         Tensor& out, const backend::DropoutParams& dropout,
                                         const Fp8SavedInput& saved) const {
  if (ctx.tp->size() == 1 && dropout.p == 0.0f && !uses_fp8(ctx, fp8)) {
    MT_CHECK(in.identity()) << "a prologue on the input of a linear that is not FP8";
    ctx.backend->linear_residual_forward(in.x, ctx.param(weight), ctx.optional_param(bias), residual, out);
    return;
  }
  Tensor& partial = ctx.ws->h1;
  any_linear_forward(ctx, fp8, in, ctx.param(weight), Tensor(), partial, saved);
  ctx.backend->bias_dropout_add(reduce_rows(ctx, partial), ctx.optional_param(bias), residual, out, dropout);
}

Tensor branch_output_grad(const LayerContext& ctx, const Tensor& g, const backend::DropoutParams& dropout,
                          const BranchGradTaken& taken) {
  Tensor h1 = local_rows(ctx, ctx.ws->h1);
  if (taken.grad_in_h1) return h1;
  return gather_rows(ctx, through_dropout(ctx, g, h1, dropout), ctx.ws->h1);
}

}  // namespace megatron::model
