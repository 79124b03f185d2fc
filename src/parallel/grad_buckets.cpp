#include "parallel/grad_buckets.h"

#include <algorithm>

#include "core/error.h"

namespace megatron::parallel {

std::vector<Range> grad_buckets(std::span<const int64_t> offsets, int64_t total, int64_t bucket_size,
                                std::span<const int64_t> starts, int64_t held) {
  const size_t P = offsets.size();
  std::vector<bool> starts_bucket(P, false);
  auto mark = [&](int64_t k) {
    MT_CHECK(k >= 0 && k <= static_cast<int64_t>(P)) << "bucket start at parameter " << k << " of " << P;
    if (k < static_cast<int64_t>(P)) starts_bucket[static_cast<size_t>(k)] = true;
  };
  for (int64_t k : starts) mark(k);
  if (held >= 0) {  // it begins a bucket, and its successor another
    mark(held);
    mark(held + 1);
  }
  std::vector<Range> buckets;
  int64_t end = total;
  for (size_t i = P; i-- > 0;) {
    const int64_t start = offsets[i];
    if (end > start && ((bucket_size > 0 && end - start >= bucket_size) || starts_bucket[i])) {
      buckets.push_back({start, end});
      end = start;
    }
  }
  if (end > 0 || buckets.empty()) buckets.push_back({0, end});
  return buckets;
}

int64_t overlap_bucket_elements(int64_t dp) { return std::max<int64_t>(40'000'000, 1'000'000 * dp); }

std::vector<int64_t> shard_counts(int64_t n, int64_t dp) {
  MT_CHECK(dp >= 1 && n >= 0) << "shard_counts(" << n << ", " << dp << ")";
  const int64_t s = (n + dp - 1) / dp;
  std::vector<int64_t> counts(static_cast<size_t>(dp));
  for (int64_t r = 0; r < dp; ++r) counts[static_cast<size_t>(r)] = std::clamp<int64_t>(n - r * s, 0, s);
  return counts;
}

int64_t copy_engine_receive_elements(const std::vector<Range>& buckets, int64_t dp) {
  int64_t largest = 0;
  for (size_t i = 0; i + kCopyEngineTailBuckets < buckets.size(); ++i) {
    largest = std::max(largest, shard_counts(buckets[i].size(), dp)[0] * dp);
  }
  return largest;
}

}  // namespace megatron::parallel
