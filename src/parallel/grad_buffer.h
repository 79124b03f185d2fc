// Data-parallel gradient reduction over the model's flat main-grad buffer (Megatron's
// ParamAndGradBuffer; docs/megatron-formats.md, "Distributed optimizer and gradient buffers"), and
// the distributed optimizer's shard ranges.
//
// Layout. model::ParameterSet keeps values and grads in registration order; backward produces
// the gradients of the last registered parameters first. Buckets are therefore cut walking
// the buffer from its end towards 0 (backprop order, as Megatron lays its buffer out in
// reverse registration order): a bucket closes at the first parameter boundary at which it
// holds >= bucket_size elements; bucket_size <= 0 means one bucket for everything (Megatron's
// default without --overlap-grad-reduce). Bucket 0 is the last range of the buffer.
// A bucket also closes where a parameter listed in BucketLayout::starts begins: with pipeline
// parallelism the first parameter of each model chunk (Megatron keeps one buffer, so one set
// of buckets, per chunk: a bucket is complete when its chunk's last backward has run), and
// the tied word embedding and the parameter after it (it gets a bucket of its own, as in
// Megatron). Example: stage 0 of PP2 with vp 2, one layer per chunk, no size limit:
//   params [word, pos | layer 0 (12) | layer 2 (12)], starts {1 (after word), 14 (chunk 1)}
//   -> buckets [layer 2], [pos + layer 0], [word].
//
// Sharding (--use-distributed-optimizer). Each bucket [a, b) of n elements is cut into dp
// contiguous pieces of S = ceil(n / dp) elements (the last ones shorter, possibly empty: the
// padding Megatron adds to make n divisible, left out); DP rank r owns piece r of EVERY bucket,
// including parameter fragments that cross piece boundaries (Megatron's _build_model_gbuf_range).
// Without the distributed optimizer a rank "owns" the whole buffer.
//
// Reduction (finish_grad_sync). Gradients are scaled by 1/dp (Megatron's
// gradient_scaling_factor, inside the collective: comm::ReduceOp::kAvg) and summed over the
// data-parallel group bucket by bucket: an
// all-reduce, or with the distributed optimizer a reduce-scatter that leaves the sum in this
// rank's pieces only (the rest of the buffer is then stale and must not be read).
// After the optimizer step the distributed optimizer all-gathers each bucket of the (model
// dtype) parameter values from the owners' pieces.
//
// Overlap (Megatron's --overlap-grad-reduce / --overlap-param-gather). The collectives are
// started (comm::Communicator::start_*) rather than waited for one by one:
//  - grad reduce: a chunk's gradients are final only after the backward of its last
//    micro-batch of the iteration (Megatron's no_sync for the others). Around the computes
//    that finish them (that backward, and on the last pipeline stage also the forward of the
//    last micro-batch, whose loss head backward runs inside it) the caller arms the chunk's
//    range (arm_grad_overlap / disarm_grad_overlap); the model reports how far its gradients
//    are final (model::ParamHooks::grads_final_from) and each bucket of the armed range whose
//    parameters all are is scaled and its collective started at once, so that it runs beside
//    the rest of the backward. finish_grad_sync() starts what is left and waits for all.
//    The held bucket (BucketLayout::held: the tied word embedding with pipeline parallelism)
//    is never started early: its gradient is first summed with the other stage's copy over the
//    embedding group (train/trainer.cpp), which needs the whole local gradient; it starts in
//    finish_grad_sync(), called after that sum.
//  - param gather: start_param_gather() starts every bucket's all-gather in the order the
//    forward reads them (the last bucket first) and returns; the forward waits for each one
//    just before it reads the bucket's parameters (ParamHooks::before_reading; with several
//    chunks their first forwards run in chunk order, so parameter order is reading order);
//    finish_param_gather() waits for whatever is still in flight (before anything else reads
//    the parameters: a checkpoint, a norm).
// The results are bit-identical to the non-overlapped reduction: the same collectives on the
// same data, only started earlier.
//
// Gradient dtype (Megatron-Core's grad_reduce_in_fp32: DDP's buffer holds the model dtype unless
// --accumulate-allreduce-grads-in-fp32; the default with --fp16, and with --bf16
// --grad-reduce-in-bf16). The buffer is model::ParameterSet's gradient storage, allocated in
// grad_dtype (ParameterSet::allocate): with bf16/fp16 it is 2 bytes a parameter in memory and on
// the wire, as Megatron's:
//  - accumulation: every backward op writes its gradient into it as backend/ops.h's "(+=)"
//    outputs say: the op's fp32 result plus the old 16-bit value, added in fp32 and rounded
//    once (Megatron/TE's fused wgrad accumulation into a 16-bit main_grad; cuBLASLt's beta = 1
//    into a 16-bit C on CUDA);
//  - reduction: a bucket is scaled by 1/dp in its dtype (Backend::scale: the fp32 product
//    rounded once, Megatron's gradient_scaling_factor on the 16-bit buffer) and summed (kSum)
//    in 16 bits: NCCL natively; MPI through a user-defined op (comm/mpi_communicator.h) whose
//    every combination of two values is added in fp32 and rounded once. Over two ranks that is
//    one rounded addition, the same bits either way; over more, each partial sum is rounded in
//    the library's order (NCCL's ring, Open MPI's algorithm): last-bit differences between the
//    two, as between Megatron runs on different NCCL algorithms.
// The sums the step makes before the reduction (the tied embedding over the embedding group,
// sequence-parallel LayerNorm gradients over TP; train/train_step.h) are 16-bit all-reduces of
// the buffer's values, as Megatron's; so are the LayerNorm sums after it with
// --overlap-grad-reduce. The optimizer reads the 16-bit values in place
// (parallel/optimizer.h). fp32 (the default with --bf16 and with
// --accumulate-allreduce-grads-in-fp32) averages in the collective (kAvg) as above.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "model/parameters.h"
#include "parallel/grad_buckets.h"

