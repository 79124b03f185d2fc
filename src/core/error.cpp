#include "core/error.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace megatron {

std::string errno_string(int err) { return std::strerror(err); }

namespace detail {

CheckFailure::CheckFailure(const char* file, int line, const char* condition) {
  os_ << file << ":" << line << ": check failed: " << condition << " ";
}

CheckFailure::~CheckFailure() {
  std::fprintf(stderr, "%s\n", os_.str().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace detail
}  // namespace megatron
