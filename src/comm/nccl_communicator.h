// GPU ranks over NCCL: the Communicator (comm/communicator.h) for CUDA runs. Collectives are enqueued
// on the CUDA backend's stream (so they order with the ops before and after them, no extra
// synchronisation); host-scalar reductions synchronise. Reductions take fp32, bf16 and fp16;
// uneven reduce-scatter / all-gather run as grouped ncclReduce / ncclBroadcast calls (one per
// rank), even ones as ncclReduceScatter / ncclAllGather. Every NCCL call is checked.
// Compiled only with MT_BUILD_CUDA; otherwise the functions below throw (no_nccl.cpp).
// The header has no NCCL or CUDA types, so callers compile without CUDA.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "backend/ops.h"
#include "comm/communicator.h"

namespace megatron::comm {

bool built_with_nccl();

// ncclUniqueId as bytes: rank 0 makes it, every rank gets it (over MPI or the TCP rendezvous
// of comm/tcp_rendezvous.h), then each calls make_nccl_world with it.
using NcclUniqueIdBytes = std::array<char, 128>;
NcclUniqueIdBytes make_nccl_unique_id();

// The world communicator of `size` ranks on the GPU of `backend` (a CUDA backend; Error
// otherwise), named "world".
std::unique_ptr<Communicator> make_nccl_world(backend::Backend& backend, int64_t rank, int64_t size,
                                              const NcclUniqueIdBytes& id);

// Copy-engine collectives (Communicator::enable_copy_engine): from now on (until called with
// false) the parameters and gradients that the CUDA backend allocates on the calling thread's
// GPU come from NCCL's symmetric memory (ncclMemAlloc; kSymmetricSlackBytes more than asked, at
// the end, which an all-to-all of a bucket whose last piece is short reads past it), which a
// group's copy engines can address. Call before they are allocated. Where ncclMemAlloc fails
// (a platform without it, MEGATRON_TEST_NCCL_FAIL=ncclMemAlloc) that buffer and those after it
// on that GPU come from cudaMalloc, and enable_copy_engine turns the engines off with
// ncclMemAlloc's reason; use_symmetric_memory(true) forgets the failure and tries again.
// False (nothing changed) without NCCL 2.28 or later.
constexpr int64_t kSymmetricSlackBytes = 4096;
bool use_symmetric_memory(bool on = true);
// Whether this build's NCCL has the copy-engine collectives (2.28 or later).
bool copy_engine_supported();

}  // namespace megatron::comm
