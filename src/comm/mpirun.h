// The mpirun command line that starts N copies of a program on this machine, as used by
// `megatron train --nproc-per-node N` on CPUs and by the parity tests: Open MPI's mpirun
// (found at configure time), oversubscribed (CI has 2 cores for N > 2 ranks), not bound to
// cores, allowed to run as root when we are root (CI runs as root), and each rank's OpenMP
// threads set to cores / N unless OMP_NUM_THREADS is already set (busy-waiting OpenMP teams
// of every rank on the same cores would slow each other down many times over).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace megatron::comm {

std::string mpirun_path();
// argv: the program and its arguments. `env` entries "NAME=VALUE" are exported to the ranks.
std::vector<std::string> local_mpirun_command(int64_t np, const std::vector<std::string>& argv,
                                              const std::vector<std::string>& env = {});
// The same as one shell-quoted string (for std::system / popen in tests).
std::string shell_join(const std::vector<std::string>& words);

}  // namespace megatron::comm
