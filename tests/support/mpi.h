// Multi-rank tests under mpirun (docs/design.md, "Tests": parity under mpirun, oversubscribed on
// 2 cores). A test body starts with
//
//   if (test::relaunch_under_mpirun(2)) return;
//
// In the ordinary test process this runs the same test binary again as `mpirun -np 2`, with
// --gtest_filter naming only the current test, checks that every rank passed (the ranks'
// output is printed on failure) and returns true. Inside the ranks it returns false and the
// body goes on with MPI (comm::MpiRuntime).
#pragma once

#include <string>

namespace megatron::test {

bool relaunch_under_mpirun(int np);
// True inside the ranks started by relaunch_under_mpirun.
bool in_mpirun_ranks();

}  // namespace megatron::test
