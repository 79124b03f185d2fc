// The flags of `megatron plan` and the request they make (cli/plan_command.cpp runs it).
// Model flags are Megatron's (--num-layers, --hidden-size, ... or a --model preset shared with
// train and bench); parallel flags are Megatron's too; the cluster is --gpu, --gpus-per-node,
// --nodes (or --nodes-range a..b with --target-report-time S), --intra-node-bandwidth and
// --inter-node-bandwidth (GB/s per GPU, one direction).
#pragma once

#include <cstdint>

#include "cli/args.h"
#include "plan/search.h"

namespace megatron::cli {

struct PlanRequest {
  plan::PlanModel model;
  plan::Cluster cluster;
  plan::SearchSpace space;
  bool single = false;  // TP, PP and micro-batch all given: evaluate one layout
  plan::ParallelConfig single_layout;
  bool node_search = false;  // --nodes-range
  int64_t first_nodes = 0, last_nodes = 0;
  double target_report_time_s = 0;
};

// Default global batch when --global-batch-size is absent: GPT-3 175B's 1536 sequences
// (Brown et al. 2020, Table 2.1; also Narayanan et al. 2021's 145.6B row uses 2304, 1T 3072).
constexpr int64_t kDefaultPlanGlobalBatch = 1536;

void declare_plan_flags(Args& args);
// Throws megatron::Error with a one-line message naming the flag on bad input.
PlanRequest parse_plan_request(const Args& args);

}  // namespace megatron::cli
