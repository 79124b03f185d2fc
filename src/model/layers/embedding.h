// The input embedding: word (vocab-parallel, tensor_parallel/vocab_parallel.h: rank r holds
// rows [r V/T, (r+1) V/T) of [V, h]) plus, with --position-embedding-type learned_absolute,
// learned positions [P, h] (replicated), then the hidden dropout. Each rank looks up its own ids (others' read as -1
// and add nothing; rank 0 adds the positions) and the partial sums are all-reduced over TP, or reduce-scattered into
// the sequence shard under sequence parallelism (Megatron: all-reduce, then scatter; the same values).
#pragma once

#include <cstdint>

#include "model/gpt_config.h"
#include "model/layers/layer_context.h"

namespace megatron::model {

struct VocabParallelEmbedding {
  int64_t word = -1, position = -1;  // position -1: no learned positions

  // embedding.word_embeddings.weight [V, h] and (learned positions) embedding.position_embeddings.weight [P, h].
  static VocabParallelEmbedding declare(ParameterSet& ps, const GPTConfig& config);
  static VocabParallelEmbedding find(const ParameterSet& ps);

  // x0 [s_local, b, h] from tokens [b, s] (ids within this rank's slice, else -1) and position
  // ids [b, s] (undefined: 0..s-1); ws.h1 holds the sum before dropout when it cannot be x0.
  void forward(const LayerContext& ctx, const Tensor& tokens, const Tensor& positions, Tensor& x0,
               const backend::DropoutParams& dropout) const;
  // The gradients (accumulated) from ws.grad = d(x0) [n_local, h].
  void backward(const LayerContext& ctx, const Tensor& tokens, const Tensor& positions,
                const backend::DropoutParams& dropout) const;
  // Generation (one rank): x [t, 1, h] for tokens [1, t] at positions past..past+t-1.
  void forward_at(const LayerContext& ctx, const Tensor& tokens, int64_t past, Tensor& x) const;
};

}  // namespace megatron::model
