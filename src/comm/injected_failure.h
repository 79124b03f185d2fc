// MEGATRON_TEST_NCCL_FAIL=<call>[:<n>][@<rank>]: the copy engines' set-up
// (Communicator::enable_copy_engine, comm::use_symmetric_memory) acts as if an NCCL call failed,
// so that tests and GPU checks see its fall-back to the SM collectives on a platform that would
// not show it. <call> is one of kInjectableCalls; <n> (1-based) picks one call of that name (all
// when absent): for ncclMemAlloc the n-th since use_symmetric_memory(true) on the GPU, the
// receive buffer's included; for the others the n-th within one set-up. <rank> limits it to
// one world rank (the launcher's, comm/launch_env.h). The collective calls (ncclCommSplit,
// ncclCommWindowRegister) still run and are then declared failed, so that every rank goes on
// to the same collectives; ncclMemAlloc is not called.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "comm/launch_env.h"

namespace megatron::comm {

inline constexpr const char* kInjectableCalls[] = {"ncclMemAlloc", "ncclCommSplit", "ncclCommWindowRegister"};

struct InjectedFailure {
  std::string call;
  int64_t nth = 0;    // 0: every call of that name
  int64_t rank = -1;  // -1: every rank
};

// The variable's value parsed; nullopt when unset or empty. Throws megatron::Error naming the
// variable and the accepted forms on anything else.
std::optional<InjectedFailure> injected_failure_from(const EnvLookup& env);

// Whether the `nth` (1-based) call of `call` on this process is to fail (the process's
// environment: the variable, and the launcher's rank).
bool injected_failure(const char* call, int64_t nth);

}  // namespace megatron::comm
