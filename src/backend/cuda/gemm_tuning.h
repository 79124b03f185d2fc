// How a CUDA backend picks each GEMM's cuBLASLt algorithm (cuda_gemm.cu). A plain C++ header,
// like attention_impl.h, with stubs that throw in builds without CUDA (no_cuda.cpp).
//
//   autotune (default)   the fastest of the heuristic's top candidates, timed with CUDA events
//                        on the first call of each problem (a few runs each; the result is
//                        then computed again with the winner), cached like the heuristic's
//   heuristic            the first algorithm cuBLASLt's heuristic returns for the problem
// Either way the choice is made once per problem and kept, so a run never changes algorithm.
// Autotuning is the default because it won in every side-by-side step measurement on the
// H100 (+0.4-0.8% at 124M-2.7B on two machines; the forward GEMMs x W^T by ~8%, e.g. 1.3B's
// FC1 750 -> 809 TFLOP/s: bench/results/2026-11-23.md, "autotuning by default"). It can pick
// different algorithms in two runs (timing noise), and algorithms differ in summation order, so
// --deterministic-mode turns it off. A problem first seen with beta != 0 is timed into a temporary of C's size
// (cudaMalloc, outside the memory plan, freed at once); the engine's first call of each weight-gradient problem
// overwrites (beta = 0), so only the residual-add GEMMs take one (n x h, 16-bit); where the device has no room for it,
// that problem keeps the heuristic's choice. Initial value from the environment when the backend is constructed:
//   MEGATRON_GEMM_AUTOTUNE=0 | 1   (unset: 1)
//   MEGATRON_GEMM_TUNE_CANDIDATES=K  how many of the heuristic's candidates are timed (1-64,
//                                    unset: 32; 350M step A/B on the H100, three interleaved
//                                    pairs: 81.13 / 81.52 / 80.95 ms with 32 vs 81.34 / 82.02 /
//                                    81.48 with 8, setup time unchanged at ~1.6 s)
#pragma once

#include "backend/ops.h"

namespace megatron::backend {

// `backend` must be a CUDA backend (megatron::Error otherwise, and always without CUDA).
void set_gemm_autotune(Backend& backend, bool on);

}  // namespace megatron::backend
