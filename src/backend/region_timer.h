// Something that times named regions of work that are no Backend op, such as a collective
// (comm/profiled_communicator.h): the ProfilingBackend (one op-table row per name, `megatron
// bench --profile-ops`) and the straggler detector (obs/straggler_detector.h: one total, the
// time a rank is held up by communication).
#pragma once

#include <functional>
#include <string>

namespace megatron::backend {

class RegionTimer {
 public:
  virtual ~RegionTimer() = default;
  // Runs `f`, timed as the region `name`: what `f` queues on the device between the timer's
  // two marks (an NCCL kernel on the compute stream, or the stream's wait for one started
  // elsewhere), or the host time it blocks. An implementation may leave it untimed.
  virtual void time_region(const std::string& name, const std::function<void()>& f) = 0;
};

}  // namespace megatron::backend
