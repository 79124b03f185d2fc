// The Megatron GPT (megatron-core GPTModel with the local transformer layer spec), composed of
// the layers in model/layers/:
//
//   tokens[b, s] -> VocabParallelEmbedding (word + position, dropout) -> L x TransformerLayer
//     -> LMHead: final norm, logits = x @ W_word^T (tied; or an untied output_layer),
//        cross-entropy against labels, mean over loss_mask
//
// The layer math, the tensor-parallel choreography and the fusions between neighbouring layers
// live in the layer types (their headers give the shapes each saves). GPTModel keeps what spans
// layers: the parameter declaration order and init streams, pipeline chunks, the pool of
// activation sets, dropout streams, recompute, recorded work (CUDA graphs), the loss queue and
// the data-parallel hooks.
//
// Explicit forward and backward, no autograd (docs/design.md, "Explicit forward and backward, no
// autograd"). Every buffer is allocated once at construction for the configured micro-batch
// (model/memory_plan.h sizes them by formula and --dry-run prints that plan); a step allocates
// nothing. Dropout masks are regenerated from Philox, not stored.
//
// Tensor parallelism over T ranks (Megatron-core's layout; docs/design.md, "Parallelism is data
// layout plus collectives"): vocab-parallel embedding and output layer [V/T, h], column-parallel
// QKV and FC1, row-parallel proj and FC2 (model/layers/parallel_linear.h); norms, position
// embedding and row-parallel biases replicated (their gradients come out identical on the TP
// ranks and need no reduction), except the query/key norms (--qk-layernorm): each rank
// normalises its own heads, so their gradients are partial sums, all-reduced over TP by
// reduce_layernorm_grads().
// Sequence parallelism (--sequence-parallel): the residual stream, norms and dropouts run on rank
// r's rows [r n/T, (r+1) n/T); norm gradients are then partial sums:
// reduce_layernorm_grads() all-reduces them over TP. Dropout in these regions uses the
// shard's global element offset (backend/ops.h) and attention dropout the global head index:
// the masks are the single-process run's (Megatron instead forks a per-rank RNG; we match the
// serial run so that TP is testable against it with dropout on).
//
// Pipeline parallelism (PipelineStageOptions, model/gpt_config.h): a model holds one stage,
// i.e. vp chunks of consecutive layers, parameters named by their GLOBAL layer index (so
// checkpoints do not depend on the layout) and initialised from the single-process init
// streams. Virtual stage 0 adds the embeddings, the last one the loss head; with tied
// embeddings the last stage (pp > 1) has its own copy of the word embedding
// (Parameter::pipeline_shared), whose gradient the trainer sums with the first stage's. Dropout
// streams use the global layer index, so the masks are the serial run's.
// Several micro-batches are in flight per chunk: each has an activation set (its residual
// stream and kept layers' activations, all allocated up front); recomputed layers share one
// set of slots per stage, filled just before their backward, so in-flight sets stay cheap
// under --recompute-granularity full (Megatron recomputes within each chunk's layers). The
// loss head's backward runs right after the loss (forward_chunk with a HeadBackward): the
// logits then need one buffer whatever the number of micro-batches in flight.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "core/tensor.h"
#include "model/gpt_config.h"
#include "model/layers/embedding.h"
#include "model/layers/layer_context.h"
#include "model/layers/lm_head.h"
#include "model/layers/transformer_layer.h"
#include "model/parameters.h"
#include "tensor_parallel/vocab_parallel.h"