namespace megatron::parallel {

// How the buffer is cut into buckets (see above).
struct BucketLayout {
  int64_t bucket_size = 0;      // --ddp-bucket-size (elements; <= 0: no size limit)
  std::vector<int64_t> starts;  // parameter indices that begin a bucket (any order)
  int64_t held = -1;            // a parameter alone in its bucket, started only at finish (-1: none)
};

// Buckets of a buffer of parameters in backprop order (see above; parallel::grad_buckets).
std::vector<Range> grad_buckets(const model::ParameterSet& params, int64_t bucket_size,
                                const std::vector<int64_t>& starts = {}, int64_t held = -1);
// The buckets of `layout` (its starts, and the held parameter's own bucket).
std::vector<Range> grad_buckets(const model::ParameterSet& params, const BucketLayout& layout);
// The ranges rank `rank` of `dp` owns: piece `rank` of each bucket (empty pieces left out), in
// bucket order.
std::vector<Range> owned_ranges(const std::vector<Range>& buckets, int64_t dp, int64_t rank);

class GradBuffer {
 public:
  // `dp` is the data-parallel group (size 1: nothing to reduce); distributed selects
  // reduce-scatter + sharded ownership.
  GradBuffer(model::ParameterSet& params, comm::Communicator& dp, bool distributed, int64_t bucket_size);
  GradBuffer(model::ParameterSet& params, comm::Communicator& dp, bool distributed, const BucketLayout& layout);
  // grad_dtype: params.grads()'s dtype (ParameterSet::allocate); bf16 or fp16 is scaled on
  // `backend` before its reduction (see "Gradient dtype" above); fp32 needs no backend.
  GradBuffer(model::ParameterSet& params, comm::Communicator& dp, bool distributed, const BucketLayout& layout,
             DType grad_dtype, backend::Backend* backend);

