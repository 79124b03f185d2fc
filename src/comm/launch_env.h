// Who am I: the rank, world size and local rank of this process, read from the environment of
// whatever started it (docs/design.md, "Launching"), in this order:
//   1. torchrun and `megatron train --nproc-per-node` workers: RANK, WORLD_SIZE, LOCAL_RANK;
//   2. Open MPI (mpirun): OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK;
//   3. Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID;
//   4. otherwise a single process (rank 0 of 1).
// Open MPI comes before Slurm because mpirun run inside an sbatch script inherits the batch step's
// SLURM_PROCID=0 on every rank; its own variables are the nearer launcher's.
// MASTER_ADDR/MASTER_PORT (default 127.0.0.1:29500, torchrun's) locate the TCP rendezvous that
// carries NCCL's unique id when MPI is not there.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace megatron::comm {

enum class Launcher { kSingle, kTorchrun, kOpenMpi, kSlurm };
const char* to_string(Launcher l);

struct LaunchEnv {
  Launcher launcher = Launcher::kSingle;
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  // MPI_Init can connect this process to its peers (started by mpirun, or by srun with PMIx).
  bool mpi_available = false;
};

// Reads one environment variable (nullopt when unset); tests pass a map.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
EnvLookup process_environment();

// Throws megatron::Error naming the variable when a value is not an integer or out of range
// (rank >= world size, a port outside 1..65535).
LaunchEnv detect_launch_env(const EnvLookup& env);

// Ranks per node of a job of `world` ranks: the launcher's local world size (torchrun's
// LOCAL_WORLD_SIZE, Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, Slurm's SLURM_NTASKS_PER_NODE, the
// first that is set and divides `world`), else the whole world on one node. Throws
// megatron::Error naming the variable when it is not an integer.
int64_t ranks_per_node(const EnvLookup& env, int64_t world);

}  // namespace megatron::comm
