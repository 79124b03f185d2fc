// Tensor: a dtype, a shape and a view into reference-counted device storage. Always
// contiguous (row-major); views share storage. Tensors carry no autograd: model/ layers
// keep what their backward needs explicitly (docs/design.md, "Explicit forward and backward, no
// autograd").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/memory.h"

namespace megatron {

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& shape);
std::string shape_string(const Shape& shape);  // "[2, 3, 4]"

// Owns `bytes` bytes at `ptr` on `device`; frees them with `release` and updates the
// device's MemoryTracker under `kind`.
class Storage {
 public:
  Storage(void* ptr, int64_t bytes, Device device, MemoryKind kind, std::function<void(void*)> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return ptr_; }
  int64_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  MemoryKind kind() const { return kind_; }

 private:
  void* ptr_;
  int64_t bytes_;
  Device device_;
  MemoryKind kind_;
  std::function<void(void*)> release_;
};

// 64-byte aligned host storage, zero-filled.
std::shared_ptr<Storage> allocate_cpu_storage(int64_t bytes, MemoryKind kind);

class Tensor {
 public:
  Tensor() = default;
  // A view of `shape` starting `offset` elements into `storage`.
  Tensor(std::shared_ptr<Storage> storage, int64_t offset, Shape shape, DType dtype);

  // A zero-filled host tensor.
  static Tensor cpu(Shape shape, DType dtype = DType::kF32, MemoryKind kind = MemoryKind::kOther);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_->device(); }
  const Shape& shape() const { return shape_; }
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const;  // negative i counts from the end
  int64_t numel() const { return numel_; }
  int64_t nbytes() const { return numel_ * dtype_size(dtype_); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* data() const;
  // Typed host pointer; checks the dtype (float: fp32, uint16_t: bf16/fp16, int32_t, int64_t).
  template <class T>
  T* data_as() const;

  // The same elements with another shape (numel must match).
  Tensor view(Shape shape) const;
  // Rows [begin, end) along dim 0.
  Tensor slice(int64_t begin, int64_t end) const;
  // Elements [offset, offset + numel(shape)) of this tensor's flat range, as `shape`: how
  // parameters and gradients are carved out of one flat buffer.
  Tensor flat_view(int64_t offset, Shape shape) const;

  std::string describe() const;  // "bf16[4, 8]"

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
};

// True when the bytes of a and b intersect (views of one buffer that share an element, e.g. an
// op's input and its in-place output). Undefined or empty tensors overlap nothing.
inline bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.nbytes() == 0 || b.nbytes() == 0) return false;
  const auto* pa = static_cast<const char*>(a.data());
  const auto* pb = static_cast<const char*>(b.data());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

}  // namespace megatron
