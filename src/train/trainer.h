// The training loop of Megatron-LM's pretrain_gpt.py (classic C23 train(), docs/megatron-formats.md
// §3.2-§3.9): per iteration, update the micro-batch count from the consumed samples, run
// forward/backward over the micro-batches (gradients accumulate, each loss divided by the
// number of micro-batches), take the optimizer step (skipped on fp16 overflow; the LR
// scheduler steps only on success), count consumed samples, then log / evaluate / exit in
// Megatron's order.
// Data parallelism (docs/megatron-formats.md §3.2, §3.9): each DP rank runs gbs / (mbs * dp)
// micro-batches of its slice of the global batch; the optimizer averages the gradients over
// the DP group (parallel/grad_buffer.h, optionally with the distributed optimizer); the logged
// loss is averaged over DP. Rank 0 prints the start-up and checkpoint messages, the last rank
// the iteration lines and validation (Megatron's print_rank_0 / print_rank_last) and writes
// TensorBoard and the JSONL log; every rank writes its part of a checkpoint, or rank 0 all of it
// where the ranks do not share the --save directory (ckpt/checkpoint.h).
// Tensor parallelism (model/gpt_model.h): the TP ranks of a replica read the same samples
// (they share the DP coordinate), the model runs collectively over the TP group, the
// sequence-parallel LayerNorm gradients are all-reduced over TP before the DP reduction, and
// a checkpoint holds global tensors, each TP rank writing its shard's bytes into them.
// Pipeline parallelism (model/gpt_model.h, parallel/pipeline_schedule.h): each rank builds
// its stage; an iteration runs the stage's table (1F1B, or interleaved with
// --num-layers-per-virtual-pipeline-stage) through parallel/pipeline_executor.h, so the loss
// exists on the last stage only (logged by the last rank, averaged over DP there; the other
// stages contribute 0 to that average). Before the DP reduction the tied word embedding's
// gradient is summed over the embedding group {first, last stage}; the grad norm and the
// fp16 inf flag are reduced over the model-parallel group (TP x PP) with the last stage's
// embedding copy left out. Gradient buffers, buckets and the distributed optimizer are per
// stage (each rank's own ParameterSet, reduced over its DP group; buckets per model chunk).
// The overlaps work with any pipeline layout: --overlap-grad-reduce starts a chunk's buckets
// during its last micro-batch's backward (the tied embedding's after its embedding-group sum),
// --overlap-param-gather waits for each bucket in the next forward, and
// --overlap-p2p-communication starts the stage exchanges (parallel/grad_buffer.h,
// parallel/pipeline_executor.h). Evaluation runs the
// forward-only table. A checkpoint: each stage's TP rank 0 (of DP rank 0) sends its global
// tensors to global rank 0, which writes one layout-independent set of files; every rank
// loads its own parameters by their global names.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <vector>

#include "backend/ops.h"
#include "ckpt/checkpoint.h"
#include "data/dataset_config.h"
#include "model/gpt_model.h"
#include "obs/energy_monitor.h"
#include "obs/metrics_jsonl.h"
#include "obs/progress_log.h"
#include "obs/straggler_detector.h"
#include "obs/tensorboard_writer.h"
#include "obs/timers.h"
#include "optim/lr_scheduler.h"
#include "parallel/optimizer.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/process_groups.h"
#include "train/config.h"
#include "train/microbatches.h"

namespace megatron::train {

struct TrainSummary {
  int64_t iterations = 0;
  bool exited_early = false;  // --exit-interval, --exit-duration-in-mins or SIGTERM
  int64_t consumed_samples = 0;
  double first_loss = 0;        // the loss of iteration 1 (advanced)
  double last_loss = 0;         // the last logged interval average
  double final_valid_loss = 0;  // NaN when there is no validation split
};

class Trainer {
 public:
  // `config` must come from cli::parse_train_config with model.vocab_size and
  // model.padded_vocab_size filled. Builds the datasets, the model (initialised from --seed),
  // the optimizer and the schedules, then loads --load if given. Progress and log lines go
  // to `out`.
  // `groups` (outliving the trainer) are this rank's parallel groups; null: one process.
  // config.world_size and data_parallel_size must match them.
  ~Trainer();  // warns when an --async-save checkpoint was left uncommitted
  Trainer(const TrainConfig& config, backend::Backend& backend, std::ostream& out,
          parallel::ProcessGroups* groups = nullptr);
  TrainSummary run();

