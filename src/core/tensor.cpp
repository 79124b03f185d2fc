#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>
#include <type_traits>

#include "core/error.h"

namespace megatron {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    MT_CHECK(d >= 0) << "negative dimension in " << shape_string(shape);
    n *= d;
  }
  return n;
}

std::string shape_string(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

Storage::Storage(void* ptr, int64_t bytes, Device device, MemoryKind kind, std::function<void(void*)> release)
    : ptr_(ptr), bytes_(bytes), device_(device), kind_(kind), release_(std::move(release)) {
  memory_tracker(device_).on_alloc(kind_, bytes_);
}

Storage::~Storage() {
  if (release_) release_(ptr_);
  memory_tracker(device_).on_free(kind_, bytes_);
}

std::shared_ptr<Storage> allocate_cpu_storage(int64_t bytes, MemoryKind kind) {
  constexpr size_t kAlign = 64;
  const size_t rounded = (static_cast<size_t>(bytes) + kAlign - 1) / kAlign * kAlign;
  void* p = rounded ? std::aligned_alloc(kAlign, rounded) : nullptr;
  if (rounded && !p) throw std::bad_alloc();
  if (p) std::memset(p, 0, rounded);
  return std::make_shared<Storage>(p, bytes, Device::kCPU, kind, [](void* q) { std::free(q); });
}

Tensor::Tensor(std::shared_ptr<Storage> storage, int64_t offset, Shape shape, DType dtype)
    : storage_(std::move(storage)), offset_(offset), shape_(std::move(shape)), dtype_(dtype) {
  numel_ = shape_numel(shape_);
  MT_CHECK(storage_ != nullptr);
  MT_CHECK((offset_ + numel_) * dtype_size(dtype_) <= storage_->bytes())
      << describe() << " at offset " << offset_ << " overruns a storage of " << storage_->bytes() << " bytes";
}

Tensor Tensor::cpu(Shape shape, DType dtype, MemoryKind kind) {
  const int64_t bytes = shape_numel(shape) * dtype_size(dtype);
  return Tensor(allocate_cpu_storage(bytes, kind), 0, std::move(shape), dtype);
}

int64_t Tensor::dim(int64_t i) const {
  const int64_t n = ndim();
  if (i < 0) i += n;
  MT_CHECK(i >= 0 && i < n) << "dim " << i << " of " << describe();
  return shape_[static_cast<size_t>(i)];
}

void* Tensor::data() const {
  MT_CHECK(defined()) << "data() of an undefined tensor";
  return static_cast<char*>(storage_->data()) + offset_ * dtype_size(dtype_);
}

template <class T>
T* Tensor::data_as() const {
  bool ok = false;
  if constexpr (std::is_same_v<std::remove_const_t<T>, float>) ok = dtype_ == DType::kF32;
  if constexpr (std::is_same_v<std::remove_const_t<T>, uint16_t>) ok = dtype_ == DType::kBF16 || dtype_ == DType::kF16;
  if constexpr (std::is_same_v<std::remove_const_t<T>, uint8_t>) ok = is_fp8(dtype_);
  if constexpr (std::is_same_v<std::remove_const_t<T>, int32_t>) ok = dtype_ == DType::kI32;
  if constexpr (std::is_same_v<std::remove_const_t<T>, int64_t>) ok = dtype_ == DType::kI64;
  MT_CHECK(ok) << "data_as<> does not match " << describe();
  MT_CHECK(device() == Device::kCPU) << "host pointer of a device tensor " << describe();
  return static_cast<T*>(data());
}
template float* Tensor::data_as<float>() const;
template const float* Tensor::data_as<const float>() const;
template uint16_t* Tensor::data_as<uint16_t>() const;
template const uint16_t* Tensor::data_as<const uint16_t>() const;
template uint8_t* Tensor::data_as<uint8_t>() const;
template const uint8_t* Tensor::data_as<const uint8_t>() const;
template int32_t* Tensor::data_as<int32_t>() const;
template const int32_t* Tensor::data_as<const int32_t>() const;
template int64_t* Tensor::data_as<int64_t>() const;
template const int64_t* Tensor::data_as<const int64_t>() const;

Tensor Tensor::view(Shape shape) const {
  MT_CHECK(shape_numel(shape) == numel_) << "view " << shape_string(shape) << " of " << describe();
  return Tensor(storage_, offset_, std::move(shape), dtype_);
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  MT_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0])
      << "slice [" << begin << ", " << end << ") of " << describe();
  const int64_t row = shape_[0] ? numel_ / shape_[0] : 0;
  Shape s = shape_;
  s[0] = end - begin;
  return Tensor(storage_, offset_ + begin * row, std::move(s), dtype_);
}

Tensor Tensor::flat_view(int64_t offset, Shape shape) const {
  MT_CHECK(offset >= 0 && offset + shape_numel(shape) <= numel_)
      << "flat_view at " << offset << " of " << shape_string(shape) << " in " << describe();
  return Tensor(storage_, offset_ + offset, std::move(shape), dtype_);
}

std::string Tensor::describe() const { return std::string(dtype_name(dtype_)) + shape_string(shape_); }

}  // namespace megatron