namespace megatron::model {

// One micro-batch on the host: row-major [b, s] token ids, labels (the tokens shifted by one)
// and a loss mask (1 = counts in the loss). With documents packed into a sample
// (data/document_starts.h): each token's position id (GPTConfig::reset_position_ids; else
// empty, positions 0..s-1) and its document's first position, the first key it attends to
// (GPTConfig::reset_attention_mask; else empty).
struct MicroBatch {
  int64_t batch = 0;
  int64_t seq = 0;
  std::vector<int32_t> tokens;
  std::vector<int32_t> labels;
  std::vector<float> loss_mask;
  std::vector<int32_t> position_ids;
  std::vector<int32_t> key_start;
};

// Where dropout draws from: a seed and the (iteration, micro-batch) being run.
struct DropoutContext {
  bool training = true;  // false: no dropout (evaluation)
  uint64_t seed = 0;
  int64_t iteration = 0;
  int64_t micro_batch = 0;
};

// Points where data-parallel communication can overlap compute (--overlap-param-gather,
// --overlap-grad-reduce; parallel/grad_buffer.h). Parameter indices are ParameterSet's
// (registration order = the order the forward reads them, chunk after chunk; the backward
// finishes a chunk's in reverse). Unset hooks are not called.
struct ParamHooks {
  // Forward of chunk c: the parameters [0, k) are about to be read (called with growing k
  // within a chunk; k ends at chunk_parameters(c).second).
  std::function<void(int64_t k)> before_reading;
  // Backward of chunk c (and the loss head's, inside the last chunk's forward): the gradients
  // of the parameters [k, chunk_parameters(c).second) are final for this micro-batch (called
  // with shrinking k; the chunk's last call has k = chunk_parameters(c).first).
  std::function<void(int64_t k)> grads_final_from;
};

// The tensor-parallel group this model is split over (null: one rank) and whether the
// LayerNorm/dropout regions are sequence-parallel (needs a group of size > 1).
struct TensorParallelOptions {
  comm::Communicator* group = nullptr;
  bool sequence_parallel = false;
};

// The loss head's backward, run by forward_chunk right after the loss on the last virtual
// stage (training): the gradient of loss * loss_scale * grad_scale.
// The loss head's backward: d(loss * loss_scale * grad_scale), where the loss is the micro-
// batch's masked mean (or, with set_per_token_loss, its masked sum).
struct HeadBackward {
  float loss_scale = 1.0f;
  float grad_scale = 1.0f;
};

class GPTModel {
 public:
  // Declares and allocates the parameters (model dtype = param_dtype; this rank's shards) and
  // every activation and workspace buffer for micro-batches of `micro_batch_size` x
  // config.seq_length. Forward and backward are collective over the TP group.
  // `pipeline`: this rank's stage (default: the whole model). `grad_dtype`: the gradient
  // buffer's (ParameterSet::allocate; parallel/grad_buffer.h, "Gradient dtype").
  GPTModel(const GPTConfig& config, backend::Backend& backend, DType param_dtype, int64_t micro_batch_size,
           const TensorParallelOptions& tp = {}, const PipelineStageOptions& pipeline = {},
           DType grad_dtype = DType::kF32);

  const GPTConfig& config() const { return config_; }
  ParameterSet& parameters() { return params_; }
  const ParameterSet& parameters() const { return params_; }
  DType dtype() const { return dtype_; }

