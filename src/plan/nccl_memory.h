// The device memory NCCL holds per rank for the communicators our engine uses in a training
// step: the per-channel, per-peer protocol buffers of each connected communicator. This is
// memory our allocator never sees (NCCL allocates it with cuMem inside its own calls), so
// model::plan_memory cannot count it; the planner and `--dry-run` add it as MemoryPlan::nccl.
//
// What NCCL allocates (NCCL 2.28, the version we build against; src/transport/p2p.cc and
// net.cc, src/graph/paths.cc of github.com/NVIDIA/nccl):
//  - Nothing per peer at communicator creation: NCCL_RUNTIME_CONNECT=1 (the default since
//    2.22) connects a communicator's channels at its first collective / send-recv. A group of
//    one rank has no peer and never connects anything.
//  - A ring (or, for 2 ranks, the identical tree) connects every collective channel once, in
//    both directions: per channel a rank owns one send side and one receive side. Over NVLink
//    (the P2P transport) the two sides together hold one buffer per protocol (Simple
//    NCCL_BUFFSIZE, LL, LL128) plus two small headers, each side rounded up to the 2 MiB
//    sharing granularity: 12 MiB per channel (kP2pChannelBytes). Over the network (NET
//    transport, GPUDirect RDMA) each side holds its own LL128 and Simple buffers in device
//    memory (LL stays in host memory): 10 MiB per side (kNetSideBytes).
//  - Send/recv (the pipeline) connects per peer and direction kNvlinkP2pChannelsPerPeer
//    channels with the same P2P buffers; across the network NCCL uses one shared pool per
//    direction instead (kNetP2pPoolBytes).
//  - NVLS (NVLink SHARP) buffers: none, we always run with NCCL_NVLS_ENABLE=0.
//
// Which communicators a rank creates, each paying kCommunicatorCreationBytes: the world's, and
// one per distinct set of groups of two or more ranks among the kinds of parallel/process_groups.h
// (tp, dp, pp, dp-cp, model-parallel, tp-dp-cp, tp-cp, and on the first and last stage the
// embedding group; kinds with the same groups share one communicator, and the world's only with
// the kinds no step uses: tp-dp-cp, tp-cp). TP4 on 4 GPUs creates two (the world, which tp-dp-cp
// and tp-cp share; tp = model-parallel). The collective rings below are likewise counted once
// per communicator.
// Which communicators a rank connects (parallel/process_groups.h; they all exist, the size-1 ones
// cost nothing, and groups our step never uses — cp, dp, tp-cp, tp-dp-cp, the position
// embedding — are never connected):
//   world           a collective (the bench's per-iteration barrier, the trainer's checkpoint
//                   barrier and exit checks)                        if world > 1
//   tp              TP all-reduce / all-gather / reduce-scatter     if tp > 1
//   dp-cp           gradient all-reduce or reduce-scatter + gather  if dp > 1
//   model-parallel  grad-norm / inf-flag all-reduce over tp x pp    if tp * pp > 1
//   embedding       tied word-embedding gradient all-reduce, first and last stage only,
//                   if pp > 1 and the embeddings are tied
//   pp              send/recv with each pipeline neighbour          if pp > 1
//                   (1F1B: the first and last stage have one neighbour, the others two;
//                   the interleaved schedule also sends from the last stage to the first)
// Not counted: the send/recv connections a checkpoint save opens (the distributed optimizer's
// gather to DP rank 0, the stages' gather to stage 0) and NCCL's per-communicator state
// allocated at creation (small, and before any of our allocations).
//
// Accuracy: on 2 x H200 (NVLink, NCCL 2.28) the model gives DP2 0.75, TP2 1.125, PP2 1.5 GiB
// against 0.74-0.75, 0.99-1.00 and 1.46-1.47 GiB measured beyond our own allocations
// (tests/plan/nccl_memory_test.cpp; bench/results/2026-11-23.md, "NCCL's buffers in the memory
// plan"). Groups of 4 on 4 x H100 (bench/results/2026-11-28.md, "the first 4-GPU machine"), not
// isolated per communicator: a DP4 rank (world and dp-cp connected, 0.75 GiB modelled) used 0.30
// GiB beyond its tracked allocations, so the model is high there. The ~4.9 GB a TP4 rank of a
// 17.89B model held beyond its plan in that entry was the communicators' own state
// (kCommunicatorCreationBytes below; 4 x H200, bench/results/2026-11-28.md, "the PP4 hang found and
// fixed"). Unmeasured: groups of 8 (if NCCL chooses Tree for a group of more than two ranks, its
// chain adds the reverse connections: up to twice that group's bytes), and every inter-node figure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace megatron::plan {

constexpr int64_t kMebibyte = 1024 * 1024;

// NCCL's protocol buffers per connection, defaults of NCCL 2.28 (docs.nvidia.com/deeplearning/
// nccl/user-guide/docs/env.html for NCCL_BUFFSIZE; the LL/LL128 sizes are NCCL's compile-time
// defaults in src/include/device.h, overridable by NCCL_LL_BUFFSIZE / NCCL_LL128_BUFFSIZE):
//  Simple  NCCL_BUFFSIZE, documented default 4 MiB.
//  LL      8 lines per thread x 512 threads x 8 steps x 16-byte lines = 512 KiB.
//  LL128   120 8-byte elements per thread x 640 threads x 8 steps = 4,915,200 bytes.
constexpr int64_t kSimpleBufferBytes = 4 * kMebibyte;
constexpr int64_t kLlBufferBytes = 8 * 512 * 8 * 16;
constexpr int64_t kLl128BufferBytes = 120 * 640 * 8 * 8;
// The headers in front of the buffers (struct ncclSendMem / ncclRecvMem: head, tail, FIFO of
// NCCL_STEPS entries, padding): a few KiB; only their presence matters, for the rounding.
constexpr int64_t kConnectionHeaderBytes = 4096;
// Every shareable buffer is rounded up to CUDA_IPC_MIN (src/include/comm.h), the cuMem
// allocation granularity on Hopper: 2 MiB.
constexpr int64_t kAllocationGranularity = 2 * kMebibyte;

