#include "plan/comm_model.h"

namespace megatron::plan {

namespace {
double beta(const Link& link) { return 1.0 / (link.bytes_per_s * kLinkEfficiency); }
}  // namespace

double all_reduce_seconds(double bytes, int64_t p, const Link& link) {
  if (p <= 1) return 0.0;
  const double steps = static_cast<double>(p - 1);
  return 2.0 * steps * link.latency_s + 2.0 * steps / static_cast<double>(p) * bytes * beta(link);
}

double reduce_scatter_seconds(double bytes, int64_t p, const Link& link) {
  if (p <= 1) return 0.0;
  const double steps = static_cast<double>(p - 1);
  return steps * link.latency_s + steps / static_cast<double>(p) * bytes * beta(link);
}

double all_gather_seconds(double bytes, int64_t p, const Link& link) { return reduce_scatter_seconds(bytes, p, link); }

double send_recv_seconds(double bytes, const Link& link) { return link.latency_s + bytes * beta(link); }

}  // namespace megatron::plan
