// What a checkpoint directory must hold before anything is built from it. Every reader of
// checkpoints (train --load, generate, convert, checkpoint-info) goes through these checks, so a
// file that one command refuses, every command refuses, with the same one-line error:
//   - each value of metadata.json in its range, with the file and key named
//     ("<dir>/metadata.json: args.--num-layers is 0, expected 1 to 26");
//   - enum values known (precision, gelu, --normalization, the scheduler's styles);
//   - "iteration" equal to the one the directory's name gives (0 for release);
//   - model.safetensors holding exactly the tensors the recorded model consumes (none missing,
//     none left over), each of its global shape and floating point; optimizer.safetensors, when
//     present, exactly the state of those tensors; fp8_state.safetensors, when present, the FP8
//     scaling state of the model's layers (ckpt/checkpoint_fp8.h: read_fp8_state_info).
// The shape values are bounded by what the files hold (the layer count by the number of
// tensors, each dimension by the largest one present) before a model is declared from them,
// so a forged metadata.json cannot make a reader allocate without bound.
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/checkpoint_io.h"
#include "core/dtype.h"
#include "model/gpt_config.h"
#include "optim/loss_scaler.h"
#include "optim/lr_scheduler.h"

namespace megatron::ckpt {

// metadata.json "format" of our checkpoints (written by the trainer and by megatron convert).
inline constexpr const char* kCheckpointFormat = "megatron.cpp checkpoint v1";

// Where a run is: Megatron's iteration and consumed samples (the data sampler's cursor).
struct TrainProgress {
  int64_t iteration = 0;
  int64_t consumed_train_samples = 0;
  int64_t consumed_valid_samples = 0;
};

// The largest count a checkpoint may record (samples, steps): 2^53, exact in a double, so that
// adding a batch to it can neither overflow nor round.
inline constexpr int64_t kMaxCheckpointCount = int64_t{1} << 53;

// The model shape and dtype a checkpoint was trained with, validated against its tensors as
// above. Dropout is left 0 (inference); callers that train take the rates from their flags.
struct CheckpointModel {
  model::GPTConfig config;
  DType dtype = DType::kF32;
  int64_t iteration = 0;
};
CheckpointModel read_checkpoint_model(const LoadedCheckpoint& checkpoint);

// The training state of metadata.json, each value validated. The optimizer's part (steps, loss
// scaler, scheduler) is read only when the checkpoint holds optimizer.safetensors.
struct CheckpointState {
  TrainProgress progress;
  bool has_optimizer_state = false;
  int64_t optimizer_steps = 0;
  optim::GradScalerState grad_scaler;
  optim::SchedulerState scheduler;
};
CheckpointState read_checkpoint_state(const LoadedCheckpoint& checkpoint);

// The index of the first NaN or Inf among `count` elements of a floating-point type at `data`
// (by their bits: no conversion), or -1 when all are finite.
int64_t first_non_finite(const void* data, DType dtype, int64_t count);
// Error "<file>: tensor '<name>' holds NaN or Inf (element k)" for the first such tensor of any
// safetensors file of the checkpoint but fp8_state.safetensors (amax histories may hold an Inf
// amax): for the commands that read whole checkpoints (generate, convert). The trainer checks
// the shares it reads instead.
void check_all_finite(const LoadedCheckpoint& checkpoint);

}  // namespace megatron::ckpt
