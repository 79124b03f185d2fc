// Where the CUDA backend's device memory of one kind comes from, when not from cudaMalloc: the
// copy-engine data parallelism (comm::use_symmetric_memory) puts the parameters and gradients
// in NCCL's symmetric memory (ncclMemAlloc), which NCCL's copy engines can reach on every GPU
// of the group. Per GPU (one process may drive several in tests), set before the memory is
// allocated; storage already allocated keeps its allocator (the Storage remembers how to free).
#pragma once

#include <cstdint>
#include <functional>

#include "core/tensor.h"

namespace megatron::backend {

struct DeviceAllocator {
  // bytes > 0. nullptr: this allocator cannot (the storage then comes from cudaMalloc, freed
  // with cudaFree); throws megatron::Error where cudaMalloc would not help either.
  std::function<void*(int64_t bytes)> alloc;
  std::function<void(void*)> release;  // never throws; only what alloc returned
};

// From now on CudaBackend::empty(..., kind) on GPU `device` allocates with `allocator`; an
// allocator without alloc goes back to cudaMalloc.
void set_device_allocator(int device, MemoryKind kind, DeviceAllocator allocator);

}  // namespace megatron::backend
