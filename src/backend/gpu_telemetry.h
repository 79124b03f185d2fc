// What the GPU's clock and power did while `megatron bench` timed its steps: a training step at
// 1.3B and larger runs against the board's power limit on an H100 (SM clock median 1605-1785 of
// 1980 MHz, bench/results/2026-11-24.md, "the step is power-capped"), so MFU alone does not say
// whether a step is slow or merely power-capped. Sampled through NVML, loaded at run time (dlopen
// of libnvidia-ml.so.1, which ships with the driver: the binary runs where it is absent, and then
// reports nothing).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace megatron::backend {

// One reading.
struct TelemetrySample {
  double sm_clock_mhz = 0.0;
  double power_w = 0.0;
  uint64_t reasons = 0;  // NVML clock event (throttle) reasons, bit mask
  // Optional readings (NaN where this GPU or driver does not give them, e.g. utilisation under MIG).
  double temperature_c = std::numeric_limits<double>::quiet_NaN();    // the GPU die
  double utilization_pct = std::numeric_limits<double>::quiet_NaN();  // of NVML's last period, with a kernel running
};

// NVML's clock event reason bits that mean "held back by power" and "by heat".
constexpr uint64_t kReasonSwPowerCap = 0x4, kReasonHwSlowdown = 0x8, kReasonHwPowerBrake = 0x80;
constexpr uint64_t kReasonSwThermal = 0x20, kReasonHwThermal = 0x40;

struct TelemetrySummary {
  int64_t samples = 0;
  double sm_clock_median_mhz = 0.0;
  double sm_clock_max_mhz = 0.0;  // the device's maximum SM clock
  double power_median_w = 0.0;
  double power_limit_w = 0.0;   // the enforced limit
  double power_capped = 0.0;    // fraction of samples held back by power (SW cap, HW slowdown, power brake)
  double thermal_capped = 0.0;  // fraction held back by temperature
  // Medians over the samples that have the reading; NaN when none has.
  double temperature_median_c = std::numeric_limits<double>::quiet_NaN();
  double utilization_median_pct = std::numeric_limits<double>::quiet_NaN();
};

// The summary of `samples` (medians; fractions of samples with the reason bits), given the
// device's maximum SM clock and power limit. Empty samples give samples = 0.
TelemetrySummary summarize_telemetry(std::span<const TelemetrySample> samples, double sm_clock_max_mhz,
                                     double power_limit_w);

// "SM clock median 1785 of 1980 MHz, power median 591 of 700 W, power-capped in 63% of 417
// samples" (and ", temperature-capped in N%" when any sample was).
std::string describe_telemetry(const TelemetrySummary& t);

// Samples GPU `cuda_device` every `period_ms` on a thread of its own from construction to
// stop().
class TelemetrySampler {
 public:
  virtual ~TelemetrySampler() = default;
  // Stops sampling; the summary of the samples not yet taken.
  virtual TelemetrySummary stop() = 0;
  // The summary of the samples since the last take() (or the start), sampling on.
  virtual TelemetrySummary take() = 0;
};

// A running sampler, or null with *why_not set (no NVML library, no such device, a query NVML
// does not support on it). Defined in backend/cuda/gpu_telemetry_nvml.cpp (CUDA builds) or
// backend/cuda/no_cuda.cpp.
std::unique_ptr<TelemetrySampler> start_telemetry(int cuda_device, int period_ms, std::string* why_not);

// A GPU's energy counter: NVML's nvmlDeviceGetTotalEnergyConsumption, millijoules since the
// driver was loaded (Volta and newer), what Megatron-Core's EnergyMonitor reads.
class EnergyCounter {
 public:
  virtual ~EnergyCounter() = default;
  // The counter now; nullopt when this read failed.
  virtual std::optional<int64_t> millijoules() = 0;
};

// The counter of GPU `cuda_device`, or null with *why_not set (no NVML library, no such device,
// a GPU without the counter). Defined beside start_telemetry.
std::unique_ptr<EnergyCounter> open_energy_counter(int cuda_device, std::string* why_not);

}  // namespace megatron::backend
