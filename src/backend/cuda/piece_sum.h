// The sum half of a reduce-scatter done as an all-to-all plus a local sum (the copy-engine
// data parallelism of comm::Communicator::enable_copy_engine): after the all-to-all, rank r's
// receive buffer holds `pieces` rows of `stride` elements, row q being group rank q's copy of
// piece r; this adds them up into r's piece.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace megatron::backend {

// out[i] = sum over q = 0, 1, ..., pieces-1, in that order, of (scale * in[q * stride + i]),
// for i < n, fp32, on `stream`: each product and partial sum rounded to fp32, no fused
// multiply-add (scale = 1 / pieces gives the products of NCCL's ncclAvg, a pre-multiplied
// sum). `out` [n] must not overlap `in` [pieces * stride]; n <= stride; pieces >= 1.
void sum_pieces_f32(const float* in, float* out, int64_t pieces, int64_t stride, int64_t n, float scale,
                    cudaStream_t stream);

}  // namespace megatron::backend
