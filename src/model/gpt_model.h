// The Megatron GPT (megatron-core GPTModel with the local transformer layer spec):
//
//   tokens[b, s] -> word + position embedding -> dropout -> L x TransformerLayer
//     -> final LayerNorm -> logits = x @ W_word^T (tied; or an untied output_layer)
//     -> cross-entropy against labels, mean over loss_mask
//   TransformerLayer (pre-LayerNorm):
//     x_mid = x + dropout(proj(attention(qkv(LN1(x)))) + b_proj)
//     x_out = x_mid + dropout(fc2(gelu(fc1(LN2(x_mid)) + b_fc1)) + b_fc2)
//
// Explicit forward and backward, no autograd (DESIGN.md decision 1). Every buffer is
// allocated once at construction for the configured micro-batch (model/memory_plan.h sizes
// them by formula and --dry-run prints that plan); a step allocates nothing.
//
// Saved per layer for backward (rows n = s*b, activation dtype = model dtype):
//   input x [n,h] (= the previous layer's output), LN1 out [n,h], LN1 mean/rstd [n] fp32,
//   qkv [n,3q], attention out [n,q], attention lse [b,heads,s] fp32, x_mid [n,h],
//   LN2 out [n,h], LN2 mean/rstd [n] fp32, fc1 out (before bias+GELU) [n,f], GELU out [n,f]
// (q = heads * kv_channels). Dropout masks are regenerated from Philox, not stored.
//
// Tensor parallelism over T ranks (Megatron-core's layout, DESIGN.md decision 3; the
// collectives are tensor_parallel/mappings.h, the partitions tensor_parallel/partition.h):
//   word embedding, output layer  vocab-parallel [V/T, h] (tensor_parallel/vocab_parallel.h)
//   QKV [3q/T, h] + bias, FC1 [f/T, h] + bias   column-parallel (rank r: heads [r H/T, (r+1) H/T))
//   proj [h, q/T], FC2 [h, f/T]                  row-parallel: output all-reduced, then the
//                                                (replicated) bias added once
//   LayerNorms, position embedding, row-parallel biases: replicated; their gradients come out
//   identical on the TP ranks (each sees the whole sequence) and need no reduction.
// Per layer and rank: qkv [n, 3q/T], attention out [n, q/T], lse [b, heads/T, s], fc1/GELU out
// [n, f/T]; the logits [n, V/T].
// Sequence parallelism (--sequence-parallel): the residual stream, LayerNorms and dropouts run
// on rank r's rows [r n/T, (r+1) n/T) (n/T = s/T * b), the column-parallel linears all-gather
// their input rows (the gathered LayerNorm output lives in a workspace and is gathered again
// in backward, as Megatron), the row-parallel ones reduce-scatter their output instead of
// the all-reduce. LayerNorm gradients are then partial sums: reduce_sequence_parallel_grads()
// all-reduces them over TP. The row-parallel biases take their gradient from the gathered
// (whole) output gradient, so it is complete on every rank. Dropout in these regions uses the
// shard's global element offset (backend/ops.h) and attention dropout the global head index:
// the masks are the single-process run's (Megatron instead forks a per-rank RNG; we match the
// serial run so that TP is testable against it with dropout on).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "core/tensor.h"
#include "model/gpt_config.h"
#include "model/parameters.h"
#include "tensor_parallel/vocab_parallel.h"

