// start_telemetry (backend/gpu_telemetry.h) through NVML, loaded with dlopen: the few NVML
// entry points used are declared here (NVML's C ABI: nvmlReturn_t is an int, 0 = success;
// nvmlDevice_t an opaque pointer; NVML_CLOCK_SM = 1; NVML_TEMPERATURE_GPU = 0; clocks in MHz,
// power in milliwatts, temperature in degrees C; nvmlUtilization_t is {unsigned gpu, memory}
// in percent; energy in millijoules as unsigned long long), so the build needs neither nvml.h
// nor libnvidia-ml at link time.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/gpu_telemetry.h"
#include "core/error.h"

namespace megatron::backend {
namespace {

struct NvmlDeviceSt;
using NvmlDevice = NvmlDeviceSt*;
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;
constexpr int kNvmlTemperatureGpu = 0;
struct NvmlUtilization {
  unsigned gpu;
  unsigned memory;
};

// The NVML library and the functions this file calls.
struct Nvml {
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  const char* (*error_string)(int) = nullptr;
  int (*by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  int (*clock)(NvmlDevice, int, unsigned*) = nullptr;
  int (*max_clock)(NvmlDevice, int, unsigned*) = nullptr;
  int (*power)(NvmlDevice, unsigned*) = nullptr;
  int (*power_limit)(NvmlDevice, unsigned*) = nullptr;
  int (*reasons)(NvmlDevice, unsigned long long*) = nullptr;
  // Optional (older drivers may lack them; the fields then read 0).
  int (*temperature)(NvmlDevice, int, unsigned*) = nullptr;
  int (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  int (*total_energy)(NvmlDevice, unsigned long long*) = nullptr;  // open_energy_counter only

  ~Nvml() {
    if (shutdown != nullptr) shutdown();
    if (lib != nullptr) dlclose(lib);
  }
  std::string why(const char* call, int rc) const {
    return str_cat(call, " failed: ", error_string != nullptr ? error_string(rc) : std::to_string(rc).c_str());
  }
};

template <class F>
bool resolve(void* lib, const char* name, F* f) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  return *f != nullptr;
}

class NvmlSampler final : public TelemetrySampler {
 public:
  NvmlSampler(std::unique_ptr<Nvml> nvml, NvmlDevice device, int period_ms, double max_clock, double limit)
      : nvml_(std::move(nvml)), device_(device), period_(period_ms), max_clock_(max_clock), limit_(limit) {
    thread_ = std::thread([this] { run(); });
  }
  ~NvmlSampler() override { join(); }

  TelemetrySummary stop() override {
    join();
    return summarize_telemetry(samples_, max_clock_, limit_);
  }
  TelemetrySummary take() override {
    std::vector<TelemetrySample> taken;
    {
      std::lock_guard<std::mutex> lock(mu_);
      taken.swap(samples_);
    }
    return summarize_telemetry(taken, max_clock_, limit_);
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      TelemetrySample s;
      unsigned clock = 0, milliwatts = 0;
      unsigned long long reasons = 0;
      if (nvml_->clock(device_, kNvmlClockSm, &clock) == kNvmlSuccess &&
          nvml_->power(device_, &milliwatts) == kNvmlSuccess && nvml_->reasons(device_, &reasons) == kNvmlSuccess) {
        s.sm_clock_mhz = clock;
        s.power_w = milliwatts / 1000.0;
        s.reasons = reasons;
        unsigned celsius = 0;
        if (nvml_->temperature != nullptr &&
            nvml_->temperature(device_, kNvmlTemperatureGpu, &celsius) == kNvmlSuccess) {
          s.temperature_c = celsius;
        }
        NvmlUtilization busy{0, 0};
        if (nvml_->utilization != nullptr && nvml_->utilization(device_, &busy) == kNvmlSuccess) {
          s.utilization_pct = busy.gpu;
        }
        samples_.push_back(s);
      }
      cv_.wait_for(lock, std::chrono::milliseconds(period_), [this] { return stop_; });
    }
  }
  void join() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  std::unique_ptr<Nvml> nvml_;
  NvmlDevice device_;
  int period_;
  double max_clock_, limit_;
  std::vector<TelemetrySample> samples_;  // written by the thread under mu_
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

class NvmlEnergyCounter final : public EnergyCounter {
 public:
  NvmlEnergyCounter(std::unique_ptr<Nvml> nvml, NvmlDevice device) : nvml_(std::move(nvml)), device_(device) {}
  std::optional<int64_t> millijoules() override {
    unsigned long long mj = 0;
    if (nvml_->total_energy(device_, &mj) != kNvmlSuccess) return std::nullopt;
    return static_cast<int64_t>(mj);
  }

 private:
  std::unique_ptr<Nvml> nvml_;
  NvmlDevice device_;
};

// NVML loaded, the entry points every user needs and those `resolve_required` asks for resolved
// (`lacks` the reason when one is missing), initialised, and `cuda_device`'s handle in *device;
// nullptr with the reason in *why otherwise.
template <typename ResolveRequired>
std::unique_ptr<Nvml> open_nvml_device(int cuda_device, ResolveRequired resolve_required, const char* lacks,
                                       NvmlDevice* device, std::string* why) {
  auto nvml = std::make_unique<Nvml>();
  nvml->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml->lib == nullptr) {
    *why = "no NVML library (libnvidia-ml.so.1)";
    return nullptr;
  }
  void* lib = nvml->lib;
  resolve(lib, "nvmlErrorString", &nvml->error_string);
  int (*init)() = nullptr;
  if (!resolve(lib, "nvmlInit_v2", &init) || !resolve(lib, "nvmlDeviceGetHandleByPciBusId_v2", &nvml->by_pci_bus_id) ||
      !resolve_required(lib, *nvml)) {
    *why = lacks;
    return nullptr;
  }
  if (const int rc = init(); rc != kNvmlSuccess) {
    *why = nvml->why("nvmlInit_v2", rc);
    return nullptr;
  }
  resolve(lib, "nvmlShutdown", &nvml->shutdown);  // paired with the successful init
  char bus[32] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), cuda_device) != cudaSuccess) {
    *why = str_cat("no PCI bus id for CUDA device ", cuda_device);
    return nullptr;
  }
  if (const int rc = nvml->by_pci_bus_id(bus, device); rc != kNvmlSuccess) {
    *why = nvml->why("nvmlDeviceGetHandleByPciBusId_v2", rc);
    return nullptr;
  }
  return nvml;
}

}  // namespace

std::unique_ptr<EnergyCounter> open_energy_counter(int cuda_device, std::string* why_not) {
  auto fail = [&](std::string why) -> std::unique_ptr<EnergyCounter> {
    if (why_not != nullptr) *why_not = std::move(why);
    return nullptr;
  };
  NvmlDevice device = nullptr;
  std::string why;
  std::unique_ptr<Nvml> nvml = open_nvml_device(
      cuda_device,
      [](void* lib, Nvml& n) { return resolve(lib, "nvmlDeviceGetTotalEnergyConsumption", &n.total_energy); },
      "the NVML library lacks nvmlDeviceGetTotalEnergyConsumption", &device, &why);
  if (!nvml) return fail(why);
  unsigned long long probe = 0;
  if (const int rc = nvml->total_energy(device, &probe); rc != kNvmlSuccess) {
    return fail(nvml->why("nvmlDeviceGetTotalEnergyConsumption", rc));
  }
  return std::make_unique<NvmlEnergyCounter>(std::move(nvml), device);
}

std::unique_ptr<TelemetrySampler> start_telemetry(int cuda_device, int period_ms, std::string* why_not) {
  MT_CHECK(period_ms > 0) << "telemetry period " << period_ms;
  auto fail = [&](std::string why) -> std::unique_ptr<TelemetrySampler> {
    if (why_not != nullptr) *why_not = std::move(why);
    return nullptr;
  };
  NvmlDevice device = nullptr;
  std::string why;
  std::unique_ptr<Nvml> nvml = open_nvml_device(
      cuda_device,
      [](void* lib, Nvml& n) {
        return resolve(lib, "nvmlDeviceGetClockInfo", &n.clock) &&
               resolve(lib, "nvmlDeviceGetMaxClockInfo", &n.max_clock) &&
               resolve(lib, "nvmlDeviceGetPowerUsage", &n.power) &&
               resolve(lib, "nvmlDeviceGetEnforcedPowerLimit", &n.power_limit) &&
               (resolve(lib, "nvmlDeviceGetCurrentClocksEventReasons", &n.reasons) ||
                resolve(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", &n.reasons));
      },
      "the NVML library lacks a function this build calls", &device, &why);
  if (!nvml) return fail(why);
  resolve(nvml->lib, "nvmlDeviceGetTemperature", &nvml->temperature);
  resolve(nvml->lib, "nvmlDeviceGetUtilizationRates", &nvml->utilization);
  unsigned max_clock = 0, limit_mw = 0, probe = 0;
  unsigned long long reasons = 0;
  if (const int rc = nvml->max_clock(device, kNvmlClockSm, &max_clock); rc != kNvmlSuccess) {
    return fail(nvml->why("nvmlDeviceGetMaxClockInfo", rc));
  }
  if (const int rc = nvml->power_limit(device, &limit_mw); rc != kNvmlSuccess) {
    return fail(nvml->why("nvmlDeviceGetEnforcedPowerLimit", rc));
  }
  if (const int rc = nvml->power(device, &probe); rc != kNvmlSuccess)
    return fail(nvml->why("nvmlDeviceGetPowerUsage", rc));
  if (const int rc = nvml->reasons(device, &reasons); rc != kNvmlSuccess) {
    return fail(nvml->why("nvmlDeviceGetCurrentClocksEventReasons", rc));
  }
  return std::make_unique<NvmlSampler>(std::move(nvml), device, period_ms, static_cast<double>(max_clock),
                                       limit_mw / 1000.0);
}

}  // namespace megatron::backend
