#include "model/layers/norm.h"

#include "core/error.h"

namespace megatron::model {

Norm Norm::declare(ParameterSet& ps, const std::string& name, const GPTConfig& config, int64_t width) {
  Norm n;
  n.eps = config.layernorm_epsilon;
  n.zero_centered = config.apply_layernorm_1p;
  const int64_t w = width > 0 ? width : config.hidden_size;
  n.weight = ps.add(name + ".weight", {w}, n.zero_centered ? Init::kZeros : Init::kOnes);
  if (config.layernorm_bias()) n.bias = ps.add(name + ".bias", {w}, Init::kZeros);
  return n;
}

Norm Norm::find(const ParameterSet& ps, const std::string& name, const GPTConfig& config) {
  Norm n;
  n.eps = config.layernorm_epsilon;
  n.zero_centered = config.apply_layernorm_1p;
  n.weight = ps.require(name + ".weight");
  n.bias = config.layernorm_bias() ? ps.require(name + ".bias") : -1;
  return n;
}

void Norm::allocate_workspace(const LayerContext& ctx, LayerWorkspace& ws) const {
  if (!zero_centered || ws.norm_gamma.defined()) return;
  const int64_t h = ctx.values->operator[](weight).value.numel();
  ws.norm_gamma = ctx.backend->empty({h}, DType::kF32, MemoryKind::kWorkspace);
  ws.ones = ctx.backend->empty({h}, DType::kF32, MemoryKind::kWorkspace);
  ctx.backend->fill(ws.ones, 1.0f);
}

Tensor Norm::gamma(const LayerContext& ctx) const {
  if (!zero_centered) return ctx.param(weight);
  MT_CHECK(ctx.ws != nullptr && ctx.ws->norm_gamma.defined()) << "a zero-centred norm without its workspace";
  Tensor& g = ctx.ws->norm_gamma;
  ctx.backend->copy(ctx.param(weight), g);
  ctx.backend->add(g, ctx.ws->ones, g);
  return g;
}

void Norm::forward(const LayerContext& ctx, const Tensor& x, Tensor& out, Tensor& mean, Tensor& rstd) const {
  ctx.backend->layernorm_forward(x, gamma(ctx), ctx.optional_param(bias), eps, out, mean, rstd);
}

BranchGradTaken Norm::backward_into(const LayerContext& ctx, const Tensor& dy, const Tensor& x, const Tensor& mean,
                                    const Tensor& rstd, Tensor& g, const RowParallelLinear* branch,
                                    const backend::DropoutParams& dropout) const {
  backend::Backend& be = *ctx.backend;
  const backend::GradWrite write = ctx.claim_grads(weight, bias);
  Tensor db = ctx.optional_grad(bias);  // undefined for RMSNorm
  if (branch == nullptr || !branch->bias_grad_in_next_norm(ctx)) {
    be.layernorm_backward(dy, x, gamma(ctx), mean, rstd, g, ctx.grad(weight), db, write,
                          backend::GradWrite::kAccumulate);
    return {};
  }
  const int64_t rb = branch->bias;
  if (dropout.p > 0.0f) {
    Tensor dz = local_rows(ctx, ctx.ws->h1);
    be.layernorm_backward_dropout_colsum(dy, x, gamma(ctx), mean, rstd, g, ctx.grad(weight), db, dz, ctx.grad(rb),
                                         dropout, write, backend::GradWrite::kAccumulate, ctx.grads->claim_grad(rb));
    return {true, true};
  }
  be.layernorm_backward_colsum(dy, x, gamma(ctx), mean, rstd, g, ctx.grad(weight), db, ctx.grad(rb), write,
                               backend::GradWrite::kAccumulate, ctx.grads->claim_grad(rb));
  return {true, false};
}

void Norm::backward(const LayerContext& ctx, const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                    Tensor& dx) const {
  Tensor db = ctx.optional_grad(bias);
  ctx.backend->layernorm_backward(dy, x, gamma(ctx), mean, rstd, dx, ctx.grad(weight), db,
                                  ctx.claim_grads(weight, bias));
}

}  // namespace megatron::model