  // The whole model on one pipeline stage (pp == 1), one micro-batch at a time:
  // Loss of one micro-batch: sum(loss * mask) / sum(mask) (0 when the mask is empty).
  // Saves the activations for backward().
  float forward(const MicroBatch& batch, const DropoutContext& dropout);
  // The logits [s*b, V/T] (model dtype; this rank's vocabulary slice) of the last forward
  // (row si*b + bi), until backward() reuses the buffer for their gradient.
  const Tensor& logits() const { return head_.logits(); }
  // Accumulates into the fp32 gradients the gradient of (loss * loss_scale * grad_scale), with
  // loss the value forward() returned (grad_scale = 1 / num_microbatches in training).
  void backward(float loss_scale, float grad_scale);
  // All-reduces over TP the gradients of the parameters marked sum_grad_over_tp (under sequence
  // parallelism every norm's, with --qk-layernorm the query/key norms'), after the last
  // backward of an iteration (Megatron's finalize_model_grads,
  // _allreduce_non_tensor_model_parallel_grads), packed into as few collectives as a dead
  // workspace buffer allows (one at GPT sizes). No-op without such parameters.
  void reduce_layernorm_grads();
  // FP8 (GPTConfig::fp8; null without): the scaling state of this stage's linears, linear
  // 4 i + {0: QKV, 1: proj, 2: FC1, 3: FC2} of local layer i (chunk after chunk), each with
  // its 3 operand slots (backend::Fp8ScalingState::slot). What a checkpoint holds of FP8.
  backend::Fp8ScalingState* fp8_state() { return fp8_.get(); }
  const backend::Fp8ScalingState* fp8_state() const { return fp8_.get(); }
  // The once-per-iteration FP8 update after the last backward (Transformer Engine's
  // reduce_and_update_fp8_tensors): the amaxes recorded since the last update all-reduced
  // (MAX) over `amax_group` (Megatron's amax reduction group: the ranks of a pipeline stage,
  // TP x DP x CP; null or one rank: none), then Fp8ScalingState::update(). Every rank of the
  // group then holds the same scales, which are the single-process run's. No-op without FP8.
  void fp8_update(comm::Communicator* amax_group);
  int64_t tensor_parallel_size() const { return tp_->size(); }
  void set_param_hooks(ParamHooks hooks) { hooks_ = std::move(hooks); }
  // Recorded device work (Backend::begin_recording; CUDA graphs): on a backend that records,
  // one pipeline stage of one chunk and one tensor-parallel rank (dropout included: its
  // streams' (iteration, micro-batch) part is read from the activation set's dropout_stream
  // when the work runs), the device work of forward_chunk (embedding, layers, loss head and its
  // backward) and of backward_chunk is recorded the second time it runs with the same
  // host-side inputs (the first run is left unrecorded so that lazy set-up — GEMM autotuning,
  // cuDNN plans — happens outside a recording) and replayed from then on. With parameter hooks
  // (the data-parallel overlaps) the work is recorded in segments between the hooks instead,
  // which then run between the replays as they run between the ops: the embedding, each
  // layer's forward, the loss head (with its backward), each layer's backward (with its
  // recomputed forward), the embedding's backward. The results are the same bits: the same
  // kernels with the same arguments. Off: the ops are issued one by one. Work that fails to
  // record runs again unrecorded, so what is recorded must give the same result when run twice
  // (hence loss_weights writes into its own buffer).
  void set_recording(bool on) { recording_on_ = on; }
  // Runs of recorded work so far (the one right after recording included), and why recording
  // stopped ("" while it has not).
  int64_t replays() const { return replays_; }
  const std::string& recording_failure() const { return recording_failure_; }
  // Distinct host-side inputs being tracked: at most kMaxRecordedKeys per recorded segment of a
  // chunk (one without hooks; past it the keys without a recording are dropped, then if need be
  // every recording).
  static constexpr int64_t kMaxRecordedKeys = 16;
  int64_t recorded_key_limit() const;
  int64_t recorded_keys() const { return static_cast<int64_t>(recorded_.size()); }
  // The parameter indices [first, end) of chunk c: its layers, on virtual stage 0 also the
  // embeddings, on the last virtual stage also the final LayerNorm and output layer (or the
  // tied embedding's copy). The chunks tile [0, P) in order.
  std::pair<int64_t, int64_t> chunk_parameters(int64_t chunk) const;
  bool sequence_parallel() const { return sp_; }

