// `megatron plan`'s search: every valid layout of a model on a cluster, each with its memory
// per GPU (memory_model.h), whether it fits, and its predicted speed (throughput_model.h);
// and the smallest node count that reaches a target report time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/gpt_config.h"
#include "plan/memory_model.h"
#include "plan/parallel_config.h"
#include "plan/throughput_model.h"

namespace megatron::plan {

// The model as given on the command line: padded_vocab_size is derived per TP size.
struct PlanModel {
  model::GPTConfig config;  // shape; vocab_size set, padded_vocab_size ignored
  int64_t make_vocab_size_divisible_by = 128;
  DType dtype = DType::kBF16;
};

// Megatron's vocabulary padding: ceil(V / (divisible_by * tp)) * divisible_by * tp.
int64_t padded_vocab(int64_t vocab, int64_t divisible_by, int64_t tp);
// The GPTConfig for TP size `tp` (padded vocabulary filled).
model::GPTConfig config_for_tp(const PlanModel& m, int64_t tp);

// What the user fixed; unset fields are searched.
struct SearchSpace {
  int64_t global_batch = 0;  // required (> 0)
  std::optional<int64_t> tp, pp, vp, micro_batch;
  std::optional<PlanRecompute> recompute;
  std::optional<bool> distributed_optimizer, sequence_parallel;
  int64_t max_micro_batch = 8;  // micro-batches tried: 1, 2, 4, ... up to this
  int64_t max_vp = 8;           // virtual stages tried (divisors of L/pp up to this)
};

constexpr int64_t kMaxSearchedTp = 8;  // the largest TP of the published runs (one DGX)

struct Candidate {
  ParallelConfig parallel;
  RankMemory memory;
  double capacity_bytes = 0;  // GPU memory - kReservedBytes (memory.worst includes NCCL's buffers)
  bool fits = false;
  Prediction prediction;
};

// Every valid layout of `space` on `cluster`, fitting ones first by report time (fastest
// first), then the others by memory (smallest first). TP sizes searched: the divisors of the
// heads up to the GPUs per node, and whole multiples of a node up to kMaxSearchedTp (TP 8 on
// 4-GPU nodes: its groups fill two nodes and cross on all their NICs); a fixed TP is taken as
// given.
std::vector<Candidate> enumerate_layouts(const PlanModel& m, const Cluster& cluster, const SearchSpace& space);

// One layout, validated (megatron::Error naming the flag when it is not valid), with the copy
// engines where cluster.dp_copy_engine asks for them and the layout allows (p.dp_copy_engine).
Candidate evaluate_layout(const PlanModel& m, const Cluster& cluster, ParallelConfig p);

struct NodeSearchStep {
  int64_t nodes = 0;
  std::optional<Candidate> best;  // the fastest layout that fits, if any
  std::string why_none;           // without one: why (no_layout_reason)
};

// Why `cluster` has no fitting layout of `space` (enumerate_layouts gave `all`): "no valid
// layout: ..." naming the divisibility that failed (heads, layers, the global batch), or "does
// not fit: the smallest layout (TP x PP x DP ...) needs X GiB per GPU, Y GiB over the Z GiB".
std::string no_layout_reason(const PlanModel& m, const Cluster& cluster, const SearchSpace& space,
                             const std::vector<Candidate>& all);
struct NodeSearch {
  std::vector<NodeSearchStep> steps;  // one per node count tried, in order
  std::optional<int64_t> nodes;       // the smallest node count meeting the target, if any
};
// Tries node counts first_nodes..last_nodes in order and stops at the first whose fastest
// fitting layout has report_time_s <= target_report_time_s.
NodeSearch smallest_node_count(const PlanModel& m, Cluster cluster, const SearchSpace& space, int64_t first_nodes,
                               int64_t last_nodes, double target_report_time_s);

}  // namespace megatron::plan
