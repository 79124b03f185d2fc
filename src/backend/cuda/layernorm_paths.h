// Which LayerNorm forward kernel a CUDA backend runs for rows that fit one warp (cuda_norm.cu).
// A plain C++ header, like gemm_tuning.h, with a stub that throws in builds without CUDA.
//
//   row groups (default)  rows split over 1-16 warps joined by block-wide sums: measured on
//                         the H100 (bench/RESULTS.md), ~1/3 of HBM bandwidth at GPT sizes
//   one warp per row      up to 8 16-byte loads in flight per lane, warp-only sums: written for
//                         that gap, compiled and covered by the GPU tests, but not yet run on a
//                         GPU (no device could be had in its session); opt-in until it has been
// Both give fixed-order, run-to-run identical bits (not the same bits as each other).
// Initial value from the environment when the backend is constructed:
//   MEGATRON_LN_WARP_FORWARD=0 | 1
#pragma once

#include "backend/ops.h"

namespace megatron::backend {

// `backend` must be a CUDA backend (megatron::Error otherwise, and always without CUDA).
void set_layernorm_warp_forward(Backend& backend, bool on);

}  // namespace megatron::backend
