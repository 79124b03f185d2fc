#include "plan/memory_model.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "model/gpt_model.h"
#include "parallel/grad_buckets.h"
#include "parallel/pipeline_schedule.h"

namespace megatron::plan {

namespace {

// The activation sets of the stage, one pool for its chunks: 1F1B min(pp - stage, m) micro-
// batches; interleaved, what the engine allocates (train/config.cpp, with overlapped exchanges
// unless --no-overlap-p2p-communication: ParallelConfig::overlap_p2p). They stop growing with m at 2 pp micro-batches
// (the warm-up is at most (vp + 1) pp chunk forwards; checked for pp <= 16, vp <= 12 in
// tests/plan/memory_model_test.cpp), so the table is built for min(m, 2 pp) and memoised.
int64_t activation_sets(const ParallelConfig& p, int64_t stage) {
  if (p.vp == 1) return std::min(p.pp - stage, p.num_micro_batches());
  static std::mutex mu;
  static std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool>, int64_t> memo;
  const int64_t m = std::min(p.num_micro_batches(), 2 * p.pp);
  const auto key = std::make_tuple(p.pp, p.vp, m, stage, p.overlap_p2p);
  std::lock_guard<std::mutex> lock(mu);
  auto it = memo.find(key);
  if (it == memo.end())
    it = memo.emplace(key, parallel::activation_sets_needed({p.pp, stage, m, p.vp}, p.overlap_p2p)).first;
  return it->second;
}

// The engine's description of stage `stage` of the layout, its activation sets included.
model::PipelineStageOptions stage_options(const ParallelConfig& p, int64_t stage) {
  model::PipelineStageOptions pipe;
  pipe.pp = p.pp;
  pipe.stage = stage;
  pipe.virtual_chunks = p.vp;
  pipe.activation_sets = activation_sets(p, stage);
  return pipe;
}

// The model as the engine runs it under the layout's recompute: kFull is uniform over 1 layer.
model::GPTConfig engine_config(const model::GPTConfig& c, PlanRecompute recompute) {
  model::GPTConfig e = c;
  // Selective recompute keeps what no recompute keeps (flash attention stores no [s, s]).
  e.recompute = recompute == PlanRecompute::kFull ? model::Recompute::kUniform : model::Recompute::kNone;
  e.recompute_num_layers = 1;
  return e;
}

}  // namespace

int64_t stage_num_parameters(const model::GPTConfig& c, const ParallelConfig& p, int64_t stage) {
  model::PipelineStageOptions pipe;
  pipe.pp = p.pp;
  pipe.stage = stage;
  return model::stage_num_parameters(c, p.tp, pipe);  // the engine's count (model/memory_plan.h)
}

NcclLayout nccl_layout(const model::GPTConfig& c, const ParallelConfig& p, int64_t gpus_per_node, bool shared_groups) {
  return NcclLayout{p.tp,          p.pp,
                    p.dp,          p.vp,
                    gpus_per_node, !c.untie_embeddings_and_output_weights,
                    shared_groups, p.uses_copy_engines()};
}

DType grad_dtype_of(DType dtype, int64_t grad_reduce_bytes) {
  return grad_reduce_bytes == 2 && dtype != DType::kF32 ? dtype : DType::kF32;
}

model::MemoryPlan stage_memory(const model::GPTConfig& c, DType dtype, const ParallelConfig& p, int64_t stage,
                               int64_t gpus_per_node, bool shared_groups, DType grad_dtype) {
  MT_CHECK(p.tp > 0 && p.pp > 0 && p.vp > 0 && p.dp > 0 && p.micro_batch > 0 && c.num_layers % p.pp == 0 &&
           p.num_micro_batches() > 0)
      << p.describe();
  // The engine's own plan of this rank (model/memory_plan.h), then what only the planner counts.
  model::MemoryPlan m = model::plan_memory(engine_config(c, p.recompute), dtype, p.micro_batch, p.tp,
                                           p.sequence_parallel, stage_options(p, stage), grad_dtype);
  if (p.distributed_optimizer) m = model::shard_optimizer_state(m, p.dp);
  // Documents on cuDNN: its bias [b, s, s] in the 16-bit I/O dtype, in cuDNN's workspace
  // (cudnn_attention.h), which the engine's plan does not hold.
  if (c.reset_attention_mask && dtype != DType::kF32) m.workspace += p.micro_batch * c.seq_length * c.seq_length * 2;
  // Query groups with documents on cuDNN: the backward's packed Q and dQ [s, b, H/T, d] in the
  // 16-bit I/O dtype (cudnn_attention.h: without documents the groups fold into the batch and Q
  // stays in place), in cuDNN's workspace too.
  if (c.reset_attention_mask && c.query_groups() < c.num_attention_heads && dtype != DType::kF32) {
    m.workspace += 2 * p.micro_batch * c.seq_length * (c.num_attention_heads / p.tp) * c.kv_channels * 2;
  }
  m.nccl = nccl_memory(nccl_layout(c, p, gpus_per_node, shared_groups), stage).total();
  if (p.uses_copy_engines()) {
    const int64_t bucket = p.overlap_grad_reduce ? parallel::overlap_bucket_elements(p.dp) : 0;  // 0: one bucket
    m.copy_engine = copy_engine_receive_bytes(c, p.tp, stage_options(p, stage), p.dp, bucket);
  }
  return m;
}

int64_t copy_engine_receive_bytes(const model::GPTConfig& c, int64_t tp, const model::PipelineStageOptions& pipe,
                                  int64_t dp, int64_t bucket_size) {
  model::ParameterSet ps;
  const model::GPTModel::BucketBoundaries bounds = model::GPTModel::declare_local_stage(c, pipe, tp, &ps);
  std::vector<int64_t> offsets;
  for (const model::Parameter& p : ps.params()) offsets.push_back(p.offset);
  const std::vector<parallel::Range> buckets =
      parallel::grad_buckets(offsets, ps.total_numel(), bucket_size, bounds.chunk_starts, bounds.tied);
  return parallel::copy_engine_receive_elements(buckets, dp) * 4;
}

RankMemory rank_memory(const model::GPTConfig& c, DType dtype, const ParallelConfig& p, int64_t gpus_per_node,
                       bool shared_groups, DType grad_dtype) {
  RankMemory r;
  for (int64_t k = 0; k < p.pp; ++k) {
    const model::MemoryPlan m = stage_memory(c, dtype, p, k, gpus_per_node, shared_groups, grad_dtype);
    r.stage_totals.push_back(m.total());
    if (k == 0 || m.total() > r.worst.total()) {
      r.worst = m;
      r.worst_stage = k;
    }
  }
  return r;
}

}  // namespace megatron::plan
