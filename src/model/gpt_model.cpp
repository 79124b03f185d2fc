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

// sum(loss_i * mask_i) / sum(mask) in double over n per-token losses; 0 when the mask is empty.
double masked_sum(const float* losses, const float* mask, int64_t n) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += static_cast<double>(losses[i]) * mask[i];
  return total;
}

float masked_mean(const float* losses, const float* mask, int64_t n, float mask_sum) {
  return mask_sum > 0 ? static_cast<float>(masked_sum(losses, mask, n) / mask_sum) : 0.0f;
}

}  // namespace

GPTModel::ParamIndices GPTModel::declare(const GPTConfig& c, const PipelineStageOptions& pipe, ParameterSet* params) {
  ParamIndices ix;
  const int64_t pp = pipe.pp, vp = pipe.virtual_chunks, Lc = c.num_layers / (pp * vp);
  const bool first_stage = pipe.stage == 0, last_stage = pipe.stage == pp - 1;
  const int64_t h = c.hidden_size, f = c.ffn_hidden_size, V = c.padded_vocab_size;
  const int64_t q = c.num_attention_heads * c.kv_channels;
  const bool bias = c.add_bias_linear, tied = !c.untie_embeddings_and_output_weights;
  const bool norm_bias = c.layernorm_bias();
  const int64_t f1 = c.fc1_out_size(), f1_chunks = c.swiglu ? 2 : 1;  // [gate; up] with SwiGLU
  constexpr int kRows = 0, kCols = 1;  // partition dims: column-parallel / vocab rows, row-parallel columns
  // Parameters in the single-process order, each drawing from its single-process init stream:
  // word 0, position 1, then per layer `per_layer` streams, then the final LayerNorm and the
  // untied output layer.
  const int64_t per_layer = (bias ? 8 : 4) + (norm_bias ? 4 : 2);
  ParameterSet& ps = *params;
  if (first_stage) {
    ps.set_next_init_stream(0);
    ix.word_emb = ps.add("embedding.word_embeddings.weight", {V, h}, Init::kNormal, kRows);
    ix.pos_emb = ps.add("embedding.position_embeddings.weight", {c.max_position_embeddings, h}, Init::kNormal);
  }
  for (int64_t ci = 0; ci < vp; ++ci) {
    const int64_t first_layer = (ci * pp + pipe.stage) * Lc;
    for (int64_t l = first_layer; l < first_layer + Lc; ++l) {
      ps.set_next_init_stream(2 + l * per_layer);
      const std::string pre = "decoder.layers." + std::to_string(l) + ".";
      LayerParams lp{};
      lp.ln1_w = ps.add(pre + "input_layernorm.weight", {h}, Init::kOnes);
      lp.ln1_b = norm_bias ? ps.add(pre + "input_layernorm.bias", {h}, Init::kZeros) : -1;
      lp.qkv_w = ps.add(pre + "self_attention.linear_qkv.weight", {3 * q, h}, Init::kNormal, kRows);
      lp.qkv_b = bias ? ps.add(pre + "self_attention.linear_qkv.bias", {3 * q}, Init::kZeros, kRows) : -1;
      lp.proj_w = ps.add(pre + "self_attention.linear_proj.weight", {h, q}, Init::kScaledNormal, kCols);
      lp.proj_b = bias ? ps.add(pre + "self_attention.linear_proj.bias", {h}, Init::kZeros) : -1;
      lp.ln2_w = ps.add(pre + "pre_mlp_layernorm.weight", {h}, Init::kOnes);
      lp.ln2_b = norm_bias ? ps.add(pre + "pre_mlp_layernorm.bias", {h}, Init::kZeros) : -1;
      lp.fc1_w = ps.add(pre + "mlp.linear_fc1.weight", {f1, h}, Init::kNormal, kRows, f1_chunks);
      lp.fc1_b = bias ? ps.add(pre + "mlp.linear_fc1.bias", {f1}, Init::kZeros, kRows, f1_chunks) : -1;
      lp.fc2_w = ps.add(pre + "mlp.linear_fc2.weight", {h, f}, Init::kScaledNormal, kCols);
      lp.fc2_b = bias ? ps.add(pre + "mlp.linear_fc2.bias", {h}, Init::kZeros) : -1;
      ix.layers.push_back(lp);
    }
  }
  if (last_stage) {
    ps.set_next_init_stream(2 + c.num_layers * per_layer);
    ix.final_ln_w = ps.add("decoder.final_layernorm.weight", {h}, Init::kOnes);
    ix.final_ln_b = norm_bias ? ps.add("decoder.final_layernorm.bias", {h}, Init::kZeros) : -1;
    if (!tied) {
      ix.output_w = ps.add("output_layer.weight", {V, h}, Init::kNormal, kRows);
    } else if (first_stage) {
      ix.output_w = ix.word_emb;
    } else {
      // The last stage's own copy of the tied embedding, initialised like the first stage's
      // (stream 0) and kept equal by summing the two gradients (Megatron's shared embedding).
      ps.set_next_init_stream(0);
      ix.output_w = ps.add("embedding.word_embeddings.weight", {V, h}, Init::kNormal, kRows);
      ps[ix.output_w].pipeline_shared = true;
    }
  }
  return ix;
}

