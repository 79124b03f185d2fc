#include "model/gpt_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "comm/self_communicator.h"
#include "core/error.h"
#include "model/memory_plan.h"
#include "tensor_parallel/mappings.h"

namespace megatron::model {

namespace {
// Dropout use sites within a layer (part of the Philox stream id).
constexpr int kSiteAttentionProbs = 0;
constexpr int kSiteAttentionOut = 1;
constexpr int kSiteMlpOut = 2;
constexpr int kSiteEmbedding = 3;

}  // namespace

GPTModel::StageLayers GPTModel::declare(const GPTConfig& c, const PipelineStageOptions& pipe, ParameterSet* params) {
  StageLayers st;
  const int64_t pp = pipe.pp, vp = pipe.virtual_chunks, Lc = c.num_layers / (pp * vp);
  const bool first_stage = pipe.stage == 0, last_stage = pipe.stage == pp - 1;
  const bool bias = c.add_bias_linear, tied = !c.untie_embeddings_and_output_weights;
  constexpr int kRows = 0;  // vocab-parallel rows
  // Parameters in the single-process order, each drawing from its single-process init stream:
  // word 0, position 1, then per layer `per_layer` streams, then the final norm and the untied
  // output layer.
  const int64_t norm_tensors = c.layernorm_bias() ? 2 : 1;
  const int64_t per_layer = (bias ? 8 : 4) + (c.qk_layernorm ? 4 : 2) * norm_tensors;
  ParameterSet& ps = *params;
  if (first_stage) {
    ps.set_next_init_stream(0);
    st.embedding = VocabParallelEmbedding::declare(ps, c);
  }
  for (int64_t ci = 0; ci < vp; ++ci) {
    const int64_t first_layer = (ci * pp + pipe.stage) * Lc;
    for (int64_t l = first_layer; l < first_layer + Lc; ++l) {
      ps.set_next_init_stream(2 + l * per_layer);
      st.layers.push_back(TransformerLayer::declare(ps, l, c));
    }
  }
  if (last_stage) {
    ps.set_next_init_stream(2 + c.num_layers * per_layer);
    st.final_norm = Norm::declare(ps, "decoder.final_layernorm", c);
    if (!tied) {
      st.output = ps.add("output_layer.weight", {c.padded_vocab_size, c.hidden_size}, Init::kNormal, kRows);
    } else if (first_stage) {
      st.output = st.embedding.word;
    } else {
      // The last stage's own copy of the tied embedding, initialised like the first stage's
      // (stream 0) and kept equal by summing the two gradients (Megatron's shared embedding).
      ps.set_next_init_stream(0);
      st.output =
          ps.add("embedding.word_embeddings.weight", {c.padded_vocab_size, c.hidden_size}, Init::kNormal, kRows);
      ps[st.output].pipeline_shared = true;
    }
    ps[st.output].embedding_or_output = true;
  }
  if (first_stage) ps[st.embedding.word].embedding_or_output = true;
  return st;
}

void GPTModel::declare_stage_parameters(const GPTConfig& config, const PipelineStageOptions& pipeline,
                                        ParameterSet* params) {
  declare(config, pipeline, params);
}

GPTModel::BucketBoundaries GPTModel::declare_local_stage(const GPTConfig& config, const PipelineStageOptions& pipeline,
                                                         int64_t tp, ParameterSet* params) {
  params->set_tensor_parallel(0, tp);
  const StageLayers st = declare(config, pipeline, params);
  BucketBoundaries b;
  const int64_t Lc = config.num_layers / (pipeline.pp * pipeline.virtual_chunks);
  for (int64_t c = 1; c < pipeline.virtual_chunks; ++c) {
    b.chunk_starts.push_back(st.layers[static_cast<size_t>(c * Lc)].first_parameter());
  }
  if (pipeline.pp > 1 && !config.untie_embeddings_and_output_weights) {
    b.tied = st.embedding.word >= 0 ? st.embedding.word : st.output;
  }
  return b;
}

GPTModel::GPTModel(const GPTConfig& config, backend::Backend& backend, DType param_dtype, int64_t micro_batch_size,
                   const TensorParallelOptions& tp, const PipelineStageOptions& pipeline, DType grad_dtype)
    : config_(config), backend_(backend), dtype_(param_dtype), micro_batch_size_(micro_batch_size), pipe_(pipeline) {
  const GPTConfig& c = config_;
  MT_CHECK(c.num_layers > 0 && c.hidden_size > 0 && c.num_attention_heads > 0 && c.ffn_hidden_size > 0 &&
           c.kv_channels > 0 && c.seq_length > 0 && c.padded_vocab_size > 0 && micro_batch_size > 0)
      << "incomplete GPTConfig";
  MT_CHECK(c.seq_length <= c.max_position_embeddings) << "seq_length > max_position_embeddings";
  if (tp.group == nullptr) own_tp_ = std::make_unique<comm::SelfCommunicator>(backend_, "tp");
  tp_ = tp.group ? tp.group : own_tp_.get();
  const int64_t T = tp_->size(), rank = tp_->rank();
  sp_ = tp.sequence_parallel;
  MT_CHECK(!sp_ || T > 1) << "sequence parallelism needs a tensor-parallel group";
  // Configuration errors are reported by cli/train_args.cpp; here they are bugs.
  MT_CHECK(c.num_attention_heads % c.query_groups() == 0 && c.query_groups() % T == 0 && c.ffn_hidden_size % T == 0 &&
           c.padded_vocab_size % T == 0 && (!sp_ || c.seq_length % T == 0))
      << "GPTConfig does not split over " << T << " tensor-parallel ranks";
  const int64_t pp = pipe_.pp, vp = pipe_.virtual_chunks;
  MT_CHECK(pp >= 1 && vp >= 1 && pipe_.stage >= 0 && pipe_.stage < pp && c.num_layers % (pp * vp) == 0)
      << "pipeline stage " << pipe_.stage << " of " << pp << " x " << vp << " chunks for " << c.num_layers << " layers";
  MT_CHECK(pipe_.activation_sets >= 1) << "activation sets: " << pipe_.activation_sets;
  layers_per_chunk_ = c.num_layers / (pp * vp);
  chunk_config_ = c;
  chunk_config_.num_layers = layers_per_chunk_;
  const int64_t Lc = layers_per_chunk_;
  const bool last_stage = pipe_.stage == pp - 1;
  const int64_t h = c.hidden_size;
  vocab_ = tensor_parallel::vocab_range(c.padded_vocab_size, rank, T);

  params_.set_tensor_parallel(rank, T);
  StageLayers st = declare(c, pipe_, &params_);
  embedding_ = st.embedding;
  layers_ = std::move(st.layers);
  head_.final_norm = st.final_norm;
  head_.output.weight = st.output;
  for (int64_t ci = 0; ci < vp; ++ci) {
    Chunk chunk;
    chunk.first_layer = (ci * pp + pipe_.stage) * Lc;
    chunks_.push_back(std::move(chunk));
  }
  for (Parameter& p : params_.params()) {
    const bool norm = p.name.find("layernorm") != std::string::npos;
    const bool qk_norm =
        p.name.find(".q_layernorm.") != std::string::npos || p.name.find(".k_layernorm.") != std::string::npos;
    p.sum_grad_over_tp = (sp_ && norm) || (T > 1 && qk_norm);
  }
  params_.allocate(backend_, dtype_, grad_dtype);

  const int64_t s = c.seq_length, b = micro_batch_size_, n = s * b;
  n_local_ = sp_ ? n / T : n;
  ctx_.backend = &backend_;
  ctx_.tp = tp_;
  ctx_.sequence_parallel = sp_;
  ctx_.values = &params_;
  ctx_.grads = &params_;
  ctx_.ws = &ws_;
  ctx_.seq = s;
  ctx_.batch = b;
  ctx_.hidden = h;

  // Activations and inputs (shapes per rank: the layers' headers).
  const int64_t nl = n_local_, sl = sp_ ? s / T : s;
  auto act = [&](Shape shape, DType dt) { return backend_.empty(std::move(shape), dt, MemoryKind::kActivations); };
  auto work = [&](Shape shape, DType dt) { return backend_.empty(std::move(shape), dt, MemoryKind::kWorkspace); };
  // Any layer of the stage gives the per-layer shapes (they are the same for every layer).
  const TransformerLayer& any_layer = layers_.front();
  const GPTConfig& cc = chunk_config_;
  MT_CHECK(cc.recompute == Recompute::kNone || cc.recompute_num_layers >= 1) << "recompute_num_layers";
  // Kept layers own a slot per set (in layer order); recomputed layers share the recompute
  // slots (~slot) of the whole stage: they are filled just before their backward.
  for (int64_t l = 0, kept = 0; l < Lc; ++l) {
    if (!cc.recomputed(l)) {
      act_slot_.push_back(kept++);
    } else if (cc.recompute == Recompute::kUniform) {
      act_slot_.push_back(~(l % cc.recompute_num_layers));
    } else {
      act_slot_.push_back(~int64_t{0});
    }
  }
  // One pool of sets for all chunks (each holds Lc layers): stage 0's sets can all take chunk
  // 0's micro-batches, so each has the tokens (and position ids).
  for (int64_t k = 0; k < pipe_.activation_sets; ++k) {
    ActivationSet set;
    if (pipe_.stage == 0) set.tokens = act({b, s}, DType::kI32);
    if ((pipe_.stage == 0 || positions_in_every_chunk()) && c.reset_position_ids) {
      set.positions = act({b, s}, DType::kI32);
    }
    if (c.reset_attention_mask) set.key_start = act({b, s}, DType::kI32);
    if (dropout_stream_in_memory(c, T, pipe_)) set.dropout_stream = act({1}, DType::kI64);
    for (int64_t l = 0; l <= Lc; ++l) set.xs.push_back(act({sl, b, h}, dtype_));
    for (int64_t l = 0; l < cc.kept_layers(); ++l) set.kept.push_back(any_layer.allocate_saved(ctx_, dtype_));
    sets_.push_back(std::move(set));
  }
  for (int64_t l = 0; l < cc.recompute_slots(); ++l) recompute_saved_.push_back(any_layer.allocate_saved(ctx_, dtype_));
  if (last_stage) head_.allocate(ctx_, dtype_, vocab_.size);
  ws_.grad = work({nl, h}, dtype_);
  ws_.h1 = work({n, h}, dtype_);
  ws_.h2 = work({n, h}, dtype_);
  any_layer.allocate_workspace(ctx_, dtype_, ws_);
  if (sp_) ws_.full = work({n, h}, dtype_);
  if (c.fp8) allocate_fp8();
  if (pp > 1) recv_grad_ = work({nl, h}, dtype_);
}

void GPTModel::allocate_fp8() {
  const int64_t n = config_.seq_length * micro_batch_size_;
  int64_t rows = 0, weight = 0, rows_t = 0, cols_t = 0;  // the largest operand of each buffer
  std::vector<int64_t> weight_bytes;                     // by fp8 index
  for (size_t i = 0; i < layers_.size(); ++i) {
    TransformerLayer& L = layers_[i];
    const int64_t base = 4 * static_cast<int64_t>(i);
    L.attention.qkv.fp8 = base;
    L.attention.proj.fp8 = base + 1;
    L.mlp.fc1.fp8 = base + 2;
    L.mlp.fc2.fp8 = base + 3;
    for (int64_t w : {L.attention.qkv.weight, L.attention.proj.weight, L.mlp.fc1.weight, L.mlp.fc2.weight}) {
      const Tensor& v = params_[w].value;
      const int64_t out = v.dim(0), in = v.dim(1);
      rows = std::max({rows, n * in, n * out});
      weight = std::max(weight, out * in);
      weight_bytes.push_back(out * in);
      rows_t = std::max(rows_t, n * out);
      cols_t = std::max(cols_t, n * in);
    }
  }
  // Workspace, as the buffers: model::fp8_memory_bytes plans both.
  fp8_ = std::make_unique<backend::Fp8ScalingState>(
      backend_, *config_.fp8, 4 * static_cast<int64_t>(layers_.size()) * backend::kFp8Roles, MemoryKind::kWorkspace);
  auto work = [&](int64_t bytes) { return backend_.empty({bytes}, DType::kF8E4M3, MemoryKind::kWorkspace); };
  ws_.fp8_rows = work(rows);
  ws_.fp8_weight = work(weight);
  ws_.fp8_rows_t = work(rows_t);
  ws_.fp8_cols_t = work(cols_t);
  ws_.fp8_saved_wt.clear();
  for (int64_t bytes : weight_bytes) ws_.fp8_saved_wt.push_back(work(bytes));
  ctx_.fp8 = fp8_.get();
}

void GPTModel::fp8_update(comm::Communicator* amax_group) {
  if (!fp8_) return;
  if (amax_group != nullptr && amax_group->size() > 1) {
    Tensor amax = fp8_->amax_to_reduce();
    amax_group->all_reduce(amax, comm::ReduceOp::kMax);
  }
  fp8_->update();
}

bool GPTModel::is_last_virtual(int64_t chunk) const { return chunk == num_chunks() - 1 && pipe_.stage == pipe_.pp - 1; }

Parameter* GPTModel::tied_embedding() {
  if (pipe_.pp == 1 || config_.untie_embeddings_and_output_weights) return nullptr;
  if (embedding_.word >= 0) return &params_[embedding_.word];
  if (head_.output.weight >= 0) return &params_[head_.output.weight];
  return nullptr;
}

TransformerLayer::Saved& GPTModel::layer_saved(int64_t l) {
  const int64_t slot = act_slot_[static_cast<size_t>(l)];
  if (slot < 0) return recompute_saved_[static_cast<size_t>(~slot)];
  return cur_set().kept[static_cast<size_t>(slot)];
}

backend::DropoutParams GPTModel::dropout_params(float p, int64_t layer, int site) const {
  backend::DropoutParams d;
  if (!dropout_ctx_.training || p <= 0.0f) return d;
  d.p = p;
  d.seed = dropout_ctx_.seed;
  // A distinct Philox stream per (iteration, micro-batch, layer, site): 26 + 16 + 12 + 2 bits;
  // the (iteration, micro-batch) part read from the set's dropout_stream when it has one.
  d.stream = (static_cast<uint64_t>(layer + 1) << 2) | static_cast<uint64_t>(site);
  const Tensor& in_memory = cur_set().dropout_stream;
  if (in_memory.defined()) {
    d.stream_add = static_cast<const uint64_t*>(in_memory.data());  // device memory on a GPU backend
  } else {
    d.stream |= dropout_stream_base(dropout_ctx_);
  }
  // Hidden dropouts act on the residual stream [n_local, h]: a sequence-parallel shard starts
  // at global element rank * n_local * h (attention dropout places its heads instead).
  if (sp_ && site != kSiteAttentionProbs) {
    d.offset = static_cast<uint64_t>(tp_->rank() * n_local_ * config_.hidden_size);
  }
  return d;
}

uint64_t GPTModel::dropout_stream_base(const DropoutContext& dropout) {
  return (static_cast<uint64_t>(dropout.iteration) << 16 | static_cast<uint64_t>(dropout.micro_batch)) << 14;
}

TransformerLayer::Run GPTModel::layer_run(int64_t gl) const {
  TransformerLayer::Run run;
  run.attention.probs = dropout_params(config_.attention_dropout, gl, kSiteAttentionProbs);
  run.attention.out = dropout_params(config_.hidden_dropout, gl, kSiteAttentionOut);
  run.attention.key_start = cur_set().key_start;  // undefined without documents
  run.attention.positions = cur_set().positions;  // undefined without documents
  run.mlp_out = dropout_params(config_.hidden_dropout, gl, kSiteMlpOut);
  return run;
}

void GPTModel::reduce_layernorm_grads() {
  // One all-reduce per workspace-full of gradients instead of one per norm tensor (4 per layer
  // under sequence parallelism: ~100 small collectives at 24 layers, each paying NCCL's
  // latency), as Megatron coalesces them. The packing buffer is ws_.full's bytes (sequence
  // parallelism), else ws_.h2's (the backward's partial sums): both are dead after the last
  // backward of an iteration. The sums are elementwise (at TP 2 the bits of the per-tensor
  // all-reduces; at larger TP a ring may add an element's terms in another order for another
  // message size, the same on every rank).
  std::vector<Tensor> grads;
  for (Parameter& p : params_.params()) {
    if (p.sum_grad_over_tp && p.grad.numel() > 0) grads.push_back(p.grad);
  }
  if (grads.empty()) return;
  Tensor& buffer = sp_ ? ws_.full : ws_.h2;
  if (sp_) ws_.full_rows_of = nullptr;        // the packs overwrite the gathered rows
  const DType gdt = params_.grads().dtype();  // every gradient is a view of this one flat buffer
  const int64_t esize = dtype_size(gdt);
  const auto* base = static_cast<const char*>(buffer.storage()->data());
  const int64_t byte_offset = static_cast<const char*>(buffer.data()) - base;
  MT_CHECK(byte_offset % esize == 0) << "the packing workspace at byte " << byte_offset << " cannot hold "
                                     << dtype_name(gdt);
  const int64_t capacity = buffer.nbytes() / esize;
  const Tensor pack_all = Tensor(buffer.storage(), byte_offset / esize, {capacity}, gdt);
  size_t next = 0;
  while (next < grads.size()) {
    // Gradients [next, end) fit the buffer together; one that alone does not is reduced in place.
    size_t end = next;
    int64_t numel = 0;
    while (end < grads.size() && numel + grads[end].numel() <= capacity) {
      numel += grads[end++].numel();
    }
    if (end - next < 2) {
      tensor_parallel::all_reduce_tp(*tp_, grads[next++]);
      continue;
    }
    Tensor pack = pack_all.flat_view(0, {numel});
    int64_t off = 0;
    for (size_t i = next; i < end; ++i) {
      Tensor dst = pack.flat_view(off, grads[i].shape());
      backend_.copy(grads[i], dst);
      off += grads[i].numel();
    }
    tensor_parallel::all_reduce_tp(*tp_, pack);
    off = 0;
    for (size_t i = next; i < end; ++i) {
      backend_.copy(pack.flat_view(off, grads[i].shape()), grads[i]);
      off += grads[i].numel();
    }
    next = end;
  }
}

namespace {

// A micro-batch's document ids (MicroBatch), checked on the host because the device kernels
// trust them (ops.h): position ids within [0, max_positions); key starts within [0, i] at
// position i and not decreasing along a row.
void check_document_ids(const std::vector<int32_t>& ids, bool key_starts, int64_t b, int64_t s, int64_t max_positions) {
  const char* what = key_starts ? "key_start" : "position_ids";
  MT_CHECK(static_cast<int64_t>(ids.size()) == b * s)
      << "micro-batch " << what << ": " << ids.size() << " ids for " << b << "x" << s << " tokens";
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t si = 0; si < s; ++si) {
      const int32_t v = ids[static_cast<size_t>(bi * s + si)];
      const bool ok = key_starts ? v >= 0 && v <= si && (si == 0 || v >= ids[static_cast<size_t>(bi * s + si - 1)])
                                 : v >= 0 && v < max_positions;
      MT_CHECK(ok) << "micro-batch " << what << "[" << bi << ", " << si << "] = " << v
                   << (key_starts ? ": expected within [0, position], not below the previous position's"
                                  : ": expected within [0, --max-position-embeddings)");
    }
  }
}

}  // namespace

