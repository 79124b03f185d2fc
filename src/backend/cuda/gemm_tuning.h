// How a CUDA backend picks each GEMM's cuBLASLt algorithm (cuda_gemm.cu). A plain C++ header,
// like attention_impl.h, with stubs that throw in builds without CUDA (no_cuda.cpp).
//
//   heuristic (default)  the first algorithm cuBLASLt's heuristic returns for the problem
//   autotune             the fastest of the heuristic's top candidates, timed with CUDA events
//                        on the first call of each problem (a few runs each; the result is
//                        then computed again with the winner), cached like the heuristic's
// Either way the choice is made once per problem and kept, so a run never changes algorithm.
// Autotuning can pick different algorithms in two runs (timing noise), and algorithms differ
// in summation order, so --deterministic-mode turns it off.
// Initial value from the environment when the backend is constructed:
//   MEGATRON_GEMM_AUTOTUNE=0 | 1
#pragma once

#include "backend/ops.h"

namespace megatron::backend {

// `backend` must be a CUDA backend (megatron::Error otherwise, and always without CUDA).
void set_gemm_autotune(Backend& backend, bool on);

}  // namespace megatron::backend
