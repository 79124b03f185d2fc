// Alpha-beta time of one NCCL collective on a ring of p ranks (Thakur et al. 2005; NCCL's
// "bus bandwidth" convention, nccl-tests doc/PERFORMANCE.md):
//   all-reduce        2(p-1) * alpha + 2(p-1)/p * bytes / B
//   reduce-scatter,
//   all-gather        (p-1) * alpha + (p-1)/p * bytes / B       (bytes = the whole buffer)
//   send/recv         alpha + bytes / B
// B = achieved bus bandwidth of the slowest link the ring crosses = nominal one-direction
// bandwidth per GPU x kLinkEfficiency; alpha = per-step latency of that link.
#pragma once

#include <cstdint>

namespace megatron::plan {

// Constants (assumptions, not measurements):
//  kLinkEfficiency 0.80: NCCL rings reach ~80% of the nominal link bandwidth for large messages
//    (typical nccl-tests bus bandwidth: ~360 of 450 GB/s NVLink on H100 without NVLS,
//    ~40-45 of 50 GB/s per NDR NIC).
//  kNvlinkLatency 3 us, kNetworkLatency 8 us per ring step: the order of NCCL's per-hop latency
//    within a node and across InfiniBand; they only matter for small messages (pipeline sends
//    of small micro-batches, many-rank rings).
constexpr double kLinkEfficiency = 0.80;
constexpr double kNvlinkLatency = 3e-6;
constexpr double kNetworkLatency = 8e-6;

struct Link {
  double bytes_per_s = 0;  // nominal, one direction, per GPU
  double latency_s = 0;    // alpha, per ring step
};

double all_reduce_seconds(double bytes, int64_t ranks, const Link& link);
double reduce_scatter_seconds(double bytes, int64_t ranks, const Link& link);
double all_gather_seconds(double bytes, int64_t ranks, const Link& link);
double send_recv_seconds(double bytes, const Link& link);

}  // namespace megatron::plan