  // --log-straggler's detector (null: none), whose watched communicators `groups` are; it
  // times each iteration and reports at every log interval (obs/straggler_detector.h).
  void set_straggler_detector(obs::StragglerDetector* detector) { straggler_ = detector; }
  // --log-energy and --codecarbon-dir: this rank's GPU energy counter (never given, or null:
  // this rank's energy reads 0), read by obs::EnergyMonitor.
  void set_energy_counter(std::unique_ptr<backend::EnergyCounter> counter) {
    energy_ = std::make_unique<obs::EnergyMonitor>(std::move(counter));
  }

  model::GPTModel& model() { return *model_; }
  const ckpt::TrainProgress& progress() const { return progress_; }

  // Set by the SIGTERM handler that --exit-signal-handler installs; tests may set it too.
  static void request_exit();
  // Installs that handler: a SIGTERM from now on is honoured at the next iteration boundary
  // (save, exit 0). `megatron train` calls it before any long start-up work (loading a
  // checkpoint, building the sample index), as Megatron does; the constructor calls it again.
  static void install_exit_signal_handler();

 private:
  struct LoopState;  // what run() keeps between iterations (trainer_loop.cpp)
  struct Iteration;  // one iteration's step, loss and global batch

  // The steps of run(), in the order an iteration takes them (train/trainer_loop.cpp):
  // Before the first iteration: "training ...", the progress log's start, --profile's notices.
  void begin_training(LoopState* loop);
  // The step of the current global batch (micro-batch count from the consumed samples, the
  // per-token weights, train_step, the NaN checks), then the scheduler, the consumed samples
  // and the iteration count advance. Collective.
  Iteration run_iteration(LoopState* loop);
  // Megatron's training_log for the iteration just run: the interval's accumulators, TensorBoard
  // at --tensorboard-log-interval, and at --log-interval the iteration line, JSONL, the memory
  // line (once), the timers and the straggler report, then a new interval. Collective.
  void log_iteration(const Iteration& it, LoopState* loop, TrainSummary* summary);
  // --eval-interval: the validation block, the interval clock stopped meanwhile. Collective.
  void evaluate_if_due(LoopState* loop);
  // Megatron's order: SIGTERM (save, exit), --save-interval, --exit-duration-in-mins,
  // --exit-interval (each exit saving unless just saved). True when the run stops here, with
  // summary->exited_early set. Collective.
  bool save_or_exit(LoopState* loop, TrainSummary* summary);
  // With TrainConfig::predicted_iteration_ms: the measured steady state (after the first log
  // interval) against megatron plan's prediction, printed by the last rank.
  void report_against_prediction(const LoopState& loop);
  // --profile: an NVTX range per phase (no-ops otherwise); the CUDA profiler's capture.
  void mark(const char* name) const;
  void unmark() const;
  void cuda_profiler(bool start) const;

