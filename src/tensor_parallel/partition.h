// How a parameter is split over the tensor-parallel group (Megatron's tensor_model_parallel /
// partition_dim / partition_stride=1 attributes) and the index math between a rank's shard and
// the global tensor, used to initialise shards with the single-process values and to save and
// load checkpoints with global shapes (docs/design.md, "Interoperable files").
//
//   dim -1: replicated (LayerNorm, position embedding, row-parallel biases): shard == global.
//   dim  0: rows split (column-parallel weights [out/T, in] and biases [out/T], the vocab-
//           parallel embedding and output layer [V/T, h]): rank r holds global rows
//           [r * R/T, (r+1) * R/T), one contiguous block of the flat tensor.
//   dim  1: columns split (row-parallel weights [out, in/T]): rank r holds columns
//           [r * C/T, (r+1) * C/T) of every row. Example [2, 4] over T = 2: global
//           [[0 1 2 3] [4 5 6 7]] -> rank 0 [[0 1] [4 5]], rank 1 [[2 3] [6 7]].
// The fused QKV weight [3 * heads * d, h] is split by rows: with Megatron's per-head [q|k|v]
// row order, rank r's block is exactly the heads [r * heads/T, (r+1) * heads/T).
//   dim 0 with chunks c > 1: the rows are c equal blocks, each split over the ranks, and rank r
//           holds its rows of every block in block order (SwiGLU's linear_fc1 [2f, h] = [gate;
//           up]: rank r holds [gate rows r f/T..; up rows r f/T..], as Megatron-core's sharded
//           state dict). That is dim 1 of the flat tensor viewed as [c, numel / c].
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "core/tensor.h"

namespace megatron::tensor_parallel {

struct Partition {
  int dim = -1;      // -1 (replicated), 0 or 1
  int64_t rank = 0;  // tensor-parallel rank and size
  int64_t size = 1;
  int64_t chunks = 1;  // dim 0 only: blocks of rows split separately
  bool split() const { return dim >= 0 && size > 1; }
};

// A chunked dim-0 split as the equivalent dim-1 split of the flat tensor viewed as [chunks,
// numel / chunks]; any other partition as it is. The index math below works on these.
inline void as_plain_split(const Shape& global, const Partition& p, Shape* shape, Partition* plain) {
  if (p.split() && p.dim == 0 && p.chunks > 1) {
    *shape = {p.chunks, shape_numel(global) / p.chunks};
    *plain = Partition{1, p.rank, p.size, 1};
  } else {
    *shape = global;
    *plain = p;
  }
}

// The shard's shape: global with dimension `dim` divided by size (checked divisible).
Shape local_shape(const Shape& global, const Partition& p);
// Flat index in the global tensor of flat element `k` of the shard.
int64_t global_index(const Shape& global, const Partition& p, int64_t k);
// The shard's flat elements [begin, begin + count) as runs of consecutive global elements, in
// order: fn(global_start, shard_start, n) for each maximal run (one run for dim -1 and dim 0;
// for dim 1 one per row touched, C/T elements each but the first and last). What a rank
// writing its own shard into the global tensor's bytes needs (ckpt/checkpoint.cpp).
template <class Fn>
void for_each_global_run(const Shape& global_shape, const Partition& partition, int64_t begin, int64_t count, Fn&& fn) {
  if (count <= 0) return;
  Shape global;
  Partition p;
  as_plain_split(global_shape, partition, &global, &p);
  if (!p.split() || p.dim == 0) {
    fn(global_index(global, p, begin), begin, count);
    return;
  }
  const int64_t local_cols = global[1] / p.size;
  for (int64_t k = begin, end = begin + count; k < end;) {
    const int64_t n = std::min(end - k, local_cols - k % local_cols);  // to the end of this row
    fn(global_index(global, p, k), k, n);
    k += n;
  }
}
// global_index as Backend::init_normal's affine index map (offset, local_cols, global_cols;
// seed, stream and scale left at their defaults), for filling a shard on its device.
backend::NormalInit shard_index_map(const Shape& global, const Partition& p);

// The global tensor (host, shard's dtype) assembled from the group's shards: every rank of
// `tp` passes its shard (contiguous, on the backend's device) and gets the whole. Replicated:
// a host copy of the shard.
Tensor gather_partitioned(comm::Communicator& tp, backend::Backend& backend, const Tensor& shard, const Shape& global,
                          const Partition& p);
// This rank's shard (host, global's dtype) cut from a host global tensor.
Tensor slice_partition(const Tensor& global, const Partition& p);

}  // namespace megatron::tensor_parallel
