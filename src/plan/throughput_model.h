// Predicted iteration time, tokens/s and TFLOP/s per GPU of a layout on a cluster.
//
// Per micro-batch and pipeline stage (n = b*s tokens, t = tp, u = t with SP else 1):
//  GEMMs       per layer QKV (n x 3q/t x h), proj (n x h x q/t), FC1 (n x f1/t x h; f1 = f, or 2f
//              with --swiglu: gate and up), FC2 (n x h x f/t),
//              LM head (n x V/t x h) on the last stage; each runs 3 times (forward, dgrad, wgrad)
//              with w = 2*M*N*K FLOPs at efficiency  eff(w) = ceiling * w / (w + w0),
//              i.e. time = (w + w0) / (peak * ceiling): a fixed ~w0 of lost work per GEMM
//              (launch, wave quantisation, tails, fp32 wgrad accumulation).
//  attention   flash (our engine, Megatron-Core's --attention-backend flash): 6*b*s^2*q/t FLOPs
//              per layer (forward + backward, causal mask counted half) at efficiency
//              kAttentionEfficiency * d/(d + 64) * s/(s + 512)  (d = head size), where a head
//              size between the kernel's sizes runs as the next one up (flash_kernel_head_size:
//              d = 80 costs the work of 128 at 128's efficiency), and with few heads per rank
//              the longest causal tiles set the time (flash_wave_factor).
//              local (Megatron's own DotProductAttention, the only kind in 2021): the scores
//              [b, a/t, s, s] are materialised in the model dtype (E = b*a/t*s^2 elements, e bytes):
//              two batched GEMMs forward (QK^T, probs.V) and four backward, 2*E*d FLOPs each, the
//              full square computed (no causal skipping); each is the slower of its FLOPs at the
//              GEMM rate and its E*e bytes of score traffic at the streaming rate (roofline: at
//              d = 64..160 these GEMMs are memory-bound on A100 and H100); the fused
//              scale-mask-softmax moves 2E*e forward, 3E*e backward; attention dropout (p > 0)
//              (2e + 1)*E forward (probs in, dropped probs and a 1-byte mask out) and the same
//              backward; the context [b, a/t, s, d] -> [s, b, q/t] copy (permute + contiguous,
//              read + write) forward and backward. Streaming rate = HBM bandwidth x kStreamEfficiency.
//  memory-bound  per layer, on n*h/u elements at the GPU's HBM bandwidth: kElementwiseBytes (the
//              two LayerNorms forward + backward, the residual-gradient add in the backward);
//              kBiasDropoutAddBytes where the residual add is not in the row-parallel GEMM's
//              epilogue (ours: TP > 1 or hidden dropout > 0; other engines always); and
//              kResidualGradAddBytes where the residual-gradient add is its own kernel (not ours).
//              (RMSNorm: the same term as LayerNorm.) With rotary embeddings, kRopeBytes * e per
//              element of q and k (query groups' keys) forward and backward, at the streaming rate.
//              Grouped-query attention narrows the QKV GEMM to (a + 2 g) d / t (qkv_out_size).
//              kLogitsBytes * n*V/t for the softmax cross-entropy at HBM bandwidth; plus, at the
//              streaming rate, with --swiglu its own kernels (kSwiglu*Bytes * e per [n, f/t]
//              output element, in every engine), and what the engine does outside its kernels
//              (engine_profile.h): a separate bias-GeLU (without SwiGLU), residual dropout masks,
//              a QKV `+= bias`, unfused cross-entropy,
//              and weight-gradient accumulation outside the GEMM ((m-1) passes over the stage's
//              parameters per iteration).
//  FP8         (GPTConfig::fp8, --fp8-format) the four layer GEMMs above at the GPU's FP8 peak
//              (GpuSpec::fp8_tflops: 2x the bf16 peak on H100 and H200) with the same ceiling
//              share and lost time per GEMM; the LM head, attention and the rest as without. Per
//              linear and micro-batch the quantize passes at the streaming rate: x and w
//              forward, dy (both layouts), w^T and x^T backward, each an amax read and a cast
//              read of the e-byte operand plus 1-byte codes written; the bias gradient as its
//              own pass over dy; FC1's GELU (forward and backward) and the residual add
//              (kBiasDropoutAddBytes) outside the GEMMs' epilogues; and no overlap of the
//              column-parallel dgrad all-reduces with the wgrad GEMMs (one FP8 backward call).
//  GEMM ceiling  kGemmCeilingShare of the GPU's best-shape GEMM rate (gpu_spec.h): what a training
//              step's GEMM mix reaches (fp32-accumulating wgrad, GELU_AUX epilogues, its shapes);
//              or the engine's software stack's absolute figure (Engine::gemm_efficiency).
//  full recompute  one more forward: 1/3 of the GEMM and LayerNorm time (the profiles below:
//              the forward is 0.29-0.41 of the LayerNorm time), the bias-dropout-add and the other
//              forward-only terms, 1/3.5 of flash attention (its backward is ~2.5x its forward) or
//              local attention's forward terms, two more TP all-reduces.
//  TP          4 all-reduces of n*h*e bytes per layer (2 forward, 2 backward; with SP the same
//              volume as all-gathers + reduce-scatters, and 1 more: the backward's all-gathers
//              of dy before the proj and FC2 dgrads); the 2 backward ones overlap the QKV and
//              FC1 wgrad GEMMs (Megatron's async TP all-reduce; Engine::async_tp_allreduce), the
//              rest is exposed.
//  PP          per micro-batch and virtual chunk, a forward and a backward send/recv of n*h*e/t
//              bytes (scatter-gather / SP-sharded); iteration = (m + (pp-1)/vp) * slowest stage
//              (bubble fraction (pp-1)/(m*vp), Narayanan et al. 2021 §2.2).
//  DP          gradient all-reduce (or reduce-scatter with the distributed optimizer) of the
//              stage's grads (Engine::grad_reduce_bytes each), and the parameter all-gather of
//              the distributed optimizer;
//              with overlap, exposed = t / buckets (the last bucket, after the compute) + what
//              of the rest exceeds the window + kOverlapContention x the part beside the
//              compute when the DP group is on NVLink (0 across nodes); window = the backward
//              (grads) or forward (params) of one micro-batch, buckets of max(4e7, 1e6*dp)
//              elements (docs/megatron-formats.md §9).
//  optimizer   kGradPassBytes per local parameter (grad norm) + kAdamBytes per owned
//              parameter, at HBM bandwidth (ours); or Engine::optimizer_bytes per parameter at
//              the streaming rate (Megatron 2021's fp16 optimizer).
// Links: a TP group on NVLink when its tp consecutive ranks divide the node, else across nodes;
// a DP group on NVLink when tp*dp divides the node, else across nodes; a group across nodes at
// min(NVLink, k x the per-GPU network bandwidth) where k of its ranks share its emptiest node
// (its rings' channels spread over those k GPUs' NICs; comm_model.h group_link), with NCCL's
// tree latency for all-reduces over many nodes; PP over the network when tp*dp*pp spans nodes,
// one GPU's NIC per hop (rank order tp-dp-pp, docs/megatron-formats.md §7).
//
// Calibration (H100, bench/results/2026-11-23.md, "planner (`megatron plan`): calibration and
// validation"): kAttentionEfficiency from the 124M op profile (cuDNN attention forward +
// backward 5.01 ms for 0.93 TFLOP); kLogitsBytes at the constant. kElementwiseBytes,
// kBiasDropoutAddBytes and kResidualGradAddBytes from op profiles of the engine with and without
// its residual fusions (bench/results/2026-11-23.md, "planner: memory-bound bytes from the fused
// engine"; numbers at the constants). kGradPassBytes and kAdamBytes from the 1.3B profile with
// no gradient zero fill and the clip factor inside AdamW (bench/results/2026-11-23.md,
// "gradient writes without a zero fill": sum_squares 2.10 ms, adamw 13.90 ms for
// 1.316e9 parameters). The GEMM curve (kGemmCeilingShare, kGemmLostWorkH100) by least squares
// on relative error over 7 single-H100 runs (bench/results/2026-11-23.md, "plan validation (a)
// on one H100, 12 runs; refit"): gpt2-350m mbs 16, gpt3-1.3b and gpt3-2.7b mbs 4 from the sweep
// (bench/recorded/one_*.json) and gpt2-124m, 350m, 1.3b, 2.7b at scripts/gpu-check.sh's shapes;
// held out: the mbs 8 / 2 rows and every full-recompute row (all within 3.1%;
// tests/plan/recorded_runs_test.cpp).
// That fit ran with the older single kElementwiseBytes = 72; with the split memory-bound terms
// (each run predicted with the residual adds of the code that ran it) the same procedure gives
// 0.852 and 10.9 GFLOP, in sample rms 2.0 -> 1.6% but held out max 3.3 -> 4.9%, so the curve
// was kept (bench/results/2026-11-23.md, "planner: memory-bound bytes from the fused engine").
// Other GPUs: the ceiling is the same share of the GPU's own ceiling, w0 and the rest scale with
// the GPU's peak and bandwidth; attention efficiency is assumed the same.
// kStreamEfficiency from the same profile at 1.3B: adamw_update_segments streams 39.5 GB of fp32
// state at 2.7 TB/s, 82% of the H100's 3.35 TB/s (bench/results/2026-11-23.md, "the 1.3B profile").
//
// Validation against published runs (tests/plan/published_runs_test.cpp;
// bench/results/2026-11-23.md, "plan validation vs published" and "megatron-2021 as it ran"): with
// the engine profile of the software that ran (engine_profile.h), Narayanan et al. 2021 Table 1
// (A100) lands within -1..+11% on all 10 rows; the Megatron-Core H100 table within 20% on 7 of 9
// rows (1.7B and 7.1B: +29%, +29%, per-layer host/launch overheads we have no source for); BLOOM
// 176B (384 A100, TP 4 x PP 12 x DP 8) +2.6%; median |error| of the 20 rows 7.6%.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "core/dtype.h"
#include "model/gpt_config.h"
#include "plan/engine_profile.h"
#include "plan/gpu_spec.h"
#include "plan/parallel_config.h"

