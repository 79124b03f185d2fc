// What the CUDA-backend benchmarks (bench/*_bench.cpp) share: the device check they start with
// and the timing loop of one call.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>

#include "backend/device.h"
#include "backend/ops.h"

namespace megatron::bench {

// False, after saying why on stderr as `name`, when there is no CUDA device to run on.
inline bool have_cuda_device(const char* name) {
  if (backend::cuda_device_count() > 0) return true;
  std::fprintf(stderr, "%s: no CUDA device (this build %s CUDA)\n", name,
               backend::built_with_cuda() ? "has" : "has no");
  return false;
}

// Mean ms per call of f over `repeats` calls after 3 warm-up calls, synchronised with `be`.
inline double time_ms(backend::Backend& be, int repeats, const std::function<void()>& f) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < 3; ++i) f();
  be.synchronize();
  const auto t0 = Clock::now();
  for (int i = 0; i < repeats; ++i) f();
  be.synchronize();
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / repeats;
}

}  // namespace megatron::bench