void GPTModel::load_inputs(const MicroBatch& mb, ActivationSet& as, bool first, bool labels) {
  const int64_t s = config_.seq_length, b = micro_batch_size_, n = s * b;
  MT_CHECK(mb.batch == b && mb.seq == s && static_cast<int64_t>(mb.tokens.size()) == n &&
           static_cast<int64_t>(mb.labels.size()) == n && static_cast<int64_t>(mb.loss_mask.size()) == n)
      << "micro-batch shape " << mb.batch << "x" << mb.seq << " != " << b << "x" << s;
  auto load_ids = [&](const std::vector<int32_t>& ids, bool key_starts, Tensor& dst) {
    check_document_ids(ids, key_starts, b, s, config_.max_position_embeddings);
    Tensor host = Tensor::cpu({b, s}, DType::kI32);
    std::copy(ids.begin(), ids.end(), host.data_as<int32_t>());
    backend_.copy(host, dst);
  };
  if ((first || positions_in_every_chunk()) && as.positions.defined()) load_ids(mb.position_ids, false, as.positions);
  if (as.key_start.defined()) load_ids(mb.key_start, true, as.key_start);
  if (!first && !labels) return;  // a middle chunk reads only the key starts
  // Tokens stay [b, s]; labels and mask go sequence-first to match the logits rows. Ids go in
  // shifted into this rank's vocabulary slice (-1 outside it; T = 1: unchanged).
  Tensor host_tokens = Tensor::cpu({b, s}, DType::kI32);
  Tensor host_labels = Tensor::cpu({s, b}, DType::kI32);
  Tensor host_mask = Tensor::cpu({s, b}, DType::kF32);
  int32_t* tk = host_tokens.data_as<int32_t>();
  int32_t* lb = host_labels.data_as<int32_t>();
  float* mk = host_mask.data_as<float>();
  double mask_sum = 0.0;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t si = 0; si < s; ++si) {
      const int32_t t = mb.tokens[bi * s + si], y = mb.labels[bi * s + si];
      MT_CHECK(t >= 0 && t < config_.padded_vocab_size && y >= 0 && y < config_.padded_vocab_size)
          << "token id out of range: " << t << " / " << y;
      tk[bi * s + si] = vocab_.contains(t) ? static_cast<int32_t>(t - vocab_.start) : -1;
      lb[si * b + bi] = vocab_.contains(y) ? static_cast<int32_t>(y - vocab_.start) : -1;
      mk[si * b + bi] = mb.loss_mask[bi * s + si];
      mask_sum += mb.loss_mask[bi * s + si];
    }
  }
  if (first) backend_.copy(host_tokens, as.tokens);
  if (labels) head_.set_targets(backend_, host_labels, host_mask, static_cast<float>(mask_sum));
}

