// --log-straggler (Megatron's StragglerDetector, megatron/core/utils.py and
// README_STRAGGLER.md): at every log interval rank 0 prints which rank computes slowest and
// fastest, and each one's GPU power, temperature, utilisation and SM clock, so that a slow
// node, or a throttled GPU in it, is named instead of slowing every rank in silence:
//
//   [2026-11-25 10:00:00] | MnRtt/Rnk: 130.41ms/0 | MxRtt/Rnk: 188.02ms/5 | MnPwr/Rnk: 402.10W/5 | ...
//     | MnDRtt/Rnk: 0.31ms/2 | MxDRtt/Rnk: 0.40ms/5 | MnEtpt/Rnk: 401.88TF/5 | MxEtpt/Rnk: 579.42TF/0
//     | slowest: rank 5 on node-b, 44.2% over the fastest
//
// Megatron's fields, in its order and format ("Mn"/"Mx": the least and greatest value over the
// ranks, "/r" the rank that had it); each is a per-iteration mean (GPU readings: a median) over
// the log interval:
//   Rtt   compute time per iteration. Megatron times the forward passes only, which under TP
//         and PP include the waits for the slow peer, so every rank of a slow group reads slow.
//         Here it is the rank's whole iteration (forward, backward, optimizer) on its device
//         stream, minus the time the stream was held up by communication: every blocking
//         collective and every wait for a started one (comm/profiled_communicator.h). A rank
//         that waits for a straggler spends that time in communication, so the straggler is the
//         one with the largest Rtt, in any layout. What it cannot see: a rank held up *inside*
//         a collective (its host descheduled during an MPI call, a late NCCL launch) spends that
//         time in communication as its peers do, so it is named only for slowness between
//         collectives, which is where a throttled GPU, a slow kernel or a loaded host shows.
//   Pwr, Tmp, Utl, Clk   the GPU's power (W), temperature (C), utilisation (%) and SM clock
//         (MHz), sampled through NVML every 100 ms (backend/gpu_telemetry.h); each left out
//         where no rank has it (CPU ranks, no NVML library, utilisation under MIG).
//   DRtt  the time spent reading the iteration's micro-batches.
//   Etpt  this rank's share of the iteration's model FLOPs (the log line's formula / world
//         size) over its Rtt: the TFLOP/s it would reach if it never waited.
// After them, ours: the slowest rank's host and how far its Rtt is over the fastest.
// --straggler-minmax-count N > 1 adds Megatron's two lines of the N ranks of lowest and highest
// Etpt. --disable-straggler-on-startup starts it off; rank 0's --straggler-ctrlr-port
// (obs/straggler_control.h) turns it on and off while the run goes on.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_op_timer.h"
#include "backend/gpu_telemetry.h"
#include "backend/ops.h"
#include "backend/region_timer.h"
#include "comm/communicator.h"
#include "obs/straggler_control.h"

namespace megatron::obs {

// One rank's means over a log interval (see the header comment).
struct StragglerRankStats {
  double rtt_ms = 0.0;
  double batch_ms = 0.0;
  double etpt_tflops = 0.0;
  bool gpu = false;  // the GPU was sampled: power and clock exist
  double power_w = 0.0, sm_clock_mhz = 0.0;
  // NaN where the GPU or driver does not give the reading (utilisation under MIG, ...).
  double temperature_c = std::numeric_limits<double>::quiet_NaN();
  double utilization_pct = std::numeric_limits<double>::quiet_NaN();
};

// The report of one interval: Megatron's line (after `timestamp`, "[YYYY-mm-dd HH:MM:SS]"),
// ours appended, then with minmax_count > 1 the lowest and highest Etpt lines. `ranks` and
// `hosts` are indexed by world rank. Ties go to the lower rank.
std::string format_straggler_report(const std::vector<StragglerRankStats>& ranks, const std::vector<std::string>& hosts,
                                    int64_t minmax_count, const std::string& timestamp);

struct StragglerOptions {
  bool on_at_start = true;   // false: --disable-straggler-on-startup
  int control_port = 65535;  // --straggler-ctrlr-port (rank 0 listens)
  int64_t minmax_count = 1;  // --straggler-minmax-count
};

class StragglerDetector final : public backend::RegionTimer {
 public:
  // Times on `backend`'s device stream (host clocks on the CPU); samples GPU `cuda_device`
  // (-1: none). Rank 0 (`world_rank`) starts the control listener; a port it cannot listen on
  // is reported in start_up_note() and leaves the state fixed.
  StragglerDetector(backend::Backend& backend, const StragglerOptions& options, int64_t world_rank, int cuda_device);
  ~StragglerDetector() override;

  // `world` wrapped so that every collective of it, and of every group split from it, is
  // timed as communication while an iteration is timed.
  std::unique_ptr<comm::Communicator> watch(std::unique_ptr<comm::Communicator> world);
  // What rank 0 prints before training: the state and how to flip it.
  std::string start_up_note() const;

  // Brackets one training iteration (only its communication counts as such); `model_flops`
  // is this rank's share of the iteration's model FLOPs. No-ops while off.
  void begin_iteration();
  void end_iteration(double model_flops);
  // Adds `seconds` of reading micro-batches to the iteration being timed.
  void add_batch_seconds(double seconds);
  bool timing() const { return in_iteration_; }

  // Collective over `world` at every log interval, on or off: gathers every rank's means of the
  // interval and passes rank 0's requested state on. Returns the report on rank 0 when the
  // interval was timed, and a line when the state changes; nullopt otherwise.
  std::optional<std::string> report(comm::Communicator& world);

  // RegionTimer (the watched communicators'): `f` timed as communication inside an iteration.
  void time_region(const std::string& name, const std::function<void()>& f) override;

 private:
  backend::Backend& backend_;
  StragglerOptions options_;
  int64_t world_rank_;
  bool on_;
  std::unique_ptr<StragglerControl> control_;  // rank 0
  std::string control_error_;                  // why rank 0 has no control listener
  std::string gpu_missing_;                    // why a GPU rank has no readings
  std::unique_ptr<backend::TelemetrySampler> gpu_;
  std::unique_ptr<backend::OpTimer> iteration_timer_, comm_timer_;
  bool in_iteration_ = false, in_region_ = false;
  int64_t iterations_ = 0;
  double batch_seconds_ = 0.0, model_flops_ = 0.0;
  std::vector<std::string> hosts_;  // by world rank, gathered at the first report
};

}  // namespace megatron::obs
