// The software side of a prediction: how a training engine runs the pieces whose cost
// differs between engines (attention kernel, GeLU, cross-entropy, TP overlap, gradient dtype),
// and named profiles of the engines the planner is validated against (`megatron plan --engine`).
//
// Profiles:
//   ours                our engine (the default): cuDNN flash attention, GeLU in the GEMM
//                       epilogue, fused cross-entropy, async TP all-reduce, fp32 grad reduction.
//   megatron-core-2024  Megatron-Core r0.8 as its README H100 table ran (Transformer Engine,
//                       flash attention, "DP/TP/PP communication overlap" = --tp-comm-overlap,
//                       unfused fp32 cross-entropy: --cross-entropy-loss-fusion came after r0.8).
//   megatron-2021       Megatron-LM as Narayanan et al. 2021 ran it (examples/sc21): local
//                       attention with dropout 0.1 on the scores, fused_bias_gelu as its own
//                       kernel, every TP all-reduce exposed, --fp16 grads reduced in fp16,
//                       unfused cross-entropy.
#pragma once

#include <cstdint>
#include <string>

namespace megatron::plan {

// Megatron's --attention-backend as far as the planner tells them apart: kFlash (fused kernels
// that never store the [s, s] scores; ours is cuDNN's) or kLocal (Megatron's DotProductAttention:
// baddbmm, fused scale-mask-softmax, dropout, bmm; what Megatron-LM ran in 2021).
enum class AttentionBackend { kFlash, kLocal };
const char* attention_backend_name(AttentionBackend a);

// How the training software runs where it matters for time. The defaults are our engine's;
// find_engine's other profiles describe published runs (tests/plan/published_runs_test.cpp).
struct Engine {
  AttentionBackend attention = AttentionBackend::kFlash;  // --attention-backend
  double attention_dropout = 0.0;  // --attention-dropout; costs time only with kLocal (flash fuses it)
  int64_t grad_reduce_bytes = 4;   // bytes per gradient element the DP collective moves: 4 = fp32
                                   // main grads; 2 = --grad-reduce-in-bf16, or Megatron-2021 --fp16
                                   // without --accumulate-allreduce-grads-in-fp32
  // GELU (and its derivative) applied in the FC1 GEMM's epilogue (ours: cuBLASLt GELU_AUX; TE's).
  // false: a separate bias-GeLU kernel (Megatron 2021's fused_bias_gelu): 2e bytes forward and
  // 3e backward per FC1 output element, at the streaming rate.
  bool gelu_in_gemm_epilogue = true;
  // The backward TP all-reduces overlap the wgrad GEMMs (Megatron's async TP all-reduce, ours).
  // false: every TP all-reduce is exposed (the 2021 code the SC21 runs used).
  bool async_tp_allreduce = true;
  // --tp-comm-overlap (Transformer Engine userbuffers): each layer's TP all-gathers and
  // reduce-scatters are split into chunks pipelined with the GEMMs they feed, so only what
  // exceeds the layer's GEMM time is exposed. Needs SP; our engine does not have it.
  bool tp_comm_overlap = false;
  // Softmax cross-entropy fused over the 16-bit logits (ours: kLogitsBytes per logit). false:
  // Megatron's vocab_parallel_cross_entropy on output.float() (no --cross-entropy-loss-fusion):
  // kUnfusedLogitsBytes per logit at the streaming rate.
  bool fused_cross_entropy = true;
};

// The profile named `name` (ours, megatron-core-2024, megatron-2021); throws megatron::Error
// "[--engine] unknown engine 'x' (choose from ...)" otherwise.
Engine find_engine(const std::string& name);
std::string engine_names();

}  // namespace megatron::plan
