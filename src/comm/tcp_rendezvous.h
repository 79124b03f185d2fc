// The one thing exchanged outside a communicator: NCCL's unique id, from rank 0 to every
// rank, over TCP at MASTER_ADDR:MASTER_PORT (torchrun's convention; docs/design.md, "Launching"),
// for GPU ranks started without MPI. Rank 0 listens and sends the bytes to each of the
// world - 1 ranks that connect; the others connect (retrying while rank 0 is not up yet) and
// read them. Errors and timeouts throw megatron::Error naming the address.
#pragma once

#include <cstdint>
#include <string>

namespace megatron::comm {

// Returns `payload` (rank 0's) on every rank; `size` bytes are read on the other ranks.
std::string tcp_broadcast_bytes(const std::string& addr, int64_t port, int64_t rank, int64_t world,
                                const std::string& payload, int64_t size, int64_t timeout_seconds);

}  // namespace megatron::comm
