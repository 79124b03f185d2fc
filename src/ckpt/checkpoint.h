// What a training checkpoint holds and how the trainer's state goes in and comes back
// (the file layer is ckpt/checkpoint_io.h). Resume is bit-exact: together with the
// (seed, iteration, micro-batch) dropout streams and the data order fixed by the consumed
// sample count, this is all the state a run has.
//
//   model.safetensors      every parameter by its Megatron-core name, in the model dtype
//   optimizer.safetensors  "main_param.<name>" (fp32, only when the model is bf16/fp16),
//                          "exp_avg.<name>", "exp_avg_sq.<name>" (absent with --no-save-optim)
//   fp8_state.safetensors  with --fp8-format: the linears' FP8 scaling state (ckpt/checkpoint_fp8.h)
//   metadata.json          {"format", "program_version", "iteration", "consumed_train_samples",
//                           "consumed_valid_samples", "optimizer_steps", "scheduler": {...},
//                           "grad_scaler": {...}, "rng": {...}, "layout": {...}, "args": {...}}
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "backend/ops.h"
#include "ckpt/checkpoint_contents.h"
#include "ckpt/checkpoint_fp8.h"
#include "ckpt/checkpoint_io.h"
#include "comm/communicator.h"
#include "model/gpt_config.h"
#include "model/parameters.h"
#include "optim/lr_scheduler.h"
#include "parallel/optimizer.h"
#include "parallel/process_groups.h"

