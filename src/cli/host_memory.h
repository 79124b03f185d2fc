// Host memory for runs on the CPU device. A CPU run whose memory plan (model/memory_plan.h) is
// larger than what the machine has available does not fail on allocation: Linux overcommits,
// and the kernel's OOM killer ends the process part-way through model construction with no
// message ("Killed"). `megatron train` and `megatron bench` check the plan against
// /proc/meminfo's MemAvailable first and stop with a one-line error instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "train/config.h"

namespace megatron::cli {

// MemAvailable of a /proc/meminfo text, in bytes; nullopt when the line is missing or malformed.
std::optional<int64_t> parse_mem_available(const std::string& meminfo);
// MemAvailable of this machine, or nullopt when /proc/meminfo cannot be read (no check then).
std::optional<int64_t> host_available_bytes();
// Throws a one-line error naming `command`, the plan and what is available when
// `ranks_on_node` ranks of `planned_bytes` each exceed `available_bytes`; nothing when
// `available_bytes` is unknown.
void check_host_memory(const std::string& command, int64_t planned_bytes, int64_t ranks_on_node,
                       std::optional<int64_t> available_bytes);
// The check for a CPU run of `config` on pipeline stage `stage`: this rank's memory plan, the
// launcher's ranks on this node, this machine's MemAvailable.
void check_host_memory(const std::string& command, const train::TrainConfig& config, int64_t stage);

// --save: the line --dry-run prints (the parallel save's staging, or with
// --no-ckpt-fully-parallel-save ckpt::checkpoint_save_memory's numbers), and the check
// `megatron train` makes on rank 0 before the first step when rank 0 writes the whole
// checkpoint (--no-ckpt-fully-parallel-save, or a --save directory not every rank sees; the
// parallel save stages 64 MiB, and --async-save's page-locked copy is allocated before the
// first step, every rank stopping if one cannot): a one-line error naming --save when
// training's planned device bytes plus what a save adds exceed `device_total` (0: unknown, not
// checked), or what a save holds in host memory exceeds `host_available`. Nothing when training
// does not fit the device by itself: that fails first, with its own message.
std::string save_memory_line(const train::TrainConfig& config);
void check_save_memory(const train::TrainConfig& config, int64_t planned_device_bytes, int64_t device_total,
                       std::optional<int64_t> host_available);

}  // namespace megatron::cli
