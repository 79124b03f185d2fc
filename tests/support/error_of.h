// The message of the megatron::Error that `f` throws, or "" when it throws none: tests assert on
// the one-line errors users see (the flag or file named, what was expected).
#pragma once

#include <functional>
#include <string>

#include "core/error.h"

namespace megatron::test {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace megatron::test