namespace megatron::plan {

// The GEMM curve, its two constants fitted together (see "Calibration" above; on H100 the
// ceiling is 0.857 x 0.803 = 0.688 of peak, 680 TFLOP/s).
constexpr double kGemmCeilingShare = 0.857;  // of the GPU's GEMM ceiling (gpu_spec.h)
constexpr double kGemmLostWorkH100 = 9.0e9;  // w0 in FLOPs on H100 (scaled by peak / 989 elsewhere)
constexpr double kAttentionEfficiency = 0.562;
// The head size a flash kernel computes a head of size d as: cuDNN's fused attention has kernels
// for 64, 128 and 256 and runs the sizes between as the next one up. H100
// (bench/results/2026-11-23.md, "the GEMM and attention limits measured"): a 4-layer probe at
// hidden 2560 ran 32 heads of 80 in 3.90 + 1.21 ms (backward + forward) against 2.68 + 0.80 ms for
// 20 heads of 128, the same FLOPs: 1.47x, where this rule says 1.6x and d/(d + 64) alone 1.2x. At
// 32 heads each (bench/results/2026-11-24.md, "cuDNN attention against head size"), sizes 80 / 96 /
// 112 took 0.89 / 0.98 / 1.00 of 128's time: the rule holds for 96-128 and overprices 80 by ~12%
// (2.7B's attention, ~15% of its step: the planner's -0.6..-1.9% on the 2.7B runs). Kept, one rule
// for every size rather than a fit to three points.
// Sizes up to 64 and above 256 are taken as they are.
constexpr double flash_kernel_head_size(double d) {
  return d <= 64.0 ? d : d <= 128.0 ? 128.0 : d <= 256.0 ? 256.0 : d;
}
// Flash attention's wave quantisation: a kernel runs one tile of 128 queries (forward) or keys
// (backward) of one (batch, head) per SM at a time, T = ceil(s / 128) tiles per head, and under
// the causal mask tile i does i + 1 blocks of work: B heads x T (T + 1) / 2 blocks in all, at
// least T of them in one tile. With few heads per rank (B = micro-batch x heads / TP) the
// longest tiles, not the work per SM, set the time: factor max(1, T x SMs / (B T (T + 1) / 2)).
// No constant fitted: H200, the 16.63B TP4 shard on one GPU (10 heads of 128, s 2048, B = 10,
// T = 16: factor 1.55) ran cuDNN attention at 183 TFLOP/s against 286 for gpt3-1.3b (B = 64:
// factor 1), 1.56x (bench/results/2026-11-28.md, "the data-parallel average moves into the
// collective").
inline double flash_wave_factor(double heads, double s, double sms) {
  const double tiles = std::ceil(s / 128.0);
  const double blocks = heads * tiles * (tiles + 1.0) / 2.0;
  return blocks > 0 ? std::max(1.0, tiles * sms / blocks) : 1.0;
}
// Attention dropout inside flash attention (ours: cuDNN's RNG node) costs integer work per causal
// score drawn, in the forward and again in the backward, on top of the FLOPs. H100 `--profile-ops`
// (bench/results/2026-11-24.md, "attention dropout on cuDNN"), attention with dropout 0.1 minus
// without, per step, over b * heads * s (s + 1) / 2 * layers scores: 350M (3.22e9) forward +3.44
// ms, backward +2.31; 1.3B (3.22e9) +4.12 / +2.44; 2.7B (8.59e9) +9.78 / +6.54: 0.87e12 and 1.34e12
// scores per second, i.e. 19.3 and 12.5 of the H100's 16.7e12 INT32 operations per score.
constexpr double kFlashDropoutForwardOps = 19.3;
constexpr double kFlashDropoutBackwardOps = 12.5;
// Our own attention kernels (what attention dropout over a tensor-parallel share of the heads
// runs, Engine::own_attention_for_tp_dropout) against cuDNN's, both with dropout 0.1: H100, the
// same notebook entry, whole steps with MEGATRON_ATTENTION_IMPL=own minus with cuDNN, plus cuDNN's
// attention time per step: 124M 48.3 vs 7.25 ms (6.7x), 350M 126 vs 19.7 (6.4x), 1.3B 127 vs
// 24.4 (5.2x), 2.7B 295 vs 58.4 (5.1x); the mean, 5.8.
constexpr double kOwnDropoutAttentionFactor = 5.8;
// The documents' bias on cuDNN (Engine::document_bias), in 2-byte reads per causal score and
// (batch, head), at the HBM rate, fitted on H100 whole steps (bench/results/2026-11-25.md,
// "documents packed into samples", calls 3-4, bf16, dropout 0): gpt3-1.3b (micro-batch 4, s 2048,
// 16 heads of 128) 147.0-148.1 ms with documents vs 135.5 causal, gpt3-2.7b (2 x 2048, 32 heads of
// 80) 171.0-172.2 vs 155.9: 6.0-6.5 passes over the causal half of the [b, heads, s, s] bias (one
// pass: 1.92 and 2.57 ms per step at 3.35 TB/s). Split forward : backward as the attention ops'
// added time under --profile-ops (3.6 : 11.8 ms at 1.3B). At s 1024 (gpt2-350m, 8 x 1024, heads of
// 64) the measured cost is lower, 3.9 passes (the smaller bias stays in L2): the model is then
// pessimistic by ~6%.
constexpr double kDocumentBiasForwardPasses = 1.5;
constexpr double kDocumentBiasBackwardPasses = 4.6;
// Memory-bound bytes per layer, token and hidden element (n*h/u), at HBM bandwidth.
// kElementwiseBytes: the two LayerNorms, forward + backward, the backward adding the residual
// gradient (ours). H100 `--profile-ops` (bench/results/2026-11-23.md, "planner: memory-bound bytes
// from the fused engine"), layernorm_forward + layernorm_backward per step (the final LayerNorm
// folded in, as before) x 3.35 TB/s over layers x tokens x h: 124M (mbs 16) 0.526 + 1.300 ms ->
// 40.5 bytes, 1.3B (mbs 4) 1.765 + 3.528 -> 44.0, 2.7B (mbs 4) 4.638 + 6.645 -> 56.3; mean 47 (the
// later LayerNorm backward, 124M 1.20 and 2.7B 6.18 ms, gives 38.3 and 54.0). Was 72 from the first
// 124M profile, which also ran a bias-dropout-add and a separate residual-gradient add in every
// layer.
constexpr double kElementwiseBytes = 47.0;
// Megatron's bias-dropout-add forward (two per layer: out = residual + dropout(x + bias)), which
// our engine runs only with TP > 1 or hidden dropout > 0 (otherwise the projection and FC2
// GEMMs add the residual in their epilogue, C = residual). Our kernel in the 1.3B profile of
// bench/results/2026-11-23.md, "gradient writes without a zero fill" (1.8 again in "LayerNorm:
// warp-per-row forward by default"): 1.82 ms per step -> 15.1 bytes (6 read and written per
// element, twice, at 80% of HBM bandwidth). Dropout's mask costs its own term
// (Engine::hidden_dropout).
constexpr double kBiasDropoutAddBytes = 15.0;
// A residual-gradient add as its own kernel (autograd's accumulation in Megatron; two per layer),
// net of the residual read our LayerNorm backward does instead. 1.3B profiles of 2026-11-23,
// before the fusion (the same one: LayerNorm backward 3.12 ms + add 1.64 ms per step) and after
// it ("LayerNorm: warp-per-row forward by default": 3.92 ms) -> 0.84 ms = 7.0 bytes.
constexpr double kResidualGradAddBytes = 7.0;
// The loss head's cross-entropy, forward and backward in one kernel with the hardware exp2
// (cross_entropy_fused; bench/results/2026-11-23.md, "cross-entropy forward and backward in one
// kernel"): 1.100 ms per step at 124M for n V = 8.24e8 logits at 3.35 TB/s -> 4.5 bytes per logit
// (it moves 4: one bf16 read, one write). Before: 8.0 (two kernels), 5.7 (one kernel with expf).
constexpr double kLogitsBytes = 4.5;  // per token and (padded) vocabulary entry
// --swiglu's elementwise kernels (Backend::swiglu_forward / swiglu_backward), in units of the
// model dtype's bytes e per element of the activation output [n, f/t], at the streaming rate
// (kStreamEfficiency), priced like the unfused bias-GeLU (2e forward, 3e backward): forward
// reads gate and up (2) and writes the output (1); backward reads the output gradient (1) and
// the saved gate and up (2) and writes their gradients (2). The traffic counted, not measured:
// an assumption until an H100 profile of the SwiGLU ops calibrates it.
constexpr double kSwigluForwardBytes = 3.0;
constexpr double kSwigluBackwardBytes = 5.0;
// Rotary embeddings (--position-embedding-type rope): bytes per element of q and k, in units of
// e, forward (read + write) and again backward; counted, not measured (as the SwiGLU terms).
constexpr double kRopeBytes = 2.0;
constexpr double kGradPassBytes = 5.3;  // per parameter of the rank (the grad-norm pass)
constexpr double kAdamBytes = 35.4;     // per parameter the rank's optimizer owns
// The share of an overlapped DP collective's time that the GEMMs beside it lose (NCCL's kernels and
// cuBLASLt's contend for the SMs): the 1.3B step's GEMMs on H200 with the distributed optimizer and
// both overlaps, --profile-ops against one GPU, +6.8 ms at DP2 and +9.8 ms at DP4 beside
// reduce-scatters and all-gathers this model times at 10.9 and 16.4 ms (0.62, 0.60;
// bench/results/2026-11-28.md, "the data-parallel average moves into the collective" call 3, "DP4
// on 4 x H200 after the in-collective average" call 2). Measured against the whole collective; the
// model applies it to all but the last bucket (32/33 of it at 1.3B).
constexpr double kOverlapContention = 0.6;
// The same with the copy engines moving the data (MEGATRON_DP_COPY_ENGINE): what the step still
// loses beside them (HBM traffic, the GPUs at their power cap). Fitted to gpt3-1.3b DP4 on 4 x H200
// with the distributed optimizer and both overlaps, `megatron bench` 130.93 ms
// (bench/results/2026-11-28.md, "the data-parallel collectives on the copy engines", call 2; this
// model: 128.2 ms at 0.27, the backward GEMMs' share alone, +1.6 ms beside the copy engines against
// +3.6 beside NCCL's kernels at 350M, call 3; 131.0 ms at 0.45).
constexpr double kCopyEngineContention = 0.45;
constexpr double kStreamEfficiency = 0.82;  // achieved fraction of HBM bandwidth of a streaming kernel

// Megatron's unfused cross-entropy, bytes per logit for 16-bit logits: forward cast to fp32
// (2 read + 4 written), max (4), subtract (4 + 4), exp (4 + 4), sum (4), divide (4 + 4) = 38;
// backward scale the saved softmax (4 + 4) and cast back (4 + 2) = 14.
constexpr double kUnfusedLogitsBytes = 52.0;

struct Cluster {
  GpuSpec gpu;
  int64_t gpus_per_node = 8;
  int64_t nodes = 1;
  double intra_node_bytes_per_s = 0;  // 0: the GPU's NVLink figure
  double inter_node_bytes_per_s = 0;  // 0: the GPU's default network figure
  bool overlap_grad_reduce = true;    // --overlap-grad-reduce
  bool overlap_param_gather = true;   // --overlap-param-gather (with the distributed optimizer)
  // MEGATRON_DP_COPY_ENGINE set: layouts that can (the distributed optimizer, dp > 1 within a
  // node) run their DP collectives on the copy engines (ParallelConfig::dp_copy_engine).
  bool dp_copy_engine = false;
  Engine engine;
  int64_t world() const { return gpus_per_node * nodes; }
};

struct Prediction {
  double seconds_per_iteration = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu_2024 = 0;  // Megatron 2024 convention (full s^2), what published tables use
  double tflops_per_gpu_2025 = 0;  // causal core attention halved (Megatron HEAD, our default)
  double report_time_s = 0;        // 20e6 / tokens_per_s (the NLP benchmark's figure)
  // Breakdown, seconds per iteration on the slowest stage.
  double compute_s = 0;       // GEMMs, attention, memory-bound ops, recompute (all micro-batches)
  double gemm_s = 0;          //   of which the linear-layer GEMMs (layers and LM head, recompute included)
  double attention_s = 0;     //   of which core attention (recompute included)
  double memory_bound_s = 0;  //   of which the memory-bound ops (norms, residuals, GeLU, cross-entropy, ...)
  double fp8_quantize_s = 0;  //     of which FP8's quantize passes (recompute included)
  double tp_comm_s = 0;       // exposed TP collectives
  double pp_comm_s = 0;       // pipeline sends/receives
  double bubble_s = 0;        // (pp-1)/vp idle micro-batch slots
  double dp_comm_s = 0;       // exposed gradient reduction + parameter gather + tied-embedding all-reduce
  double optimizer_s = 0;
};

// FLOPs of one iteration of `global_batch` samples (train/flops.h's formula, SwiGLU's c = 3
// included; causal = the 2025 convention). Needs c.padded_vocab_size.
double model_flops(const model::GPTConfig& c, int64_t global_batch, bool causal);

// Throws megatron::Error with a one-line reason naming the flag when `p` is not a valid layout
// for `c` on `world` GPUs (divisibility, SP, virtual pipeline rules of docs/megatron-formats.md
// §7-§8).
void validate_layout(const model::GPTConfig& c, const ParallelConfig& p, int64_t world);

// c.padded_vocab_size must be padded for p.tp; p must pass validate_layout.
Prediction predict(const model::GPTConfig& c, DType dtype, const ParallelConfig& p, const Cluster& cluster);

// The fewest ranks that any group of `size` ranks `stride` apart (blocks of size * stride
// consecutive ranks, Megatron's order: DP groups have stride TP) has on one node of
// `gpus_per_node` GPUs that it touches: how many NICs its slowest node crossing has. TP 4 x DP
// 3 on 8-GPU nodes: 1 (a group puts 2 + 1 ranks on two nodes); TP 4 x DP 4: 2.
int64_t fewest_group_members_on_a_node(int64_t size, int64_t stride, int64_t gpus_per_node);

// The most nodes that any such group touches (for NCCL's tree latency over the nodes): TP 16 on
// 8-GPU nodes 2, TP 6 on 8-GPU nodes 2, TP 8 x DP 48 on 8-GPU nodes 48.
int64_t most_nodes_of_a_group(int64_t size, int64_t stride, int64_t gpus_per_node);

// Whether every block of `block` consecutive ranks (a TP group: tp; the ranks of DP groups: tp
// x dp; a pipeline's hops: tp x dp x pp) lies inside one node of `gpus_per_node` GPUs, i.e.
// the block divides the node. Groups of a block that does not span whole nodes otherwise.
bool blocks_within_nodes(int64_t block, int64_t gpus_per_node);

}  // namespace megatron::plan
