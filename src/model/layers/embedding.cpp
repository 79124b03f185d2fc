#include "model/layers/embedding.h"

#include "model/layers/parallel_linear.h"

namespace megatron::model {

VocabParallelEmbedding VocabParallelEmbedding::declare(ParameterSet& ps, const GPTConfig& c) {
  constexpr int kRows = 0;
  VocabParallelEmbedding e;
  e.word = ps.add("embedding.word_embeddings.weight", {c.padded_vocab_size, c.hidden_size}, Init::kNormal, kRows);
  if (c.learned_positions()) {
    e.position =
        ps.add("embedding.position_embeddings.weight", {c.max_position_embeddings, c.hidden_size}, Init::kNormal);
  }
  return e;
}

VocabParallelEmbedding VocabParallelEmbedding::find(const ParameterSet& ps) {
  VocabParallelEmbedding e;
  e.word = ps.require("embedding.word_embeddings.weight");
  e.position = ps.index_of("embedding.position_embeddings.weight");
  return e;
}

void VocabParallelEmbedding::forward(const LayerContext& ctx, const Tensor& tokens, const Tensor& positions, Tensor& x0,
                                     const backend::DropoutParams& dropout) const {
  const int64_t s = ctx.seq, b = ctx.batch, n = ctx.rows(), h = ctx.hidden;
  const Tensor wpe = ctx.tp->rank() == 0 && position >= 0 ? ctx.param(position) : Tensor();
  Tensor emb = !ctx.sequence_parallel && dropout.p == 0.0f ? x0 : ctx.ws->h1.view({s, b, h});
  ctx.backend->embedding_forward(tokens, positions, ctx.param(word), wpe, emb);
  Tensor emb_rows = emb.view({n, h});
  const Tensor emb_local = reduce_rows(ctx, emb_rows);
  if (emb.data() != x0.data()) {
    Tensor x0_rows = x0.view({ctx.local_rows(), h});
    ctx.backend->dropout_forward(emb_local, x0_rows, dropout);  // p == 0: a copy
  }
}

void VocabParallelEmbedding::backward(const LayerContext& ctx, const Tensor& tokens, const Tensor& positions,
                                      const backend::DropoutParams& dropout) const {
  LayerWorkspace& ws = *ctx.ws;
  Tensor buffer = local_rows(ctx, ws.h1);
  const Tensor d_local = through_dropout(ctx, ws.grad, buffer, dropout);
  const Tensor d = gather_rows(ctx, d_local, ws.h1);
  Tensor no_table;
  ctx.backend->embedding_backward(tokens, positions, d.view({ctx.seq, ctx.batch, ctx.hidden}),
                                  ctx.accumulable_grad(word),
                                  position >= 0 ? ctx.accumulable_grad(position) : no_table);
}

void VocabParallelEmbedding::forward_at(const LayerContext& ctx, const Tensor& tokens, int64_t past, Tensor& x) const {
  const int64_t t = tokens.shape()[1];
  const Tensor positions = position >= 0 ? ctx.param(position).slice(past, past + t) : Tensor();
  ctx.backend->embedding_forward(tokens, Tensor(), ctx.param(word), positions, x);
}

}  // namespace megatron::model
