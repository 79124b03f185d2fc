// The alpha-beta collective model (plan/comm_model.h) against hand-computed times: ring
// formulas, the bandwidth of a group across nodes, and NCCL's tree latency for all-reduces.
#include "plan/comm_model.h"

#include <gtest/gtest.h>

namespace megatron::plan {
namespace {

TEST(PlanComm, RingFormulas) {
  const Link l{100e9, 5e-6};
  const double beta = 1.0 / (100e9 * kLinkEfficiency);
  EXPECT_DOUBLE_EQ(all_reduce_seconds(1e9, 4, l), 6 * 5e-6 + 1.5 * 1e9 * beta);
  EXPECT_DOUBLE_EQ(reduce_scatter_seconds(1e9, 4, l), 3 * 5e-6 + 0.75 * 1e9 * beta);
  EXPECT_DOUBLE_EQ(all_gather_seconds(1e9, 4, l), reduce_scatter_seconds(1e9, 4, l));
  EXPECT_DOUBLE_EQ(send_recv_seconds(1e9, l), 5e-6 + 1e9 * beta);
  EXPECT_EQ(all_reduce_seconds(1e9, 1, l), 0.0);
}

// DGX A100: NVLink 300 GB/s per GPU, one 25 GB/s HDR NIC per GPU.
TEST(PlanComm, GroupAcrossNodesUsesItsGpusNics) {
  const Link nvlink{300e9, kNvlinkLatency}, nic{25e9, kNetworkLatency};
  EXPECT_EQ(group_link(nvlink, nic, 1, 8).bytes_per_s, 300e9);  // within a node: NVLink
  const Link eight = group_link(nvlink, nic, 2, 8);
  EXPECT_EQ(eight.bytes_per_s, 200e9);  // 8 NICs of 25 GB/s
  EXPECT_EQ(eight.latency_s, kNetworkLatency);
  EXPECT_EQ(group_link(nvlink, nic, 2, 4).bytes_per_s, 100e9);
  EXPECT_EQ(group_link(nvlink, nic, 48, 1).bytes_per_s, 25e9);
  // H100 NVLink 450 with 8 NDR NICs: 400 GB/s; 16 NICs' worth would be capped at NVLink.
  EXPECT_EQ(group_link(Link{450e9, kNvlinkLatency}, Link{50e9, kNetworkLatency}, 2, 8).bytes_per_s, 400e9);
  EXPECT_EQ(group_link(Link{450e9, kNvlinkLatency}, Link{50e9, kNetworkLatency}, 2, 16).bytes_per_s, 450e9);
}

// 384 ranks, one per node over 384 nodes: the ring pays 2 x 383 network steps, the tree
// 2 x ceil(log2 384) = 18; the bandwidth term is the same.
TEST(PlanComm, AllReduceAcrossManyNodesTakesTheTreeLatency) {
  const Link l = group_link(Link{300e9, kNvlinkLatency}, Link{25e9, kNetworkLatency}, 384, 1);
  const double bw = 2.0 * 383.0 / 384.0 * 1e6 / (25e9 * kLinkEfficiency);
  EXPECT_NEAR(all_reduce_seconds(1e6, 384, l), 18 * kNetworkLatency + bw, 1e-12);
  // Reduce-scatter has only the ring.
  EXPECT_NEAR(reduce_scatter_seconds(1e6, 384, l), 383 * kNetworkLatency + bw / 2.0, 1e-12);
  // Two nodes of 8: the tree's 2 x 7 NVLink + 2 network steps against the ring's 30 network steps.
  const Link two = group_link(Link{300e9, kNvlinkLatency}, Link{25e9, kNetworkLatency}, 2, 8);
  EXPECT_NEAR(all_reduce_seconds(0.0, 16, two), 14 * kNvlinkLatency + 2 * kNetworkLatency, 1e-15);
}

}  // namespace
}  // namespace megatron::plan
