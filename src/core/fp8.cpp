#include "core/fp8.h"

namespace megatron {

std::string_view fp8_format_name(Fp8Format f) { return f == Fp8Format::kE4M3 ? "e4m3" : "e5m2"; }

}  // namespace megatron
