#include "plan/nccl_memory.h"

#include <algorithm>

#include "core/error.h"

namespace megatron::plan {

namespace {

// Ranks of a group on one node, Megatron's order tp-cp-dp-pp (parallel/rank_layout.h): a group
// whose consecutive members are `stride` ranks apart has min(size, G / stride) of them on a
// node of G GPUs (1 once the stride reaches a node).
int64_t per_node(int64_t size, int64_t stride, int64_t G) {
  if (stride >= G) return 1;
  return std::min(size, G / stride);
}

// A collective communicator of `ranks` members, `k` of them on this rank's node. Each channel
// has one send and one receive side per rank; a ring over n nodes crosses the network 2n
// times among its n*k ranks' 2nk sides, so on average 2/k of a rank's two sides are network
// sides (NCCL spreads the rings' entry and exit GPUs over the node, one NIC each).
int64_t collective_bytes(int64_t ranks, int64_t k) {
  if (k >= ranks) return kCollectiveChannels * p2p_channel_bytes();
  const int64_t p2p_side = p2p_channel_bytes() / 2;
  return kCollectiveChannels * (2 * net_side_bytes() + (2 * k - 2) * p2p_side) / k;
}

}  // namespace

int64_t round_up_to_granularity(int64_t bytes) {
  return (bytes + kAllocationGranularity - 1) / kAllocationGranularity * kAllocationGranularity;
}

int64_t p2p_channel_bytes() {
  const int64_t send_side = round_up_to_granularity(kConnectionHeaderBytes + kSimpleBufferBytes);
  const int64_t recv_side = round_up_to_granularity(kConnectionHeaderBytes + kLlBufferBytes + kLl128BufferBytes);
  return send_side + recv_side;
}

int64_t net_side_bytes() { return round_up_to_granularity(kLl128BufferBytes + kSimpleBufferBytes); }

int64_t NcclMemory::buffers() const {
  int64_t t = 0;
  for (const NcclCommunicatorMemory& c : communicators) t += c.bytes;
  return t;
}

NcclMemory nccl_memory(const NcclLayout& l, int64_t stage) {
  MT_CHECK(l.tp > 0 && l.pp > 0 && l.dp > 0 && l.vp > 0 && l.gpus_per_node >= 0 && stage >= 0 && stage < l.pp)
      << "tp " << l.tp << " pp " << l.pp << " dp " << l.dp << " vp " << l.vp << " stage " << stage;
  const int64_t world = l.tp * l.pp * l.dp;
  const int64_t G = l.gpus_per_node == 0 ? world : l.gpus_per_node;
  NcclMemory m;
  // The groups of a kind span some of the dimensions tp, dp, pp (cp is 1); two kinds have the
  // same groups when they span the same dimensions of size > 1. The embedding group of the first
  // and last stage is the whole pp group when pp == 2, groups of their own beyond (kOwnDim).
  constexpr int kTpDim = 1, kDpDim = 2, kPpDim = 4, kOwnDim = 8;
  const int real = (l.tp > 1 ? kTpDim : 0) | (l.dp > 1 ? kDpDim : 0) | (l.pp > 1 ? kPpDim : 0);
  const bool embedding_member = l.pp > 1 && (stage == 0 || stage == l.pp - 1);
  const int embedding_span = l.pp == 2 ? kPpDim : kOwnDim;
  // Communicators created (parallel::make_process_groups): the world, and one per kind of two or
  // more ranks, or with shared groups one per distinct span.
  // The kinds no step uses (tp-dp-cp, tp-cp) also share the world's when they span all of it.
  std::vector<int> spans;
  auto create = [&](int dims, bool unused) {
    const int effective = dims & (real | kOwnDim);
    if (effective == 0 || (l.shared_groups && unused && effective == real)) return;
    if (!l.shared_groups || std::find(spans.begin(), spans.end(), effective) == spans.end()) spans.push_back(effective);
  };
  for (const int dims : {kTpDim, kDpDim, kPpDim, kDpDim /* dp-cp */, kTpDim | kPpDim /* model-parallel */}) {
    create(dims, false);
  }
  create(kTpDim | kDpDim, true);  // tp-dp-cp
  create(kTpDim, true);           // tp-cp
  if (embedding_member) create(embedding_span, false);
  m.created = static_cast<int64_t>(spans.size()) + (world > 1 ? 1 : 0);
  // Copy-engine data parallelism: the data-parallel group's zero-CTA child (comm::
  // Communicator::enable_copy_engine). It connects no protocol buffers: its all-to-alls and
  // all-gathers go between symmetric windows on the copy engines.
  if (l.dp_copy_engine && l.dp > 1) ++m.created;
  // Collective rings: the world's, and each kind's that a step uses, once per communicator.
  std::vector<int> rings;
  auto collective = [&](const char* name, int64_t ranks, int64_t k, int dims) {
    if (ranks <= 1) return;
    if (l.shared_groups && dims != 0) {
      if (std::find(rings.begin(), rings.end(), dims & (real | kOwnDim)) != rings.end()) return;
      rings.push_back(dims & (real | kOwnDim));
    }
    m.communicators.push_back({name, ranks, NcclTraffic::kCollective, k, collective_bytes(ranks, k)});
  };
  collective("world", world, std::min(world, G), 0);
  collective("tp", l.tp, per_node(l.tp, 1, G), kTpDim);
  collective("dp-cp", l.dp, per_node(l.dp, l.tp, G), kDpDim);
  const int64_t pp_per_node = per_node(l.pp, l.tp * l.dp, G);
  collective("model-parallel", l.tp * l.pp, std::min(l.tp, G) * pp_per_node, kTpDim | kPpDim);
  if (l.tied_embedding && embedding_member) collective("embedding", 2, world <= G ? 2 : 1, embedding_span);
  if (l.pp > 1) {
    // The distinct neighbours this stage sends to and receives from (both directions each:
    // activations one way, their gradients back).
    std::vector<int64_t> peers;
    auto add = [&](int64_t s) {
      if (s != stage && std::find(peers.begin(), peers.end(), s) == peers.end()) peers.push_back(s);
    };
    if (stage + 1 < l.pp) add(stage + 1);
    if (stage > 0) add(stage - 1);
    if (l.vp > 1) add(stage == 0 ? l.pp - 1 : stage == l.pp - 1 ? 0 : stage);
    int64_t bytes = 0;
    bool network = false;
    for (int64_t s : peers) {
      if (s / pp_per_node == stage / pp_per_node) {
        bytes += kNvlinkP2pChannelsPerPeer * p2p_channel_bytes();
      } else {
        network = true;
      }
    }
    if (network) bytes += 2 * kNetP2pPoolBytes;  // one shared pool per direction
    m.communicators.push_back({"pp", l.pp, NcclTraffic::kSendRecv, pp_per_node, bytes});
  }
  return m;
}

int64_t max_nccl_bytes(const NcclLayout& l) {
  int64_t worst = 0;
  for (int64_t s = 0; s < l.pp; ++s) worst = std::max(worst, nccl_memory(l, s).total());
  return worst;
}

}  // namespace megatron::plan