namespace megatron::ckpt {

// The run a training checkpoint belongs to: what every rank's save walks (the tensors of every
// stage, by their global shapes) and what metadata.json records. train::checkpoint_run builds it
// from the flags.
struct CheckpointRun {
  model::GPTConfig model;
  std::vector<model::PipelineStageOptions> stages;  // one per pipeline stage: what it declares
  int64_t tensor_model_parallel_size = 1;
  int64_t data_parallel_size = 1;
  DType dtype = DType::kF32;  // the model's: --bf16, --fp16 or fp32
  int64_t seed = 0;           // --seed (dropout streams are Philox(seed, iteration, ...))
  // metadata.json's "args": flag name -> JSON value text (train::checkpoint_args). The load
  // prints how they differ from the checkpoint's and refuses a change of the model's shape.
  std::map<std::string, std::string> args;
  int64_t pipeline_model_parallel_size() const { return static_cast<int64_t>(stages.size()); }
};

// Where and how a save writes.
struct SaveOptions {
  std::string dir;             // --save
  int64_t keep_last = 0;       // --save-keep-last: 0 keeps every checkpoint
  bool save_optim = true;      // false with --no-save-optim: weights only
  bool fully_parallel = true;  // --ckpt-fully-parallel-save (default) or the streamed save
  bool async = false;          // --async-save (parallel save only)
};

// What a load reads and keeps.
struct LoadOptions {
  std::string dir;                        // --load
  std::optional<int64_t> step;            // --ckpt-step, else the tracker's latest
  bool finetune = false;                  // --finetune: weights only, iteration 0
  bool load_optim = true;                 // false with --no-load-optim
  bool exit_on_missing = false;           // --exit-on-missing-checkpoint
  bool override_scheduler = false;        // --override-opt_param-scheduler
  bool use_checkpoint_scheduler = false;  // --use-checkpoint-opt_param-scheduler
};

// What the streamed save (--no-ckpt-fully-parallel-save, below) costs in memory beyond
// training: `checkpoint_bytes` pass through the writer's file (model dtype plus the saved
// optimizer state, every tensor of every stage); at any moment the writer holds at most two
// host copies of the largest tensor (one received or gathered, one being written) and one
// device buffer of it, and a rank of a tensor-parallel group one gathered copy on the host and
// one on the device. The sizes come from the same tensor list the save walks; at GPT shapes the
// largest tensor is the word embedding's fp32 optimizer state (padded vocabulary x hidden).
// The parallel save holds kParallelSaveStagingBytes of host memory per rank and no device memory;
// with --async-save, a page-locked copy of the rank's share instead (rank_share_bytes).
inline constexpr int64_t kParallelSaveStagingBytes = int64_t{64} << 20;
struct CheckpointSaveMemory {
  int64_t checkpoint_bytes = 0;  // the tensors of model.safetensors + optimizer.safetensors
  int64_t host_bytes = 0;        // the writer's host memory while it saves
  int64_t device_bytes = 0;      // the writer's device memory beyond training while it saves
  // The parallel save: about what the busiest rank writes (its stage's bytes over TP x DP; a
  // little more on TP rank 0, which writes the tensors replicated over TP): what --async-save
  // copies to that rank's host memory.
  int64_t rank_share_bytes = 0;
};
CheckpointSaveMemory checkpoint_save_memory(const CheckpointRun& run, bool save_optim);

// Saves the state after `progress.iteration` to options.dir (without options.save_optim, weights
// only), printing Megatron's "saving checkpoint at iteration ..." lines to `log` (rank 0's).
// The files are the same for every layout and either way of writing them: every tensor by its
// global shape, byte for byte. Collective over `groups.world`: every rank calls it. A failure
// on any rank (a full disk, a directory it cannot see) stops every rank with an Error, the
// failing rank's naming the path; the previous checkpoint stays the latest.
//
// The parallel save (options.fully_parallel, Megatron's default fully parallel save;
// it needs every rank to see the --save directory: all_ranks_see_directory): rank 0 lays out
// the files in the temporary directory (headers written, data areas sized), then every rank
// writes the bytes it holds at their offsets in the global tensors, with no communication:
// each TP rank its shard of a split parameter (TP rank 0 a replicated one), and of that, the
// optimizer state it owns under --use-distributed-optimizer, else part d of DP equal parts on
// DP rank d. Every byte is written by exactly one rank; device bytes are staged through
// kParallelSaveStagingBytes of host memory at a time. Rank 0 then adds metadata.json and
// commits the directory (ckpt/checkpoint_io.h).
//
// The streamed save (--no-ckpt-fully-parallel-save): global rank 0 writes, one tensor at a
// time, in file order (the model tensors of stage 0, 1, ..., then the optimizer's of stage 0,
// 1, ...; a stage's in its parameter order). For each tensor the ranks of the stage that holds
// it: gather the optimizer state of the parameter to data-parallel rank 0 when it is sharded
// (MixedPrecisionOptimizer::gather_param_state), then the data-parallel-rank-0 ranks gather
// it over tensor parallelism into its global shape, and that stage's writer (TP 0, DP 0) sends
// it to rank 0 over the pipeline group unless it is rank 0. Every rank walks the same list in
// the same order, so each collective and each send meets its peers; memory stays bounded by
// the largest tensor (checkpoint_save_memory), whatever the model's size.
//
// With --async-save (options.async, parallel save only) it returns once every rank has
// copied the bytes it writes (the state as of this iteration) into the page-locked host buffer
// *async_host (allocated at the first save, or grown, and kept for the next: the caller holds
// it and must not start another save before this one is finished) and started a thread that
// writes them; training goes on, and finish_checkpoint_save commits the checkpoint. Otherwise
// it returns null, the checkpoint committed.
class PendingCheckpointSave;
// The page-locked host buffer --async-save copies this rank's bytes into, allocated before
// training (pinning is slow: ~14 s for the 18.4 GB of gpt3-1.3b on the GPU machine, which the
// first save would otherwise stall for). Collective over groups.world: when one rank cannot
// allocate it, every rank stops (Error; that rank's names it).
std::shared_ptr<Storage> async_save_host_buffer(const CheckpointRun& run, const SaveOptions& options,
                                                const model::ParameterSet& params,
                                                const parallel::MixedPrecisionOptimizer& optimizer,
                                                const parallel::ProcessGroups& groups, backend::Backend& backend);
// `fp8`: this rank's FP8 scaling state (its state null without FP8), saved with the weights
// and the optimizer state alike (also with --no-save-optim: it is part of the model, as TE's
// _extra_state is).
std::unique_ptr<PendingCheckpointSave> save_training_checkpoint(
    const CheckpointRun& run, const SaveOptions& options, const TrainProgress& progress,
    const model::ParameterSet& params, const parallel::MixedPrecisionOptimizer& optimizer, const Fp8StageState& fp8,
    const optim::OptimizerParamScheduler& scheduler, const parallel::ProcessGroups& groups, backend::Backend& backend,
    std::ostream& log, std::shared_ptr<Storage>* async_host = nullptr);

// An asynchronous save in flight. Destroyed unfinished, it waits for this rank's writes and
// leaves the temporary directory (the previous checkpoint stays the latest; the next save
// removes it).
class PendingCheckpointSave {
 public:
  struct State;
  explicit PendingCheckpointSave(std::unique_ptr<State> state);
  ~PendingCheckpointSave();
  PendingCheckpointSave(const PendingCheckpointSave&) = delete;
  PendingCheckpointSave& operator=(const PendingCheckpointSave&) = delete;
  int64_t iteration() const;

