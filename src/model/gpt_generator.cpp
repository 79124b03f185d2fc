#include "model/gpt_generator.h"

#include <cmath>

#include "core/error.h"

namespace megatron::model {

const Tensor& GPTGenerator::weight(const std::string& name) const {
  const Parameter* p = params_.find(name);
  MT_CHECK(p != nullptr) << "no parameter " << name;
  return p->value;
}

const Tensor* GPTGenerator::optional_weight(const std::string& name) const {
  const Parameter* p = params_.find(name);
  return p ? &p->value : nullptr;
}

GPTGenerator::GPTGenerator(const GPTConfig& config, const ParameterSet& params, backend::Backend& backend,
                           int64_t max_context)
    : config_(config), params_(params), backend_(backend), max_context_(max_context), dtype_(params.values().dtype()) {
  MT_CHECK(max_context > 0 && max_context <= config.max_position_embeddings)
      << "max_context " << max_context << " > max_position_embeddings " << config.max_position_embeddings;
  word_ = &weight("embedding.word_embeddings.weight");
  pos_ = &weight("embedding.position_embeddings.weight");
  final_w_ = &weight("decoder.final_layernorm.weight");
  final_b_ = optional_weight("decoder.final_layernorm.bias");  // absent for RMSNorm
  const Tensor* untied = optional_weight("output_layer.weight");
  output_ = untied ? untied : word_;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    const std::string pre = "decoder.layers." + std::to_string(l) + ".";
    Layer L;
    L.ln1_w = &weight(pre + "input_layernorm.weight");
    L.ln1_b = optional_weight(pre + "input_layernorm.bias");
    L.qkv_w = &weight(pre + "self_attention.linear_qkv.weight");
    L.qkv_b = optional_weight(pre + "self_attention.linear_qkv.bias");
    L.proj_w = &weight(pre + "self_attention.linear_proj.weight");
    L.proj_b = optional_weight(pre + "self_attention.linear_proj.bias");
    L.ln2_w = &weight(pre + "pre_mlp_layernorm.weight");
    L.ln2_b = optional_weight(pre + "pre_mlp_layernorm.bias");
    L.fc1_w = &weight(pre + "mlp.linear_fc1.weight");
    L.fc1_b = optional_weight(pre + "mlp.linear_fc1.bias");
    L.fc2_w = &weight(pre + "mlp.linear_fc2.weight");
    L.fc2_b = optional_weight(pre + "mlp.linear_fc2.bias");
    const Shape cache{1, config.num_attention_heads, max_context, config.kv_channels};
    L.k_cache = backend.empty(cache, DType::kF32, MemoryKind::kActivations);
    L.v_cache = backend.empty(cache, DType::kF32, MemoryKind::kActivations);
    layers_.push_back(std::move(L));
  }
}

std::vector<float> GPTGenerator::append(std::span<const int32_t> tokens) {
  const int64_t t = static_cast<int64_t>(tokens.size());
  if (t == 0) throw_error("[--prompt] generation needs at least one token of context");
  if (past_ + t > max_context_) {
    throw_error("[--max-new-tokens] the context would reach ", past_ + t, " tokens, more than the ", max_context_,
                " positions the model has (--max-position-embeddings)");
  }
  const int64_t h = config_.hidden_size, f = config_.ffn_hidden_size, V = config_.padded_vocab_size;
  const int64_t q = config_.num_attention_heads * config_.kv_channels;
  const float eps = config_.layernorm_epsilon;
  auto tmp = [&](Shape shape, DType dt) { return backend_.empty(std::move(shape), dt, MemoryKind::kWorkspace); };

  // Embedding of the new positions [past, past + t): tokens as [b=1, s=t] with the position
  // table shifted by `past`.
  Tensor host_tokens = Tensor::cpu({1, t}, DType::kI32);
  for (int64_t i = 0; i < t; ++i) {
    const int32_t id = tokens[static_cast<size_t>(i)];
    if (id < 0 || id >= config_.vocab_size) throw_error("[--prompt] token id ", id, " is outside the vocabulary");
    host_tokens.data_as<int32_t>()[i] = id;
  }
  Tensor dev_tokens = tmp({1, t}, DType::kI32);
  backend_.copy(host_tokens, dev_tokens);
  const Tensor positions = pos_->slice(past_, past_ + t);
  Tensor x = tmp({t, 1, h}, dtype_);
  backend_.embedding_forward(dev_tokens, Tensor(), *word_, positions, x);
  Tensor x2 = x.view({t, h});

  // RMSNorm keeps no mean (an undefined mean selects it, backend/ops.h).
  const bool rms = config_.normalization == Normalization::kRMSNorm;
  Tensor ln = tmp({t, h}, dtype_), mean = rms ? Tensor() : tmp({t}, DType::kF32), rstd = tmp({t}, DType::kF32);
  Tensor qkv = tmp({t, 1, 3 * q}, dtype_), ctx = tmp({t, 1, q}, dtype_);
  Tensor mid = tmp({t, h}, dtype_), fc1 = tmp({t, config_.fc1_out_size()}, dtype_), act = tmp({t, f}, dtype_);
  backend::AttentionParams ap;
  ap.heads = config_.num_attention_heads;
  ap.head_dim = config_.kv_channels;
  ap.softmax_scale = 1.0f / std::sqrt(static_cast<float>(config_.kv_channels));
  auto opt = [](const Tensor* p) { return p ? *p : Tensor(); };
  for (Layer& L : layers_) {
    backend_.layernorm_forward(x2, *L.ln1_w, opt(L.ln1_b), eps, ln, mean, rstd);
    Tensor qkv2 = qkv.view({t, 3 * q});
    backend_.linear_forward(ln, *L.qkv_w, opt(L.qkv_b), qkv2);
    backend_.attention_kv_cache(qkv, L.k_cache, L.v_cache, past_, ctx, ap);
    // The training forward's row-parallel linear + residual, as one op (no TP, no dropout here).
    backend_.linear_residual_forward(ctx.view({t, q}), *L.proj_w, opt(L.proj_b), x2, mid);
    backend_.layernorm_forward(mid, *L.ln2_w, opt(L.ln2_b), eps, ln, mean, rstd);
    if (config_.swiglu) {  // as training's forward
      backend_.linear_forward(ln, *L.fc1_w, opt(L.fc1_b), fc1);
      backend_.swiglu_forward(fc1, act);
    } else {
      backend_.linear_gelu_forward(ln, *L.fc1_w, opt(L.fc1_b), fc1, act, config_.gelu);
    }
    backend_.linear_residual_forward(act, *L.fc2_w, opt(L.fc2_b), mid, x2);
  }
  // Only the last position's logits are needed.
  Tensor last = x2.slice(t - 1, t);
  Tensor last_ln = tmp({1, h}, dtype_), m1 = rms ? Tensor() : tmp({1}, DType::kF32), r1 = tmp({1}, DType::kF32);
  backend_.layernorm_forward(last, *final_w_, opt(final_b_), eps, last_ln, m1, r1);
  Tensor logits = tmp({1, V}, dtype_);  // the model dtype, as the training forward's logits
  backend_.linear_forward(last_ln, *output_, Tensor(), logits);
  Tensor host = Tensor::cpu({V}, DType::kF32);
  backend_.copy(logits, host);
  past_ += t;
  const float* lp = host.data_as<float>();
  return std::vector<float>(lp, lp + V);
}

}  // namespace megatron::model
