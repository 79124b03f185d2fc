// A two-rank job whose rank 1 is held back, as a descheduled or throttled process is: mpirun's
// MPMD form starts rank 0 as is and rank 1 under a shell loop that stops it (SIGSTOP) for
// `stopped_s` of every `running_s + stopped_s` seconds until it exits. Used by the tests of the
// straggler detector and of `megatron preflight`, which must name rank 1.
#pragma once

#include <string>
#include <vector>

namespace megatron::test {

// The shell command (for run_command) that runs `argv` (the program and its arguments) as
// both ranks, under `timeout timeout_s`.
std::string held_back_rank1_command(const std::vector<std::string>& argv, double running_s, double stopped_s,
                                    int timeout_s);

}  // namespace megatron::test