float GPTModel::forward(const MicroBatch& mb, const DropoutContext& dropout) {
  MT_CHECK(pipe_.pp == 1 && num_chunks() == 1)
      << "forward() runs the whole model; a pipeline stage uses forward_chunk()";
  MT_CHECK(!head_.losses_pending()) << "forward(): " << head_.pending_losses() << " queued losses not taken";
  forward_chunk(0, 0, &mb, dropout);
  return static_cast<float>(take_losses());  // one micro-batch: its float loss exactly
}

void GPTModel::backward(float loss_scale, float grad_scale) {
  MT_CHECK(pipe_.pp == 1 && num_chunks() == 1)
      << "backward() runs the whole model; a pipeline stage uses backward_chunk()";
  cur_chunk_ = 0;
  cur_set_ = 0;
  head_.backward(ctx_, cur_set().xs.back().view({n_local_, config_.hidden_size}), loss_scale, grad_scale, ws_.grad);
  grads_final_from(layer_end(layers_per_chunk_ - 1));
  chunk_backward();
}

GPTModel::ActivationSet& GPTModel::set_at(int64_t chunk, int64_t set) {
  return const_cast<ActivationSet&>(std::as_const(*this).set_at(chunk, set));
}

const GPTModel::ActivationSet& GPTModel::set_at(int64_t chunk, int64_t set) const {
  MT_CHECK(chunk >= 0 && chunk < num_chunks() && set >= 0 && set < activation_sets())
      << "activation set " << set << " of " << activation_sets() << " for chunk " << chunk << " of " << num_chunks();
  return sets_[static_cast<size_t>(set)];
}

