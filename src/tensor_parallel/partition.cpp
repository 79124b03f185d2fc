#include "tensor_parallel/partition.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace megatron::tensor_parallel {

Shape local_shape(const Shape& global, const Partition& p) {
  Shape s = global;
  if (!p.split()) return s;
  const int64_t parts = p.size * (p.dim == 0 ? p.chunks : 1);
  MT_CHECK(p.dim < static_cast<int>(s.size()) && (p.dim == 0 || p.chunks == 1) &&
           s[static_cast<size_t>(p.dim)] % parts == 0)
      << "shape " << shape_string(global) << " does not split along dim " << p.dim << " over " << p.size << " x "
      << p.chunks << " chunks";
  s[static_cast<size_t>(p.dim)] /= p.size;
  return s;
}

int64_t global_index(const Shape& global_shape, const Partition& partition, int64_t k) {
  Shape global;
  Partition p;
  as_plain_split(global_shape, partition, &global, &p);
  if (!p.split()) return k;
  if (p.dim == 0) return p.rank * (shape_numel(global) / p.size) + k;
  // dim 1 of [R, C]: local [R, C/T].
  const int64_t cols = global[1], local_cols = cols / p.size;
  return (k / local_cols) * cols + p.rank * local_cols + k % local_cols;
}

backend::NormalInit shard_index_map(const Shape& global_shape, const Partition& partition) {
  Shape global;
  Partition p;
  as_plain_split(global_shape, partition, &global, &p);
  backend::NormalInit m;
  const int64_t n = shape_numel(global) / (p.split() ? p.size : 1);  // the shard's elements
  m.local_cols = m.global_cols = std::max<int64_t>(n, 1);
  if (p.split() && p.dim == 0) {
    m.offset = p.rank * n;
  } else if (p.split()) {  // dim 1 of [R, C]: this rank's C / T columns of each row
    m.global_cols = global[1];
    m.local_cols = m.global_cols / p.size;
    m.offset = p.rank * m.local_cols;
  }
  return m;
}

Tensor gather_partitioned(comm::Communicator& tp, backend::Backend& backend, const Tensor& shard, const Shape& global,
                          const Partition& p) {
  if (!p.split()) {
    Tensor host_shard = Tensor::cpu(shard.shape(), shard.dtype());
    backend.copy(shard, host_shard);
    return host_shard;
  }
  MT_CHECK_EQ(tp.size(), p.size);
  // Concatenation of the shards in rank order, gathered where the communicator works (the
  // backend's device: NCCL needs GPU memory), then placed on the host by global_index.
  Tensor gathered = backend.empty({shard.numel() * p.size}, shard.dtype(), MemoryKind::kOther);
  comm::all_gather(tp, shard.view({shard.numel()}), gathered);
  Tensor stacked = Tensor::cpu({shard.numel() * p.size}, shard.dtype());
  backend.copy(gathered, stacked);
  if (p.dim == 0 && p.chunks == 1) return stacked.view(global);
  Tensor out = Tensor::cpu(global, shard.dtype());
  const int64_t e = dtype_size(shard.dtype()), n = shard.numel();
  const char* src = static_cast<const char*>(stacked.data());
  char* dst = static_cast<char*>(out.data());
  for (int64_t r = 0; r < p.size; ++r) {
    const Partition pr{p.dim, r, p.size, p.chunks};
    for (int64_t k = 0; k < n; ++k) {
      std::memcpy(dst + global_index(global, pr, k) * e, src + (r * n + k) * e, static_cast<size_t>(e));
    }
  }
  return out;
}

Tensor slice_partition(const Tensor& global, const Partition& p) {
  MT_CHECK(global.device() == Device::kCPU) << "slice_partition of a device tensor";
  if (!p.split()) return global;
  const Shape local = local_shape(global.shape(), p);
  Tensor out = Tensor::cpu(local, global.dtype());
  const int64_t e = dtype_size(global.dtype()), n = out.numel();
  const char* src = static_cast<const char*>(global.data());
  char* dst = static_cast<char*>(out.data());
  if (p.dim == 0 && p.chunks == 1) {
    std::memcpy(dst, src + p.rank * n * e, static_cast<size_t>(n * e));
    return out;
  }
  for (int64_t k = 0; k < n; ++k)
    std::memcpy(dst + k * e, src + global_index(global.shape(), p, k) * e, static_cast<size_t>(e));
  return out;
}

}  // namespace megatron::tensor_parallel
