// The NVML sampler behind `megatron bench`'s "GPU during the timed steps" line: while the GPU
// multiplies matrices for ~2 s it returns readings every 5 ms, each clock within the
// device's maximum, the power positive and within the enforced limit (plus NVML's averaging
// slack), the die temperature and a busy GPU's utilisation (--log-straggler's readings, taken
// while sampling goes on), and the maximum clock and limit of a data-centre GPU. Skips without a
// GPU; fails if NVML is missing on a machine with one (the driver ships it). The energy counter
// (--log-energy) grows while the GPU works, by the sampler's median power times the seconds
// within a wide band (NVML averages power over its own window).
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "backend/device.h"
#include "backend/gpu_telemetry.h"
#include "backend/ops.h"
#include "core/memory.h"

namespace megatron::backend {
namespace {

TEST(GpuTelemetryNvml, SamplesClockAndPowerWhileTheGpuWorks) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::string why;
  std::unique_ptr<TelemetrySampler> sampler = start_telemetry(0, 5, &why);
  ASSERT_NE(sampler, nullptr) << why;
  auto gpu = make_cuda_backend(0);
  Tensor a = gpu->empty({4096, 4096}, DType::kBF16, MemoryKind::kOther);
  Tensor c = gpu->empty({4096, 4096}, DType::kBF16, MemoryKind::kOther);
  gpu->fill(a, 0.01f);
  auto work = [&](std::chrono::milliseconds how_long) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < how_long) {
      for (int i = 0; i < 20; ++i) gpu->matmul(a, false, a, true, c, 1.0f, 0.0f);
      gpu->synchronize();
    }
  };
  // NVML's utilisation covers its own last sample period (up to a second on some GPUs): the first
  // readings still describe the idle time before, so the first second is taken and dropped (a run
  // that kept it read a median of 3% over 0.4 s: bench/results/2026-11-25.md, "`--log-straggler` on
  // one H100", call 1).
  work(std::chrono::milliseconds(1000));
  sampler->take();
  work(std::chrono::milliseconds(1000));
  const TelemetrySummary t = sampler->take();
  EXPECT_GE(t.samples, 20);
  EXPECT_GT(t.temperature_median_c, 15.0);
  EXPECT_LT(t.temperature_median_c, 110.0);
  EXPECT_GT(t.utilization_median_pct, 30.0) << "the GPU multiplied matrices all along";
  EXPECT_LE(t.utilization_median_pct, 100.0);
  EXPECT_GE(t.sm_clock_max_mhz, 1000.0);
  EXPECT_GT(t.sm_clock_median_mhz, 0.0);
  EXPECT_LE(t.sm_clock_median_mhz, t.sm_clock_max_mhz);
  EXPECT_GE(t.power_limit_w, 100.0);
  EXPECT_GT(t.power_median_w, 0.0);
  EXPECT_LE(t.power_median_w, 1.2 * t.power_limit_w);
  EXPECT_GE(t.power_capped, 0.0);
  EXPECT_LE(t.power_capped, 1.0);
  // take() left sampling on: the samples after it, and only those, come with stop().
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const TelemetrySummary rest = sampler->stop();
  EXPECT_GE(rest.samples, 5);
  EXPECT_LT(rest.samples, t.samples);
}

TEST(GpuTelemetryNvml, TheEnergyCounterAgreesWithThePower) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::string why;
  std::unique_ptr<EnergyCounter> counter = open_energy_counter(0, &why);
  ASSERT_NE(counter, nullptr) << why;
  std::unique_ptr<TelemetrySampler> sampler = start_telemetry(0, 5, &why);
  ASSERT_NE(sampler, nullptr) << why;
  auto gpu = make_cuda_backend(0);
  Tensor a = gpu->empty({4096, 4096}, DType::kBF16, MemoryKind::kOther);
  Tensor c = gpu->empty({4096, 4096}, DType::kBF16, MemoryKind::kOther);
  gpu->fill(a, 0.01f);
  auto work = [&](std::chrono::milliseconds how_long) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < how_long) {
      for (int i = 0; i < 20; ++i) gpu->matmul(a, false, a, true, c, 1.0f, 0.0f);
      gpu->synchronize();
    }
  };
  work(std::chrono::milliseconds(1000));  // to a steady power
  sampler->take();
  const std::optional<int64_t> before = counter->millijoules();
  const auto t0 = std::chrono::steady_clock::now();
  work(std::chrono::milliseconds(2000));
  const std::optional<int64_t> after = counter->millijoules();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const TelemetrySummary t = sampler->stop();
  ASSERT_TRUE(before && after);
  const double watts = static_cast<double>(*after - *before) / 1000.0 / seconds;
  EXPECT_GT(watts, 0.5 * t.power_median_w) << "median power " << t.power_median_w << " W";
  EXPECT_LT(watts, 1.5 * t.power_median_w) << "median power " << t.power_median_w << " W";
}

}  // namespace
}  // namespace megatron::backend
