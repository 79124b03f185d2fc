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

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Micro-batches in flight on 1F1B stage `stage` (the header).
int64_t in_flight_micro_batches(const ParallelConfig& p, int64_t stage) {
  return std::min(p.pp - stage, p.num_micro_batches());
}

// The activation sets of the stage, one pool for its chunks: 1F1B min(pp - stage, m) micro-
// batches; interleaved, what the engine allocates (train/config.cpp, with the blocking
// exchanges: the planner does not model --overlap-p2p-communication, whose moved receives can
// take one set more). They stop growing with m at 2 pp micro-batches (the warm-up is at most
// (vp + 1) pp chunk forwards; checked for pp <= 16, vp <= 12 in
// tests/plan/memory_model_test.cpp), so the table is built for min(m, 2 pp) and memoised.
int64_t activation_sets(const ParallelConfig& p, int64_t stage) {
  if (p.vp == 1) return in_flight_micro_batches(p, stage);
  static std::mutex mu;
  static std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, int64_t> memo;
  const int64_t m = std::min(p.num_micro_batches(), 2 * p.pp);
  const auto key = std::make_tuple(p.pp, p.vp, m, stage);
  std::lock_guard<std::mutex> lock(mu);
  auto it = memo.find(key);
  if (it == memo.end()) it = memo.emplace(key, parallel::activation_sets_needed({p.pp, stage, m, p.vp}, false)).first;
  return it->second;
}

}  // namespace

int64_t stage_num_parameters(const model::GPTConfig& c, const ParallelConfig& p, int64_t stage) {
  model::PipelineStageOptions pipe;
  pipe.pp = p.pp;
  pipe.stage = stage;
  return model::stage_num_parameters(c, p.tp, pipe);  // the engine's count (model/memory_plan.h)
}

NcclLayout nccl_layout(const model::GPTConfig& c, const ParallelConfig& p, int64_t gpus_per_node, bool shared_groups) {
  return NcclLayout{p.tp,
                    p.pp,
                    p.dp,
                    p.vp,
                    gpus_per_node,
                    !c.untie_embeddings_and_output_weights,
                    shared_groups,
                    p.uses_copy_engines()};
}

model::MemoryPlan stage_memory(const model::GPTConfig& c, DType dtype, const ParallelConfig& p, int64_t stage,
                               int64_t gpus_per_node, bool shared_groups) {
  MT_CHECK(p.tp > 0 && p.pp > 0 && p.vp > 0 && p.dp > 0 && p.micro_batch > 0 && c.num_layers % p.pp == 0 &&
           p.num_micro_batches() > 0)
      << p.describe();
  model::MemoryPlan m;
  const int64_t P = stage_num_parameters(c, p, stage);
  const int64_t e = dtype_size(dtype);
  m.num_parameters = P;
  m.parameters = P * e;
  const int64_t owned = p.distributed_optimizer ? ceil_div(P, p.dp) : P;
  m.main_parameters = dtype == DType::kF32 ? 0 : owned * 4;
  m.gradients = P * 4;
  m.optimizer = 2 * owned * 4;

  const int64_t s = c.seq_length, b = p.micro_batch, n = s * b, h = c.hidden_size, f = c.ffn_hidden_size;
  const int64_t q = c.num_attention_heads * c.kv_channels, a = c.num_attention_heads, t = p.tp;
  const int64_t u = p.sequence_parallel ? t : 1;
  const int64_t V = c.padded_vocab_size;
  const int64_t layers = c.num_layers / p.pp;
  // FC1's output: f, or 2f with SwiGLU (gate and up); the activation's output f either way.
  const int64_t f1 = c.fc1_out_size();
  // fp32 statistics per norm and row: LayerNorm's mean and rstd, RMSNorm's rstd only.
  const int64_t norm_stats = c.layernorm_bias() ? 2 : 1;
  const int64_t layer = n * (3 * h / u + (c.qkv_out_size() + q + f1 + f) / t) * e + 2 * norm_stats * n * 4 / u + b * a * s * 4 / t;
  const int64_t mbs_in_flight = in_flight_micro_batches(p, stage);
  const int64_t sets = activation_sets(p, stage);  // each holds one chunk's layers
  const int64_t layers_in_flight = sets * (layers / p.vp);
  const bool full = p.recompute == PlanRecompute::kFull;
  int64_t act = layers_in_flight * (n * h * e / u + (full ? 0 : layer));
  if (full) act += layer;  // the one slot recomputed layers share (model/gpt_config.h recompute_slots)
  // Tokens (and position ids) on stage 0: in every activation set.
  if (stage == 0) act += sets * n * 4 * (c.reset_position_ids ? 2 : 1);
  // Documents: int32 key starts [n] per activation set.
  if (c.reset_attention_mask) act += sets * n * 4;
  model::PipelineStageOptions layout;
  layout.pp = p.pp;
  layout.virtual_chunks = p.vp;
  if (model::dropout_stream_in_memory(c, p.tp, layout)) act += sets * 8;  // int64 per activation set
  if (stage == p.pp - 1) {
    act += mbs_in_flight * (2 * n * h * e / u + norm_stats * n * 4 / u + n * (V / t) * e + 5 * n * 4);
  }
  m.activations = act;
  // fc1's output gradient [n, f1/t]; SwiGLU adds the activation's output gradient [n, f/t].
  m.workspace = (3 * n * h + (4 * n * q + n * f1 + (c.swiglu ? n * f : 0)) / t) * e;
  // Documents on cuDNN: its bias [b, s, s] in the 16-bit I/O dtype, in cuDNN's workspace
  // (cudnn_attention.h), which the engine's own plan (model::plan_memory) does not hold.
  if (c.reset_attention_mask && dtype != DType::kF32) m.workspace += b * s * s * 2;
  m.nccl = nccl_memory(nccl_layout(c, p, gpus_per_node, shared_groups), stage).total();
  if (p.uses_copy_engines()) {
    model::PipelineStageOptions pipe;
    pipe.pp = p.pp;
    pipe.stage = stage;
    pipe.virtual_chunks = p.vp;
    const int64_t bucket = p.overlap_grad_reduce ? parallel::overlap_bucket_elements(p.dp) : 0;  // 0: one bucket
    m.copy_engine = copy_engine_receive_bytes(c, p.tp, pipe, p.dp, bucket);
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
                       bool shared_groups) {
  RankMemory r;
  for (int64_t k = 0; k < p.pp; ++k) {
    const model::MemoryPlan m = stage_memory(c, dtype, p, k, gpus_per_node, shared_groups);
    r.stage_totals.push_back(m.total());
    if (k == 0 || m.total() > r.worst.total()) {
      r.worst = m;
      r.worst_stage = k;
    }
  }
  return r;
}

}  // namespace megatron::plan
