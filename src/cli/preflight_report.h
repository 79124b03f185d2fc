// What `megatron preflight` measured, and its report (cli/preflight_command.cpp): before a long
// job, every GPU's GEMM rate and memory copy rate and every parallel group's collective bus
// bandwidth, each compared with the median of its kind, so that one slow GPU, one throttled
// node or one bad link is named (rank and host) before it slows every rank of a run for days.
// Its bandwidths also give `megatron plan` its link flags for this cluster.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace megatron::cli {

// One measured quantity of one rank, or of one group instance (every rank of it).
struct PreflightValue {
  std::vector<int64_t> ranks;  // world ranks: one for a per-rank value, the group's for a group's
  double value = 0.0;          // TFLOP/s or GB/s
  bool across_nodes = false;   // a group whose ranks are on more than one host
};

// One line of the report: a kind of measurement and its values.
struct PreflightRow {
  std::string what;            // "GEMM bf16 8192 x 8192 x 8192", "all_reduce [tp] 256 MiB fp32"
  std::string unit;            // "TFLOP/s", "GB/s"
  bool bus_bandwidth = false;  // a collective's bus bandwidth (NCCL's convention): feeds the plan flags
  std::vector<PreflightValue> values;
};

struct PreflightReport {
  std::string header;              // ranks, hosts, device, layout, iterations
  std::vector<std::string> hosts;  // by world rank
  std::vector<PreflightRow> rows;
  bool host_staged = false;  // GPU collectives staged through host memory: no plan flags from them
};

// The report's text: per row the least value (its ranks and host), the median and the greatest;
// then every value more than `tolerance` (a fraction) below its row's median, or the line that
// there is none; then the `megatron plan` flags. *slow (may be null) receives the number of
// such values.
std::string format_preflight(const PreflightReport& report, double tolerance, int64_t* slow);

// The same as one JSON object (`megatron preflight --json`, for a cluster's health checks):
//   {"header": ..., "tolerance": 0.1, "slow": N, "plan_flags": "...",
//    "rows": [{"what": ..., "unit": ..., "bus_bandwidth": bool, "min": x, "median": x, "max": x,
//              "values": [{"ranks": [...], "hosts": [...], "value": x, "slow": bool}, ...]}, ...]}
std::string preflight_json(const PreflightReport& report, double tolerance);

// `megatron plan`'s --intra-node-bandwidth / --inter-node-bandwidth (nominal GB/s per GPU, one
// direction) from the median bus bandwidth of the collectives within / across nodes, leaving out
// the values more than `tolerance` below their row's median (a broken link describes that link,
// not the cluster), over the planner's link efficiency (plan/comm_model.h); "" when neither was
// measured or the collectives were host-staged.
std::string plan_link_flags(const PreflightReport& report, double tolerance);

}  // namespace megatron::cli