Tensor& GPTModel::input_buffer(int64_t chunk, int64_t set) {
  MT_CHECK(!is_first_virtual(chunk)) << "virtual stage 0 reads tokens";
  return set_at(chunk, set).xs.front();
}

const Tensor& GPTModel::output(int64_t chunk, int64_t set) const {
  MT_CHECK(!is_last_virtual(chunk)) << "the last virtual stage outputs a loss";
  return set_at(chunk, set).xs.back();
}

void GPTModel::forward_chunk(int64_t chunk, int64_t set, const MicroBatch* mb, const DropoutContext& dropout,
                             const HeadBackward* head) {
  cur_chunk_ = chunk;
  cur_set_ = set;
  ActivationSet& as = set_at(chunk, set);
  as.dropout = dropout;
  dropout_ctx_ = dropout;
  const bool first = is_first_virtual(chunk), last = is_last_virtual(chunk);
  if (reads_batch(chunk)) {
    MT_CHECK(mb != nullptr) << "chunk " << chunk << " of stage " << pipe_.stage << " reads the micro-batch";
    load_inputs(*mb, as, first, last);
  }
  if (as.dropout_stream.defined()) {
    Tensor host = Tensor::cpu({1}, DType::kI64);
    *host.data_as<int64_t>() = static_cast<int64_t>(dropout_stream_base(dropout));
    backend_.copy(host, as.dropout_stream);
  }
  run_recordable(0, head != nullptr, last ? head_loss_factor(head) : 0.0f, [&] { chunk_forward(first, last, head); });
  if (last) head_.queue_loss(backend_);
}

