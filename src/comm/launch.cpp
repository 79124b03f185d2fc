#include "comm/launch.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "comm/host_staged_communicator.h"
#include "comm/mpirun.h"
#include "comm/nccl_communicator.h"
#include "comm/self_communicator.h"
#include "comm/tcp_rendezvous.h"
#include "core/error.h"

namespace megatron::comm {

namespace {
constexpr int64_t kRendezvousTimeoutSeconds = 300;
constexpr int kGraceSeconds = 10;

std::vector<char*> c_argv(std::vector<std::string>& words) {
  std::vector<char*> out;
  for (std::string& w : words) out.push_back(w.data());
  out.push_back(nullptr);
  return out;
}
}  // namespace

void let_rank0_report_first(const std::string& line) {
  if (!line.empty()) std::fputs(str_cat("error: ", line, "\n").c_str(), stderr);
  std::this_thread::sleep_for(std::chrono::seconds(3));
}

std::string self_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw_error("cannot read /proc/self/exe: ", errno_string(errno));
  return std::string(buf, static_cast<size_t>(n));
}

std::vector<std::string> worker_command(const std::string& command, const std::vector<std::string>& arguments) {
  std::vector<std::string> worker = {self_executable(), command};
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i] == "--nproc-per-node") {
      ++i;
    } else if (!arguments[i].starts_with("--nproc-per-node=")) {
      worker.push_back(arguments[i]);
    }
  }
  return worker;
}

RankConnection connect_ranks(const LaunchEnv& env, backend::Backend& backend, std::chrono::milliseconds timeout,
                             bool host_collectives) {
  RankConnection c;
  if (env.world_size == 1) {
    c.world = std::make_unique<SelfCommunicator>(backend, "world");
    return c;
  }
  if (backend.device() == Device::kCUDA && !host_collectives) {
    NcclUniqueIdBytes id{};
    if (env.rank == 0) id = make_nccl_unique_id();
    if (env.mpi_available) {
      c.mpi = std::make_unique<MpiRuntime>();
      std::unique_ptr<Communicator> mpi_world = c.mpi->world();
      Tensor bytes = Tensor::cpu({static_cast<int64_t>(id.size() / 4)}, DType::kI32);
      std::memcpy(bytes.data(), id.data(), id.size());
      mpi_world->broadcast(bytes, 0);
      std::memcpy(id.data(), bytes.data(), id.size());
    } else {
      const std::string got = tcp_broadcast_bytes(env.master_addr, env.master_port, env.rank, env.world_size,
                                                  std::string(id.data(), id.size()), static_cast<int64_t>(id.size()),
                                                  kRendezvousTimeoutSeconds);
      std::memcpy(id.data(), got.data(), id.size());
    }
    c.world = make_nccl_world(backend, env.rank, env.world_size, id);
  } else {
    if (!env.mpi_available) {
      if (backend.device() == Device::kCUDA) {
        throw_error("[--distributed-backend] mpi: GPU ranks then talk over MPI; start them with mpirun -np ",
                    env.world_size, " (or `megatron train --nproc-per-node ", env.world_size, "`), not from ",
                    to_string(env.launcher));
      }
      throw_error("[", to_string(env.launcher), "] CPU ranks communicate over MPI: start them with mpirun -np ",
                  env.world_size, " (or `megatron train --nproc-per-node ", env.world_size, "`)");
    }
    c.mpi = std::make_unique<MpiRuntime>();
    c.world = std::make_unique<HostStagedCommunicator>(c.mpi->world(), backend);
  }
  if (c.world->size() != env.world_size || c.world->rank() != env.rank) {
    throw_error("[", to_string(env.launcher), "] the environment says rank ", env.rank, " of ", env.world_size,
                " but the communicator has rank ", c.world->rank(), " of ", c.world->size());
  }
  c.watchdog = std::make_unique<Watchdog>(env.rank, timeout);
  c.world = std::make_unique<WatchedCommunicator>(std::move(c.world), *c.watchdog);
  return c;
}

int spawn_local_workers(int64_t nproc, const std::vector<std::string>& argv, bool nccl) {
  if (nproc < 1) throw_error("[--nproc-per-node] must be positive, got ", nproc);
  if (!nccl) {
    std::vector<std::string> cmd = local_mpirun_command(nproc, argv);
    std::fflush(nullptr);
    std::vector<char*> args = c_argv(cmd);
    ::execvp(args[0], args.data());
    throw_error("[--nproc-per-node] cannot run ", cmd[0], ": ", errno_string(errno));
  }
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (int64_t r = 0; r < nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) throw_error("[--nproc-per-node] fork failed: ", errno_string(errno));
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("MASTER_ADDR", addr ? addr : "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port ? port : "29500", 1);
      std::vector<std::string> words = argv;
      std::vector<char*> args = c_argv(words);
      ::execv(args[0], args.data());
      std::fprintf(stderr, "error: [--nproc-per-node] cannot run %s\n", args[0]);
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  int64_t running = nproc;
  int failed_rank = -1;
  bool killed = false;
  std::chrono::steady_clock::time_point deadline{};
  while (running > 0) {
    int status = 0;
    // Once a rank failed, poll so that the stragglers can be SIGKILLed after the grace period.
    // A child that has not been reaped keeps its pid, so signalling pids[] never hits a stranger.
    const pid_t pid = ::waitpid(-1, &status, failed_rank < 0 ? 0 : WNOHANG);
    if (pid == 0) {
      if (!killed && std::chrono::steady_clock::now() > deadline) {
        for (pid_t p : pids) {
          if (p > 0) ::kill(p, SIGKILL);
        }
        killed = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int64_t rank = -1;
    for (int64_t r = 0; r < nproc; ++r) {
      if (pids[static_cast<size_t>(r)] == pid) rank = r;
    }
    if (rank < 0) continue;
    pids[static_cast<size_t>(rank)] = -1;
    --running;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && failed_rank < 0) {
      failed_rank = static_cast<int>(rank);
      const std::string why = WIFEXITED(status) ? str_cat("exited with status ", WEXITSTATUS(status))
                                                : str_cat("was killed by signal ", WTERMSIG(status));
      std::fprintf(stderr, "error: [--nproc-per-node] rank %d (pid %d) %s; stopping the other ranks\n", failed_rank,
                   static_cast<int>(pid), why.c_str());
      std::fflush(stderr);
      for (pid_t p : pids) {
        if (p > 0) ::kill(p, SIGTERM);
      }
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kGraceSeconds);
    }
  }
  return failed_rank < 0 ? 0 : 1;
}

}  // namespace megatron::comm
