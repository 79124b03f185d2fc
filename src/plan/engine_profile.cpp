#include "plan/engine_profile.h"

#include <cmath>

#include "core/error.h"

namespace megatron::plan {

const char* attention_backend_name(AttentionBackend a) { return a == AttentionBackend::kLocal ? "local" : "flash"; }

std::string engine_names() { return "ours, megatron-core-2024, megatron-2021"; }

double our_tp_collective_share(double bytes) {
  if (bytes <= kOurTpShareSmallBytes) return kOurTpShareSmall;
  if (bytes >= kOurTpShareLargeBytes) return kOurTpShareLarge;
  const double x = std::log(bytes / kOurTpShareSmallBytes) / std::log(kOurTpShareLargeBytes / kOurTpShareSmallBytes);
  return kOurTpShareSmall + x * (kOurTpShareLarge - kOurTpShareSmall);
}

Engine find_engine(const std::string& name) {
  Engine e;
  if (name == "ours") return e;
  e.own_attention_for_tp_dropout = name == "ours";
  e.measured_tp_collectives = false;
  if (name == "megatron-core-2024") {
    e.tp_comm_overlap = true;
    e.fused_cross_entropy = false;
    e.residual_add_in_gemm_epilogue = false;  // bias_dropout_add after the row-parallel linear
    e.residual_grad_add_in_layernorm = false;
    return e;
  }
  if (name == "megatron-2021") {
    e.gemm_efficiency = kGemmEfficiencyA100Era2022;
    e.hidden_dropout = 0.1;  // Megatron's default --hidden-dropout; examples/sc21/CONFIG.sh keeps it
    e.linear_bias_in_epilogue = false;
    e.residual_add_in_gemm_epilogue = false;
    e.residual_grad_add_in_layernorm = false;
    e.wgrad_accumulation_bytes = 6.0;
    e.optimizer_bytes = kMegatron2021OptimizerBytes;
    e.attention = AttentionBackend::kLocal;
    e.attention_dropout = 0.1;
    e.grad_reduce_bytes = 2;
    e.gelu_in_gemm_epilogue = false;
    e.async_tp_allreduce = false;
    e.overlap_grad_reduce = false;  // --DDP-impl local (Megatron-LM 2021's default)
    e.fused_cross_entropy = false;
    return e;
  }
  throw_error("[--engine] unknown engine '", name, "' (choose from ", engine_names(), ")");
}

}  // namespace megatron::plan
