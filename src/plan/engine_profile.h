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
//                       Its GEMMs are cuBLAS(Lt)'s, as ours: it takes our fitted GEMM curve and
//                       optimizer byte counts (no measurement of its own exists). Residual adds
//                       as Megatron runs them: bias-dropout-add after the row-parallel linear,
//                       the residual gradients added by autograd (our kernels' bytes for both).
//   megatron-2021       Megatron-LM as Narayanan et al. 2021 ran it (examples/sc21: container
//                       nvcr.io/nvidia/pytorch:20.12-py3, --fp16, default dropouts 0.1): local
//                       attention with dropout 0.1 on the scores, fused_bias_gelu as its own
//                       kernel, the QKV bias added outside the GEMM, residual dropout masks,
//                       bias-dropout-add and the residual-gradient add as their own kernels,
//                       every TP all-reduce exposed, the DP all-reduce after the backward
//                       (--DDP-impl local, the default), --fp16 grads reduced in fp16 and
//                       accumulated across micro-batches by autograd, unfused cross-entropy,
//                       Megatron's fp16 optimizer (unfused passes, no distributed optimizer),
//                       and the A100 GEMM rate of that era's cuBLAS (kGemmEfficiencyA100Era2022).
// Every profile field is a documented property of the software that ran, never a per-row or
// fitted factor (tests/plan/published_runs_test.cpp; bench/results/2026-11-23.md, "plan
// validation vs published").
#pragma once

#include <cstdint>
#include <string>

