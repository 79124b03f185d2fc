// cli/flag_agreement: ranks started with different flags are stopped before anything starts.
//  - Under mpirun -np 3, with `train`'s flags: identical flags agree; file and directory flags
//    (--data-path, --load, ...) may differ; a different --seq-length on rank 2 and a switch only
//    rank 1 gives are named by rank 0 with its value, the count and the first rank, and by
//    each differing rank with its own value.
//  - A rank running another command (another flag list) is named, not left hanging.
//  - End to end: `megatron train` under mpirun's MPMD form with rank 1 at another --lr exits
//    non-zero within seconds on both ranks, before any iteration, with both lines.
#include "cli/flag_agreement.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/train_args.h"
#include "comm/mpi_communicator.h"
#include "comm/mpirun.h"
#include "support/mpi.h"
#include "support/parity_runs.h"
#include "support/paths.h"
#include "support/walk_corpus.h"

namespace megatron::cli {
namespace {

Args train_args(const std::vector<std::string>& argv) {
  Args a("train");
  declare_train_flags(a);
  a.parse(argv);
  return a;
}

TEST(FlagAgreement, RanksWithDifferentFlagsAreNamed) {
  if (test::relaunch_under_mpirun(3)) return;
  comm::MpiRuntime mpi;
  auto world = mpi.world();
  const int64_t me = world->rank();
  const std::vector<std::string> base = {"--num-layers", "2",   "--hidden-size", "64",  "--num-attention-heads", "4",
                                         "--seq-length", "128", "--lr",          "1e-4"};
  // Paths differ per rank: allowed.
  std::vector<std::string> same = base;
  same.insert(same.end(), {"--data-path", "/node" + std::to_string(me) + "/d", "--load", "/ck" + std::to_string(me)});
  const FlagDisagreement agree = compare_flags_across_ranks(train_args(same), *world);
  EXPECT_FALSE(agree.any) << agree.message;
  EXPECT_EQ(agree.message, "");

  std::vector<std::string> differ = base;
  if (me == 2) differ[7] = "256";  // --seq-length
  if (me == 1) differ.push_back("--fp16");
  const FlagDisagreement d = compare_flags_across_ranks(train_args(differ), *world);
  EXPECT_TRUE(d.any);
  if (me == 0) {
    EXPECT_EQ(d.message,
              "the ranks were not started with the same flags: --seq-length is '128' on rank 0 but not on 1 of 3 "
              "ranks (rank 2 first); --fp16 is '0' on rank 0 but not on 1 of 3 ranks (rank 1 first). Every rank "
              "must run the same command (only file and directory flags may differ)");
  } else if (me == 1) {
    EXPECT_EQ(d.message, "[rank 1] --fp16 is '1' here, unlike rank 0");
  } else {
    EXPECT_EQ(d.message, "[rank 2] --seq-length is '256' here, unlike rank 0");
  }
}

// A rank running another command (so another flag set: reductions of another length) is
// stopped by the fixed-size header comparison instead of hanging.
TEST(FlagAgreement, ARankRunningAnotherCommandIsNamed) {
  if (test::relaunch_under_mpirun(3)) return;
  comm::MpiRuntime mpi;
  auto world = mpi.world();
  const int64_t me = world->rank();
  const std::vector<std::string> base = {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4"};
  Args other("bench");
  declare_train_flags(other);
  other.flag("--json", "one extra flag: a longer flag list");
  other.parse(base);
  const FlagDisagreement d = compare_flags_across_ranks(me == 2 ? other : train_args(base), *world);
  EXPECT_TRUE(d.any);
  if (me == 0) {
    EXPECT_EQ(d.message.rfind("the ranks do not run the same program: the command differs on 1 of 3 ranks (rank 2 "
                              "first); the flag set differs on 1 of 3 ranks (rank 2 first) (megatron.cpp ",
                              0),
              0u)
        << d.message;
    EXPECT_NE(d.message.find(" `train` here). Every rank must run the same build and command"), std::string::npos)
        << d.message;
  } else if (me == 2) {
    EXPECT_EQ(d.message.rfind("[rank 2] the command differs from rank 0's; the flag set differs from rank 0's: ", 0),
              0u)
        << d.message;
    EXPECT_NE(d.message.find(" `bench` here"), std::string::npos) << d.message;
  } else {
    EXPECT_EQ(d.message, "");
  }
}

TEST(FlagAgreement, TrainStopsRanksStartedDifferently) {
  const std::string dir = test::scratch_dir("flag_agreement_train");
  test::write_walk_corpus(dir);
  const std::vector<std::string> flags = test::tiny_train_flags(dir, 2, "0");
  std::vector<std::string> other = flags;
  for (size_t i = 0; i + 1 < other.size(); ++i) {
    if (other[i] == "--lr") other[i + 1] = "0.001";
  }
  std::vector<std::string> cmd = comm::local_mpirun_command(1, flags);
  cmd.insert(cmd.end(), {":", "-np", "1"});
  cmd.insert(cmd.end(), other.begin(), other.end());
  const test::CommandResult r = test::run_command("timeout 60 " + comm::shell_join(cmd), /*capture_stderr=*/true);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.status, 124) << "a rank hung: " << r.output;
  EXPECT_NE(r.output.find("error: the ranks were not started with the same flags: --lr is '0.003' on rank 0 but not "
                          "on 1 of 2 ranks (rank 1 first)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("error: [rank 1] --lr is '0.001' here, unlike rank 0"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" iteration "), std::string::npos) << "no step before the error: " << r.output;
}

}  // namespace
}  // namespace megatron::cli
