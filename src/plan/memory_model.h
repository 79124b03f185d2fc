// Memory per GPU for a (TP, PP, VP, DP, micro-batch, recompute, distributed optimizer, SP)
// layout: model/memory_plan's formula extended to tensor and pipeline shards.
//
// What is exact and what is a model:
//  - TP = PP = 1 (any DP, with or without the distributed optimizer): exactly the bytes our
//    engine allocates, term for term model::plan_memory + model::shard_optimizer_state
//    (tests/plan/memory_model_test.cpp checks the equality; memory_plan_test checks those
//    against real allocations).
//  - NCCL's buffers (MemoryPlan::nccl, 0 on one GPU): a model of what NCCL allocates for the
//    communicators the stage creates and connects, plan/nccl_memory.h (one constant fitted on
//    2 x H200, one on 4 x H200).
//  - TP > 1 or PP > 1: the bytes our engine allocates with Megatron's layout
//    (docs/megatron-formats.md §7-§10), same per-tensor accounting; against measured device
//    memory within 0.6% on ten 2 x H200 runs (TP2, PP2, DP2; tests/plan/recorded_runs_test.cpp)
//    and +1.5% on DP4 over 4 x H100, and within 1% of nvidia-smi on 4 x H200
//    (bench/results/2026-11-28.md, "the PP4 hang found and fixed"), with NCCL's per-communicator
//    state counted: without it the 17.89B TP4 run held ~4.9 GB beyond its plan and ran out of
//    memory on 4 x H100 (bench/results/2026-11-28.md, "the first 4-GPU machine"). Megatron-LM
//    itself stores more (dropout masks, unfused softmax inputs: Korthikanti et al. 2022's
//    34*s*b*h per layer vs our ~(3h + 4q/t + 2f/t)*e per token).
//
// The pieces, for rank k of a pipeline of pp stages (n = micro_batch * seq tokens, e = bytes of
// the model dtype, t = tp, u = t with sequence parallelism else 1, L_k = L / pp layers; the
// variants as model::plan_memory: f1 = FC1's output width, f or 2f with --swiglu (gate and up);
// r = 2 parameters and 2 fp32 statistics (mean, rstd) per LayerNorm row, 1 and 1 with
// --normalization RMSNorm (weight only, rstd only)):
//  parameters per rank  L_k * [2rh + (3qh + hq + f1*h + fh)/t + bias*(3q/t + f1/t + 2h)]
//                       + first stage: V*h/t + P*h (positions, replicated)
//                       + last stage: rh (final norm) + V*h/t (untied, or the tied copy when pp > 1)
//  bytes per parameter  e (model) + 4 (fp32 main, 16-bit models only) + 4 (fp32 grad) + 8 (Adam);
//                       the distributed optimizer keeps ceil(P_k / dp) of main and Adam (§9)
//  activations          per micro-batch in flight: L_k layer inputs n*h*e/u, the kept layers'
//                       n*(3h/u + (4q + f1 + f)/t)*e + 8rn/u + 4*b*a*s/t bytes each (LN outputs
//                       and x_mid are sequence-sharded only with SP; qkv, attention out, fc1, the
//                       GELU / SwiGLU output are head/column-sharded; fp32 norm stats; fp32
//                       softmax lse), the first stage's int32 tokens 4n, the last stage's final
//                       stream and norm out 2*n*h*e/u + 4rn/u,
//                       logits n*(V/t)*e and 20n (losses, lse, labels, loss mask, weights);
//                       plus, once, the activation slot of the layer being recomputed (full recompute)
//  in flight            1F1B: stage k holds min(pp - k, m) micro-batches
//                       (docs/megatron-formats.md §8);
//                       interleaved: the stage's one pool of activation sets, each of L_k/vp
//                       layers, as many as the schedule holds at once
//                       (parallel::activation_slots): Megatron's min(m*vp, 2(pp-k-1) +
//                       (vp-1)*pp + 1) chunks live at once (Korthikanti 2022) for m > pp, all
//                       m*vp for m == pp (Megatron's all-warm-up case)
//  workspace            (3nh + (4nq + n*f1 + [SwiGLU] nf)/t)*e: gradient stream, temporaries,
//                       gathered SP inputs, fc1's output gradient, SwiGLU's output gradient
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "model/gpt_config.h"
#include "model/memory_plan.h"
#include "plan/nccl_memory.h"
#include "plan/parallel_config.h"

namespace megatron::plan {

// Headroom kept free on every GPU for what the plan does not count: the CUDA context and
// library handles, loaded kernels, allocator fragmentation. NCCL's buffers and its
// communicators' own state are counted (MemoryPlan::nccl). Measured (nvidia-smi's peak against
// the plan, 2026-11-28, 4 x H200, NCCL 2.28): 0.69 GiB on one GPU (gpt3-2.7b; the context and
// handles are 0.56 of it), 0.41 GiB at TP4 (gpt3-2.7b), 0.50 GiB for the 32.44B model at TP4
// with full recompute, which ran with 0.7 GiB of the card left. 1 GiB keeps ~0.3 GiB beyond
// the largest of these.
constexpr double kReservedBytes = 1.0 * 1024 * 1024 * 1024;

// Parameters held by pipeline stage `stage` (each rank of its TP group holds this many): the
// engine's own count, model::stage_num_parameters.
int64_t stage_num_parameters(const model::GPTConfig& c, const ParallelConfig& p, int64_t stage);

// The memory of one rank of pipeline stage `stage`, in model::MemoryPlan's kinds
// ("activations" = everything saved for backward across the micro-batches in flight; "nccl"
// = nccl_memory() of the layout with `gpus_per_node` GPUs per node, 0 meaning one node, and
// NcclLayout::shared_groups `shared_groups`).
// c.padded_vocab_size must already be padded for p.tp.
model::MemoryPlan stage_memory(const model::GPTConfig& c, DType dtype, const ParallelConfig& p, int64_t stage,
                               int64_t gpus_per_node = 0, bool shared_groups = true);

struct RankMemory {
  model::MemoryPlan worst;    // the stage with the largest total
  int64_t worst_stage = 0;
  std::vector<int64_t> stage_totals;  // bytes per stage
};
RankMemory rank_memory(const model::GPTConfig& c, DType dtype, const ParallelConfig& p, int64_t gpus_per_node = 0,
                       bool shared_groups = true);

// Copy-engine data parallelism (ParallelConfig::dp_copy_engine): the bytes of the fp32 receive
// buffer that the buckets of tensor-parallel rank 0 of stage `pipe` need, buckets of
// `bucket_size` elements over `dp` ranks (parallel::copy_engine_receive_elements; what
// train::GradBuffer asks the group for, checked in tests/plan/memory_model_test.cpp).
// stage_memory counts it with parallel::overlap_bucket_elements, or one bucket without
// ParallelConfig::overlap_grad_reduce (--ddp-bucket-size / --ddp-num-buckets are not modelled;
// --dry-run counts them).
int64_t copy_engine_receive_bytes(const model::GPTConfig& c, int64_t tp, const model::PipelineStageOptions& pipe,
                                  int64_t dp, int64_t bucket_size);

// The NCCL layout (plan/nccl_memory.h) of a planner layout.
NcclLayout nccl_layout(const model::GPTConfig& c, const ParallelConfig& p, int64_t gpus_per_node,
                       bool shared_groups = true);

}  // namespace megatron::plan