  // --- Pipeline stage interface (parallel/pipeline_executor.h drives it; forward() and
  // backward() above are chunk 0, set 0 of a one-stage model). The stage's chunks share one
  // pool of activation sets (PipelineStageOptions::activation_sets); the set a micro-batch of a
  // chunk takes (parallel::activation_slots) holds it from its forward (or its input's
  // receive) to its backward. Activations and gradients crossing stages are the residual
  // stream [s/T (sequence parallel) or s, b, h].
  int64_t num_chunks() const { return static_cast<int64_t>(chunks_.size()); }
  int64_t activation_sets() const { return static_cast<int64_t>(sets_.size()); }
  // Virtual stage 0 (embedding, tokens in) / the last one (loss out).
  bool is_first_virtual(int64_t chunk) const { return chunk == 0 && pipe_.stage == 0; }
  bool is_last_virtual(int64_t chunk) const;
  // Whether forward_chunk(chunk, ...) reads the micro-batch: the first and last virtual
  // stages, and every chunk when attention follows documents (its key_start).
  bool reads_batch(int64_t chunk) const {
    return is_first_virtual(chunk) || is_last_virtual(chunk) || config_.reset_attention_mask ||
           positions_in_every_chunk();
  }
  // Rotary embeddings over packed documents read the position ids in every layer.
  bool positions_in_every_chunk() const { return config_.rope() && config_.reset_position_ids; }
  // Where chunk c's input activation for set k is received (not the first virtual stage).
  Tensor& input_buffer(int64_t chunk, int64_t set);
  // Forward of one micro-batch through chunk c into set k. `batch` is read where
  // reads_batch(c): tokens (and position ids) on the first virtual stage, labels and mask on
  // the last, the documents' key starts everywhere with reset_attention_mask. On the last
  // virtual stage the micro-batch loss is queued for take_losses() (its per-token losses are
  // copied to the host without waiting); there, with `head`, the loss head's backward runs
  // at once and the set keeps only d(last layer output).
  void forward_chunk(int64_t chunk, int64_t set, const MicroBatch* batch, const DropoutContext& dropout,
                     const HeadBackward* head = nullptr);
  // The sum, in the order they ran, of the losses forward_chunk queued since the last call
  // (each as forward() returns it), and the queue emptied: one wait for the device for all
  // of an iteration's micro-batches instead of one each. 0 when none is queued.
  double take_losses();
  // Megatron's --calculate-per-token-loss: a micro-batch's loss is the masked sum of its token
  // losses, not their mean; take_losses() then sums them and the caller divides by the tokens
  // (forward() returns the sum as a float). Off by default.
  void set_per_token_loss(bool on) { head_.set_per_token_loss(on); }
  // Chunk c's output activation from set k's forward (to send; not the last virtual stage).
  const Tensor& output(int64_t chunk, int64_t set) const;
  // Where the gradient of a chunk's output is received before backward_chunk (one buffer).
  Tensor& output_grad_buffer() { return recv_grad_; }
  // Backward of chunk c for the micro-batch in set k: from output_grad_buffer() (or, on the
  // last virtual stage, the head gradient forward_chunk kept), accumulating parameter
  // gradients. Afterwards input_grad() is d(chunk input) (to send; not on virtual stage 0).
  void backward_chunk(int64_t chunk, int64_t set);
  const Tensor& input_grad() const { return ws_.grad; }
  // The word embedding when it is tied across the first and last stage (pp > 1, not
  // --untie-embeddings-and-output-weights) and this stage holds it: its gradient must be
  // all-reduced over the embedding group before the optimizer step. Null otherwise.
  Parameter* tied_embedding();
  // Declares (without allocating) in `params` the parameters of pipeline stage `pipeline`, as
  // the constructor does (names, global shapes under a one-rank TP set, order, init streams):
  // what a checkpoint writer receives from that stage.
  static void declare_stage_parameters(const GPTConfig& config, const PipelineStageOptions& pipeline,
                                       ParameterSet* params);
  // Declares, as the constructor of tensor-parallel rank 0 of `tp` does (local shapes and
  // offsets, without allocating), the parameters of stage `pipeline`, and returns where its
  // data-parallel gradient buckets must begin besides their size (parallel/grad_buffer.h
  // BucketLayout): chunk_parameters(c).first of each chunk c >= 1 and tied_embedding()'s index.
  struct BucketBoundaries {
    std::vector<int64_t> chunk_starts;
    int64_t tied = -1;  // -1: none
  };
  static BucketBoundaries declare_local_stage(const GPTConfig& config, const PipelineStageOptions& pipeline, int64_t tp,
                                              ParameterSet* params);

