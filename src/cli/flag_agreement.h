// Every rank of a job must run the same command with the same flags. A Slurm script that
// builds a rank's flags from its node, an MPMD line with one flag missed, or a node with another
// build would otherwise hang in a collective, crash in one, or (a different --lr on some ranks)
// train replicas that silently drift apart. Before anything is allocated, the ranks compare a
// 48-bit hash of each flag's value over the world, after a fixed-size comparison of the
// megatron.cpp version, the command and the set of flags (so that ranks of another build or
// command stop with a message rather than hang in reductions of different lengths).
//
// Flags that name files and directories (metavar FILE, DIR or PATH: --data-path, --load,
// --vocab-file, ...) may differ: nodes mount storage at different places. So may the launch's
// own flags (--nproc-per-node, --local-rank).
#pragma once

#include <string>

#include "cli/args.h"
#include "comm/communicator.h"

namespace megatron::cli {

struct FlagDisagreement {
  bool any = false;     // some flag differs between some ranks
  std::string message;  // rank 0: the error, naming each flag, its value there and the ranks that
                        // differ; another rank: its own value of the flags where it differs from
                        // rank 0 ("" where it does not)
};

// Collective over `world` (three host all-reduces).
FlagDisagreement compare_flags_across_ranks(const Args& args, comm::Communicator& world);

// The start-up check of `train` and `bench`: true when the flags agree. Otherwise rank 0 throws
// megatron::Error with the list; another rank prints its own differing values on stderr, waits
// 3 s (mpirun ends the job at the first non-zero exit: rank 0's line comes first) and returns
// false, for the command to exit 1.
bool flags_agree_across_ranks(const Args& args, comm::Communicator& world);

}  // namespace megatron::cli
