// What a training checkpoint holds and how the trainer's state goes in and comes back
// (the file layer is train/checkpoint_io.h). Resume is bit-exact: together with the
// (seed, iteration, micro-batch) dropout streams and the data order fixed by the consumed
// sample count, this is all the state a run has.
//
//   model.safetensors      every parameter by its Megatron-core name, in the model dtype
//   optimizer.safetensors  "main_param.<name>" (fp32, only when the model is bf16/fp16),
//                          "exp_avg.<name>", "exp_avg_sq.<name>" (absent with --no-save-optim)
//   metadata.json          {"format", "program_version", "iteration", "consumed_train_samples",
//                           "consumed_valid_samples", "optimizer_steps", "scheduler": {...},
//                           "grad_scaler": {...}, "rng": {...}, "layout": {...}, "args": {...}}
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "model/parameters.h"
#include "train/checkpoint_io.h"
#include "train/config.h"
#include "train/lr_scheduler.h"
#include "train/optimizer.h"

namespace megatron::train {

// metadata.json "format" of our checkpoints (written by the trainer and by megatron convert).
inline constexpr const char* kCheckpointFormat = "megatron.cpp checkpoint v1";

// Where a run is: Megatron's iteration and consumed samples (the data sampler's cursor).
struct TrainProgress {
  int64_t iteration = 0;
  int64_t consumed_train_samples = 0;
  int64_t consumed_valid_samples = 0;
};

// The configuration fields a checkpoint records under "args", as flag name -> JSON value text.
std::map<std::string, std::string> checkpoint_args(const TrainConfig& config);

// The tensors a checkpoint stores, by name, with their global shapes (host or device): every
// parameter in the model dtype and, unless --no-save-optim, its fp32 optimizer state
// ("main_param." only for bf16/fp16 models, "exp_avg.", "exp_avg_sq.").
struct CheckpointTensors {
  std::vector<std::pair<std::string, Tensor>> model, optimizer;
};

// Collects them from this rank's parameters and `state` (optimizer.gather_full_state(): the
// whole fp32 state of this rank's shards, also when it is sharded over data-parallel ranks).
// With tensor parallelism each partitioned tensor is gathered over `tp` into its global
// shape (tensor_parallel/partition.h): collective over `tp`, every rank gets the whole set.
// One TP rank: views of the rank's own tensors, no copies. The last pipeline stage's copy of a
// tied word embedding is left out (the first stage saves it).
CheckpointTensors collect_checkpoint_tensors(const model::ParameterSet& params,
                                             const MixedPrecisionOptimizer& optimizer,
                                             const FullOptimizerState& state, bool with_optimizer,
                                             comm::Communicator& tp, backend::Backend& backend);

// Pipeline parallelism: stage 0's writer receives the other stages' tensors (global shapes,
// as collect_checkpoint_tensors returned them there) and appends them to `tensors`; the other
// stages send theirs. Collective over `pp`, called by the ranks that hold whole tensors (TP
// rank 0 of DP rank 0 of each stage); stage 0 knows what arrives by declaring each stage's
// parameters (model::GPTModel::declare_stage_parameters). No-op at pp 1.
void gather_pipeline_stages(CheckpointTensors* tensors, const TrainConfig& config, DType model_dtype,
                            bool separate_main_params, bool with_optimizer, comm::Communicator& pp,
                            backend::Backend& backend);

// What a save costs the writer (global rank 0) in memory, as the functions above and
// save_training_checkpoint do it: the whole checkpoint passes through its host memory (every
// tensor of every stage, model dtype plus the saved optimizer state), and its device holds, on
// top of training, the other pipeline stages' tensors it receives, the distributed optimizer's
// gathered state of its own shard (DP > 1) and one TP-gathered tensor at a time (the largest,
// the word embedding). Checkpoints are written by one rank: a model that needs model
// parallelism to fit its GPUs needs this much on one rank when it saves (sharded checkpoints
// are not implemented).
struct CheckpointSaveMemory {
  int64_t host_bytes = 0;       // rank 0's host memory while it writes
  int64_t node_host_bytes = 0;  // with TP > 1 stage 0's other TP ranks (on rank 0's node) hold its
                                // gathered tensors too
  int64_t device_bytes = 0;     // rank 0's device memory beyond training
};
CheckpointSaveMemory checkpoint_save_memory(const TrainConfig& config);

// Saves the state after `progress.iteration` to config.save (with --no-save-optim, weights
// only), printing Megatron's "saving checkpoint at iteration ..." lines to `log`. The files
// are the same for every data-parallel and tensor-parallel size. Called on the one rank that
// writes.
void save_training_checkpoint(const TrainConfig& config, const TrainProgress& progress,
                              const CheckpointTensors& tensors, const MixedPrecisionOptimizer& optimizer,
                              const OptimizerParamScheduler& scheduler, backend::Backend& backend,
                              std::ostream& log);

// Loads config.load into the model, optimizer and scheduler (what is loaded follows
// --finetune / --no-load-optim) and returns where to continue. Without a checkpoint in the
// directory: Megatron's warning and iteration 0 (or an Error with --exit-on-missing-checkpoint).
// Prints the differences between the checkpoint's args and this run's, and refuses (Error,
// one line naming the flag) a change that breaks the weights or the run: model shape,
// padded vocabulary, sequence length. Every rank calls it (each reads the files and keeps
// what it owns: its tensor-parallel shards, its data-parallel optimizer ranges), so a
// checkpoint saved under one TP/DP layout loads under another.
TrainProgress load_training_checkpoint(const TrainConfig& config, model::ParameterSet& params,
                                       MixedPrecisionOptimizer& optimizer, OptimizerParamScheduler& scheduler,
                                       backend::Backend& backend, std::ostream& log);

// For inference (megatron generate): the model shape and dtype a checkpoint was trained with,
// read from its metadata.json, and its weights loaded into `params` (declared by a GPTModel
// built from that shape). Errors name the file.
struct CheckpointModel {
  model::GPTConfig config;
  DType dtype = DType::kF32;
  int64_t iteration = 0;
};
CheckpointModel read_checkpoint_model(const LoadedCheckpoint& checkpoint);
void load_checkpoint_weights(const LoadedCheckpoint& checkpoint, model::ParameterSet& params,
                             backend::Backend& backend);

}  // namespace megatron::train