namespace megatron::model {

// One micro-batch on the host: row-major [b, s] token ids, labels (the tokens shifted by one)
// and a loss mask (1 = counts in the loss).
struct MicroBatch {
  int64_t batch = 0;
  int64_t seq = 0;
  std::vector<int32_t> tokens;
  std::vector<int32_t> labels;
  std::vector<float> loss_mask;
};

// Where dropout draws from: a seed and the (iteration, micro-batch) being run.
struct DropoutContext {
  bool training = true;  // false: no dropout (evaluation)
  uint64_t seed = 0;
  int64_t iteration = 0;
  int64_t micro_batch = 0;
};

// Points where data-parallel communication can overlap compute (--overlap-param-gather,
// --overlap-grad-reduce; train/grad_buffer.h). Parameter indices are ParameterSet's
// (registration order = the order the forward reads them; the backward finishes them in
// reverse). Unset hooks are not called.
struct ParamHooks {
  // Forward: the parameters [0, k) are about to be read (called with growing k; the last call
  // has k = the number of parameters).
  std::function<void(int64_t k)> before_reading;
  // Backward: the gradients of the parameters [k, P) are final for this backward (called with
  // shrinking k; the last call has k = 0).
  std::function<void(int64_t k)> grads_final_from;
};

// The tensor-parallel group this model is split over (null: one rank) and whether the
// LayerNorm/dropout regions are sequence-parallel (needs a group of size > 1).
struct TensorParallelOptions {
  comm::Communicator* group = nullptr;
  bool sequence_parallel = false;
};

class GPTModel {
 public:
  // Declares and allocates the parameters (model dtype = param_dtype; this rank's shards) and
  // every activation and workspace buffer for micro-batches of `micro_batch_size` x
  // config.seq_length. Forward and backward are collective over the TP group.
  GPTModel(const GPTConfig& config, backend::Backend& backend, DType param_dtype, int64_t micro_batch_size,
           const TensorParallelOptions& tp = {});

  const GPTConfig& config() const { return config_; }
  ParameterSet& parameters() { return params_; }
  const ParameterSet& parameters() const { return params_; }
  DType dtype() const { return dtype_; }

  // Loss of one micro-batch: sum(loss * mask) / sum(mask) (0 when the mask is empty).
  // Saves the activations for backward().
  float forward(const MicroBatch& batch, const DropoutContext& dropout);
  // The logits [s*b, V/T] (model dtype; this rank's vocabulary slice) of the last forward
  // (row si*b + bi), until backward() reuses the buffer for their gradient.
  const Tensor& logits() const { return logits_; }
  // Accumulates into the fp32 gradients the gradient of (loss * loss_scale * grad_scale), with
  // loss the value forward() returned (grad_scale = 1 / num_microbatches in training).
  void backward(float loss_scale, float grad_scale);
  // Sequence parallelism: all-reduces over TP the gradients of the parameters marked
  // sequence_parallel (the LayerNorms), after the last backward of an iteration (Megatron's
  // finalize_model_grads). No-op otherwise.
  void reduce_sequence_parallel_grads();
  int64_t tensor_parallel_size() const { return tp_->size(); }
  void set_param_hooks(ParamHooks hooks) { hooks_ = std::move(hooks); }
  bool sequence_parallel() const { return sp_; }

