// The collective pairs tensor-parallel layers are built from (Megatron-core
// tensor_parallel/mappings.py), on activations laid out [s, b, h] (rows n = s*b, sequence
// first) over the tensor-parallel group `tp` of T ranks. Each function is one direction of a
// pair; the layer calls the partner in its backward:
//
//   pair (Megatron name)                         forward               backward
//   copy_to_tensor_model_parallel_region         identity              all_reduce_tp
//   reduce_from_tensor_model_parallel_region     all_reduce_tp         identity
//   gather_from_sequence_parallel_region         gather_sequence       reduce_scatter_sequence
//   reduce_scatter_to_sequence_parallel_region   reduce_scatter_seq.   gather_sequence
//   scatter_to_sequence_parallel_region          (split, no comm)      gather_sequence
//
// Sequence split: rank r holds rows [r * n/T, (r+1) * n/T) of the [n, h] tensor. Activations
// are sequence-first, so these rows are the sequence positions [r * s/T, (r+1) * s/T) of
// every batch entry, and they are one contiguous block: worked example s = 4, b = 2, T = 2:
// rows (si, bi) = (0,0) (0,1) (1,0) (1,1) | (2,0) (2,1) (3,0) (3,1), rank 0 | rank 1.
// The shard's first element is element r * (n/T) * h of the whole tensor: its dropout offset
// (backend/ops.h), so sequence-parallel masks equal the single-process run's.
#pragma once

#include <cstdint>
#include <memory>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace megatron::tensor_parallel {

// x := sum over the group of x (in place). T == 1: nothing.
void all_reduce_tp(comm::Communicator& tp, Tensor& x);

// Rows of this rank's sequence shard: n / T (n divisible by T, checked).
int64_t shard_rows(const comm::Communicator& tp, int64_t n);
// This rank's shard of full [n, ...] as a view (rows [r * n/T, (r+1) * n/T)).
Tensor sequence_shard(const comm::Communicator& tp, const Tensor& full);

// full [n, h] := the concatenation over ranks of their shards [n/T, h]. `shard` may be this
// rank's shard of `full` (sequence_shard(full)); then no copy is made.
void gather_sequence(comm::Communicator& tp, const Tensor& shard, Tensor& full);
// shard [n/T, h] := this rank's rows of the sum over the group of full [n, h]; `shard` may be
// sequence_shard(full) (in place); the rest of `full` is then unspecified.
void reduce_scatter_sequence(comm::Communicator& tp, Tensor& full, Tensor& shard);

// The same two reductions started, not waited for (Megatron's asynchronous input-gradient
// all-reduce / reduce-scatter in a column-parallel linear's backward, overlapped with the
// weight-gradient GEMM): the result is the blocking call's once wait() returns; until then
// the caller must not touch x / full / shard. T == 1: a finished handle, nothing done.
std::unique_ptr<comm::PendingCollective> start_all_reduce_tp(comm::Communicator& tp, Tensor& x);
std::unique_ptr<comm::PendingCollective> start_reduce_scatter_sequence(comm::Communicator& tp, Tensor& full,
                                                                       Tensor& shard);
// gather_sequence started, not waited for (the backward's second gather of a column-parallel
// input, overlapped with the input-gradient GEMM). `shard` must not be a view of `full`.
// T == 1: the one-rank group's gather (full := shard); callers gather only under sequence
// parallelism, where T > 1.
std::unique_ptr<comm::PendingCollective> start_gather_sequence(comm::Communicator& tp, const Tensor& shard,
                                                               Tensor& full);

}  // namespace megatron::tensor_parallel
