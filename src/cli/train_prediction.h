// What `megatron plan` predicts for a `megatron train` configuration, printed before the first
// step (and by --dry-run), so that a run says how fast it should go before it goes: the same
// memory and throughput models as `megatron plan` (plan/), for this exact layout, on the GPU the
// run uses (named by --gpu, else the CUDA device's kind).
#pragma once

#include <cstdint>
#include <string>

#include "plan/gpu_spec.h"
#include "train/config.h"

namespace megatron::cli {

// " > predicted by megatron plan for h100-80gb (1 node x 1 GPU): 136.2 ms per iteration,
// 60,150 tokens/s, 510.3 TFLOP/s/GPU (Megatron 2024 convention, as megatron plan; ... in this
// run's 2025 convention), report time 332.5 s; fits (38.1 of 79.6 GiB per GPU)\n".
// `config` must have model.vocab_size set; `gpus_per_node` ranks share a node. ms_per_iteration
// is 0, and the line gives the reason, where the planner does not model the run (fp32, full
// recompute of only some layers); 0 too under --rampup-batch-size (the line is for the final batch).
struct SpeedPrediction {
  std::string line;
  double ms_per_iteration = 0.0;
};
SpeedPrediction predict_speed(const train::TrainConfig& config, const plan::GpuSpec& gpu, int64_t gpus_per_node);

}  // namespace megatron::cli