namespace megatron::plan {

// Megatron's --attention-backend as far as the planner tells them apart: kFlash (fused kernels
// that never store the [s, s] scores; ours is cuDNN's) or kLocal (Megatron's DotProductAttention:
// baddbmm, fused scale-mask-softmax, dropout, bmm; what Megatron-LM ran in 2021).
enum class AttentionBackend { kFlash, kLocal };
const char* attention_backend_name(AttentionBackend a);

// The share of NVLink's figure (in comm_model.h's alpha-beta model, bus bandwidth = 2 (p-1)/p x
// bytes / time per all-reduce) that our TP collectives reach, by message size. Measured, not
// fitted to step times; it grows with the message as NCCL's fixed costs weigh less:
//  - 33.5 MB ([s b, h] bf16 at 1.3B, the TP + SP all-gathers and reduce-scatters): 0.39. TP2 on
//    2 x H200, one all-gather + one reduce-scatter of 33.6 MB alone 0.185 ms (182 GB/s = 0.40;
//    bench/results/2026-11-24.md, "every parallel layout on one GPU", call 14); TP4 on 4 x H100
//    inside the 1.3B step (--profile-ops) 0.114 + 0.183 ms for 33.5 MB (169 GB/s = 0.38;
//    bench/results/2026-11-28.md, "the first 4-GPU machine").
//  - 256 MiB: 0.75. `megatron preflight` on 4 x H100, fp32 all-reduce over the 4 ranks, 339
//    GB/s (the same entry; 2-rank groups 263-297 GB/s).
// Between them log-linear in the size, outside them the nearer value.
constexpr double kOurTpShareSmallBytes = 33.5e6, kOurTpShareSmall = 0.39;
constexpr double kOurTpShareLargeBytes = 268435456.0, kOurTpShareLarge = 0.75;
double our_tp_collective_share(double bytes);

// How the training software runs where it matters for time. The defaults are our engine's;
// find_engine's other profiles describe published runs (tests/plan/published_runs_test.cpp).
struct Engine {
  AttentionBackend attention = AttentionBackend::kFlash;  // --attention-backend
  double attention_dropout = 0.0;  // --attention-dropout; kLocal: passes over the scores; kFlash: the RNG
  // Attention dropout over a tensor-parallel share of the heads runs our own kernels, not
  // cuDNN's (ours: the masks follow the global head index; attention_impl.h), at
  // kOwnDropoutAttentionFactor times the time. Other profiles: false.
  bool own_attention_for_tp_dropout = true;
  // Documents packed into samples (--reset-attention-mask): cuDNN's flash attention adds a
  // [b, 1, s, s] bias of the documents to the scores (cudnn_attention.h), read from memory at
  // kDocumentBiasForwardPasses / kDocumentBiasBackwardPasses per causal score. (Where our own
  // kernels run instead, a tensor-parallel share with dropout, they skip masked tiles: no term.)
  bool document_bias = false;
  int64_t grad_reduce_bytes = 4;  // bytes per gradient element the DP collective moves: 4 = fp32
                                  // main grads; 2 = --grad-reduce-in-bf16, or Megatron-2021 --fp16
                                  // without --accumulate-allreduce-grads-in-fp32
  // GELU (and its derivative) applied in the FC1 GEMM's epilogue (ours: cuBLASLt GELU_AUX; TE's).
  // false: a separate bias-GeLU kernel (Megatron 2021's fused_bias_gelu): 2e bytes forward and
  // 3e backward per FC1 output element, at the streaming rate.
  bool gelu_in_gemm_epilogue = true;
  // The DP gradient reduction overlaps the backward (--overlap-grad-reduce, Megatron-Core's DDP;
  // ours). false: Megatron-LM 2021's default --DDP-impl local, which all-reduces the gradients
  // after the backward of the last micro-batch (a run with --DDP-impl torch overlapped: torch's
  // DDP buckets; `megatron plan` has no flag for it, tests/plan/published_runs_test.cpp sets it
  // per row as examples/sc21 ran them).
  bool overlap_grad_reduce = true;
  // The backward TP all-reduces overlap the wgrad GEMMs (Megatron's async TP all-reduce, ours).
  // false: every TP all-reduce is exposed (the 2021 code the SC21 runs used).
  bool async_tp_allreduce = true;
  // Each pipeline send carries 1/tp of the [s, b, h] activation from each TP rank, gathered over
  // NVLink on the receiving side (Megatron's scatter/gather optimisation, on by default since
  // 2021-02, Narayanan et al. 2021 §4.1 and Fig. 18; ours sends the SP shard). false: every TP
  // rank sends the whole tensor (Megatron-LM before it, e.g. commit 8aa4619f2b's
  // training.py communicate()), tp times the bytes through the node's NICs.
  bool pipeline_scatter_gather = true;
  // TP collectives over NVLink at our_tp_collective_share() of the link (ours, measured) instead
  // of comm_model.h's kLinkEfficiency (the other profiles: their validations used 0.80).
  bool measured_tp_collectives = true;
  // --tp-comm-overlap (Transformer Engine userbuffers): each layer's TP all-gathers and
  // reduce-scatters (the backward's dy gathers included) are split into chunks pipelined with
  // the GEMMs they feed, so only what exceeds the layer's GEMM time is exposed. Needs SP; our
  // engine does not have it.
  bool tp_comm_overlap = false;
  // Softmax cross-entropy fused over the 16-bit logits (ours: kLogitsBytes per logit). false:
  // Megatron's vocab_parallel_cross_entropy on output.float() (no --cross-entropy-loss-fusion):
  // kUnfusedLogitsBytes per logit at the streaming rate.
  bool fused_cross_entropy = true;
  // Ceiling of the GEMM efficiency curve (fraction of the GPU's dense peak) of the engine's
  // software stack; 0: kGemmCeilingShare of the GPU's own figure (gpu_spec.h: today's cuBLAS,
  // Bekman's MAMF), the share our engine's GEMM mix reaches (throughput_model.h).
  double gemm_efficiency = 0;
  // Dropout on the two residual branches (--hidden-dropout). The fused bias-dropout-add reads
  // and writes what it would without dropout, plus a 1-byte mask forward (again in a recompute
  // forward); backward applies the mask in its own pass: grad in (e), mask (1), grad out (e).
  // With dropout our engine runs that bias-dropout-add instead of the residual epilogue below.
  // Our engine's calibration ran with dropout 0, so `ours` keeps 0.
  double hidden_dropout = 0.0;
  // The attention projection and FC2 add the residual in their GEMM's epilogue (ours: cuBLASLt
  // with C = residual, Backend::linear_residual_forward), which our engine does only with TP 1
  // and hidden dropout 0. Otherwise, and always when false (Megatron's bias_dropout_add after the
  // row-parallel linear): kBiasDropoutAddBytes per layer, token and hidden element.
  bool residual_add_in_gemm_epilogue = true;
  // The residual gradient added inside the LayerNorm backward (ours). false: a separate add of
  // the two gradients (autograd in Megatron): kResidualGradAddBytes more per layer.
  bool residual_grad_add_in_layernorm = true;
  // The QKV bias added by the GEMM (epilogue / cuBLASLt bias). false: Megatron 2021's
  // ColumnParallelLinear on [s, b, h] input: F.linear = matmul, then `+= bias` as its own
  // kernel, 2e bytes per QKV output element forward (and in a recompute forward).
  bool linear_bias_in_epilogue = true;
  // Bytes per parameter and micro-batch (from the second on) spent accumulating the weight
  // gradients outside the GEMM. 0: the wgrad GEMM accumulates into the main grad (ours;
  // Megatron-Core's --gradient-accumulation-fusion). Megatron 2021 with --fp16: autograd adds
  // each micro-batch's fp16 grad into param.grad: read 2 + read 2 + write 2 = 6.
  double wgrad_accumulation_bytes = 0;
  // Optimizer step bytes per parameter at the streaming rate, for an engine without the
  // distributed optimizer; 0: ours (kGradPassBytes per local + kAdamBytes per owned parameter
  // at HBM bandwidth, measured). See find_engine for Megatron 2021's count.
  double optimizer_bytes = 0;
  // Process-group kinds with the same groups share one NCCL communicator, and one-rank groups
  // have none (parallel::make_process_groups); false: every kind its own, as in the runs recorded
  // before 2026-11-28 (plan/nccl_memory.h NcclLayout::shared_groups).
  bool shared_process_groups = true;
};

// A100 GEMM ceiling for Megatron-LM 2021: 230 of 312 TFLOP/s, torch.matmul fp16 on
// 8192 x 8192 x 8192 random matrices, A100 80GB, NGC PyTorch 22.07 (CUDA 11.7)
// (github.com/mli/transformers-benchmarks README, "MatMul FP32 / FP16 116 / 230"). The SC21 runs
// used the older 20.12 container (CUDA 11.1); the same shape measures 258 with 2024 software
// (Horace He, docs/performance-references.md, "GEMM") and the best shape 271 with 2025's (Bekman's
// MAMF, gpu_spec.h), so cuBLAS on A100 got faster with time and 230 is the closest period figure we
// have, not a fit.
constexpr double kGemmEfficiencyA100Era2022 = 230.0 / 312.0;

// Megatron 2021's fp16 optimizer step (Float16OptimizerWithFloat16Params + apex FusedAdam),
// bytes per parameter: fp16 grad -> fp32 main grad (2 + 4), unscale and inf check (4 + 4),
// grad norm (4), clip scale (4 + 4), Adam (p, g, m, v read, p, m, v written: 28), fp32 params ->
// fp16 model params (4 + 2), zero the fp16 grads (2) = 62.
constexpr double kMegatron2021OptimizerBytes = 62.0;

// The profile named `name` (ours, megatron-core-2024, megatron-2021); throws megatron::Error
// "[--engine] unknown engine 'x' (choose from ...)" otherwise.
Engine find_engine(const std::string& name);
std::string engine_names();

}  // namespace megatron::plan