 private:
  friend bool finish_checkpoint_save(PendingCheckpointSave&, comm::Communicator&, bool, std::ostream&);
  std::unique_ptr<State> state_;
};

// Collective over `world`. When every rank's writes are done (waiting for them when `wait`):
// rank 0 adds metadata.json and makes the checkpoint the latest, prints Megatron's
// "successfully saved checkpoint" line to `log`, and it returns true; a write failure on any
// rank stops every rank (Error), as in the synchronous save. Without `wait`, while some rank
// is still writing, it returns false and changes nothing (Megatron's
// maybe_finalize_async_save(blocking=False), called once per iteration).
bool finish_checkpoint_save(PendingCheckpointSave& save, comm::Communicator& world, bool wait, std::ostream& log);

// Every rank learns whether any failed at `step` of a save or load of `dir` (collective): the
// one that failed throws its own error, the others a line naming `flag` and `dir` that points
// at it. Shared by the save (ckpt/checkpoint.cpp) and the load (ckpt/checkpoint_load.cpp).
void agree_on_failure(comm::Communicator& world, const std::optional<std::string>& my_error, const std::string& dir,
                      const char* step, const char* flag = "--save");

// Whether every rank of `world` sees the same directory `dir` (created by rank 0 when
// missing): rank 0 leaves a file with a random number there that each rank must read back.
// Not so for node-local storage under one path on several nodes, where the parallel save
// cannot work. Collective; an Error on every rank when rank 0 cannot create the directory.
bool all_ranks_see_directory(const std::string& dir, comm::Communicator& world);

// Loads options.dir into the model, optimizer and scheduler (what is loaded follows
// --finetune / --no-load-optim) and returns where to continue. Without a checkpoint in the
// directory: Megatron's warning and iteration 0 (or an Error with --exit-on-missing-checkpoint).
// Prints the differences between the checkpoint's args and this run's, and refuses (Error,
// one line naming the flag) a change that breaks the weights or the run: model shape,
// padded vocabulary, sequence length. Every rank calls it and reads, with no communication,
// from the memory-mapped files only the bytes it holds (its tensor-parallel shards, and of the
// optimizer state its data-parallel ranges), so a checkpoint saved under one TP/PP/DP layout
// loads under another, and no rank reads more than its share. Collective over `world` at the
// end: an error on any rank stops every rank (the failing one naming the file), and so do
// ranks that loaded different iterations or sample counts (a --load directory that is not
// the same on every node). The FP8 scaling state goes into fp8.state (null without FP8) by
// ckpt/checkpoint_fp8.h's rules, with --finetune and --no-load-optim too (it is part of the
// model, as Transformer Engine's _extra_state is of the model's state dict).
TrainProgress load_training_checkpoint(const CheckpointRun& run, const LoadOptions& options,
                                       model::ParameterSet& params, parallel::MixedPrecisionOptimizer& optimizer,
                                       const Fp8StageState& fp8, optim::OptimizerParamScheduler& scheduler,
                                       comm::Communicator& world, backend::Backend& backend, std::ostream& log);

// For inference (megatron generate): the weights of a checkpoint (read_checkpoint_model, in
// ckpt/checkpoint_contents.h, gives the shape to declare `params` with) loaded into `params`.
// Errors name the file; a NaN or Inf weight is one.
void load_checkpoint_weights(const LoadedCheckpoint& checkpoint, model::ParameterSet& params,
                             backend::Backend& backend);

}  // namespace megatron::ckpt
