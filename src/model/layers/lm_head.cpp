#include "model/layers/lm_head.h"

#include "tensor_parallel/vocab_parallel.h"

namespace megatron::model {

namespace {

// sum(loss_i * mask_i) in double over n per-token losses.
double masked_sum(const float* losses, const float* mask, int64_t n) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += static_cast<double>(losses[i]) * mask[i];
  return total;
}

// The masked mean; 0 when the mask is empty.
float masked_mean(const float* losses, const float* mask, int64_t n, float mask_sum) {
  return mask_sum > 0 ? static_cast<float>(masked_sum(losses, mask, n) / mask_sum) : 0.0f;
}

}  // namespace

void LMHead::allocate(const LayerContext& ctx, DType dtype, int64_t vocab_slice) {
  backend::Backend& be = *ctx.backend;
  auto act = [&](Shape shape, DType dt) { return be.empty(std::move(shape), dt, MemoryKind::kActivations); };
  const int64_t s = ctx.seq, b = ctx.batch, n = ctx.rows(), nl = ctx.local_rows(), h = ctx.hidden;
  labels_ = act({s, b}, DType::kI32);
  loss_weights_ = act({s, b}, DType::kF32);
  dloss_weights_ = act({s, b}, DType::kF32);
  final_out_ = act({nl, h}, dtype);
  if (final_norm.bias >= 0) final_mean_ = act({nl}, DType::kF32);  // RMSNorm keeps no mean
  final_rstd_ = act({nl}, DType::kF32);
  // Logits in the model dtype, as Megatron's output layer (the cross-entropy works in fp32 on
  // them); the backward overwrites them with their gradient, so its GEMMs run on 16-bit tensor
  // cores as with Megatron's autograd.
  logits_ = act({n, vocab_slice}, dtype);
  dlogits_ = logits_;
  losses_ = act({n}, DType::kF32);
  lse_ = act({n}, DType::kF32);
}

void LMHead::set_targets(backend::Backend& backend, const Tensor& host_labels, const Tensor& host_mask,
                         float mask_sum) {
  mask_sum_ = mask_sum;
  backend.copy(host_labels, labels_);
  backend.copy(host_mask, loss_weights_);
  host_mask_ = host_mask.view({host_mask.numel()});
}

float LMHead::loss_factor(float loss_scale, float grad_scale) const {
  const float factor = loss_scale * grad_scale;
  if (per_token_loss_) return factor;
  return mask_sum_ > 0 ? factor / mask_sum_ : 0.0f;
}

Tensor LMHead::loss_weights(const LayerContext& ctx, float loss_scale, float grad_scale) {
  // d(loss)/d(loss_i) = mask_i / sum(mask), times the loss scale and 1/num_microbatches (per
  // token: mask_i times the loss scale and grad_scale, the caller's 1 / tokens). Into their own
  // buffer, the loaded mask left as it is: the head's work then gives the same result when it
  // runs again (recorded work that failed to record runs again unrecorded).
  const int64_t n = ctx.rows();
  Tensor dlosses = dloss_weights_.view({n});
  ctx.backend->copy(loss_weights_.view({n}), dlosses);
  if (per_token_loss_) {
    ctx.backend->scale(dlosses, loss_scale * grad_scale);
  } else if (mask_sum_ > 0) {
    ctx.backend->scale(dlosses, loss_scale * grad_scale / mask_sum_);
  }
  return dlosses;
}

void LMHead::forward(const LayerContext& ctx, const Tensor& x, bool fused_backward, float loss_scale,
                     float grad_scale) {
  backend::Backend& be = *ctx.backend;
  const int64_t n = ctx.rows();
  final_norm.forward(ctx, x, final_out_, final_mean_, final_rstd_);
  output.forward(ctx, final_out_, logits_);
  if (ctx.tp->size() == 1) {
    if (fused_backward) {
      be.cross_entropy_fused(logits_, labels_.view({n}), loss_weights(ctx, loss_scale, grad_scale), losses_, lse_,
                             dlogits_);
      dlogits_ready_ = true;
    } else {
      be.cross_entropy_forward(logits_, labels_.view({n}), losses_, lse_);
    }
    return;
  }
  // Vocab-parallel: the whole vocabulary's losses and lse from the slices, on the device. The
  // rows' maximum lse goes in dloss_weights_, free until backward's loss_weights().
  Tensor max_lse = dloss_weights_.view({n});
  tensor_parallel::vocab_parallel_cross_entropy(be, *ctx.tp, logits_, labels_.view({n}), max_lse, losses_, lse_);
}

void LMHead::backward(const LayerContext& ctx, const Tensor& x, float loss_scale, float grad_scale, Tensor& dx) {
  backend::Backend& be = *ctx.backend;
  const int64_t n = ctx.rows();
  if (!dlogits_ready_) {
    // Vocab-parallel: the local slice's softmax with the whole vocabulary's lse, local labels.
    be.cross_entropy_backward(logits_, labels_.view({n}), lse_, loss_weights(ctx, loss_scale, grad_scale), dlogits_);
  }
  dlogits_ready_ = false;
  const Tensor d_final = output.backward(ctx, dlogits_, final_out_, ctx.ws->h2);
  // dx may be x's own buffer: the norm's backward reads x, so the gradient goes through ws.grad.
  final_norm.backward(ctx, d_final, x, final_mean_, final_rstd_, ctx.ws->grad);
  if (dx.data() != ctx.ws->grad.data()) be.copy(ctx.ws->grad, dx);
}

void LMHead::queue_loss(backend::Backend& backend) {
  const int64_t n = losses_.numel();
  PendingLoss p;
  p.mask = host_mask_;
  p.mask_sum = mask_sum_;
  const size_t slot = pending_losses_.size();
  if (slot == loss_staging_.size()) loss_staging_.push_back(backend.host_staging({n}, DType::kF32));
  p.losses = loss_staging_[slot];
  backend.copy_to_host_async(losses_, p.losses);
  pending_losses_.push_back(std::move(p));
}

double LMHead::take_losses(backend::Backend& backend) {
  if (pending_losses_.empty()) return 0.0;
  backend.synchronize();  // the asynchronous copies have landed
  double sum = 0.0;
  for (const PendingLoss& p : pending_losses_) {
    // The masked mean (or sum) on the host (n values): exact and backend-independent.
    const float* losses = p.losses.data_as<const float>();
    const float* mask = p.mask.data_as<const float>();
    sum += per_token_loss_ ? masked_sum(losses, mask, p.losses.numel())
                           : masked_mean(losses, mask, p.losses.numel(), p.mask_sum);
  }
  pending_losses_.clear();
  return sum;
}

}  // namespace megatron::model
