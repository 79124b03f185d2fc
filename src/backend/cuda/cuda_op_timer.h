// Op timers for ProfilingBackend (backend/profiling_backend.h): a plain C++ interface, so
// that code without CUDA headers can time the ops of any backend.
//   - On a CudaBackend (make_op_timer, cuda_op_timer.cu): a pair of CUDA events recorded on
//     the backend's stream around each op; the elapsed times are read back lazily (events
//     that have completed are harvested as begin() goes, the rest at report() after waiting),
//     and the events are recycled through a pool. The time is the GPU stream's time from
//     reaching the op to finishing its work: its kernels, plus any time the stream waited on
//     the host to launch them (so a launch-bound op shows its launch cost too).
//   - Otherwise (the CPU backend; builds without CUDA, backend/cuda/no_cuda.cpp): host
//     std::chrono::steady_clock around the call (CPU ops are synchronous).
// Intervals are attributed to small integer keys chosen by the caller; begin()/end() pairs
// must not nest.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace megatron::backend {

class Backend;

// Time spent under one key.
struct OpTime {
  int64_t calls = 0;
  double total_ms = 0.0;
};

class OpTimer {
 public:
  virtual ~OpTimer() = default;
  // Opens an interval (just before the op is issued).
  virtual void begin() = 0;
  // Closes the interval opened by begin() and charges it to `key` (>= 0).
  virtual void end(int key) = 0;
  // Waits for every closed interval to be measurable and returns the totals so far, indexed by
  // key (keys never charged have calls == 0).
  virtual std::vector<OpTime> report() = 0;
  // Drops every total (and any interval still in flight).
  virtual void reset() = 0;
  // How times are taken, for the report header ("CUDA events", "host steady_clock").
  virtual const char* clock_name() const = 0;
};

// A CUDA-event timer on the stream of `backend` when it is a CudaBackend, else a host chrono
// timer. Defined in cuda_op_timer.cu (CUDA builds) or no_cuda.cpp (builds without CUDA).
std::unique_ptr<OpTimer> make_op_timer(Backend& backend);
// The host std::chrono timer (defined in backend/profiling_backend.cpp).
std::unique_ptr<OpTimer> make_chrono_op_timer();

}  // namespace megatron::backend
