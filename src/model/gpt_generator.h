// Incremental GPT forward for text generation: the training model's layers (model/layers/) run
// over new tokens only, with each layer's keys and values kept in a KV cache
// (backend::attention_kv_cache), so a token costs O(context) instead of a full re-run.
// Reads the weights of a GPTModel's ParameterSet by their Megatron-core names; dropout off; one
// tensor-parallel rank. The context is at most max_position_embeddings tokens. A batch of up to
// max_batch sequences runs together when all of them are at the same context length (one KV
// cache position for the batch, as Megatron's static inference batches: its callers feed a
// longer prompt's remaining tokens one step at a time, serve/batch_engine.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "model/gpt_config.h"
#include "model/layers/embedding.h"
#include "model/layers/layer_context.h"
#include "model/layers/norm.h"
#include "model/layers/transformer_layer.h"
#include "model/parameters.h"

namespace megatron::model {

class GPTGenerator {
 public:
  // `params` must outlive the generator; max_context <= config.max_position_embeddings; the KV
  // cache holds max_batch sequences of max_context positions.
  GPTGenerator(const GPTConfig& config, const ParameterSet& params, backend::Backend& backend, int64_t max_context,
               int64_t max_batch = 1);
  ~GPTGenerator();

  // Forgets the context.
  void reset() {
    past_ = 0;
    batch_ = 0;
  }
  int64_t context_length() const { return past_; }
  // Appends `tokens` to the context and returns the fp32 logits [V] (padded vocabulary) that
  // predict the token after the last one. Throws megatron::Error when the context would
  // exceed max_context.
  std::vector<float> append(std::span<const int32_t> tokens);
  // The same for a batch of `batch` sequences (1 <= batch <= max_batch) that share the context
  // length: tokens [batch, t] (each sequence's t new tokens, row-major). Returns the logits
  // [batch, V] of each sequence's last new position, or with `all_positions` the logits
  // [t, batch, V] (sequence-first) of every new position. The batch size may change only after
  // reset().
  std::vector<float> append(std::span<const int32_t> tokens, int64_t batch, bool all_positions = false);
  int64_t max_batch() const { return max_batch_; }
  int64_t padded_vocab_size() const { return config_.padded_vocab_size; }

 private:
  GPTConfig config_;
  backend::Backend& backend_;
  int64_t max_context_;
  int64_t max_batch_ = 1;
  int64_t past_ = 0;
  int64_t batch_ = 0;  // the batch size since reset(); 0 before the first append
  DType dtype_;
  std::unique_ptr<comm::Communicator> tp_;  // one rank
  LayerWorkspace ws_;  // the rotary frequencies only (the layers' forward needs no other workspace)
  LayerContext ctx_;
  VocabParallelEmbedding embedding_;
  std::vector<TransformerLayer> layers_;
  Norm final_norm_;
  int64_t output_ = -1;  // output_layer.weight, or the word embedding when tied
  // Per layer: keys and values [max_batch, groups, max_context, d] fp32.
  std::vector<Tensor> k_cache_, v_cache_;
};

}  // namespace megatron::model
