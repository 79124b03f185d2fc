#include "comm/mpirun.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#ifndef MT_MPIEXEC
#define MT_MPIEXEC "mpirun"
#endif

namespace megatron::comm {

std::string mpirun_path() { return MT_MPIEXEC; }

std::vector<std::string> local_mpirun_command(int64_t np, const std::vector<std::string>& argv,
                                              const std::vector<std::string>& env) {
  std::vector<std::string> cmd = {mpirun_path(), "-np", std::to_string(np), "--oversubscribe", "--bind-to", "none"};
  if (geteuid() == 0) cmd.push_back("--allow-run-as-root");
  // Containers often forbid the cross-memory-attach syscalls of Open MPI's shared-memory
  // single-copy path; plain copies through shared memory work everywhere.
  cmd.insert(cmd.end(), {"--mca", "btl_vader_single_copy_mechanism", "none"});
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    const int64_t cores = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
    cmd.insert(cmd.end(), {"-x", "OMP_NUM_THREADS=" + std::to_string(std::max<int64_t>(1, cores / np))});
  }
  for (const std::string& e : env) cmd.insert(cmd.end(), {"-x", e});
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  return cmd;
}

std::string shell_join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) {
    if (!out.empty()) out += ' ';
    out += '\'';
    for (char c : w) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

}  // namespace megatron::comm
