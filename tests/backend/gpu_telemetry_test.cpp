// backend/gpu_telemetry: the summary of clock and power samples (medians, the fractions of
// samples NVML marks as held back by power or by heat) and its one-line text. The NVML
// sampler itself is tested on the GPU (tests/backend/cuda/gpu_telemetry_nvml_test.cpp).
#include "backend/gpu_telemetry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace megatron::backend {
namespace {

TEST(GpuTelemetry, SummaryTakesMediansAndCountsCappedSamples) {
  const std::vector<TelemetrySample> samples = {
      {1980, 300, 0x0},                // free
      {1605, 699, kReasonSwPowerCap},  // power
      {1470, 698, kReasonSwPowerCap | 0x1},
      {1785, 650, kReasonHwSlowdown},  // power (hardware slowdown)
      {1700, 640, kReasonHwThermal},   // heat
      {1900, 500, 0x1},                // idle: neither
  };
  const TelemetrySummary t = summarize_telemetry(samples, 1980, 700);
  EXPECT_EQ(t.samples, 6);
  EXPECT_DOUBLE_EQ(t.sm_clock_median_mhz, (1700.0 + 1785.0) / 2);  // even count: mean of the middle two
  EXPECT_DOUBLE_EQ(t.power_median_w, (640.0 + 650.0) / 2);
  EXPECT_DOUBLE_EQ(t.power_capped, 3.0 / 6.0);
  EXPECT_DOUBLE_EQ(t.thermal_capped, 1.0 / 6.0);
  EXPECT_DOUBLE_EQ(t.sm_clock_max_mhz, 1980);
  EXPECT_DOUBLE_EQ(t.power_limit_w, 700);
  EXPECT_EQ(describe_telemetry(t),
            "SM clock median 1742 of 1980 MHz, power median 645 of 700 W, power-capped in 50% of 6 samples, "
            "temperature-capped in 17%");

  const std::vector<TelemetrySample> odd = {{1500, 600, kReasonHwPowerBrake}, {1900, 200, 0}, {1600, 690, 0}};
  const TelemetrySummary o = summarize_telemetry(odd, 1980, 700);
  EXPECT_DOUBLE_EQ(o.sm_clock_median_mhz, 1600);
  EXPECT_DOUBLE_EQ(o.power_median_w, 600);
  EXPECT_DOUBLE_EQ(o.power_capped, 1.0 / 3.0);
  EXPECT_EQ(describe_telemetry(o),
            "SM clock median 1600 of 1980 MHz, power median 600 of 700 W, power-capped in 33% of 3 samples");
}

TEST(GpuTelemetry, SummaryTakesTheMedianTemperatureAndUtilization) {
  const std::vector<TelemetrySample> samples = {
      {1980, 300, 0, 41, 0}, {1800, 650, 0, 63, 100}, {1850, 640, 0, 60, 97}, {1900, 500, 0, 58, 88}};
  const TelemetrySummary t = summarize_telemetry(samples, 1980, 700);
  EXPECT_DOUBLE_EQ(t.temperature_median_c, (58.0 + 60.0) / 2);
  EXPECT_DOUBLE_EQ(t.utilization_median_pct, (88.0 + 97.0) / 2);
  // Readings a GPU does not give (NaN) are left out; none at all: NaN.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<TelemetrySample> partial = {
      {1980, 300, 0, 41, nan}, {1800, 650, 0, nan, nan}, {1850, 640, 0, 60, nan}};
  const TelemetrySummary p = summarize_telemetry(partial, 1980, 700);
  EXPECT_DOUBLE_EQ(p.temperature_median_c, (41.0 + 60.0) / 2);
  EXPECT_TRUE(std::isnan(p.utilization_median_pct));
  EXPECT_DOUBLE_EQ(p.sm_clock_median_mhz, 1850);
}

TEST(GpuTelemetry, NoSamplesIsAnEmptySummary) {
  const TelemetrySummary t = summarize_telemetry({}, 1980, 700);
  EXPECT_EQ(t.samples, 0);
  EXPECT_EQ(t.power_capped, 0.0);
}

}  // namespace
}  // namespace megatron::backend