float GPTModel::head_loss_factor(const HeadBackward* head) const {
  return head == nullptr ? 0.0f : head_.loss_factor(head->loss_scale, head->grad_scale);
}

void GPTModel::chunk_forward(bool first, bool last, const HeadBackward* head) {
  ActivationSet& as = cur_set();
  const int64_t h = config_.hidden_size;
  if (first) {
    const backend::DropoutParams emb_dropout = dropout_params(config_.hidden_dropout, -1, kSiteEmbedding);
    before_reading(std::max(embedding_.word, embedding_.position) + 1);
    segment(forward_segment(0), false, 0.0f,
            [&] { embedding_.forward(ctx_, as.tokens, as.positions, as.xs.front(), emb_dropout); });
  }

  for (int64_t l = 0; l < layers_per_chunk_; ++l) {
    if (hooks_.before_reading) before_reading(layer_end(l));
    segment(forward_segment(1 + l), false, 0.0f, [&] { layer_forward(l); });
  }
  if (!last) return;
  before_reading(static_cast<int64_t>(params_.params().size()));
  segment(forward_segment(1 + layers_per_chunk_), head != nullptr, head_loss_factor(head), [&] {
    Tensor x_last = as.xs.back().view({n_local_, h});
    head_.forward(ctx_, x_last, head != nullptr, head ? head->loss_scale : 1.0f, head ? head->grad_scale : 1.0f);
    if (head) {
      // The head's backward now: the set then keeps d(x_last) in place of x_last (the layers'
      // backward reads their inputs, never the chunk's output).
      head_.backward(ctx_, x_last, head->loss_scale, head->grad_scale, x_last);
    }
  });
  if (head) grads_final_from(layer_end(layers_per_chunk_ - 1));
}

