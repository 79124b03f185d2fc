// --device for the commands that compute: "cpu", "cuda" (GPU 0) or "auto" (CUDA when this
// build has it and a GPU is visible, else the CPU reference backend).
#pragma once

#include <memory>
#include <ostream>
#include <string>

#include "backend/ops.h"
#include "cli/args.h"

namespace megatron::cli {

// Also declares --deterministic-mode (Megatron's flag; --deterministic is accepted too).
void declare_device_flag(Args& args);
// Whether --deterministic-mode / --deterministic was given.
bool deterministic(const Args& args);
// Builds the backend --device asks for and prints one line saying which (to `log`); a CUDA
// backend runs on GPU `cuda_device` (a rank's LOCAL_RANK).
std::unique_ptr<backend::Backend> make_backend(const Args& args, std::ostream& log, int64_t cuda_device = 0);
// Whether --device selects the CUDA backend on this machine (without creating it).
bool uses_cuda(const Args& args);
// --distributed-backend (a train flag): true for mpi or gloo (host-side collectives over MPI,
// comm/host_staged_communicator.h), false for nccl; anything else is a one-line error.
bool host_collectives(const Args& args);
// Whether this process's ranks talk over NCCL: GPU ranks without host collectives.
bool uses_nccl(const Args& args);
// The GPU of the rank with LOCAL_RANK `local_rank`: that GPU; with host collectives, ranks
// beyond the visible GPUs share them round-robin (NCCL refuses two ranks on one GPU).
int64_t cuda_device_for_rank(const Args& args, int64_t local_rank);
// The line a CUDA job with host collectives prints first (" > collectives: ..."), saying when
// its `local_ranks` share fewer GPUs, so that speed and device memory are read as what they
// are; "" without host collectives or off the GPU.
std::string host_collectives_note(const Args& args, int64_t local_ranks);

}  // namespace megatron::cli
