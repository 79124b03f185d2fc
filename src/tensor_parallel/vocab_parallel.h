// The vocab-parallel pieces of Megatron-core (tensor_parallel/layers.py VocabParallelEmbedding,
// tensor_parallel/cross_entropy.py vocab_parallel_cross_entropy) over the tensor-parallel group.
//
// Partition: the padded vocabulary V (a multiple of --make-vocab-size-divisible-by * T) is cut
// into T equal slices; rank r holds ids [r * V/T, (r+1) * V/T): its rows of the word
// embedding [V/T, h] and of the output layer, and its columns of the logits [n, V/T].
// Example V = 50432, T = 2: rank 0 ids [0, 25216), rank 1 ids [25216, 50432).
//
// Embedding: each rank looks its ids up (the others give zero rows; backend embedding ops
// treat ids outside the table that way), rank 0 alone adds the position embedding, and the
// partial sums are all-reduced (or, with sequence parallelism, reduce-scattered along the
// sequence). Each output element is one word row plus one position row plus exact zeros, so
// the sum is the single-process value bit for bit.
//
// Cross-entropy: from each rank's logits [n, V/T] the backend's cross_entropy_forward gives the
// slice's lse_r = log sum_{v in slice} exp(l_v) (computed max-subtracted) and, on the rank that
// holds the label, loss_r = lse_r - l_label. Then over the group, per row:
//   M = max_r lse_r                                 (all-reduce MAX: Megatron's logits max)
//   S = sum_r exp(lse_r - M)                        (all-reduce SUM: Megatron's sum of exp)
//   target = lse_owner - loss_owner, 0 elsewhere     (all-reduce SUM: Megatron's target logit)
//   lse = M + log S, loss = lse - target
// on the device, in the stream's order (three all-reduces of n fp32 values, as Megatron; the
// per-row steps are the backend's vocab_parallel_ce_terms / _finish, double arithmetic rounded
// to fp32): the host waits for nothing, and the losses reach it as the single-shard head's do.
// The backward is the backend's cross_entropy_backward on the local slice with the global lse
// and the local labels (ids of other ranks have no one-hot term): softmax - onehot, local, no
// communication.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "core/tensor.h"

namespace megatron::tensor_parallel {

struct VocabRange {
  int64_t start = 0;  // first id of this rank's slice
  int64_t size = 0;   // V / T
  bool contains(int64_t id) const { return id >= start && id < start + size; }
};

// Rank `rank` of `size`'s slice of a padded vocabulary of `padded_vocab` (divisible by size).
VocabRange vocab_range(int64_t padded_vocab, int64_t rank, int64_t size);

// ids shifted into the slice: id - start for ids in it, -1 (no row, no label) for the others.
std::vector<int32_t> localize_ids(const std::vector<int32_t>& ids, const VocabRange& range);

// Forward of the vocab-parallel cross-entropy (see above). logits [n, V/T] (model dtype),
// local_labels [n] int32 (localize_ids), max_scratch, losses and lse [n] fp32, all on the
// backend's device. On return losses holds each row's loss over the whole vocabulary and lse
// the whole vocabulary's lse (for the backward); max_scratch is overwritten. Collective over
// `tp`.
void vocab_parallel_cross_entropy(backend::Backend& backend, comm::Communicator& tp, const Tensor& logits,
                                  const Tensor& local_labels, Tensor& max_scratch, Tensor& losses, Tensor& lse);

}  // namespace megatron::tensor_parallel