  // Fills `mb` with micro-batch `k` of the iteration starting at `first_sample` of `dataset`
  // (samples first_sample + k*mbs*dp + dp_rank*mbs + [0, mbs): MegatronPretrainingSampler's
  // slice for this DP rank).
  void load_micro_batch(const data::TokenDataset& dataset, int64_t first_sample, int64_t k,
                        model::MicroBatch* mb) const;
  // --calculate-per-token-loss: the tokens the loss counts in the current global batch
  // (microbatches_) from `first_sample`, over the whole data-parallel group: every position
  // unless --eod-mask-loss drops the predictions after an end of document (then the loss masks
  // of this rank's micro-batches, loaded as load_micro_batch does, summed over DP).
  // Collective over DP; only the last stage calls it.
  double loss_tokens(const data::TokenDataset& dataset, int64_t first_sample) const;
  // Megatron evaluate(): eval_iters iterations of the current global batch (microbatches_)
  // without dropout; the mean of the micro-batch losses over all DP ranks. Advances *consumed.
  double evaluate(const data::TokenDataset& dataset, int64_t* consumed);
  void evaluate_and_print(const std::string& prefix, const data::TokenDataset& dataset, int64_t* consumed,
                          double* loss_out);
  void save();
  // What the checkpoints hold of this rank's FP8 scaling state (its state null without FP8).
  ckpt::Fp8StageState fp8_stage_state() const { return {model_->fp8_state(), groups_->coords.pp}; }
  // Commits an --async-save in flight: when every rank has written (without `wait`: checked,
  // collectively), or after waiting for them (`wait`).
  void finish_pending_save(bool wait);
  // The watchdog's grace for the waits of a save (on), or none (off).
  void grant_save_time(bool on);
  // The validation and test evaluations after training (or instead of it, --skip-train).
  void evaluate_final(TrainSummary* summary);
  // This stage's schedule for `num_micro` micro-batches (checked against the model's sets).
  std::vector<parallel::PipelineAction> pipeline_table(int64_t num_micro, bool forward_only) const;
  // TensorBoard scalars of one iteration (every --tensorboard-log-interval).
  // `params_norm`: --log-params-norm's value (computed by every rank: it is collective).
  void log_to_tensorboard(const parallel::StepResult& step, double loss, int64_t gbs,
                          std::optional<double> params_norm);
  // --check-weight-hash-across-dp-replicas-interval: every rank's weights against its
  // data-parallel group's rank 0 (collective); throws on every rank when any differ.
  void check_weight_hashes();
  // --log-progress: rank 0 appends `text` to <--save>/progress.txt (a failure is a warning: the
  // run goes on).
  void append_progress(const std::string& text);
  // --log-progress after a save: Megatron's line of the job's and the run's throughput.
  void append_checkpoint_progress();
  // Timers::log over the world, printed by the last rank (collective).
  void log_timers(const std::vector<std::string>& names, double normalizer = 1.0);
  // --codecarbon-dir: rank 0 writes the run's row of emissions.csv from the energy lapped so far.
  void write_emissions() const;

  TrainConfig config_;
  backend::Backend& backend_;
  // Global rank 0's lock on --save for the whole run (none without --save, on other ranks).
  std::unique_ptr<ckpt::SaveDirectoryLock> save_lock_;
  std::unique_ptr<parallel::ProcessGroups> own_groups_;  // one-rank groups when none are given
  parallel::ProcessGroups* groups_;
  std::ostream null_{nullptr};  // swallows the lines other ranks print
  std::ostream* log0_;          // rank 0's messages (print_rank_0)
  std::ostream* log_last_;      // the last rank's (print_rank_last)
  data::GPTDatasets datasets_;
  std::unique_ptr<model::GPTModel> model_;
  std::unique_ptr<parallel::MixedPrecisionOptimizer> optimizer_;
  bool recording_failure_reported_ = false;  // the warning on recorded work, printed once
  bool weight_hash_skip_reported_ = false;   // --check-weight-hash... at DP 1, said once
  std::unique_ptr<optim::OptimizerParamScheduler> scheduler_;
  std::unique_ptr<NumMicroBatchesCalculator> microbatches_;
  int64_t train_iters_ = 0;
  ckpt::TrainProgress progress_;
  std::unique_ptr<obs::Timers> timers_;          // --timing-log-level (obs/timers.h)
  obs::StragglerDetector* straggler_ = nullptr;  // --log-straggler
  std::unique_ptr<obs::EnergyMonitor> energy_;   // --log-energy, --codecarbon-dir
  std::string emissions_run_id_;                 // --codecarbon-dir: this run's row
  std::chrono::steady_clock::time_point energy_start_;
  std::unique_ptr<obs::TensorBoardWriter> tensorboard_;
  std::unique_ptr<obs::MetricsJsonlWriter> jsonl_;
  // --log-progress: when this job started (the earliest rank's construction of its Trainer) and
  // the model FLOPs done before it (the loaded checkpoint's).
  double flops_per_sample_ = 0.0;  // model FLOPs of one sample (train/flops.h, --flops-convention)
  std::chrono::system_clock::time_point job_start_;
  double job_start_flops_ = 0.0;
  // Where the run of jobs with this GPU count started (read from progress.txt once, after this
  // job's "Starting job": later lines are this job's own and cannot move it).
  std::optional<obs::ProgressStart> progress_run_start_;
  std::chrono::milliseconds save_grace_{0};   // grant_save_time's grace, computed at the first save
  std::shared_ptr<Storage> async_save_host_;  // --async-save's page-locked copy, kept between saves
  std::unique_ptr<ckpt::PendingCheckpointSave>
      pending_save_;  // an --async-save being written (declared last: destroyed first)
};

}  // namespace megatron::train
