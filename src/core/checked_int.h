// Size arithmetic that refuses to wrap. Shapes and counts from the command line multiply into
// element, byte and sample counts; a product that wrapped around 2^63 would be a small or
// negative number that passes every later check (a memory plan of 0.07 GiB for 2^62 layers).
//
//   CheckedInt n = CheckedInt(seq) * micro_batch;   // throws IntegerOverflow instead of wrapping
//   int64_t bytes = (n * hidden * 2).value();
//
// IntegerOverflow is a megatron::Error; a caller that knows which flags fed the formula catches
// it and throws the one-line message naming them.
#pragma once

#include <cstdint>

#include "core/error.h"

namespace megatron {

class IntegerOverflow : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] inline void overflow(int64_t a, char op, int64_t b) {
  throw IntegerOverflow(str_cat(a, " ", op, " ", b, " does not fit in 64 bits"));
}
}  // namespace detail

inline int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) detail::overflow(a, '+', b);
  return r;
}

inline int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) detail::overflow(a, '-', b);
  return r;
}

inline int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) detail::overflow(a, '*', b);
  return r;
}

// An int64 whose +, - and * throw IntegerOverflow rather than wrap; / and % are int64's
// (the divisor must not be 0, nor -1 with INT64_MIN: callers divide sizes by positive counts).
class CheckedInt {
 public:
  constexpr CheckedInt(int64_t v = 0) : v_(v) {}  // NOLINT: implicit, so formulas mix freely
  constexpr int64_t value() const { return v_; }

  friend CheckedInt operator+(CheckedInt a, CheckedInt b) { return checked_add(a.v_, b.v_); }
  friend CheckedInt operator-(CheckedInt a, CheckedInt b) { return checked_sub(a.v_, b.v_); }
  friend CheckedInt operator*(CheckedInt a, CheckedInt b) { return checked_mul(a.v_, b.v_); }
  friend CheckedInt operator/(CheckedInt a, CheckedInt b) { return a.v_ / b.v_; }
  friend CheckedInt operator%(CheckedInt a, CheckedInt b) { return a.v_ % b.v_; }
  CheckedInt& operator+=(CheckedInt b) { return *this = *this + b; }
  CheckedInt& operator*=(CheckedInt b) { return *this = *this * b; }
  friend bool operator==(CheckedInt a, CheckedInt b) { return a.v_ == b.v_; }
  friend auto operator<=>(CheckedInt a, CheckedInt b) { return a.v_ <=> b.v_; }

 private:
  int64_t v_;
};

}  // namespace megatron