void GPTModel::declare_stage_parameters(const GPTConfig& config, const PipelineStageOptions& pipeline,
                                        ParameterSet* params) {
  declare(config, pipeline, params);
}

GPTModel::BucketBoundaries GPTModel::declare_local_stage(const GPTConfig& config, const PipelineStageOptions& pipeline,
                                                         int64_t tp, ParameterSet* params) {
  params->set_tensor_parallel(0, tp);
  const ParamIndices ix = declare(config, pipeline, params);
  BucketBoundaries b;
  const int64_t Lc = config.num_layers / (pipeline.pp * pipeline.virtual_chunks);
  for (int64_t c = 1; c < pipeline.virtual_chunks; ++c) b.chunk_starts.push_back(ix.layers[static_cast<size_t>(c * Lc)].ln1_w);
  if (pipeline.pp > 1 && !config.untie_embeddings_and_output_weights) b.tied = ix.word_emb >= 0 ? ix.word_emb : ix.output_w;
  return b;
}

GPTModel::GPTModel(const GPTConfig& config, backend::Backend& backend, DType param_dtype, int64_t micro_batch_size,
                   const TensorParallelOptions& tp, const PipelineStageOptions& pipeline)
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
  MT_CHECK(c.num_attention_heads % T == 0 && c.ffn_hidden_size % T == 0 && c.padded_vocab_size % T == 0 &&
           (!sp_ || c.seq_length % T == 0))
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
  const int64_t h = c.hidden_size, f = c.ffn_hidden_size, V = c.padded_vocab_size;
  const int64_t q = c.num_attention_heads * c.kv_channels;
  heads_ = c.num_attention_heads / T;
  q_size_ = q / T;
  ffn_ = f / T;
  vocab_ = tensor_parallel::vocab_range(V, rank, T);

  params_.set_tensor_parallel(rank, T);
  const ParamIndices ix = declare(c, pipe_, &params_);
  word_emb_ = ix.word_emb;
  pos_emb_ = ix.pos_emb;
  final_ln_w_ = ix.final_ln_w;
  final_ln_b_ = ix.final_ln_b;
  output_w_ = ix.output_w;
  layer_params_ = ix.layers;
  for (int64_t ci = 0; ci < vp; ++ci) {
    Chunk chunk;
    chunk.first_layer = (ci * pp + pipe_.stage) * Lc;
    chunks_.push_back(std::move(chunk));
  }
  if (sp_) {
    for (Parameter& p : params_.params()) {
      if (p.name.find("layernorm") != std::string::npos) p.sequence_parallel = true;
    }
  }
  params_.allocate(backend_, dtype_);

  // Activations and inputs (shapes per rank, see the header).
  const int64_t s = c.seq_length, b = micro_batch_size_, n = s * b;
  n_local_ = sp_ ? n / T : n;
  const int64_t nl = n_local_, sl = sp_ ? s / T : s;
  auto act = [&](Shape shape, DType dt) { return backend_.empty(std::move(shape), dt, MemoryKind::kActivations); };
  auto work = [&](Shape shape, DType dt) { return backend_.empty(std::move(shape), dt, MemoryKind::kWorkspace); };
  // RMSNorm keeps no row means (ops.h: an undefined mean selects it).
  const bool norm_mean = c.layernorm_bias();
  const int64_t f1_local = c.swiglu ? 2 * ffn_ : ffn_;
  auto layer_acts = [&]() {
    LayerActs a;
    a.ln1_out = act({nl, h}, dtype_);
    if (norm_mean) a.ln1_mean = act({nl}, DType::kF32);
    a.ln1_rstd = act({nl}, DType::kF32);
    a.qkv = act({s, b, 3 * q_size_}, dtype_);
    a.attn_out = act({s, b, q_size_}, dtype_);
    a.attn_lse = act({b, heads_, s}, DType::kF32);
    a.x_mid = act({nl, h}, dtype_);
    a.ln2_out = act({nl, h}, dtype_);
    if (norm_mean) a.ln2_mean = act({nl}, DType::kF32);
    a.ln2_rstd = act({nl}, DType::kF32);
    a.fc1_out = act({n, f1_local}, dtype_);
    a.gelu_out = act({n, ffn_}, dtype_);
    return a;
  };
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
    if (pipe_.stage == 0 && c.reset_position_ids) set.positions = act({b, s}, DType::kI32);
    if (c.reset_attention_mask) set.key_start = act({b, s}, DType::kI32);
    if (dropout_stream_in_memory(c, T, pipe_)) set.dropout_stream = act({1}, DType::kI64);
    for (int64_t l = 0; l <= Lc; ++l) set.xs.push_back(act({sl, b, h}, dtype_));
    for (int64_t l = 0; l < cc.kept_layers(); ++l) set.kept.push_back(layer_acts());
    sets_.push_back(std::move(set));
  }
  for (int64_t l = 0; l < cc.recompute_slots(); ++l) recompute_acts_.push_back(layer_acts());
  if (last_stage) {
    labels_ = act({s, b}, DType::kI32);
    loss_weights_ = act({s, b}, DType::kF32);
    dloss_weights_ = act({s, b}, DType::kF32);
    final_ln_out_ = act({nl, h}, dtype_);
    if (norm_mean) final_ln_mean_ = act({nl}, DType::kF32);
    final_ln_rstd_ = act({nl}, DType::kF32);
    // Logits in the model dtype, as Megatron's output layer (the cross-entropy works in fp32
    // on them); the backward overwrites them with their gradient.
    logits_ = act({n, vocab_.size}, dtype_);
    losses_ = act({n}, DType::kF32);
    loss_lse_ = act({n}, DType::kF32);
  }
  ws_grad_ = work({nl, h}, dtype_);
  ws_h1_ = work({n, h}, dtype_);
  ws_h2_ = work({n, h}, dtype_);
  ws_qkv_ = work({s, b, 3 * q_size_}, dtype_);
  ws_q_ = work({s, b, q_size_}, dtype_);
  ws_f_ = work({n, f1_local}, dtype_);
  if (c.swiglu) ws_act_ = work({n, ffn_}, dtype_);
  if (sp_) ws_full_ = work({n, h}, dtype_);
  if (pp > 1) recv_grad_ = work({nl, h}, dtype_);
  dlogits_ = logits_;
}


