// Megatron's timers (megatron/core/timers.py) and the lines they print, so that logs read by
// tools written for Megatron ("(min, max) time across ranks (ms):" blocks) read ours.
//
// A timer has a name and a log level; it exists only if its level <= --timing-log-level (0: the
// set-up and checkpoint timers; 1: forward-backward, the gradient reductions and the optimizer's
// phases; 2: also the batch generator and each forward / backward compute). A timer that does
// not exist costs nothing: start/stop return at once. An existing timer synchronises the device
// at start and stop (as Megatron's torch.cuda.synchronize), and with `barrier` first waits for
// every rank of the world (Megatron's barrier; --barrier-with-L1-time for the level-1 timers).
//
// log(names, normalizer) is collective over the world: every rank's accumulated seconds of each
// name (0 where the timer does not exist or never ran) are gathered, then, after reset, the last
// rank prints with --timing-log-option
//   minmax: "(min, max) time across ranks (ms):" and per name "    <name padded with '.' to 48>: (min, max)"
//   max:    "max time across ranks (ms):" and "    <name ...>: max"
//   all:    "times across ranks (ms):", per name "  <name>:" and "     rank  r: t" per rank that ran it
// min and max over the ranks whose time is > 0; ms = seconds * 1000 / normalizer, "%.2f". Names
// no rank timed are left out; with none at all nothing is printed.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace megatron::obs {

enum class TimingLogOption { kMinMax, kMax, kAll };
TimingLogOption parse_timing_log_option(const std::string& s);  // throws naming --timing-log-option

class Timers {
 public:
  // synchronize_device: waits for the device's queued work (empty: none to wait for).
  Timers(int64_t log_level, TimingLogOption option, std::function<void()> synchronize_device);

  bool active(int64_t level) const { return level <= log_level_; }
  // Megatron's timers(name, log_level).start(barrier) / .stop(barrier). A name keeps the level
  // it was first started with. `world` is needed only with barrier.
  void start(const std::string& name, int64_t level, comm::Communicator* world = nullptr, bool barrier = false);
  void stop(const std::string& name, comm::Communicator* world = nullptr, bool barrier = false);

  // Seconds accumulated by `name` (0 if it does not exist); a running timer counts up to now.
  double elapsed_seconds(const std::string& name) const;

  // The block described above, for the last rank of `world` (nullopt on the others, and when no
  // rank timed any of the names). Collective; resets the named timers on every rank (a running
  // one restarts from now).
  std::optional<std::string> log(const std::vector<std::string>& names, comm::Communicator& world,
                                 double normalizer = 1.0);
  // Megatron's Timers.write: per name some rank timed, the largest time over ranks in seconds /
  // normalizer, keyed "<name>-time" (the TensorBoard tag). Collective; resets nothing.
  std::vector<std::pair<std::string, double>> max_seconds(const std::vector<std::string>& names,
                                                          comm::Communicator& world, double normalizer);

 private:
  struct Timer {
    int64_t level = 0;
    bool running = false;
    double elapsed = 0.0;
    std::chrono::steady_clock::time_point started;
  };
  // [world size][names] seconds, gathered from every rank; resets when asked.
  std::vector<std::vector<double>> gather(const std::vector<std::string>& names, comm::Communicator& world, bool reset);
  void sync(comm::Communicator* world, bool barrier);

  int64_t log_level_;
  TimingLogOption option_;
  std::function<void()> synchronize_device_;
  std::map<std::string, Timer> timers_;
};

// The per-iteration timers in the order Megatron's training_log lists them (timers_to_log);
// those that do not exist or never ran are not printed.
const std::vector<std::string>& iteration_timer_names();

}  // namespace megatron::obs
