#include "model/layers/layer_context.h"

#include "core/error.h"

namespace megatron::model {

backend::GradWrite LayerContext::claim_grads(int64_t a, int64_t b) const {
  MT_CHECK(grads != nullptr) << "a backward without gradients (inference context)";
  const backend::GradWrite w = grads->claim_grad(a);
  if (b >= 0) {
    const backend::GradWrite wb = grads->claim_grad(b);
    MT_CHECK(wb == w) << "gradients of " << (*grads)[a].name << " and " << (*grads)[b].name
                      << " are written together, but only one was written this step";
  }
  return w;
}

Tensor& LayerContext::accumulable_grad(int64_t i) const {
  Tensor& g = grad(i);
  if (grads->claim_grad(i) == backend::GradWrite::kOverwrite) backend->fill(g, 0.0f);
  return g;
}

}  // namespace megatron::model
