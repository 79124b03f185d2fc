#include "cli/host_memory.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "comm/launch_env.h"
#include "core/error.h"
#include "train/config.h"
#include "train/sub_configs.h"

namespace megatron::cli {

std::optional<int64_t> parse_mem_available(const std::string& meminfo) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    long long kib = -1;
    std::string unit;
    if (!(fields >> kib >> unit) || kib < 0 || unit != "kB") return std::nullopt;
    return static_cast<int64_t>(kib) * 1024;
  }
  return std::nullopt;
}

std::optional<int64_t> host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return parse_mem_available(text.str());
}

void check_host_memory(const std::string& command, int64_t planned_bytes, int64_t ranks_on_node,
                       std::optional<int64_t> available_bytes) {
  if (!available_bytes) return;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const double need = static_cast<double>(planned_bytes) * static_cast<double>(ranks_on_node);
  if (need <= static_cast<double>(*available_bytes)) return;
  char numbers[160];
  std::snprintf(numbers, sizeof numbers, "%.2f GiB per rank x %lld rank(s) on this node = %.2f GiB",
                planned_bytes / gib, static_cast<long long>(ranks_on_node), need / gib);
  char available[64];
  std::snprintf(available, sizeof available, "%.2f GiB", static_cast<double>(*available_bytes) / gib);
  throw_error(command, ": the memory plan needs ", numbers, " of host memory on the cpu device, but ", available,
              " is available (MemAvailable, /proc/meminfo); use --device cuda, a smaller model or micro-batch, "
              "or ask `megatron plan`");
}

void check_host_memory(const std::string& command, const train::TrainConfig& config, int64_t stage) {
  check_host_memory(command, train::train_memory_plan(config, stage).total(),
                    comm::ranks_per_node(comm::process_environment(), config.world_size), host_available_bytes());
}

namespace {
std::string gib(int64_t bytes) {
  if (bytes < (int64_t{1} << 30)) {
    char small[32];
    std::snprintf(small, sizeof small, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return small;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}
}  // namespace

std::string save_memory_line(const train::TrainConfig& config) {
  const ckpt::CheckpointSaveMemory m =
      ckpt::checkpoint_save_memory(train::checkpoint_run(config), !config.no_save_optim);
  const std::string streamed = "rank 0 writes " + gib(m.checkpoint_bytes) + " one tensor at a time, holding at most " +
                               gib(m.host_bytes) + " of host and " + gib(m.device_bytes) +
                               " of device memory beyond training while it saves";
  if (!config.ckpt_fully_parallel_save) return " > checkpoint save (--save): " + streamed + "\n";
  if (config.async_save) {
    return " > checkpoint save (--save --async-save): every rank copies what it holds of " + gib(m.checkpoint_bytes) +
           " to host memory (about " + gib(m.rank_share_bytes) +
           " on the busiest rank) and writes it while training goes on; where not every rank sees the directory, " +
           streamed + "\n";
  }
  return " > checkpoint save (--save): every rank writes what it holds of " + gib(m.checkpoint_bytes) + ", with " +
         gib(ckpt::kParallelSaveStagingBytes) + " of host memory; where not every rank sees the directory, " +
         streamed + "\n";
}

// A checkpoint that cannot be written fails at its first save, after hours of training: say so
// before the first step.
void check_save_memory(const train::TrainConfig& config, int64_t planned_device_bytes, int64_t device_total,
                       std::optional<int64_t> host_available) {
  const ckpt::CheckpointSaveMemory m =
      ckpt::checkpoint_save_memory(train::checkpoint_run(config), !config.no_save_optim);
  // Training that does not fit by itself fails on its own allocation, with its own message.
  if (device_total > 0 && planned_device_bytes > device_total) return;
  if (device_total > 0 && planned_device_bytes + m.device_bytes > device_total) {
    throw_error("[--save] saving a checkpoint needs ", gib(m.device_bytes), " of rank 0's device memory (its largest ",
                "tensor, gathered whole) beside training's ", gib(planned_device_bytes), ", more than its ",
                gib(device_total));
  }
  if (host_available && m.host_bytes > *host_available) {
    throw_error("[--save] saving a checkpoint needs ", gib(m.host_bytes),
                " of rank 0's host memory (two copies of its ", "largest tensor), more than its ", gib(*host_available),
                " available");
  }
}
}  // namespace megatron::cli
