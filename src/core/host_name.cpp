#include "core/host_name.h"

#include <unistd.h>

namespace megatron {

std::string host_name(const char* fallback) {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return fallback;
  return buf;
}

}  // namespace megatron