bool GPTModel::recordable_apart_from_hooks() const {
  // Dropout masks follow the (iteration, micro-batch) in the set's dropout_stream, read when
  // the work runs; without it they are baked in.
  const bool masks_baked = dropout_drawn() && !cur_set().dropout_stream.defined();
  return recording_on_ && recording_failure_.empty() && backend_.can_record() && tp_->size() == 1 && pipe_.pp == 1 &&
         num_chunks() == 1 && !masks_baked;
}
bool GPTModel::recordable() const {
  return recordable_apart_from_hooks() && !hooks_.before_reading && !hooks_.grads_final_from;
}
bool GPTModel::segmented() const {
  return recordable_apart_from_hooks() && (hooks_.before_reading || hooks_.grads_final_from);
}

int64_t GPTModel::recorded_key_limit() const {
  // Segments: the embedding, the loss head, the embedding's backward and two per layer.
  const bool hooks = hooks_.before_reading || hooks_.grads_final_from;
  return kMaxRecordedKeys * (hooks ? 2 * layers_per_chunk_ + 3 : 1);
}

void GPTModel::set_carried_state(int64_t v) {
  handoff_.layer = v >= 0 ? v / 2 : (v - 1) / 2;  // floor: -1 * 2 + 0 gives back -1
  handoff_.taken.bias = handoff_.layer >= 0;
  handoff_.taken.grad_in_h1 = (v - handoff_.layer * 2) == 1;
}