 private:
  // With GPTConfig::fp8: the linears' fp8 indices, the scaling state and the FP8 buffers.
  void allocate_fp8();
  // One activation set of a chunk: the residual stream xs[0..Lc] (xs[l] is the input of the
  // chunk's layer l, xs[Lc] its output, or d(output) after an early head backward), the kept
  // layers' saved activations, the tokens (virtual stage 0) and the micro-batch's dropout context.
  struct ActivationSet {
    std::vector<Tensor> xs;
    std::vector<TransformerLayer::Saved> kept;
    Tensor tokens;
    Tensor positions;  // int32 [b, s] position ids (virtual stage 0, reset_position_ids)
    Tensor key_start;  // int32 [b, s] first visible key per query (reset_attention_mask)
    DropoutContext dropout;
    // int64 [1]: (iteration << 16 | micro-batch) << 14 of `dropout`, written by forward_chunk
    // where dropout_stream_in_memory; the dropout ops add it to their streams when they run.
    Tensor dropout_stream;
  };
  struct Chunk {
    int64_t first_layer = 0;  // global index of local layer 0
  };
  // This stage's layers, declared in the single-process order: the embedding on virtual stage
  // 0 (indices -1 elsewhere), the chunks' transformer layers [chunk * Lc + local layer], the
  // loss head's final norm and output layer on the last (output -1 elsewhere).
  struct StageLayers {
    VocabParallelEmbedding embedding;
    std::vector<TransformerLayer> layers;
    Norm final_norm;
    int64_t output = -1;
  };
  static StageLayers declare(const GPTConfig& config, const PipelineStageOptions& pipeline, ParameterSet* params);

  backend::DropoutParams dropout_params(float p, int64_t layer, int site) const;
  // The (iteration, micro-batch) bits of every dropout stream of `dropout` (dropout_params).
  static uint64_t dropout_stream_base(const DropoutContext& dropout);
  // Global layer gl's dropouts and documents for the current set.
  TransformerLayer::Run layer_run(int64_t gl) const;
  // Set `set` of the pool, for a micro-batch of chunk `chunk` (both checked).
  ActivationSet& set_at(int64_t chunk, int64_t set);
  const ActivationSet& set_at(int64_t chunk, int64_t set) const;
  // The activation set being run (cur_chunk_, cur_set_).
  ActivationSet& cur_set() { return sets_[static_cast<size_t>(cur_set_)]; }
  const ActivationSet& cur_set() const { return sets_[static_cast<size_t>(cur_set_)]; }
  // Whether the current work draws dropout masks (training, a dropout > 0).
  bool dropout_drawn() const {
    return dropout_ctx_.training && (config_.hidden_dropout > 0.0f || config_.attention_dropout > 0.0f);
  }
  // Local layer l of the current chunk, and where its activations are saved (its kept slot in
  // the current set, or a recompute slot).
  const TransformerLayer& layer(int64_t l) const {
    return layers_[static_cast<size_t>(cur_chunk_ * layers_per_chunk_ + l)];
  }
  TransformerLayer::Saved& layer_saved(int64_t l);
  // Forward of local layer l of the current chunk / set (cur_chunk_, cur_set_).
  void layer_forward(int64_t l);
  // One past local layer l's (of the current chunk) last parameter index.
  int64_t layer_end(int64_t l) const { return layer(l).parameter_end(); }
  // The device work of forward_chunk after its inputs are loaded (first / last: virtual
  // stage 0 / the last one).
  void chunk_forward(bool first, bool last, const HeadBackward* head);
  // Recorded work (set_recording). A key holds everything host-side that the recorded ops
  // bake in: which work (0 forward, 1 backward; a segment: segment_kind), chunk, set, whether
  // the loss head's backward runs, the dropout seed + 1 when dropout is drawn (0 when not), the
  // loss weights' scale (its bits), every gradient's stale flag (GradWrite) and the state one
  // layer's backward leaves for the next (carried_state). The dropout streams' (iteration,
  // micro-batch) part is read from the set's dropout_stream when the work runs.
  using RecordKey = std::tuple<int, int64_t, int64_t, bool, uint64_t, uint32_t, std::vector<bool>, int64_t>;
  struct RecordedWork {
    int64_t runs = 0;
    std::unique_ptr<backend::Recording> recording;
    std::vector<bool> stale_after;  // the stale flags after the work (what it claimed)
    int64_t carried_after = 0;      // carried_state() after the work
  };
  // Whole-chunk recording (no hooks) / recording in segments between the hooks.
  bool recordable() const;
  bool segmented() const;
  bool recordable_apart_from_hooks() const;
  // handoff_ as one number, and back (a replay sets what its recording's host code left).
  int64_t carried_state() const { return handoff_.layer * 2 + (handoff_.taken.grad_in_h1 ? 1 : 0); }
  void set_carried_state(int64_t v);
  // Runs `work` (device ops only), records it, or replays its recording (see set_recording):
  // run_recordable for a whole chunk's work when recordable(), segment for one segment when
  // segmented() (kinds: 2 + 2 * index for forward segments, 3 + 2 * index for backward ones;
  // index 0 the embedding, 1 + l layer l, layers + 1 the head). Otherwise the work just runs.
  void run_recordable(int kind, bool head, float loss_factor, const std::function<void()>& work);
  // The loss weights' scale of the head's backward (LMHead::loss_factor); 0 without it.
  float head_loss_factor(const HeadBackward* head) const;
  void segment(int kind, bool head, float loss_factor, const std::function<void()>& work);
  void run_recorded(int kind, bool head, float loss_factor, const std::function<void()>& work);
  int forward_segment(int64_t index) const { return 2 + 2 * static_cast<int>(index); }
  int backward_segment(int64_t index) const { return 3 + 2 * static_cast<int>(index); }
  // Layers of the current chunk, top to bottom, from ws_.grad = d(output); then, on virtual
  // stage 0, the embedding.
  void chunk_backward();
  // Inputs of a micro-batch onto the device, into `as` and the loss head: tokens and position
  // ids (`first`), the documents' key starts (reset_attention_mask), labels and loss weights
  // (`labels`: the last virtual stage).
  void load_inputs(const MicroBatch& mb, ActivationSet& as, bool first, bool labels);
  // grad_x: gradient w.r.t. the layer's output on entry, w.r.t. its input on exit (local l).
  void layer_backward(int64_t l, Tensor& grad_x);

