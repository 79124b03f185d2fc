// Starting and connecting the ranks of a job (docs/design.md, "Launching").
//
// connect_ranks: this process's world communicator, chosen by what started it and where it
// computes:
//   - one process: a SelfCommunicator;
//   - GPU ranks: NCCL, its unique id sent by rank 0 over MPI when MPI started us, else over
//     the TCP rendezvous at MASTER_ADDR:MASTER_PORT; with `host_collectives`
//     (--distributed-backend mpi|gloo) MPI instead, the GPU tensors staged through host memory;
//   - CPU ranks: MPI, which must have started us (mpirun, or srun with PMIx).
// MPI worlds are wrapped in a HostStagedCommunicator (comm/host_staged_communicator.h), so
// that device tensors and bf16/fp16 reductions work over MPI too.
//
// spawn_local_workers (`megatron train --nproc-per-node N`): starts N copies of this program
// on this machine and returns the job's exit status.
//   - CPU ranks, and GPU ranks with host collectives: replaces this process by `mpirun -np N <program>`
//   (comm/mpirun.h). The CPU ranks
//     need MPI to talk, and Open MPI's mpirun is the robust way to give it to them: it wires
//     the ranks up, forwards their output, and when one rank exits non-zero or dies it kills
//     the others and names the failed rank ("mpirun detected that one or more processes exited
//     with non-zero status ... rank 1"). Open MPI singletons started by fork/exec could not
//     join one world, and a second, home-made CPU transport would duplicate what MPI does.
//   - GPU ranks over NCCL (`nccl`): fork/exec of N workers with torchrun's RANK, WORLD_SIZE, LOCAL_RANK,
//     LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (NCCL bootstraps over the TCP rendezvous);
//     the launcher waits, and when a worker exits non-zero or is killed it prints which rank,
//     stops the others (SIGTERM, then SIGKILL after 10 s) and returns non-zero.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "comm/launch_env.h"
#include "comm/mpi_communicator.h"
#include "comm/watchdog.h"

namespace megatron::comm {

struct RankConnection {
  std::unique_ptr<MpiRuntime> mpi;      // when MPI started us; outlives `world`
  std::unique_ptr<Watchdog> watchdog;   // with more than one rank; outlives `world`
  std::unique_ptr<Communicator> world;  // watched by `watchdog` when there is one
};
// `timeout`: --distributed-timeout-minutes, after which a collective that has not completed
// ends the process (comm/watchdog.h).
RankConnection connect_ranks(const LaunchEnv& env, backend::Backend& backend, std::chrono::milliseconds timeout,
                             bool host_collectives = false);

// For a rank other than 0 that stops because rank 0 does (a bad flag, a check that failed on
// every rank): prints `line`, if any, as "error: <line>" in one write (so that it does not
// interleave with other ranks' on a shared stderr), then waits 3 s. mpirun ends the job at the
// first non-zero exit: rank 0, which reports the error, exits first.
void let_rank0_report_first(const std::string& line = "");

// argv: this program and the arguments each worker gets (without --nproc-per-node).
int spawn_local_workers(int64_t nproc, const std::vector<std::string>& argv, bool nccl);

// The path of the running executable (/proc/self/exe).
std::string self_executable();

// What each worker of `megatron <command> --nproc-per-node N <arguments>` runs: this executable,
// `command`, and `arguments` without --nproc-per-node N / --nproc-per-node=N.
std::vector<std::string> worker_command(const std::string& command, const std::vector<std::string>& arguments);

}  // namespace megatron::comm