void GPTModel::run_recordable(int kind, bool head, float loss_factor, const std::function<void()>& work) {
  if (!recordable()) {
    work();
    return;
  }
  run_recorded(kind, head, loss_factor, work);
}

void GPTModel::segment(int kind, bool head, float loss_factor, const std::function<void()>& work) {
  if (!segmented()) {
    work();
    return;
  }
  run_recorded(kind, head, loss_factor, work);
}

void GPTModel::run_recorded(int kind, bool head, float loss_factor, const std::function<void()>& work) {
  uint32_t factor_bits = 0;
  std::memcpy(&factor_bits, &loss_factor, sizeof(factor_bits));
  const std::vector<bool> stale_before = params_.stale_grads();
  const int64_t carried_before = carried_state();
  RecordKey key{kind,        cur_chunk_,   cur_set_,      head, dropout_drawn() ? dropout_ctx_.seed + 1 : 0,
                factor_bits, stale_before, carried_before};
  // Keys that keep changing (a loss mask whose sum differs per micro-batch, a dynamic fp16 loss
  // scale) would grow the map without end: past recorded_key_limit() the keys seen once go (the
  // recordings stay), and if that is not enough, everything.
  const int64_t limit = recorded_key_limit();
  if (recorded_keys() >= limit && recorded_.find(key) == recorded_.end()) {
    std::erase_if(recorded_, [](const auto& entry) { return entry.second.recording == nullptr; });
    if (recorded_keys() >= limit) recorded_.clear();
  }
  RecordedWork& r = recorded_[std::move(key)];
  if (r.recording) {
    backend_.replay(*r.recording);
    params_.set_stale_grads(r.stale_after);
    set_carried_state(r.carried_after);
    ++replays_;
    return;
  }
  if (r.runs++ == 0) {  // the first run of this work: unrecorded (lazy set-up happens here)
    work();
    return;
  }
  // Record, then run the recording. Whatever fails while recording (an op the backend cannot
  // record) ends recording for this model: the flags are put back and the work runs unrecorded.
  std::string failure;
  backend_.begin_recording();
  try {
    work();
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "an op threw a non-standard exception while recording";
  }
  std::unique_ptr<backend::Recording> recording = backend_.end_recording();
  if (!failure.empty() || recording == nullptr) {
    recording_failure_ = failure.empty() ? "the backend could not record an op of the step" : failure;
    params_.set_stale_grads(stale_before);
    set_carried_state(carried_before);
    head_.forget_fused_gradient();
    work();
    return;
  }
  r.stale_after = params_.stale_grads();
  r.carried_after = carried_state();
  r.recording = std::move(recording);
  backend_.replay(*r.recording);
  ++replays_;
}

