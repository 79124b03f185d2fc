// Incremental GPT forward for text generation: the same network as model/gpt_model.h, run
// over new tokens only, with each layer's keys and values kept in a KV cache
// (backend::attention_kv_cache), so a token costs O(context) instead of a full re-run.
// Reads the weights of a GPTModel's ParameterSet by their Megatron-core names; dropout off.
// Batch 1; the context is at most max_position_embeddings tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/ops.h"
#include "model/gpt_config.h"
#include "model/parameters.h"

namespace megatron::model {

class GPTGenerator {
 public:
  // `params` must outlive the generator; max_context <= config.max_position_embeddings.
  GPTGenerator(const GPTConfig& config, const ParameterSet& params, backend::Backend& backend, int64_t max_context);

  // Forgets the context.
  void reset() { past_ = 0; }
  int64_t context_length() const { return past_; }
  // Appends `tokens` to the context and returns the fp32 logits [V] (padded vocabulary) that
  // predict the token after the last one. Throws megatron::Error when the context would
  // exceed max_context.
  std::vector<float> append(std::span<const int32_t> tokens);

 private:
  struct Layer {
    const Tensor *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
    Tensor k_cache, v_cache;  // [1, heads, max_context, d] fp32
  };
  const Tensor& weight(const std::string& name) const;
  const Tensor* optional_weight(const std::string& name) const;

  GPTConfig config_;
  const ParameterSet& params_;
  backend::Backend& backend_;
  int64_t max_context_;
  int64_t past_ = 0;
  DType dtype_;
  std::vector<Layer> layers_;
  const Tensor *word_, *pos_, *final_w_, *final_b_, *output_;
};

}  // namespace megatron::model
