#include "plan/comm_model.h"

#include <algorithm>
#include <cmath>

namespace megatron::plan {

namespace {
double beta(const Link& link) { return 1.0 / (link.bytes_per_s * kLinkEfficiency); }
}  // namespace

Link group_link(const Link& nvlink, const Link& network_per_gpu, int64_t nodes, int64_t per_node) {
  if (nodes <= 1) return nvlink;
  const double g = static_cast<double>(std::max<int64_t>(1, per_node));
  return Link{std::min(nvlink.bytes_per_s, g * network_per_gpu.bytes_per_s), network_per_gpu.latency_s, nodes,
              std::max<int64_t>(1, per_node)};
}

double all_reduce_seconds(double bytes, int64_t p, const Link& link) {
  if (p <= 1) return 0.0;
  const double steps = static_cast<double>(p - 1);
  double latency = 2.0 * steps * link.latency_s;
  if (link.nodes > 1) {
    // NCCL's tree: a chain of per_node GPUs in each node, a double binary tree over the nodes.
    const double tree = 2.0 * static_cast<double>(link.per_node - 1) * kNvlinkLatency +
                        2.0 * std::ceil(std::log2(static_cast<double>(link.nodes))) * link.latency_s;
    latency = std::min(latency, tree);
  }
  return latency + 2.0 * steps / static_cast<double>(p) * bytes * beta(link);
}

double reduce_scatter_seconds(double bytes, int64_t p, const Link& link) {
  if (p <= 1) return 0.0;
  const double steps = static_cast<double>(p - 1);
  return steps * link.latency_s + steps / static_cast<double>(p) * bytes * beta(link);
}

double all_gather_seconds(double bytes, int64_t p, const Link& link) { return reduce_scatter_seconds(bytes, p, link); }

double send_recv_seconds(double bytes, const Link& link) { return link.latency_s + bytes * beta(link); }

}  // namespace megatron::plan
