// The data-parallel gradient buckets as element ranges, from parameter offsets alone: the
// layout math of parallel/grad_buffer.h (which holds the buffers and runs the collectives), here
// without tensors so that the memory plans (plan/memory_model.h, --dry-run) can size what the
// buckets imply before anything is allocated.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace megatron::parallel {

// Elements [start, end) of the flat buffers.
struct Range {
  int64_t start = 0;
  int64_t end = 0;
  int64_t size() const { return end - start; }
};

// Buckets of a buffer of `total` elements holding parameters that start at `offsets`
// (ascending, registration order), in backprop order: walking from the buffer's end towards 0,
// a bucket closes at the first parameter boundary at which it holds >= bucket_size elements
// (bucket_size <= 0: no limit) or where a parameter listed in `starts` begins; parameter
// `held` (>= 0) gets a bucket of its own. parallel/grad_buffer.h explains the rules and gives an
// example.
std::vector<Range> grad_buckets(std::span<const int64_t> offsets, int64_t total, int64_t bucket_size,
                                std::span<const int64_t> starts, int64_t held = -1);

// Megatron's bucket size with --overlap-grad-reduce (and no --ddp-bucket-size / --ddp-num-buckets):
// max(4e7, 1e6 dp) elements (docs/megatron-formats.md, "Distributed optimizer and gradient
// buffers").
int64_t overlap_bucket_elements(int64_t dp);

// The dp pieces of a bucket of n elements: counts[r] = clamp(n - r*S, 0, S), S = ceil(n/dp).
std::vector<int64_t> shard_counts(int64_t n, int64_t dp);

// Copy-engine data parallelism (MEGATRON_DP_COPY_ENGINE, comm::Communicator::enable_copy_engine):
// the last kCopyEngineTailBuckets buckets in backprop order keep the SMs' reduce-scatter (they
// start at the end of the backward, where the copy engines, slowed by the compute beside them,
// finish after it: 350M DP4 on 4 x H200, the second-to-last bucket's 168 MB took 2.9 ms instead
// of 1.2 on the SMs). Two measured best on 2 x H200 (350M 95.7-96.0% against 94.5-95.4% with
// none and 95.1-95.3% with one; 1.3B 96.6% against 96.0%; bench/results/2026-11-28.md, "the
// data-parallel collectives on the copy engines", call 7).
constexpr size_t kCopyEngineTailBuckets = 2;
// The fp32 elements of the all-to-all's receive buffer: dp pieces of ceil(n / dp) of the
// largest bucket that uses the copy engines (0 when only the tail is left, as with one bucket).
int64_t copy_engine_receive_elements(const std::vector<Range>& buckets, int64_t dp);

}  // namespace megatron::parallel
