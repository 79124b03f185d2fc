// The language-model head: the final norm, the output layer (vocab-parallel, [V/T, h]: the word
// embedding itself when tied, or its copy on the last pipeline stage, or output_layer.weight)
// and the cross-entropy against the labels, masked and averaged (or summed: per-token loss).
// Owns its buffers (allocated once): labels, loss weights [s, b], the final norm's output,
// logits [n, V/T] in the model dtype (overwritten by their gradient in backward), the per-token
// losses and log-sum-exp [n] fp32, and the host staging of the losses queued for take_losses().
#pragma once

#include <cstdint>
#include <vector>

#include "model/gpt_config.h"
#include "model/layers/layer_context.h"
#include "model/layers/norm.h"
#include "model/layers/parallel_linear.h"

namespace megatron::model {

class LMHead {
 public:
  Norm final_norm;
  ColumnParallelLinear output;  // bias -1

  // The buffers for micro-batches of ctx.seq x ctx.batch and this rank's vocab_slice rows.
  void allocate(const LayerContext& ctx, DType dtype, int64_t vocab_slice);
  // Copies in the micro-batch's labels [s, b] (int32, shifted into this rank's slice, -1 outside
  // it) and loss mask [s, b] fp32 (its sum `mask_sum`) from the host; the mask's host tensor is
  // kept for the loss (queue_loss).
  void set_targets(backend::Backend& backend, const Tensor& host_labels, const Tensor& host_mask, float mask_sum);
  void set_per_token_loss(bool on) { per_token_loss_ = on; }
  bool per_token_loss() const { return per_token_loss_; }

  // Final norm, logits and per-token losses from the last layer's output x [n_local, h] (with
  // more than one vocabulary shard through the vocab-parallel collectives, on the device). With
  // `fused_backward` (the head's backward next) and one shard, the logits gradient of d(loss *
  // loss_scale * grad_scale) comes out of the same pass.
  void forward(const LayerContext& ctx, const Tensor& x, bool fused_backward, float loss_scale, float grad_scale);
  // dx [n_local, h] = d(loss * loss_scale * grad_scale)/dx, with the output layer's and final
  // norm's gradients; dx may be x's own buffer (it goes through ws.grad first).
  void backward(const LayerContext& ctx, const Tensor& x, float loss_scale, float grad_scale, Tensor& dx);
  // Forgets a logits gradient forward computed (work that runs again from the start).
  void forget_fused_gradient() { dlogits_ready_ = false; }
  // The scale of the loss weights of backward (loss_scale * grad_scale / mask sum, or without
  // the division per token): the one host value recorded head work bakes in that changes with
  // the micro-batch.
  float loss_factor(float loss_scale, float grad_scale) const;

  // The last forward's micro-batch loss queued for take_losses (its per-token losses copied to
  // the host without waiting).
  void queue_loss(backend::Backend& backend);
  // The sum, in the order queued, of the queued losses (each the masked mean, or with per-token
  // loss the masked sum), and the queue emptied; 0 when none is queued. Waits for the device.
  double take_losses(backend::Backend& backend);
  bool losses_pending() const { return !pending_losses_.empty(); }
  size_t pending_losses() const { return pending_losses_.size(); }

  const Tensor& logits() const { return logits_; }

 private:
  // d(loss)/d(loss_i) scaled by loss_scale * grad_scale, into dloss_weights_ [n].
  Tensor loss_weights(const LayerContext& ctx, float loss_scale, float grad_scale);

  Tensor labels_, loss_weights_, dloss_weights_;  // [s, b]: labels, the loss mask, the scaled weights
  Tensor final_out_, final_mean_, final_rstd_;
  Tensor logits_;   // [n, V/T] model dtype
  Tensor dlogits_;  // the logits buffer itself, overwritten by their gradient
  bool dlogits_ready_ = false;
  Tensor losses_, lse_;  // [n] fp32
  float mask_sum_ = 0.0f;
  bool per_token_loss_ = false;
  Tensor host_mask_;  // the loss weights of the current micro-batch [n] fp32, on the host
  struct PendingLoss {
    Tensor losses, mask;
    float mask_sum = 0.0f;
  };
  std::vector<PendingLoss> pending_losses_;
  std::vector<Tensor> loss_staging_;  // [n] fp32 host staging buffers, reused: one per queued loss
};

}  // namespace megatron::model
