// --device for the commands that compute: "cpu", "cuda" (GPU 0) or "auto" (CUDA when this
// build has it and a GPU is visible, else the CPU reference backend).
#pragma once

#include <memory>
#include <ostream>
#include <string>

#include "backend/ops.h"
#include "cli/args.h"

namespace megatron::cli {

// Also declares --deterministic-mode (Megatron's flag; --deterministic is accepted too).
void declare_device_flag(Args& args);
// Whether --deterministic-mode / --deterministic was given.
bool deterministic(const Args& args);
// Builds the backend --device asks for and prints one line saying which (to `log`); a CUDA
// backend runs on GPU `cuda_device` (a rank's LOCAL_RANK).
std::unique_ptr<backend::Backend> make_backend(const Args& args, std::ostream& log, int64_t cuda_device = 0);
// Whether --device selects the CUDA backend on this machine (without creating it).
bool uses_cuda(const Args& args);

}  // namespace megatron::cli