 private:
  struct LayerParams {
    int64_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  };
  struct LayerActs {
    Tensor ln1_out, ln1_mean, ln1_rstd, qkv, attn_out, attn_lse, x_mid, ln2_out, ln2_mean, ln2_rstd, fc1_out, gelu_out;
  };
  const Tensor& param(int64_t i) const { return params_[i].value; }
  Tensor& grad(int64_t i) { return params_[i].grad; }
  // The parameter's value, or an undefined tensor for i < 0 (no bias).
  Tensor optional_param(int64_t i) const { return i >= 0 ? params_[i].value : Tensor(); }
  Tensor optional_grad(int64_t i) { return i >= 0 ? params_[i].grad : Tensor(); }
  backend::DropoutParams dropout_params(float p, int64_t layer, int site) const;
  backend::AttentionParams attention_params(int64_t layer) const;
  void layer_forward(int64_t l);
  // One past layer l's last parameter index (the layers' parameters are contiguous, each
  // starting with its first LayerNorm's weight; the final LayerNorm follows the last layer).
  int64_t layer_end(int64_t l) const;
  // d(input) of a dropout from its output gradient dy: dy itself without dropout, else the
  // masked gradient written into `buffer`.
  Tensor through_dropout(const Tensor& dy, Tensor& buffer, const backend::DropoutParams& dropout);
  // grad_x: gradient w.r.t. the layer's output on entry, w.r.t. its input on exit.
  void layer_backward(int64_t l, Tensor& grad_x);
  // The input of a column-parallel linear from its LayerNorm output [n_local, h]: the rows
  // gathered into ws_full_ under sequence parallelism, else `ln_out` itself.
  Tensor column_input(const Tensor& ln_out);
  // Row-parallel output (forward) or column-parallel input gradient (backward) `partial`
  // [n, h]: summed over TP, all-reduced in place (returns `partial`), or reduce-scattered
  // into its sequence shard (returns that view).
  Tensor reduce_rows(Tensor& partial);
  // The whole [n, h] gradient from this rank's rows `shard` (gathered into `full`), or
  // `shard` itself without sequence parallelism.
  Tensor gather_rows(const Tensor& shard, Tensor& full);
  // A [n_local, h] buffer inside `full` [n, h]: this rank's sequence shard, or all of it.
  Tensor local_rows(const Tensor& full);

  GPTConfig config_;
  backend::Backend& backend_;
  DType dtype_;
  int64_t micro_batch_size_;
  int64_t q_size_;  // this rank's heads * kv_channels (q / T)
  // Tensor parallelism: the group (a one-rank group when none is given), sequence
  // parallelism, this rank's vocabulary slice, heads, FFN columns, and the residual-stream
  // rows n_local (n / T with sequence parallelism, else n).
  std::unique_ptr<comm::Communicator> own_tp_;
  comm::Communicator* tp_ = nullptr;
  bool sp_ = false;
  tensor_parallel::VocabRange vocab_;
  int64_t heads_ = 0, ffn_ = 0, n_local_ = 0;

  ParameterSet params_;
  int64_t word_emb_ = -1, pos_emb_ = -1, final_ln_w_ = -1, final_ln_b_ = -1, output_w_ = -1;
  std::vector<LayerParams> layer_params_;

  // Inputs of the current micro-batch (device): tokens [b,s] int32, labels [s,b] int32,
  // loss weights [s,b] fp32.
  Tensor tokens_, labels_, loss_weights_;
  // xs_[l] is the input of layer l, xs_[L] the last layer's output; xs_[0] = dropout(embedding).
  std::vector<Tensor> xs_;
  std::vector<LayerActs> acts_;      // kept layers' slots, then the recompute slots
  std::vector<int64_t> act_slot_;    // per layer: its index into acts_
  Tensor final_ln_out_, final_ln_mean_, final_ln_rstd_;
  // [n, V] in the model dtype, as Megatron's output layer (the cross-entropy reads them in fp32).
  Tensor logits_;
  // d(loss)/d(logits) [n, V] in the model dtype, as Megatron's autograd hands it to the LM head
  // (so its GEMMs run on 16-bit tensor cores): the logits buffer itself, overwritten.
  Tensor dlogits_;
  Tensor losses_, loss_lse_;  // [n] fp32
  // Workspace: the gradient stream [n_local, h], two temporaries [n,h], [n,3q], [n,q], [n,f];
  // the embedding sum before dropout uses temporaries. Sequence parallelism adds ws_full_
  // [n, h], the gathered input of a column-parallel linear.
  Tensor ws_grad_, ws_h1_, ws_h2_, ws_qkv_, ws_q_, ws_f_, ws_full_;
  DropoutContext dropout_ctx_;
  float mask_sum_ = 0.0f;
  ParamHooks hooks_;
  void before_reading(int64_t k) const {
    if (hooks_.before_reading) hooks_.before_reading(k);
  }
  void grads_final_from(int64_t k) const {
    if (hooks_.grads_final_from) hooks_.grads_final_from(k);
  }
};

}  // namespace megatron::model
