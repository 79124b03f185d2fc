// Internals of the CPU backend: fp32 views of tensors of any float dtype, and shape checks.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/ops.h"
#include "core/error.h"
#include "core/tensor.h"

namespace megatron::backend::cpu_detail {

// Converts n elements of a float tensor's data (fp32, bf16 or fp16) to fp32.
void to_f32(const void* src, DType dtype, int64_t n, float* dst);
// Stores n fp32 values as `dtype`, rounding to nearest even.
void from_f32(const float* src, DType dtype, int64_t n, void* dst);

// Megatron's bias_gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
constexpr float kSqrt2OverPi = 0.7978845608f;
constexpr float kGeluCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

inline float gelu(float x, Gelu kind) {
  if (kind == Gelu::kTanh) return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
  return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2));
}

// d gelu / dx, exact for each form.
//  tanh: t = tanh(u), u = c (x + a x^3): 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2).
//  erf:  Phi(x) + x phi(x) = 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi).
inline float gelu_grad(float x, Gelu kind) {
  if (kind == Gelu::kTanh) {
    const float t = std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  }
  return 0.5f * (1.0f + std::erf(x * kInvSqrt2)) + x * std::exp(-0.5f * x * x) * kInvSqrt2Pi;
}

inline void check_cpu(const Tensor& t, const char* what) {
  MT_CHECK(t.defined()) << what << " is undefined";
  MT_CHECK(t.device() == Device::kCPU) << what << " " << t.describe() << " is not a host tensor";
}
inline void check_float(const Tensor& t, const char* what) {
  check_cpu(t, what);
  MT_CHECK(is_float(t.dtype())) << what << " " << t.describe() << " is not a float tensor";
}
inline void check_f32(const Tensor& t, const char* what) {
  check_cpu(t, what);
  MT_CHECK(t.dtype() == DType::kF32) << what << " " << t.describe() << " must be fp32";
}
inline void check_i32(const Tensor& t, const char* what) {
  check_cpu(t, what);
  MT_CHECK(t.dtype() == DType::kI32) << what << " " << t.describe() << " must be int32";
}
// Rows of t read as a 2-D [rows, cols] matrix (cols must divide numel).
inline int64_t rows_of(const Tensor& t, int64_t cols, const char* what) {
  MT_CHECK(cols > 0 && t.numel() % cols == 0) << what << " " << t.describe() << " has no rows of " << cols;
  return t.numel() / cols;
}

// Read-only fp32 view of a float tensor: the tensor's own memory when it is fp32, else a
// converted copy.
class In {
 public:
  In() = default;
  In(const Tensor& t, const char* what) {
    check_float(t, what);
    if (t.dtype() == DType::kF32) {
      p_ = t.data_as<const float>();
    } else {
      copy_.resize(static_cast<size_t>(t.numel()));
      to_f32(t.data(), t.dtype(), t.numel(), copy_.data());
      p_ = copy_.data();
    }
  }
  // An undefined tensor (an optional bias) gives a null view.
  static In optional(const Tensor& t, const char* what) { return t.defined() ? In(t, what) : In(); }

  const float* data() const { return p_; }
  explicit operator bool() const { return p_ != nullptr; }
  float operator[](int64_t i) const { return p_[i]; }

 private:
  std::vector<float> copy_;
  const float* p_ = nullptr;
};

// Writable fp32 view of a float output: the tensor's own memory when it is fp32, else an
// fp32 scratch buffer that commit() rounds into the tensor. With load = true the view starts
// from the tensor's current values (for "(+=)" outputs and in-place ops), else from zeros
// (16-bit) or the current contents (fp32; every op overwrites all of them).
class Out {
 public:
  Out(Tensor& t, const char* what, bool load = false) : t_(&t) {
    check_float(t, what);
    if (t.dtype() == DType::kF32) {
      p_ = t.data_as<float>();
    } else {
      scratch_.assign(static_cast<size_t>(t.numel()), 0.0f);
      if (load) to_f32(t.data(), t.dtype(), t.numel(), scratch_.data());
      p_ = scratch_.data();
    }
  }
  Out(const Out&) = delete;
  Out& operator=(const Out&) = delete;
  // An undefined tensor (an optional gradient) gives a null view; commit() must not be called.
  static Out optional(Tensor& t, const char* what, bool load = false) {
    return t.defined() ? Out(t, what, load) : Out();
  }
  explicit operator bool() const { return t_ != nullptr; }

  float* data() { return p_; }
  float& operator[](int64_t i) { return p_[i]; }
  // Stores the scratch into a 16-bit tensor (no-op for fp32). Call once, after writing.
  void commit() {
    if (t_->dtype() != DType::kF32) from_f32(scratch_.data(), t_->dtype(), t_->numel(), t_->data());
  }

 private:
  Out() = default;

  Tensor* t_ = nullptr;
  std::vector<float> scratch_;
  float* p_ = nullptr;
};

// Loops run on OpenMP threads only above this much work (elements or multiply-adds): below
// it, waking the threads costs more than the loop.
constexpr int64_t kParallelWork = 1 << 15;

// Column chunk width for column reductions (bias/gamma gradients, embedding scatter):
// each chunk is owned by one thread, which walks the rows in order.
constexpr int64_t kColumnChunk = 64;

}  // namespace megatron::backend::cpu_detail