bool GPTModel::is_last_virtual(int64_t chunk) const {
  return chunk == num_chunks() - 1 && pipe_.stage == pipe_.pp - 1;
}

Parameter* GPTModel::tied_embedding() {
  if (pipe_.pp == 1 || config_.untie_embeddings_and_output_weights) return nullptr;
  if (word_emb_ >= 0) return &params_[word_emb_];
  if (output_w_ >= 0) return &params_[output_w_];
  return nullptr;
}

GPTModel::LayerActs& GPTModel::layer_acts(int64_t l) {
  const int64_t slot = act_slot_[static_cast<size_t>(l)];
  if (slot < 0) return recompute_acts_[static_cast<size_t>(~slot)];
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

backend::AttentionParams GPTModel::attention_params(int64_t layer) const {
  backend::AttentionParams a;
  a.heads = heads_;
  a.head_dim = config_.kv_channels;
  a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(config_.kv_channels));
  a.dropout = dropout_params(config_.attention_dropout, layer, kSiteAttentionProbs);
  // This rank's heads are the global heads [rank * heads_, (rank + 1) * heads_).
  a.dropout_heads = config_.num_attention_heads;
  a.dropout_head0 = tp_->rank() * heads_;
  a.key_start = cur_set().key_start;  // undefined without documents
  return a;
}

Tensor GPTModel::column_input(const Tensor& ln_out) {
  if (!sp_) return ln_out;
  tensor_parallel::gather_sequence(*tp_, ln_out, ws_full_);
  ws_full_rows_of_ = ln_out.data();
  return ws_full_;
}

Tensor GPTModel::reduce_rows(Tensor& partial) {
  if (!sp_) {
    tensor_parallel::all_reduce_tp(*tp_, partial);
    return partial;
  }
  Tensor shard = tensor_parallel::sequence_shard(*tp_, partial);
  tensor_parallel::reduce_scatter_sequence(*tp_, partial, shard);
  return shard;
}

Tensor GPTModel::column_backward(const Tensor& dy, const Tensor& ln_out, int64_t w, int64_t b, Tensor& dx_partial) {
  const backend::GradWrite write = claim_grads(w, b);
  Tensor db = optional_grad(b);
  if (tp_->size() == 1) {
    backend_.linear_backward(dy, ln_out, param(w), dx_partial, grad(w), db, write);
    return dx_partial;
  }
  std::unique_ptr<comm::PendingCollective> gathered = std::make_unique<comm::FinishedCollective>();
  if (sp_ && ws_full_rows_of_ != ln_out.data()) {
    gathered = tensor_parallel::start_gather_sequence(*tp_, ln_out, ws_full_);
    ws_full_rows_of_ = ln_out.data();
  }
  const Tensor in = sp_ ? ws_full_ : ln_out;
  backend_.matmul(dy, false, param(w), false, dx_partial);  // dX = dy W, this rank's part of the sum
  Tensor shard = sp_ ? tensor_parallel::sequence_shard(*tp_, dx_partial) : dx_partial;
  std::unique_ptr<comm::PendingCollective> sum =
      sp_ ? tensor_parallel::start_reduce_scatter_sequence(*tp_, dx_partial, shard)
          : tensor_parallel::start_all_reduce_tp(*tp_, dx_partial);
  gathered->wait();
  Tensor no_dx;
  backend_.linear_backward(dy, in, param(w), no_dx, grad(w), db, write);
  sum->wait();
  return shard;
}

Tensor GPTModel::gather_rows(const Tensor& shard, Tensor& full) {
  if (!sp_) return shard;
  tensor_parallel::gather_sequence(*tp_, shard, full);
  return full;
}

Tensor GPTModel::local_rows(const Tensor& full) { return sp_ ? tensor_parallel::sequence_shard(*tp_, full) : full; }

