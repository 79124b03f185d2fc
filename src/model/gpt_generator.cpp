#include "model/gpt_generator.h"

#include "comm/self_communicator.h"
#include "core/error.h"

namespace megatron::model {

GPTGenerator::GPTGenerator(const GPTConfig& config, const ParameterSet& params, backend::Backend& backend,
                           int64_t max_context, int64_t max_batch)
    : config_(config),
      backend_(backend),
      max_context_(max_context),
      max_batch_(max_batch),
      dtype_(params.values().dtype()) {
  MT_CHECK(max_context > 0 && max_context <= config.max_position_embeddings)
      << "max_context " << max_context << " > max_position_embeddings " << config.max_position_embeddings;
  MT_CHECK(max_batch > 0) << "max_batch " << max_batch;
  tp_ = std::make_unique<comm::SelfCommunicator>(backend_, "tp");
  ctx_.backend = &backend_;
  ctx_.tp = tp_.get();
  ctx_.values = &params;
  ctx_.ws = &ws_;
  ctx_.batch = 1;
  ctx_.hidden = config.hidden_size;
  embedding_ = VocabParallelEmbedding::find(params);
  final_norm_ = Norm::find(params, "decoder.final_layernorm", config);
  const int64_t untied = params.index_of("output_layer.weight");
  output_ = untied >= 0 ? untied : embedding_.word;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    layers_.push_back(TransformerLayer::find(params, l, config));
    const Shape cache = layers_.back().attention.kv_cache_shape(max_batch, max_context);
    k_cache_.push_back(backend.empty(cache, DType::kF32, MemoryKind::kActivations));
    v_cache_.push_back(backend.empty(cache, DType::kF32, MemoryKind::kActivations));
  }
  const Attention& attention = layers_.front().attention;
  if (attention.rot_dim > 0) ws_.rotary_inv_freq = attention.rotary_frequencies(backend_);
  layers_.front().input_norm.allocate_workspace(ctx_, ws_);
}

GPTGenerator::~GPTGenerator() = default;

std::vector<float> GPTGenerator::append(std::span<const int32_t> tokens) { return append(tokens, 1, false); }

std::vector<float> GPTGenerator::append(std::span<const int32_t> tokens, int64_t b, bool all_positions) {
  MT_CHECK(b >= 1 && b <= max_batch_) << "batch " << b << " outside [1, " << max_batch_ << "]";
  MT_CHECK(batch_ == 0 || batch_ == b) << "batch " << b << " after " << batch_ << " without reset()";
  MT_CHECK(static_cast<int64_t>(tokens.size()) % b == 0) << tokens.size() << " tokens for batch " << b;
  const int64_t t = static_cast<int64_t>(tokens.size()) / b;
  if (t == 0) throw_error("[--prompt] generation needs at least one token of context");
  if (past_ + t > max_context_) {
    throw_error("[--max-new-tokens] the context would reach ", past_ + t, " tokens, more than the ", max_context_,
                " positions the model has (--max-position-embeddings)");
  }
  const int64_t h = config_.hidden_size, V = config_.padded_vocab_size, n = t * b;
  const Attention& attention = layers_.front().attention;
  const int64_t q = attention.local_width(ctx_);
  auto tmp = [&](Shape shape, DType dt) { return backend_.empty(std::move(shape), dt, MemoryKind::kWorkspace); };
  ctx_.seq = t;
  ctx_.batch = b;

  // Embedding of the new positions [past, past + t): tokens as [b, s=t].
  Tensor host_tokens = Tensor::cpu({b, t}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = tokens[static_cast<size_t>(i)];
    if (id < 0 || id >= config_.vocab_size) throw_error("[--prompt] token id ", id, " is outside the vocabulary");
    host_tokens.data_as<int32_t>()[i] = id;
  }
  Tensor dev_tokens = tmp({b, t}, DType::kI32);
  backend_.copy(host_tokens, dev_tokens);
  Tensor x = tmp({t, b, h}, dtype_);
  embedding_.forward_at(ctx_, dev_tokens, past_, x);
  Tensor x2 = x.view({n, h});

  // Temporaries the layers reuse: one norm output (both norms), the attention's qkv and output,
  // the residual stream's middle, the MLP's FC1 output and activation. RMSNorm keeps no mean
  // (an undefined mean selects it, backend/ops.h).
  const bool rms = config_.normalization == Normalization::kRMSNorm;
  Tensor ln = tmp({n, h}, dtype_), mean = rms ? Tensor() : tmp({n}, DType::kF32), rstd = tmp({n}, DType::kF32);
  Tensor qkv = tmp({t, b, attention.local_qkv_width(ctx_)}, dtype_), attn_out = tmp({t, b, q}, dtype_);
  Tensor mid = tmp({n, h}, dtype_);
  MLP::Saved mlp{tmp({n, config_.fc1_out_size()}, dtype_), tmp({n, config_.ffn_hidden_size}, dtype_)};
  for (size_t l = 0; l < layers_.size(); ++l) {
    const TransformerLayer& L = layers_[l];
    // The first b sequences' rows of the caches [max_batch, groups, max_context, d].
    Tensor k = k_cache_[l].slice(0, b), v = v_cache_[l].slice(0, b);
    L.input_norm.forward(ctx_, x2, ln, mean, rstd);
    L.attention.forward_cached(ctx_, ln, x2, mid, qkv, attn_out, k, v, past_);
    L.pre_mlp_norm.forward(ctx_, mid, ln, mean, rstd);
    L.mlp.forward(ctx_, ln, mid, x2, mlp, {});
  }
  // The last position's rows [b, h] (rows are sequence-first), or every row.
  const int64_t rows = all_positions ? n : b;
  Tensor last = all_positions ? x2 : x2.slice(n - b, n);
  Tensor last_ln = tmp({rows, h}, dtype_), m1 = rms ? Tensor() : tmp({rows}, DType::kF32),
         r1 = tmp({rows}, DType::kF32);
  final_norm_.forward(ctx_, last, last_ln, m1, r1);
  Tensor logits = tmp({rows, V}, dtype_);  // the model dtype, as the training forward's logits
  backend_.linear_forward(last_ln, ctx_.param(output_), Tensor(), logits);
  Tensor host = Tensor::cpu({rows, V}, DType::kF32);
  backend_.copy(logits, host);
  past_ += t;
  batch_ = b;
  const float* lp = host.data_as<float>();
  return std::vector<float>(lp, lp + rows * V);
}

}  // namespace megatron::model
