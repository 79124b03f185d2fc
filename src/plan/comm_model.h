// Alpha-beta time of one NCCL collective on a ring of p ranks (Thakur et al. 2005; NCCL's
// "bus bandwidth" convention, nccl-tests doc/PERFORMANCE.md):
//   all-reduce        2(p-1) * alpha + 2(p-1)/p * bytes / B
//   reduce-scatter,
//   all-gather        (p-1) * alpha + (p-1)/p * bytes / B       (bytes = the whole buffer)
//   send/recv         alpha + bytes / B
// B = achieved bus bandwidth of the slowest link the ring crosses = nominal one-direction
// bandwidth per GPU x kLinkEfficiency; alpha = per-step latency of that link.
//
// Groups that span nodes (group_link): a ring (NCCL runs one per channel, the channels spread
// over the node's NICs) through k nodes with g of the group's GPUs on each crosses every node
// boundary once per channel, so the ring's bus bandwidth is the smaller of a GPU's NVLink and the
// node's network bandwidth available to the group: g x the NIC bandwidth per GPU. (Every GPU of a
// node belongs to one group of each kind, and all groups of a kind communicate at once, so the
// node's G/g groups share its G NICs' worth evenly; on DGX systems each GPU has its own NIC:
// DGX A100 8x HDR 200 Gb/s = 25 GB/s per GPU, DGX H100 8x NDR 400 Gb/s = 50 GB/s; gpu_spec.h.)
// Both directions are used at once (a ring sends to the next node and receives from the
// previous one), and InfiniBand is full duplex, so the one-direction figure is the bound.
// NCCL's tree all-reduce (a chain inside each node, a double binary tree over the k nodes) moves
// the same bytes per node as the ring (each node sends and receives ~2 x bytes in both) but needs
// 2 (g - 1) NVLink steps + 2 ceil(log2 k) network steps of latency instead of 2 (n - 1):
// all_reduce_seconds takes the smaller latency, as NCCL's tuner picks the faster algorithm.
// Reduce-scatter and all-gather have only the ring in NCCL (no tree).
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
  double bytes_per_s = 0;  // nominal, one direction, per GPU (per ring: see group_link)
  double latency_s = 0;    // alpha, per ring step
  // A group that spans nodes: how many, and how many of its GPUs each has (the fewest on any
  // node: that node's NICs set the pace); 1 and 0 within a node. Only all_reduce_seconds' tree
  // latency reads them.
  int64_t nodes = 1;
  int64_t per_node = 0;
};

// The link a group of GPUs runs its collectives on: within one node (nodes == 1) `nvlink`;
// across nodes the network's latency and min(NVLink, per_node x network per GPU) bandwidth.
Link group_link(const Link& nvlink, const Link& network_per_gpu, int64_t nodes, int64_t per_node);

double all_reduce_seconds(double bytes, int64_t ranks, const Link& link);
double reduce_scatter_seconds(double bytes, int64_t ranks, const Link& link);
double all_gather_seconds(double bytes, int64_t ranks, const Link& link);
double send_recv_seconds(double bytes, const Link& link);

}  // namespace megatron::plan
