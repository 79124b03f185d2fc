#include "comm/launch_env.h"

#include <cstdlib>

#include "core/error.h"

namespace megatron::comm {

const char* to_string(Launcher l) {
  switch (l) {
    case Launcher::kSingle:
      return "single process";
    case Launcher::kTorchrun:
      return "torchrun-style environment (RANK/WORLD_SIZE)";
    case Launcher::kOpenMpi:
      return "Open MPI (mpirun)";
    case Launcher::kSlurm:
      return "Slurm (srun)";
  }
  return "?";
}

EnvLookup process_environment() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

namespace {

int64_t int_var(const EnvLookup& env, const char* name, int64_t fallback) {
  const std::optional<std::string> v = env(name);
  if (!v) return fallback;
  try {
    size_t used = 0;
    const long long x = std::stoll(*v, &used);
    if (used == v->size()) return x;
  } catch (const std::exception&) {
  }
  throw_error("[", name, "] expected an integer in the environment, got '", *v, "'");
}

}  // namespace

LaunchEnv detect_launch_env(const EnvLookup& env) {
  LaunchEnv e;
  struct Vars {
    Launcher launcher;
    const char *rank, *size, *local;
  };
  constexpr Vars kOrder[] = {
      {Launcher::kTorchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {Launcher::kOpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {Launcher::kSlurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  };
  for (const Vars& v : kOrder) {
    if (!env(v.rank) || !env(v.size)) continue;
    e.launcher = v.launcher;
    e.rank = int_var(env, v.rank, 0);
    e.world_size = int_var(env, v.size, 1);
    e.local_rank = int_var(env, v.local, e.rank);
    if (e.world_size < 1) throw_error("[", v.size, "] must be positive, got ", e.world_size);
    if (e.rank < 0 || e.rank >= e.world_size) {
      throw_error("[", v.rank, "] ", e.rank, " is not a rank of a world of ", e.world_size, " (", v.size, ")");
    }
    if (e.local_rank < 0) throw_error("[", v.local, "] must not be negative, got ", e.local_rank);
    break;
  }
  if (auto addr = env("MASTER_ADDR")) e.master_addr = *addr;
  e.master_port = int_var(env, "MASTER_PORT", e.master_port);
  if (e.master_port < 1 || e.master_port > 65535) throw_error("[MASTER_PORT] ", e.master_port, " is not a TCP port");
  e.mpi_available = env("OMPI_COMM_WORLD_SIZE").has_value() || env("PMIX_RANK").has_value();
  return e;
}

int64_t ranks_per_node(const EnvLookup& env, int64_t world) {
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"}) {
    const int64_t n = int_var(env, name, 0);
    if (n >= 1 && n <= world && world % n == 0) return n;
  }
  return world;
}

}  // namespace megatron::comm
