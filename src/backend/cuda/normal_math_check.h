// A test seam for core/normal_math.h on the GPU (a plain C++ header; without CUDA the function
// throws, backend/cuda/no_cuda.cpp): the device's doubles over the whole domain Box-Muller is
// used on, for a bit-for-bit comparison with the host entry points (*_host). Float outputs
// alone would hide most differences (a changed double rarely changes the rounded float).
#pragma once

#include <cstdint>
#include <vector>

namespace megatron::backend {

struct NormalMathValues {
  std::vector<double> log_u1;  // log_positive(u1)
  std::vector<double> cos_u2;  // cos_two_pi(u2)
  std::vector<double> normal;  // box_muller(u1, u2)
};

// For i in [0, n), n <= 2^24: u1 = 1 - i 2^-24 and u2 = i 2^-24 (every value the Philox words
// give), evaluated by the device functions on GPU `device`.
NormalMathValues normal_math_on_device(int device, int64_t n);

}  // namespace megatron::backend
