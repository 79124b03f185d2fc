// What the layer tests share: the LayerContext they run a layer in.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "model/layers/layer_context.h"
#include "model/parameters.h"

namespace megatron::model {

// One rank's context on `backend` over `tp`: values and gradients in `ps`, the workspace `ws`,
// [seq, batch, hidden] rows; no sequence parallelism and no FP8 (the caller sets those).
inline LayerContext test_layer_context(backend::Backend& backend, comm::Communicator& tp, ParameterSet& ps,
                                       LayerWorkspace& ws, int64_t seq, int64_t batch, int64_t hidden) {
  LayerContext ctx;
  ctx.backend = &backend;
  ctx.tp = &tp;
  ctx.values = &ps;
  ctx.grads = &ps;
  ctx.ws = &ws;
  ctx.seq = seq;
  ctx.batch = batch;
  ctx.hidden = hidden;
  return ctx;
}

}  // namespace megatron::model
