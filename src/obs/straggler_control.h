// The switch of the straggler detector (Megatron's --straggler-ctrlr-port): rank 0 listens on a
// TCP port of every interface, and each connection to it (`curl <rank-0 host>:<port>`) flips
// the state asked for and is answered, in one HTTP/1.0 response, with the new state. Timing
// costs a little (two events per collective), so a long run can keep it off until a slowdown
// needs explaining. The detector reads requested() at each log interval and passes it to every
// rank (obs/straggler_detector.h), so a flip takes effect from the next interval on.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

namespace megatron::obs {

class StragglerControl {
 public:
  // Listens on `port` (0: a free port the system picks; see port()), answering on a thread
  // of its own. `on` is the state before any connection. Throws megatron::Error naming
  // --straggler-ctrlr-port and the port when it cannot listen (the port is taken, ...).
  StragglerControl(int port, bool on);
  ~StragglerControl();  // stops listening
  StragglerControl(const StragglerControl&) = delete;
  StragglerControl& operator=(const StragglerControl&) = delete;

  int port() const { return port_; }
  bool requested() const { return on_.load(); }

 private:
  void serve();
  // Flips the state and answers one accepted connection (reading its request first, so that
  // the client sees the answer rather than a reset).
  void answer(int client);

  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> on_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace megatron::obs
