// The host's instances of core/normal_math.h, compiled with -ffp-contract=off
// (src/CMakeLists.txt) so that no multiply-add is fused: the bits the GPU computes.
#include "core/normal_math.h"

namespace megatron::normal_math {

double log_positive_host(double x) { return log_positive(x); }
double cos_two_pi_host(double u) { return cos_two_pi(u); }
double box_muller_host(double u1, double u2) { return box_muller(u1, u2); }
float normal_from_words_host(uint32_t first, uint32_t second) { return normal_from_words(first, second); }

}  // namespace megatron::normal_math
