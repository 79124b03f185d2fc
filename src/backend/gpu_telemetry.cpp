#include "backend/gpu_telemetry.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace megatron::backend {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

TelemetrySummary summarize_telemetry(std::span<const TelemetrySample> samples, double sm_clock_max_mhz,
                                     double power_limit_w) {
  TelemetrySummary t;
  t.sm_clock_max_mhz = sm_clock_max_mhz;
  t.power_limit_w = power_limit_w;
  t.samples = static_cast<int64_t>(samples.size());
  if (samples.empty()) return t;
  std::vector<double> clock, power, temperature, utilization;
  int64_t power_capped = 0, thermal_capped = 0;
  for (const TelemetrySample& s : samples) {
    clock.push_back(s.sm_clock_mhz);
    power.push_back(s.power_w);
    if (!std::isnan(s.temperature_c)) temperature.push_back(s.temperature_c);
    if (!std::isnan(s.utilization_pct)) utilization.push_back(s.utilization_pct);
    power_capped += (s.reasons & (kReasonSwPowerCap | kReasonHwSlowdown | kReasonHwPowerBrake)) != 0;
    thermal_capped += (s.reasons & (kReasonSwThermal | kReasonHwThermal)) != 0;
  }
  t.sm_clock_median_mhz = median(std::move(clock));
  t.power_median_w = median(std::move(power));
  if (!temperature.empty()) t.temperature_median_c = median(std::move(temperature));
  if (!utilization.empty()) t.utilization_median_pct = median(std::move(utilization));
  t.power_capped = static_cast<double>(power_capped) / static_cast<double>(samples.size());
  t.thermal_capped = static_cast<double>(thermal_capped) / static_cast<double>(samples.size());
  return t;
}

std::string describe_telemetry(const TelemetrySummary& t) {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "SM clock median %.0f of %.0f MHz, power median %.0f of %.0f W, power-capped in %.0f%% of %lld samples",
                t.sm_clock_median_mhz, t.sm_clock_max_mhz, t.power_median_w, t.power_limit_w, 100.0 * t.power_capped,
                static_cast<long long>(t.samples));
  std::string text = buf;
  if (t.thermal_capped > 0) {
    std::snprintf(buf, sizeof(buf), ", temperature-capped in %.0f%%", 100.0 * t.thermal_capped);
    text += buf;
  }
  return text;
}

}  // namespace megatron::backend