void GPTModel::reduce_sequence_parallel_grads() {
  if (!sp_) return;
  // One all-reduce per workspace-full of gradients instead of one per LayerNorm tensor (4 per
  // layer: ~100 small collectives at 24 layers, each paying NCCL's latency), as Megatron
  // coalesces them. The packing buffer is ws_full_'s bytes: the gathered rows it holds are dead
  // after the last backward of an iteration. The sums are elementwise (at TP 2 the bits of the
  // per-tensor all-reduces; at larger TP a ring may add an element's terms in another order
  // for another message size, the same on every rank).
  std::vector<Tensor> grads;
  for (Parameter& p : params_.params()) {
    if (p.sequence_parallel && p.grad.numel() > 0) grads.push_back(p.grad);
  }
  if (grads.empty()) return;
  ws_full_rows_of_ = nullptr;  // the packs overwrite the gathered rows
  const DType gdt = params_.grads().dtype();  // every gradient is a view of this one flat buffer
  const int64_t esize = dtype_size(gdt);
  const auto* base = static_cast<const char*>(ws_full_.storage()->data());
  const int64_t byte_offset = static_cast<const char*>(ws_full_.data()) - base;
  MT_CHECK(byte_offset % esize == 0) << "ws_full_ at byte " << byte_offset << " cannot hold " << dtype_name(gdt);
  const int64_t capacity = ws_full_.nbytes() / esize;
  const Tensor pack_all = Tensor(ws_full_.storage(), byte_offset / esize, {capacity}, gdt);
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
void check_document_ids(const std::vector<int32_t>& ids, bool key_starts, int64_t b, int64_t s,
                        int64_t max_positions) {
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
  if (first && as.positions.defined()) load_ids(mb.position_ids, false, as.positions);
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
  if (labels) {
    mask_sum_ = static_cast<float>(mask_sum);
    backend_.copy(host_labels, labels_);
    backend_.copy(host_mask, loss_weights_);
    host_mask_ = host_mask.view({n});
  }
}

float GPTModel::forward(const MicroBatch& mb, const DropoutContext& dropout) {
  MT_CHECK(pipe_.pp == 1 && num_chunks() == 1) << "forward() runs the whole model; a pipeline stage uses forward_chunk()";
  MT_CHECK(pending_losses_.empty()) << "forward(): " << pending_losses_.size() << " queued losses not taken";
  forward_chunk(0, 0, &mb, dropout);
  return static_cast<float>(take_losses());  // one micro-batch: its float loss exactly
}

void GPTModel::backward(float loss_scale, float grad_scale) {
  MT_CHECK(pipe_.pp == 1 && num_chunks() == 1) << "backward() runs the whole model; a pipeline stage uses backward_chunk()";
  cur_chunk_ = 0;
  cur_set_ = 0;
  head_backward(loss_scale, grad_scale, ws_grad_);
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
  run_recordable(0, head != nullptr, last ? head_loss_factor(head) : 0.0f,
                 [&] { chunk_forward(first, last, head); });
  if (last) queue_loss();
}

float GPTModel::head_loss_factor(const HeadBackward* head) const {
  if (head == nullptr) return 0.0f;
  const float factor = head->loss_scale * head->grad_scale;
  if (per_token_loss_) return factor;
  return mask_sum_ > 0 ? factor / mask_sum_ : 0.0f;
}

void GPTModel::chunk_forward(bool first, bool last, const HeadBackward* head) {
  ActivationSet& as = cur_set();
  const int64_t s = config_.seq_length, b = micro_batch_size_, n = s * b, h = config_.hidden_size;
  if (first) {
    // Embedding: word + position, then (hidden) dropout. Vocab-parallel: each rank's partial
    // lookup (rank 0 adds the positions) summed over TP, or reduce-scattered into the sequence
    // shard under sequence parallelism (Megatron: all-reduce, then scatter; the same values).
    const backend::DropoutParams emb_dropout = dropout_params(config_.hidden_dropout, -1, kSiteEmbedding);
    before_reading(std::max(word_emb_, pos_emb_) + 1);
    segment(forward_segment(0), false, 0.0f, [&] {
      const Tensor wpe = tp_->rank() == 0 ? param(pos_emb_) : Tensor();
      Tensor& x0 = as.xs.front();
      Tensor emb = !sp_ && emb_dropout.p == 0.0f ? x0 : ws_h1_.view({s, b, h});
      backend_.embedding_forward(as.tokens, as.positions, param(word_emb_), wpe, emb);
      Tensor emb_rows = emb.view({n, h});
      const Tensor emb_local = reduce_rows(emb_rows);
      if (emb.data() != x0.data()) {
        Tensor x0_rows = x0.view({n_local_, h});
        backend_.dropout_forward(emb_local, x0_rows, emb_dropout);  // p == 0: a copy
      }
    });
  }

  for (int64_t l = 0; l < layers_per_chunk_; ++l) {
    if (hooks_.before_reading) before_reading(layer_end(l));
    segment(forward_segment(1 + l), false, 0.0f, [&] { layer_forward(l); });
  }
  if (!last) return;
  before_reading(static_cast<int64_t>(params_.params().size()));
  segment(forward_segment(1 + layers_per_chunk_), head != nullptr, head_loss_factor(head), [&] {
    head_forward(head);
    if (head) {
      // The head's backward now: the set then keeps d(x_last) in place of x_last (the layers'
      // backward reads their inputs, never the chunk's output).
      Tensor dx = as.xs.back().view({n_local_, h});
      head_backward(head->loss_scale, head->grad_scale, dx);
    }
  });
  if (head) grads_final_from(layer_end(layers_per_chunk_ - 1));
}

bool GPTModel::recordable_apart_from_hooks() const {
  // Dropout masks follow the (iteration, micro-batch) in the set's dropout_stream, read when
  // the work runs; without it they are baked in.
  const bool masks_baked = dropout_drawn() && !cur_set().dropout_stream.defined();
  return recording_on_ && recording_failure_.empty() && backend_.can_record() && tp_->size() == 1 &&
         pipe_.pp == 1 && num_chunks() == 1 && !masks_baked;
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
  fc2_bias_taken_for_ = v >= 0 ? v / 2 : (v - 1) / 2;  // floor: -1 * 2 + 0 gives back -1
  fc2_grad_in_h1_ = (v - fc2_bias_taken_for_ * 2) == 1;
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
  RecordKey key{kind,         cur_chunk_,   cur_set_, head, dropout_drawn() ? dropout_ctx_.seed + 1 : 0,
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
    dlogits_ready_ = false;
    work();
    return;
  }
  r.stale_after = params_.stale_grads();
  r.carried_after = carried_state();
  r.recording = std::move(recording);
  backend_.replay(*r.recording);
  ++replays_;
}

double GPTModel::take_losses() {
  if (pending_losses_.empty()) return 0.0;
  backend_.synchronize();  // the asynchronous copies have landed
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

void GPTModel::head_forward(const HeadBackward* head) {
  const int64_t n = config_.seq_length * micro_batch_size_, h = config_.hidden_size;
  const ActivationSet& as = cur_set();
  Tensor x_last = as.xs.back().view({n_local_, h});
  backend_.layernorm_forward(x_last, param(final_ln_w_), optional_param(final_ln_b_), config_.layernorm_epsilon,
                             final_ln_out_,
                             final_ln_mean_, final_ln_rstd_);
  backend_.linear_forward(column_input(final_ln_out_), param(output_w_), Tensor(), logits_);
  if (tp_->size() == 1) {
    // With the head's backward next, its logits gradient comes out of the same pass over the
    // logits.
    if (head) {
      backend_.cross_entropy_fused(logits_, labels_.view({n}), loss_weights(head->loss_scale, head->grad_scale),
                                   losses_, loss_lse_, dlogits_);
      dlogits_ready_ = true;
    } else {
      backend_.cross_entropy_forward(logits_, labels_.view({n}), losses_, loss_lse_);
    }
  } else {
    // Vocab-parallel: the whole vocabulary's losses and lse from the slices, on the device. The
    // rows' maximum lse goes in dloss_weights_, free until head_backward's loss_weights().
    Tensor max_lse = dloss_weights_.view({n});
    tensor_parallel::vocab_parallel_cross_entropy(backend_, *tp_, logits_, labels_.view({n}), max_lse, losses_,
                                                  loss_lse_);
  }
}

void GPTModel::queue_loss() {
  const int64_t n = config_.seq_length * micro_batch_size_;
  PendingLoss p;
  p.mask = host_mask_;
  p.mask_sum = mask_sum_;
  // The per-token losses go to the host without waiting; take_losses() reads them.
  const size_t slot = pending_losses_.size();
  if (slot == loss_staging_.size()) loss_staging_.push_back(backend_.host_staging({n}, DType::kF32));
  p.losses = loss_staging_[slot];
  backend_.copy_to_host_async(losses_, p.losses);
  pending_losses_.push_back(std::move(p));
}

Tensor GPTModel::loss_weights(float loss_scale, float grad_scale) {
  // d(loss)/d(loss_i) = mask_i / sum(mask), times the loss scale and 1/num_microbatches (per
  // token: mask_i times the loss scale and grad_scale, the caller's 1 / tokens). Into their own
  // buffer, the loaded mask left as it is: the head's work then gives the same result when it
  // runs again (recorded work that failed to record runs again unrecorded).
  const int64_t n = config_.seq_length * micro_batch_size_;
  Tensor dlosses = dloss_weights_.view({n});
  backend_.copy(loss_weights_.view({n}), dlosses);
  if (per_token_loss_) {
    backend_.scale(dlosses, loss_scale * grad_scale);
  } else if (mask_sum_ > 0) {
    backend_.scale(dlosses, loss_scale * grad_scale / mask_sum_);
  }
  return dlosses;
}

void GPTModel::head_backward(float loss_scale, float grad_scale, Tensor& dx) {
  const int64_t n = config_.seq_length * micro_batch_size_, h = config_.hidden_size;
  if (!dlogits_ready_) {
    // Vocab-parallel: the local slice's softmax with the whole vocabulary's lse, local labels.
    backend_.cross_entropy_backward(logits_, labels_.view({n}), loss_lse_, loss_weights(loss_scale, grad_scale),
                                    dlogits_);
  }
  dlogits_ready_ = false;
  const Tensor d_final_ln = column_backward(dlogits_, final_ln_out_, output_w_, -1, ws_h2_);
  const ActivationSet& as = cur_set();
  Tensor x_last = as.xs.back().view({n_local_, h});
  // dx may be x_last's own buffer (forward_chunk): LayerNorm's backward reads x_last, so the
  // gradient goes through ws_grad_ first.
  Tensor d_final_ln_b = optional_grad(final_ln_b_);
  backend_.layernorm_backward(d_final_ln, x_last, param(final_ln_w_), final_ln_mean_, final_ln_rstd_, ws_grad_,
                              grad(final_ln_w_), d_final_ln_b, claim_grads(final_ln_w_, final_ln_b_));
  if (dx.data() != ws_grad_.data()) backend_.copy(ws_grad_, dx);
}

void GPTModel::backward_chunk(int64_t chunk, int64_t set) {
  cur_chunk_ = chunk;
  cur_set_ = set;
  const ActivationSet& as = set_at(chunk, set);
  dropout_ctx_ = as.dropout;
  // ws_grad_ := d(chunk output): kept by the early head backward, or received.
  const Tensor& dy = is_last_virtual(chunk) ? as.xs.back() : recv_grad_;
  run_recordable(1, false, 0.0f, [&] {
    backend_.copy(dy.view({n_local_, config_.hidden_size}), ws_grad_);
    chunk_backward();
  });
}

void GPTModel::chunk_backward() {
  const GPTConfig& cc = chunk_config_;
  fc2_bias_taken_for_ = -1;
  // Top to bottom, one layer at a time (a per-layer "gradients ready" point: after
  // layer_backward(l) the gradients of layer l are final for this micro-batch).
  for (int64_t l = layers_per_chunk_ - 1; l >= 0; --l) {
    segment(backward_segment(1 + l), false, 0.0f, [&] {
      // Entering a recomputed block from its top: re-run its forward from the kept input (the
      // dropout masks are functions of (seed, iteration, micro-batch, layer), so they repeat).
      if (cc.recomputed(l)) {
        const int64_t first =
            cc.recompute == Recompute::kUniform ? l / cc.recompute_num_layers * cc.recompute_num_layers : l;
        const bool top = cc.recompute == Recompute::kBlock || l == layers_per_chunk_ - 1 ||
                         (l + 1) % cc.recompute_num_layers == 0;
        if (top) {
          for (int64_t k = first; k <= l; ++k) layer_forward(k);
          fc2_grad_in_h1_ = false;  // the forward used ws_h1_
        }
      }
      layer_backward(l, ws_grad_);
    });
    grads_final_from(layer_params_[static_cast<size_t>(cur_chunk_ * layers_per_chunk_ + l)].ln1_w);
  }
  if (!is_first_virtual(cur_chunk_)) return;

  // Embedding: through the dropout, the rows gathered (sequence parallelism), then
  // scatter-add into this rank's word rows (other ranks' ids are skipped) and the positions.
  segment(backward_segment(0), false, 0.0f, [&] {
    const int64_t s = config_.seq_length, b = micro_batch_size_, h = config_.hidden_size;
    const ActivationSet& as = cur_set();
    Tensor demb_buffer = local_rows(ws_h1_);
    const Tensor demb_local =
        through_dropout(ws_grad_, demb_buffer, dropout_params(config_.hidden_dropout, -1, kSiteEmbedding));
    const Tensor demb = gather_rows(demb_local, ws_h1_);
    backend_.embedding_backward(as.tokens, as.positions, demb.view({s, b, h}), accumulable_grad(word_emb_),
                                accumulable_grad(pos_emb_));
  });
  grads_final_from(0);
}

int64_t GPTModel::layer_end(int64_t l) const {
  // A layer's parameters are contiguous and end with its FC2 (bias); what follows is the next
  // layer, the next chunk's first layer or the loss head.
  const LayerParams& p = layer_params_[static_cast<size_t>(cur_chunk_ * layers_per_chunk_ + l)];
  return std::max(p.fc2_w, p.fc2_b) + 1;
}

std::pair<int64_t, int64_t> GPTModel::chunk_parameters(int64_t chunk) const {
  auto first = [&](int64_t c) { return layer_params_[static_cast<size_t>(c * layers_per_chunk_)].ln1_w; };
  const int64_t end = chunk + 1 < num_chunks() ? first(chunk + 1) : static_cast<int64_t>(params_.params().size());
  return {chunk == 0 ? 0 : first(chunk), end};
}

void GPTModel::layer_forward(int64_t l) {
  const int64_t gl = chunks_[static_cast<size_t>(cur_chunk_)].first_layer + l;  // global layer
  const LayerParams& p = layer_params_[static_cast<size_t>(cur_chunk_ * layers_per_chunk_ + l)];
  LayerActs& a = layer_acts(l);
  std::vector<Tensor>& xs = cur_set().xs;
  const int64_t s = config_.seq_length, b = micro_batch_size_, n = s * b, h = config_.hidden_size;
  const Tensor x = xs[static_cast<size_t>(l)].view({n_local_, h});
  const float eps = config_.layernorm_epsilon;

  backend_.layernorm_forward(x, param(p.ln1_w), optional_param(p.ln1_b), eps, a.ln1_out, a.ln1_mean, a.ln1_rstd);
  Tensor qkv2 = a.qkv.view({n, 3 * q_size_});
  backend_.linear_forward(column_input(a.ln1_out), param(p.qkv_w), optional_param(p.qkv_b), qkv2);
  backend_.attention_forward(a.qkv, a.attn_out, a.attn_lse, attention_params(gl));
  row_linear_residual(a.attn_out.view({n, q_size_}), p.proj_w, p.proj_b, x, a.x_mid,
                      dropout_params(config_.hidden_dropout, gl, kSiteAttentionOut));

  backend_.layernorm_forward(a.x_mid, param(p.ln2_w), optional_param(p.ln2_b), eps, a.ln2_out, a.ln2_mean,
                             a.ln2_rstd);
  // fc1_out keeps the pre-activation (bias included) for the activation's backward.
  if (config_.swiglu) {
    backend_.linear_forward(column_input(a.ln2_out), param(p.fc1_w), optional_param(p.fc1_b), a.fc1_out);
    backend_.swiglu_forward(a.fc1_out, a.gelu_out);
  } else {
    backend_.linear_gelu_forward(column_input(a.ln2_out), param(p.fc1_w), optional_param(p.fc1_b), a.fc1_out,
                                 a.gelu_out, config_.gelu);
  }
  Tensor out = xs[static_cast<size_t>(l) + 1].view({n_local_, h});
  row_linear_residual(a.gelu_out, p.fc2_w, p.fc2_b, a.x_mid, out, dropout_params(config_.hidden_dropout, gl, kSiteMlpOut));
}

void GPTModel::row_linear_residual(const Tensor& in, int64_t w, int64_t b, const Tensor& residual, Tensor& out,
                                   const backend::DropoutParams& dropout) {
  if (tp_->size() == 1 && dropout.p == 0.0f) {
    backend_.linear_residual_forward(in, param(w), optional_param(b), residual, out);
    return;
  }
  backend_.linear_forward(in, param(w), Tensor(), ws_h1_);
  backend_.bias_dropout_add(reduce_rows(ws_h1_), optional_param(b), residual, out, dropout);
}

backend::GradWrite GPTModel::claim_grads(int64_t a, int64_t b) {
  const backend::GradWrite w = params_.claim_grad(a);
  if (b >= 0) {
    const backend::GradWrite wb = params_.claim_grad(b);
    MT_CHECK(wb == w) << "gradients of " << params_[a].name << " and " << params_[b].name
                      << " are written together, but only one was written this step";
  }
  return w;
}

Tensor& GPTModel::accumulable_grad(int64_t i) {
  Tensor& g = params_[i].grad;
  if (params_.claim_grad(i) == backend::GradWrite::kOverwrite) backend_.fill(g, 0.0f);
  return g;
}

Tensor GPTModel::through_dropout(const Tensor& dy, Tensor& buffer, const backend::DropoutParams& dropout) {
  if (dropout.p == 0.0f) return dy;  // the identity: no copy
  backend_.dropout_backward(dy, buffer, dropout);
  return buffer;
}

void GPTModel::layer_backward(int64_t l, Tensor& g) {
  const int64_t gl = chunks_[static_cast<size_t>(cur_chunk_)].first_layer + l;  // global layer
  const LayerParams& p = layer_params_[static_cast<size_t>(cur_chunk_ * layers_per_chunk_ + l)];
  LayerActs& a = layer_acts(l);
  const int64_t n = config_.seq_length * micro_batch_size_, h = config_.hidden_size;
  const Tensor x = cur_set().xs[static_cast<size_t>(l)].view({n_local_, h});
  // g, x, x_mid and LayerNorm gradients are [n_local, h] (this rank's rows under sequence
  // parallelism); `h1` is the matching part of ws_h1_.
  Tensor h1 = local_rows(ws_h1_);
  const backend::DropoutParams mlp_dropout = dropout_params(config_.hidden_dropout, gl, kSiteMlpOut);
  const backend::DropoutParams attn_dropout = dropout_params(config_.hidden_dropout, gl, kSiteAttentionOut);

  // MLP branch: g is d(x_out); x_out = x_mid + dropout(fc2 + b_fc2). The row-parallel FC2's
  // output gradient is gathered (the backward of its reduce-scatter); b_fc2's gradient is
  // taken from all n rows, so it is complete on every rank. Unless the LayerNorm backward
  // that produced g already summed it (and with dropout left d(fc2 + b_fc2) in h1): layer
  // l + 1's LayerNorm 1 in this chunk (see below).
  const bool fc2_bias_done = fc2_bias_taken_for_ == gl;
  const bool fc2_grad_ready = fc2_bias_done && fc2_grad_in_h1_;
  fc2_bias_taken_for_ = -1;
  const Tensor d_fc2 = fc2_grad_ready ? h1 : gather_rows(through_dropout(g, h1, mlp_dropout), ws_h1_);
  Tensor db_fc2 = fc2_bias_done ? Tensor() : optional_grad(p.fc2_b);
  // FC2's backward through the activation: ws_f_ = d(fc1 + b_fc1).
  if (config_.swiglu) {
    backend_.linear_backward(d_fc2, a.gelu_out, param(p.fc2_w), ws_act_, grad(p.fc2_w), db_fc2,
                             claim_grads(p.fc2_w, fc2_bias_done ? -1 : p.fc2_b));
    backend_.swiglu_backward(ws_act_, a.fc1_out, ws_f_);
  } else {
    backend_.linear_dgelu_backward(d_fc2, a.gelu_out, param(p.fc2_w), a.fc1_out, ws_f_, grad(p.fc2_w), db_fc2,
                                   config_.gelu, claim_grads(p.fc2_w, fc2_bias_done ? -1 : p.fc2_b));
  }
  const Tensor d_ln2 = column_backward(ws_f_, a.ln2_out, p.fc1_w, p.fc1_b, ws_h2_);
  // g = d(x_mid): the residual path plus the MLP branch (the add fused into the backward).
  // Without tensor parallelism d(proj + b_proj) is g itself (no dropout) or its dropout's
  // backward, taken in the same pass into h1, and b_proj's gradient their column sum.
  const bool proj_bias_in_ln = residual_bias_grad_in_layernorm(p.proj_b);
  const bool proj_grad_in_h1 = proj_bias_in_ln && attn_dropout.p > 0.0f;
  layernorm_backward_into(d_ln2, a.x_mid, p.ln2_w, p.ln2_b, a.ln2_mean, a.ln2_rstd, g, proj_bias_in_ln ? p.proj_b : -1,
                          attn_dropout, &h1);

  // Attention branch: x_mid = x + dropout(proj + b_proj).
  const Tensor d_proj = proj_grad_in_h1 ? h1 : gather_rows(through_dropout(g, h1, attn_dropout), ws_h1_);
  Tensor dq = ws_q_.view({n, q_size_});
  Tensor db_proj = proj_bias_in_ln ? Tensor() : optional_grad(p.proj_b);
  backend_.linear_backward(d_proj, a.attn_out.view({n, q_size_}), param(p.proj_w), dq, grad(p.proj_w), db_proj,
                           claim_grads(p.proj_w, proj_bias_in_ln ? -1 : p.proj_b));
  backend_.attention_backward(ws_q_, a.qkv, a.attn_out, a.attn_lse, ws_qkv_, attention_params(gl));
  const Tensor d_ln1 =
      column_backward(ws_qkv_.view({n, 3 * q_size_}), a.ln1_out, p.qkv_w, p.qkv_b, ws_h2_);
  // g = d(x): the residual path plus the attention branch. g is also d(x_out) of the layer
  // below (this chunk's layer l - 1), whose b_fc2 gradient is then summed here likewise, and
  // with dropout its FC2 output gradient left in h1 for it (chunk_backward forgets that when
  // a recompute overwrites h1 in between; the layer then runs the dropout backward again, the
  // same bits).
  int64_t below_fc2_b = -1;
  const backend::DropoutParams below_dropout = dropout_params(config_.hidden_dropout, gl - 1, kSiteMlpOut);
  if (l > 0) {
    const LayerParams& below = layer_params_[static_cast<size_t>(cur_chunk_ * layers_per_chunk_ + l - 1)];
    if (residual_bias_grad_in_layernorm(below.fc2_b)) below_fc2_b = below.fc2_b;
  }
  layernorm_backward_into(d_ln1, x, p.ln1_w, p.ln1_b, a.ln1_mean, a.ln1_rstd, g, below_fc2_b, below_dropout, &h1);
  fc2_bias_taken_for_ = below_fc2_b >= 0 ? gl - 1 : -1;
  fc2_grad_in_h1_ = below_fc2_b >= 0 && below_dropout.p > 0.0f;
}

void GPTModel::layernorm_backward_into(const Tensor& dy, const Tensor& x, int64_t w, int64_t b, const Tensor& mean,
                                       const Tensor& rstd, Tensor& g, int64_t residual_bias,
                                       const backend::DropoutParams& dropout, Tensor* dz) {
  const backend::GradWrite write = claim_grads(w, b);
  Tensor db = optional_grad(b);  // undefined for RMSNorm
  if (residual_bias < 0) {
    backend_.layernorm_backward(dy, x, param(w), mean, rstd, g, grad(w), db, write, backend::GradWrite::kAccumulate);
    return;
  }
  if (dropout.p > 0.0f) {
    MT_CHECK(dz != nullptr) << "layernorm backward through dropout without an output gradient buffer";
    backend_.layernorm_backward_dropout_colsum(dy, x, param(w), mean, rstd, g, grad(w), db, *dz,
                                               grad(residual_bias), dropout, write, backend::GradWrite::kAccumulate,
                                               params_.claim_grad(residual_bias));
    return;
  }
  backend_.layernorm_backward_colsum(dy, x, param(w), mean, rstd, g, grad(w), db, grad(residual_bias), write,
                                     backend::GradWrite::kAccumulate, params_.claim_grad(residual_bias));
}

bool GPTModel::residual_bias_grad_in_layernorm(int64_t bias) const { return bias >= 0 && tp_->size() == 1; }

}  // namespace megatron::model
