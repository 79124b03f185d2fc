#include "support/held_back_rank.h"

#include <cstdio>

#include "comm/mpirun.h"

namespace megatron::test {

std::string held_back_rank1_command(const std::vector<std::string>& argv, double running_s, double stopped_s,
                                    int timeout_s) {
  char loop[256];
  std::snprintf(loop, sizeof(loop),
                "\"$@\" & p=$!; (while kill -0 $p 2>/dev/null; do sleep %.3f; kill -STOP $p 2>/dev/null; sleep %.3f; "
                "kill -CONT $p 2>/dev/null; done) & wait $p",
                running_s, stopped_s);
  std::vector<std::string> cmd = comm::local_mpirun_command(1, argv);
  cmd.insert(cmd.end(), {":", "-np", "1", "bash", "-c", loop, "bash"});
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  return "timeout " + std::to_string(timeout_s) + " " + comm::shell_join(cmd);
}

}  // namespace megatron::test
