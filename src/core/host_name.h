// This machine's name, for messages and file names.
#pragma once

#include <string>

namespace megatron {

// gethostname(), or `fallback` when it fails or is empty.
std::string host_name(const char* fallback);

}  // namespace megatron
