// Errors: one rule in two parts (docs/design.md, "Errors").
//  - Bad input (flags, files, user shapes) throws megatron::Error with a one-line
//    message that names the flag, file or line and what was expected. Only main()
//    and tests catch it; main() prints "error: <message>" and exits non-zero.
//  - Invariants (bugs in our own code) use MT_CHECK, which stays on in release
//    builds, prints file:line and aborts.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace megatron {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Concatenates the arguments with operator<< into one message.
template <class... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

// throw_error("[--split] expected ", n, " numbers") throws megatron::Error.
template <class... Args>
[[noreturn]] void throw_error(Args&&... args) {
  throw Error(str_cat(std::forward<Args>(args)...));
}

// Error text of the current errno, e.g. "No such file or directory".
std::string errno_string(int err);

namespace detail {
// Streams the message of a failed MT_CHECK and aborts in its destructor.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  template <class T>
  CheckFailure& operator<<(const T& value) {
    os_ << value;
    return *this;
  }

 private:
  std::ostringstream os_;
};
}  // namespace detail

}  // namespace megatron

// MT_CHECK(cond) << "context"; always on. For invariants, never for user input.
#define MT_CHECK(cond) \
  if (cond) {          \
  } else               \
    ::megatron::detail::CheckFailure(__FILE__, __LINE__, #cond)

#define MT_CHECK_EQ(a, b) MT_CHECK((a) == (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "
