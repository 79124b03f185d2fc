#include "obs/energy_monitor.h"

#include <cstdio>
#include <fstream>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/file.h"
#include "obs/training_log.h"

namespace megatron::obs {

EnergyMonitor::EnergyMonitor(std::unique_ptr<backend::EnergyCounter> counter) : counter_(std::move(counter)) {}

int64_t EnergyMonitor::read() {
  if (counter_ == nullptr) return 0;
  // A failed read counts nothing (Megatron returns its last value).
  return counter_->millijoules().value_or(last_mj_);
}

void EnergyMonitor::resume() {
  last_mj_ = read();
  if (!start_mj_) start_mj_ = last_mj_;
}

void EnergyMonitor::pause() { lap_mj_ += read() - last_mj_; }

double EnergyMonitor::lap(comm::Communicator& world) {
  const int64_t now = read();
  const int64_t mine = lap_mj_ + (now - last_mj_);
  lap_mj_ = 0;
  last_mj_ = now;
  // Millijoules stay exact in a double up to 2^53 (9e12 J).
  double sums[2] = {static_cast<double>(mine), static_cast<double>(now - start_mj_.value_or(now))};
  world.all_reduce_host(sums, comm::ReduceOp::kSum);
  const auto summed = static_cast<int64_t>(sums[0]);
  world_total_mj_ += summed;
  world_wall_mj_ = static_cast<int64_t>(sums[1]);
  return static_cast<double>(summed) / 1000.0;
}

std::string emissions_csv_header() {
  return "timestamp,project_name,run_id,duration,emissions,emissions_rate,gpu_power,gpu_energy,energy_consumed,"
         "gpu_count,pue";
}

std::string emissions_csv_row(const EmissionsRecord& r) {
  const double power_w = r.duration_s > 0 ? r.gpu_energy_kwh * 3.6e6 / r.duration_s : 0.0;
  std::string emissions, rate;
  if (r.carbon_intensity_g_per_kwh) {
    const double kg = r.gpu_energy_kwh * *r.carbon_intensity_g_per_kwh / 1000.0;
    emissions = py_repr(kg);
    rate = py_repr(r.duration_s > 0 ? kg / r.duration_s : 0.0);
  }
  return str_cat(r.timestamp, ",", r.project_name, ",", r.run_id, ",", py_repr(r.duration_s), ",", emissions, ",", rate,
                 ",", py_repr(power_w), ",", py_repr(r.gpu_energy_kwh), ",", py_repr(r.gpu_energy_kwh), ",",
                 r.gpu_count, ",1.0");
}

void write_emissions_csv(const std::string& dir, const EmissionsRecord& r) {
  make_directories(dir);
  const std::string path = dir + "/emissions.csv";
  const std::string header = emissions_csv_header();
  std::vector<std::string> rows;
  if (file_exists(path)) {
    std::ifstream in(path);
    std::string line;
    if (std::getline(in, line) && line == header) {
      const std::string mine = str_cat(",", r.run_id, ",");
      while (std::getline(in, line)) {
        if (!line.empty() && line.find(mine) == std::string::npos) rows.push_back(line);
      }
    } else {
      throw_error("[--codecarbon-dir] ", path, ": a file with other columns than megatron's (", header,
                  "); move it away or give another directory");
    }
  }
  rows.push_back(emissions_csv_row(r));
  AtomicFile out(path);
  out.write(header + "\n");
  for (const std::string& row : rows) out.write(row + "\n");
  out.commit();
}

std::string random_run_id() {
  std::random_device device;
  std::mt19937_64 rng((static_cast<uint64_t>(device()) << 32) ^ device());
  char buf[40];
  const uint64_t a = rng(), b = rng();
  std::snprintf(buf, sizeof(buf), "%08x-%04x-4%03x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xfff),
                static_cast<unsigned>(0x8000 | ((b >> 48) & 0x3fff)),
                static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return buf;
}

}  // namespace megatron::obs