int64_t round_up_to_granularity(int64_t bytes);

// One collective channel over NVLink (P2P transport), both sides of one rank. With P2P read
// (NVLink, the default on Ampere and later) the Simple buffer sits with the sender: send side
// header + Simple -> 6 MiB, receive side header + LL + LL128 -> 6 MiB. Without it all three
// sit with the receiver: 2 + 10 MiB. Either way 12 MiB.
int64_t p2p_channel_bytes();
// One side (send or receive) of a network connection with GPUDirect RDMA: LL128 + Simple in
// device memory (net.cc puts LL in host memory): 10 MiB.
int64_t net_side_bytes();

// Collective channels per communicator. 32 is a FIT (on DP2 / TP2 / PP2, 2 x H200, NVLink,
// 2026-11-23): NCCL chooses it from the topology search (NCCL_MIN_NCHANNELS /
// NCCL_MAX_NCHANNELS bound it); NCCL's logs on 8 x H100 nodes report 24 or 32 "coll
// channels". 24 would give DP2 0.56 GiB against 0.75 measured; 32 reproduces it.
constexpr int64_t kCollectiveChannels = 32;
// Send/recv channels per NVLink peer: NCCL gives 2 per NVLink to the peer (18 on H100/H200
// through NVSwitch: 36), capped by the power of two above the collective channel count
// (paths.cc ncclTopoComputeP2pChannels): 32, as NCCL's H100 logs report ("32 p2p channels
// per peer"). Documented-by-source, consistent with the PP2 measurement.
constexpr int64_t kNvlinkP2pChannelsPerPeer = 32;
// Send/recv across the network: shared buffers (NCCL_NET_SHARED_BUFFERS, on by default), one
// pool per direction of p2p channels (32) x NCCL_P2P_NET_CHUNKSIZE (documented default
// 128 KiB) x NCCL_STEPS (8) = 32 MiB each. Read from net.cc; unmeasured.
constexpr int64_t kNetP2pPoolBytes = 32 * 128 * 1024 * 8;

// What a layout's ranks connect (see the header comment).
struct NcclLayout {
  int64_t tp = 1, pp = 1, dp = 1, vp = 1;
  int64_t gpus_per_node = 0;   // 0: every rank on one node
  bool tied_embedding = true;  // !--untie-embeddings-and-output-weights
  // Kinds with the same groups share one communicator (parallel::make_process_groups; the world
  // excepted); false: each kind its own (the runs recorded before 2026-11-28).
  bool shared_groups = true;
  // MEGATRON_DP_COPY_ENGINE in effect (distributed optimizer, dp > 1 on one node): one more
  // communicator (measured, 4 x H200: 0.23 GiB beyond the receive buffer at 350M and 1.3B DP4
  // against kCommunicatorCreationBytes' 0.25; bench/results/2026-11-28.md, "the data-parallel
  // collectives on the copy engines", call 2).
  bool dp_copy_engine = false;
};

enum class NcclTraffic { kCollective, kSendRecv };

struct NcclCommunicatorMemory {
  std::string group;  // "world", "tp", "dp-cp", "model-parallel", "embedding", "pp"
  int64_t ranks = 0;
  NcclTraffic traffic = NcclTraffic::kCollective;
  int64_t ranks_per_node = 0;  // of this group, on this rank's node
  int64_t bytes = 0;
};

// NCCL's own device state of one communicator of two or more ranks, allocated when it is
// created (before any connection, whether or not it is ever used): per channel a few small
// arrays (channel.cc: peers, ring ranks), each its own cuMem allocation rounded up to the
// 2 MiB granularity, so ~6 MiB per channel. Measured on 4 x H200 (NCCL 2.28, 2026-11-28,
// nvidia-smi against our own allocations in `megatron bench`): a TP4 rank's five 4-rank
// communicators held 1,262 MiB beyond the CUDA context (572 MiB, the 1-GPU run) and the world
// ring's buffers (counted above): 252 MiB each. One-rank groups cost 395 MiB each (64
// channels) when they were NCCL communicators; the engine makes them SelfCommunicators now
// (comm/nccl_communicator.cpp), so they cost nothing, and kinds with the same groups share
// one communicator (comm/shared_communicator.h).
constexpr int64_t kCommunicatorCreationBytes = 252 * kMebibyte;

struct NcclMemory {
  std::vector<NcclCommunicatorMemory> communicators;  // only those that connect anything
  int64_t created = 0;      // communicators of two or more ranks this rank creates (used or not)
  int64_t buffers() const;  // the communicators' connection buffers
  int64_t total() const { return buffers() + created * kCommunicatorCreationBytes; }
};

// The NCCL device memory of one rank of pipeline stage `stage` (0 <= stage < pp).
NcclMemory nccl_memory(const NcclLayout& layout, int64_t stage);

// The largest over the stages (what a per-GPU memory figure must hold).
int64_t max_nccl_bytes(const NcclLayout& layout);

}  // namespace megatron::plan