double GPTModel::take_losses() { return head_.take_losses(backend_); }

void GPTModel::backward_chunk(int64_t chunk, int64_t set) {
  cur_chunk_ = chunk;
  cur_set_ = set;
  const ActivationSet& as = set_at(chunk, set);
  dropout_ctx_ = as.dropout;
  // ws_.grad := d(chunk output): kept by the early head backward, or received.
  const Tensor& dy = is_last_virtual(chunk) ? as.xs.back() : recv_grad_;
  run_recordable(1, false, 0.0f, [&] {
    backend_.copy(dy.view({n_local_, config_.hidden_size}), ws_.grad);
    chunk_backward();
  });
}

void GPTModel::chunk_backward() {
  const GPTConfig& cc = chunk_config_;
  handoff_ = {};
  // Top to bottom, one layer at a time (a per-layer "gradients ready" point: after
  // layer_backward(l) the gradients of layer l are final for this micro-batch).
  for (int64_t l = layers_per_chunk_ - 1; l >= 0; --l) {
    segment(backward_segment(1 + l), false, 0.0f, [&] {
      // Entering a recomputed block from its top: re-run its forward from the kept input (the
      // dropout masks are functions of (seed, iteration, micro-batch, layer), so they repeat).
      if (cc.recomputed(l)) {
        const int64_t first =
            cc.recompute == Recompute::kUniform ? l / cc.recompute_num_layers * cc.recompute_num_layers : l;
        const bool top =
            cc.recompute == Recompute::kBlock || l == layers_per_chunk_ - 1 || (l + 1) % cc.recompute_num_layers == 0;
        if (top) {
          for (int64_t k = first; k <= l; ++k) layer_forward(k);
          handoff_.taken.grad_in_h1 = false;  // the forward used ws_.h1
        }
      }
      layer_backward(l, ws_.grad);
    });
    grads_final_from(layer(l).first_parameter());
  }
  if (!is_first_virtual(cur_chunk_)) return;

  // Embedding: through the dropout, the rows gathered (sequence parallelism), then
  // scatter-add into this rank's word rows (other ranks' ids are skipped) and the positions.
  segment(backward_segment(0), false, 0.0f, [&] {
    const ActivationSet& as = cur_set();
    embedding_.backward(ctx_, as.tokens, as.positions, dropout_params(config_.hidden_dropout, -1, kSiteEmbedding));
  });
  grads_final_from(0);
}

std::pair<int64_t, int64_t> GPTModel::chunk_parameters(int64_t chunk) const {
  auto first = [&](int64_t c) { return layers_[static_cast<size_t>(c * layers_per_chunk_)].first_parameter(); };
  const int64_t end = chunk + 1 < num_chunks() ? first(chunk + 1) : static_cast<int64_t>(params_.params().size());
  return {chunk == 0 ? 0 : first(chunk), end};
}

void GPTModel::layer_forward(int64_t l) {
  const TransformerLayer& L = layer(l);
  std::vector<Tensor>& xs = cur_set().xs;
  const int64_t h = config_.hidden_size;
  const Tensor x = xs[static_cast<size_t>(l)].view({n_local_, h});
  Tensor out = xs[static_cast<size_t>(l) + 1].view({n_local_, h});
  L.forward(ctx_, x, out, layer_saved(l), layer_run(L.index));
}

void GPTModel::layer_backward(int64_t l, Tensor& g) {
  const TransformerLayer& L = layer(l);
  const Tensor x = cur_set().xs[static_cast<size_t>(l)].view({n_local_, config_.hidden_size});
  const TransformerLayer* below = l > 0 ? &layer(l - 1) : nullptr;
  const backend::DropoutParams below_mlp_out = dropout_params(config_.hidden_dropout, L.index - 1, kSiteMlpOut);
  L.backward(ctx_, g, x, layer_saved(l), layer_run(L.index), below, below_mlp_out, handoff_);
}

}  // namespace megatron::model