  GPTConfig config_;
  backend::Backend& backend_;
  DType dtype_;
  int64_t micro_batch_size_;
  // Tensor parallelism: the group (a one-rank group when none is given), sequence
  // parallelism, this rank's vocabulary slice, and the residual-stream rows n_local (n / T
  // with sequence parallelism, else n).
  std::unique_ptr<comm::Communicator> own_tp_;
  comm::Communicator* tp_ = nullptr;
  bool sp_ = false;
  tensor_parallel::VocabRange vocab_;
  int64_t n_local_ = 0;

  PipelineStageOptions pipe_;
  // Recompute bookkeeping per chunk: config_ with num_layers = layers_per_chunk_ (Megatron
  // recomputes within each chunk's block of layers).
  GPTConfig chunk_config_;
  int64_t layers_per_chunk_ = 0;

  ParameterSet params_;
  // The layers of this stage (StageLayers) and what they run with.
  VocabParallelEmbedding embedding_;
  std::vector<TransformerLayer> layers_;  // [chunk * layers_per_chunk_ + local layer]
  LMHead head_;
  LayerWorkspace ws_;
  std::unique_ptr<backend::Fp8ScalingState> fp8_;
  LayerContext ctx_;
  // What the last layer backward left for the next one (transformer_layer.h).
  LayerHandoff handoff_;

  std::vector<Chunk> chunks_;
  std::vector<ActivationSet> sets_;                       // the pool shared by the chunks
  int64_t cur_chunk_ = 0, cur_set_ = 0;                   // what layer_forward / layer_backward work on
  std::vector<TransformerLayer::Saved> recompute_saved_;  // the recompute slots, shared by every chunk and set
  std::vector<int64_t> act_slot_;                         // per local layer: kept slot (>= 0) or ~recompute slot
  // pp > 1: the received output gradient [n_local, h] (separate from ws_.grad, which a send of
  // the previous input gradient may still read in the same exchange).
  Tensor recv_grad_;
  DropoutContext dropout_ctx_;
  bool recording_on_ = true;
  std::map<RecordKey, RecordedWork> recorded_;
  int64_t replays_ = 0;
  std::string recording_failure_;
  ParamHooks hooks_;
  void before_reading(int64_t k) const {
    if (hooks_.before_reading) hooks_.before_reading(k);
  }
  void grads_final_from(int64_t k) const {
    if (hooks_.grads_final_from) hooks_.grads_final_from(k);
  }
};

}  // namespace megatron::model
