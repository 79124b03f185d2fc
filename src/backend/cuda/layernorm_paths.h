// Which LayerNorm forward kernel a CUDA backend runs for rows that fit one warp (cuda_norm.cu).
// A plain C++ header, like gemm_tuning.h, with a stub that throws in builds without CUDA.
//
//   one warp per row      (default) up to 8 16-byte loads in flight per lane, warp-only sums:
//                         1.3B on an H100, 49 calls per step: 2.95 -> 1.81 ms
//                         (bench/results/2026-11-23.md, "LayerNorm: warp-per-row forward")
//   row groups            rows split over 1-16 warps joined by block-wide sums (~1/3 of HBM
//                         bandwidth at GPT sizes); longer rows always take it
// Both give fixed-order, run-to-run identical bits (not the same bits as each other).
// Initial value from the environment when the backend is constructed:
//   MEGATRON_LN_WARP_FORWARD=0 | 1   (unset: 1)
#pragma once

#include "backend/ops.h"

namespace megatron::backend {

// `backend` must be a CUDA backend (megatron::Error otherwise, and always without CUDA).
void set_layernorm_warp_forward(Backend& backend, bool on);

}  // namespace megatron::backend
