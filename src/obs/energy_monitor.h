// --log-energy: Megatron-Core's EnergyMonitor (megatron/core/energy_monitor.py). Each rank reads
// its GPU's energy counter (backend::EnergyCounter, NVML's total energy in millijoules); the
// energy since the last lap, less what was spent while paused (evaluation, checkpoint saves),
// is summed over the ranks at each log line and reported as
//   " energy per GPU (J/iter/GPU): {lap J / iterations / world size:.1f} |"
//   " power per GPU (W/GPU): {energy per GPU / seconds per iteration:.1f} |"
// (obs/training_log.h) and as TensorBoard's "iter-energy/gpu" and "power/gpu". A rank without
// a counter (no GPU, no NVML) reads 0, as Megatron does without pynvml. At the end rank 0
// prints "Total training energy (GPU): {total J / 1e6:.3f} MJ".
//
// --codecarbon-dir DIR (BigScience's Megatron-DeepSpeed flag): the same energy, summed over the
// ranks, written as DIR/emissions.csv in codecarbon's column names (EmissionsRecord below)
// without the codecarbon package.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "backend/gpu_telemetry.h"
#include "comm/communicator.h"

namespace megatron::obs {

class EnergyMonitor {
 public:
  // `counter` may be null: every reading is then 0.
  explicit EnergyMonitor(std::unique_ptr<backend::EnergyCounter> counter);

  // Start (the first call), or restart after pause(), counting from the counter's current value.
  void resume();
  // Stop counting; what was spent since the last resume() or lap() is kept for the next lap.
  void pause();
  // Collective over `world`: the joules of every rank since the last lap (the counted time
  // only), summed over the ranks. Every rank must call it at the same point.
  double lap(comm::Communicator& world);
  // The joules of every lap so far, summed over the ranks (no collective: the sum of what lap()
  // returned).
  double total_joules() const { return static_cast<double>(world_total_mj_) / 1000.0; }
  // The joules of every rank from the first resume() to the last lap(), paused time included,
  // summed over the ranks at that lap (what --codecarbon-dir reports).
  double wall_joules() const { return static_cast<double>(world_wall_mj_) / 1000.0; }

 private:
  int64_t read();

  std::unique_ptr<backend::EnergyCounter> counter_;
  int64_t last_mj_ = 0;              // the counter at the last resume() or lap()
  int64_t lap_mj_ = 0;               // counted before the last pause(), not yet lapped
  int64_t world_total_mj_ = 0;       // the laps' sums over the ranks
  std::optional<int64_t> start_mj_;  // the counter at the first resume()
  int64_t world_wall_mj_ = 0;
};

// One row of codecarbon's emissions.csv for a run so far: energies in kWh, emissions in kg of
// CO2-equivalent, powers in W, duration in seconds.
struct EmissionsRecord {
  std::string timestamp;  // "YYYY-mm-ddTHH:MM:SS", local time
  std::string project_name = "megatron";
  std::string run_id;
  double duration_s = 0.0;
  double gpu_energy_kwh = 0.0;
  int64_t gpu_count = 0;
  // g CO2eq per kWh of the grid (--carbon-intensity-g-per-kwh); none: emissions left empty.
  std::optional<double> carbon_intensity_g_per_kwh;
};

// The header line of the file (no newline): codecarbon's column names for what is measured here.
std::string emissions_csv_header();
// The record's line (no newline): gpu_power = energy / duration, energy_consumed = gpu_energy
// (only GPUs are measured), emissions = kWh x intensity / 1000 and emissions_rate per second,
// pue 1.0.
std::string emissions_csv_row(const EmissionsRecord& r);
// Writes DIR/emissions.csv atomically: the rows of earlier runs already there (when its header
// is this one's) with the row of r.run_id replaced by r's, or appended.
void write_emissions_csv(const std::string& dir, const EmissionsRecord& r);
// A run id unique enough for one file: 32 random hex digits in uuid4's 8-4-4-4-12 groups.
std::string random_run_id();

}  // namespace megatron::obs