  // The dtype the gradients are accumulated and reduced in: params.grads()'s (see above).
  DType grad_dtype() const { return grad_dtype_; }

  // Average (kAvg) all-reduce / reduce-scatter every bucket not started yet, then wait for
  // all of them (no-op at dp 1).
  void finish_grad_sync();
  // --overlap-grad-reduce: the compute about to run finishes, for this iteration, the
  // gradients of parameters [first, end) (a model chunk's), so its grads_final_from() calls
  // start the buckets inside that range; disarm when it is done.
  void arm_grad_overlap(int64_t first, int64_t end);
  void disarm_grad_overlap() { armed_ = {}; }
  // The gradients of parameters [k, end of the armed chunk) are final: starts the armed
  // buckets they complete (none while disarmed), in bucket (backprop) order.
  void grads_final_from(int64_t k);

  // Distributed optimizer: all-gather the owners' pieces of the parameter values, bucket by
  // bucket (no-op otherwise), waiting unless `overlap`, in which case the forward waits for
  // them through before_reading() and finish_param_gather() for any left.
  void start_param_gather(bool overlap);
  // The same, each bucket's gather started right after update(bucket) (in the order the
  // forward reads them): the distributed optimizer updates its piece of a bucket there, so that
  // the gathers of the first buckets run beside the update of the others. update runs for
  // every bucket, distributed or not (dp 1: no gather).
  void start_param_gather(bool overlap, const std::function<void(const Range& bucket)>& update);
  // Parameters [0, k) are about to be read: waits for the gathers of the buckets holding them.
  void before_reading(int64_t k);
  void finish_param_gather();

  // Copy-engine collectives for this buffer's reduce-scatters and parameter gathers
  // (comm::Communicator::enable_copy_engine over the values and gradients, with a receive
  // buffer for the largest bucket): the distributed optimizer only (an all-reduce needs the
  // SMs). Collective over the group; off, and why, where it cannot, and then nothing changes.
  comm::CopyEngineResult enable_copy_engine();
  // Of those, the last buckets in backprop order keep the SMs' reduce-scatter
  // (parallel::kCopyEngineTailBuckets says why).
  static constexpr size_t kTailBucketsOnSms = parallel::kCopyEngineTailBuckets;
  // The fp32 elements of the receive buffer enable_copy_engine asks the group for
  // (parallel::copy_engine_receive_elements).
  int64_t copy_engine_receive_elements() const;

  const std::vector<Range>& buckets() const { return buckets_; }
  // The index of the held bucket (BucketLayout::held), or buckets().size() for none.
  size_t held_bucket() const { return held_; }
  // What this rank's optimizer updates: its pieces, or the whole buffer.
  const std::vector<Range>& owned() const { return owned_; }
  int64_t owned_numel() const { return owned_numel_; }
  bool distributed() const { return distributed_; }
  bool copy_engine_on() const { return copy_engine_; }  // enable_copy_engine succeeded
  comm::Communicator& group() const { return dp_; }

 private:
  model::ParameterSet& params_;
  comm::Communicator& dp_;
  bool distributed_;
  DType grad_dtype_ = DType::kF32;
  backend::Backend* backend_ = nullptr;  // for the 16-bit buffer's scaling
  std::vector<Range> buckets_;
  size_t held_;
  bool copy_engine_ = false;  // enable_copy_engine succeeded
  std::vector<Range> owned_;
  int64_t owned_numel_ = 0;
  void start_grad_bucket(size_t i);
  int64_t offset_of(int64_t k) const;  // where parameter k starts (the buffer's end for k = P)
  // Grad reduce: the armed element range (empty: none), which buckets started, those in flight.
  Range armed_;
  std::vector<bool> grad_started_;
  std::vector<std::unique_ptr<comm::PendingCollective>> grad_pending_;
  // Param gather in flight, by bucket (null: done or never started).
  std::vector<std::unique_ptr<comm::PendingCollective>> gather_pending_;
};

}  // namespace megatron::parallel
