// Memory per GPU for a (TP, PP, VP, DP, micro-batch, recompute, distributed optimizer, SP)
// layout: the engine's own plan of one rank, model::plan_memory (model/memory_plan.h, checked
// against real allocations at TP 1 and 2, with and without sequence parallelism, PP 1 and 2,
// VP 1 and 2, in tests/model/memory_plan_test.cpp), for the layout's stage with its activation
// sets, plus what the engine's plan does not hold:
//  - NCCL's buffers (MemoryPlan::nccl, 0 on one GPU): a model of what NCCL allocates for the
//    communicators the stage creates and connects, plan/nccl_memory.h (one constant fitted on
//    2 x H200, one on 4 x H200);
//  - the copy engines' receive buffer (MemoryPlan::copy_engine, below);
//  - with --reset-attention-mask on 16-bit runs, cuDNN's attention bias [b, s, s] in its
//    workspace (MemoryPlan::workspace).
// The layout's knobs map to the engine's: kFull recompute is --recompute-method uniform
// --recompute-num-layers 1, kSelective keeps what kNone keeps; the activation sets are the
// schedule's (parallel::activation_sets_needed, as train/config.cpp pipeline_stage), with
// overlapped exchanges unless ParallelConfig::overlap_p2p is off: one set more when interleaved.
// Against measured device memory: within 0.3% on ten 2 x H200 runs (TP2, PP2, DP2;
// tests/plan/recorded_runs_test.cpp), +1.5% on DP4 over 4 x H100 and within 1% of nvidia-smi
// on 4 x H200 with NCCL's per-communicator state counted. Megatron-LM itself stores more
// (dropout masks, unfused softmax inputs: Korthikanti et al. 2022's 34*s*b*h per layer vs our
// ~(3h + 4q/t + 2f/t)*e per token).
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
// c.padded_vocab_size must already be padded for p.tp. grad_dtype: the main gradients' (fp32, or
// the 16-bit model dtype with --fp16 / --grad-reduce-in-bf16: grad_dtype_of).
model::MemoryPlan stage_memory(const model::GPTConfig& c, DType dtype, const ParallelConfig& p, int64_t stage,
                               int64_t gpus_per_node = 0, bool shared_groups = true, DType grad_dtype = DType::kF32);

// The main gradients' dtype an engine profile gives a model dtype: the 16-bit one where the
// DP collective moves 2-byte gradients (Engine::grad_reduce_bytes), else fp32.
DType grad_dtype_of(DType dtype, int64_t grad_reduce_bytes);

struct RankMemory {
  model::MemoryPlan worst;  // the stage with the largest total
  int64_t worst_stage = 0;
  std::vector<int64_t> stage_totals;  // bytes per stage
};
RankMemory rank_memory(const model::GPTConfig& c, DType dtype, const ParallelConfig& p, int64_t gpus_per_node = 0,
                       bool shared_groups = true, DType grad_dtype = DType::kF32);

// Copy-engine data parallelism (ParallelConfig::dp_copy_engine): the bytes of the fp32 receive
// buffer that the buckets of tensor-parallel rank 0 of stage `pipe` need, buckets of
// `bucket_size` elements over `dp` ranks (parallel::copy_engine_receive_elements; what
// parallel::GradBuffer asks the group for, checked in tests/plan/memory_model_test.cpp).
// stage_memory counts it with parallel::overlap_bucket_elements, or one bucket without
// ParallelConfig::overlap_grad_reduce (--ddp-bucket-size / --ddp-num-buckets are not modelled;
// --dry-run counts them).
int64_t copy_engine_receive_bytes(const model::GPTConfig& c, int64_t tp, const model::PipelineStageOptions& pipe,
                                  int64_t dp, int64_t bucket_size);

// The NCCL layout (plan/nccl_memory.h) of a planner layout.
NcclLayout nccl_layout(const model::GPTConfig& c, const ParallelConfig& p, int64_t gpus_per_node,
                       bool shared_groups = true);

}  // namespace megatron::plan
