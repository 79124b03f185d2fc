#include "train/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <string_view>
#include <vector>

#include "backend/profiler_marks.h"
#include "comm/launch.h"
#include "comm/process_groups.h"
#include "comm/self_communicator.h"
#include "core/error.h"
#include "core/host_name.h"
#include "core/memory.h"
#include "model/memory_plan.h"
#include "optim/loss_scaler.h"
#include "train/data_parallel_setup.h"
#include "train/flops.h"
#include "train/micro_batch_documents.h"
#include "train/pipeline_executor.h"
#include "train/progress_log.h"
#include "train/tensorboard_tags.h"
#include "train/train_step.h"
#include "train/training_log.h"
#include "train/weight_hash.h"

namespace megatron::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

ScheduleFlags schedule_flags(const TrainConfig& c) {
  ScheduleFlags f;
  f.train_iters = c.train_iters;
  f.train_samples = c.train_samples;
  f.global_batch_size = c.global_batch_size;
  f.lr = c.lr;
  f.min_lr = c.min_lr;
  f.lr_warmup_init = c.lr_warmup_init;
  f.lr_decay_style = to_string(c.lr_decay_style);
  f.lr_decay_iters = c.lr_decay_iters;
  f.lr_decay_samples = c.lr_decay_samples;
  f.lr_warmup_iters = c.lr_warmup_iters;
  f.lr_warmup_samples = c.lr_warmup_samples;
  f.lr_warmup_fraction = c.lr_warmup_fraction;
  f.lr_wsd_decay_style = to_string(c.lr_wsd_decay_style);
  f.lr_wsd_decay_iters = c.lr_wsd_decay_iters;
  f.lr_wsd_decay_samples = c.lr_wsd_decay_samples;
  f.weight_decay = c.weight_decay;
  if (c.weight_decay_incr_style != WdIncrStyle::kConstant) {  // constant: --weight-decay alone
    f.start_weight_decay = c.start_weight_decay;
    f.end_weight_decay = c.end_weight_decay;
  }
  f.weight_decay_incr_style = to_string(c.weight_decay_incr_style);
  return f;
}


// --exit-signal-handler: SIGTERM only sets this flag; the loop checks it after each iteration.
std::atomic<bool> g_exit_requested{false};
extern "C" void on_sigterm(int) { g_exit_requested.store(true); }


}  // namespace

Trainer::Trainer(const TrainConfig& config, backend::Backend& backend, std::ostream& out, comm::ProcessGroups* groups)
    : config_(config), backend_(backend), groups_(groups) {
  if (groups_ == nullptr) {
    own_groups_ = std::make_unique<comm::ProcessGroups>(
        comm::make_process_groups(std::make_unique<comm::SelfCommunicator>(backend_, "world"), comm::ParallelSizes{}));
    groups_ = own_groups_.get();
  }
  log0_ = groups_->is_first_rank() ? &out : &null_;
  log_last_ = groups_->is_last_rank() ? &out : &null_;
  const TrainConfig& c = config_;
  if (c.exit_signal_handler) install_exit_signal_handler();
  if (c.save) {
    // Before anything else touches the directory: a second run must not clean up this one's
    // saves in progress. Rank 0 alone saves (and locks); every rank stops when it cannot.
    std::optional<std::string> error;
    if (groups_->rank() == 0) {
      try {
        save_lock_ = std::make_unique<SaveDirectoryLock>(*c.save);
        if (!save_lock_->unlocked_reason().empty()) {
          *log0_ << "WARNING: " << save_lock_->unlocked_reason()
                 << ": nothing stops a second run from saving into --save " << *c.save << "\n";
        }
      } catch (const Error& e) {
        error = e.what();
      }
    }
    const double failed = comm::all_reduce_scalar(*groups_->world, error ? 1.0 : 0.0, comm::ReduceOp::kMax);
    if (error) throw Error(*error);
    if (failed > 0) throw_error("[--save] ", *c.save, ": rank 0 could not lock the directory (its error says why)");
  }
  flops_per_sample_ = flops_per_iteration(c.model, 1, c.flops_convention);  // the log line's formula
  {
    // Megatron's _TRAIN_START_TIME: the earliest rank's (collective).
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const double earliest = comm::all_reduce_scalar(*groups_->world, now, comm::ReduceOp::kMin);
    job_start_ = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(earliest)));
  }
  MT_CHECK(c.world_size == groups_->world_size() && c.data_parallel_size == groups_->sizes.dp &&
           c.tensor_model_parallel_size == groups_->sizes.tp && c.pipeline_model_parallel_size == groups_->sizes.pp)
      << "config for world " << c.world_size << " / dp " << c.data_parallel_size << " / tp "
      << c.tensor_model_parallel_size << " / pp " << c.pipeline_model_parallel_size << ", groups of "
      << groups_->world_size() << " / " << groups_->sizes.dp << " / " << groups_->sizes.tp << " / "
      << groups_->sizes.pp;
  comm::connect_pipeline_neighbours(*groups_, c.virtual_pipeline_chunks() > 1);
  microbatches_ = std::make_unique<NumMicroBatchesCalculator>(c.microbatch_calculator());
  *log0_ << microbatches_->describe() << '\n';
  train_iters_ = c.total_train_iters();
  timers_ = std::make_unique<Timers>(c.timing_log_level, parse_timing_log_option(c.timing_log_option),
                                     [this] { backend_.synchronize(); });
  comm::Communicator* world = groups_->world.get();
  timers_->start("train/valid/test-data-iterators-setup", 0, world, /*barrier=*/true);

  // Data: the sample counts Megatron asks of each split (build_train_valid_test_data_loaders).
  data::GPTDataConfig dc;
  dc.data_path = c.data_path;
  dc.split_data_path = c.split_data_path;
  dc.mock = c.mock_data;
  dc.eod = c.eod_token;
  dc.split = c.split;
  dc.seq_length = c.model.seq_length;
  dc.seed = c.seed;
  dc.data_cache_path = c.data_cache_path;
  dc.targets = data::target_sample_counts(c.train_samples, c.train_samples ? std::nullopt : std::optional(train_iters_),
                                          c.global_batch_size, c.eval_interval, c.eval_iters);
  dc.log = log0_;
  *log0_ << "> building train, validation, and test datasets ...\n";
  datasets_ = data::build_gpt_datasets(dc);
  if (!datasets_.train()) {
    throw_error("[--split] the training split of ", c.mock_data ? "--mock-data" : "--data-path", " is empty");
  }
  timers_->stop("train/valid/test-data-iterators-setup");

  timers_->start("model-and-optimizer-setup", 0, world, /*barrier=*/true);

  *log0_ << "building GPT model ...\n";
  model::TensorParallelOptions tp;
  tp.group = groups_->tp.get();
  tp.sequence_parallel = c.sequence_parallel;
  const bool copy_engine = prepare_copy_engine(c, *groups_);
  model_ = std::make_unique<model::GPTModel>(c.model, backend_, model_dtype(c), c.micro_batch_size, tp,
                                             pipeline_stage(c, groups_->coords.pp));
  model_->parameters().initialize(backend_, static_cast<uint64_t>(c.seed), c.model.init_method_std, c.model.num_layers);
  model_->set_per_token_loss(c.calculate_per_token_loss);
  *log0_ << " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): "
       << model_->parameters().total_numel() << '\n';

  OptimizerConfig oc;
  oc.beta1 = static_cast<float>(c.adam_beta1);
  oc.beta2 = static_cast<float>(c.adam_beta2);
  oc.eps = static_cast<float>(c.adam_eps);
  oc.clip_grad = c.clip_grad;
  oc.count_zeros = c.log_num_zeros_in_grad;
  oc.check_for_nan_in_grad = c.check_for_nan_in_loss_and_grad;
  optim::GradScaler scaler = optim::GradScaler::constant(1.0f);
  if (c.fp16) {
    if (c.loss_scale) {
      scaler = optim::GradScaler::constant(static_cast<float>(*c.loss_scale));
    } else {
      optim::DynamicScalerConfig dyn;
      dyn.initial_scale = static_cast<float>(c.initial_loss_scale);
      dyn.min_scale = static_cast<float>(c.min_loss_scale);
      dyn.growth_interval = c.loss_scale_window;
      dyn.hysteresis = c.hysteresis;
      scaler = optim::GradScaler::dynamic(dyn);
    }
  }
  // Megatron's bucket size and buckets per model chunk; the overlap hooks.
  const DataParallelOptions dp = data_parallel_options(c, *groups_, *model_);
  optimizer_ = std::make_unique<MixedPrecisionOptimizer>(model_->parameters(), backend_, oc, std::move(scaler), dp);
  *log0_ << copy_engine_text(copy_engine, c, *optimizer_);
  optimizer_->set_timers(timers_.get(), world, c.barrier_with_l1_time);
  connect_overlap_hooks(c, *model_, *optimizer_);
  scheduler_ = std::make_unique<OptimizerParamScheduler>(make_scheduler_config(schedule_flags(c)));
  model::MemoryPlan plan = train_memory_plan(c, groups_->coords.pp);
  plan.copy_engine = copy_engine_plan_bytes(*optimizer_);
  *log0_ << model::format_memory_plan(plan);
  *log0_ << flops_formula_text(c.model, c.global_batch_size, c.flops_convention);

  if (c.load) {
    timers_->start("load-checkpoint", 0, world, /*barrier=*/true);
    progress_ = load_training_checkpoint(c, model_->parameters(), *optimizer_, *scheduler_, *world, backend_, *log0_);
    timers_->stop("load-checkpoint", world, /*barrier=*/true);
    log_timers({"load-checkpoint"});
  }
  job_start_flops_ = static_cast<double>(progress_.consumed_train_samples) * flops_per_sample_;
  if (c.save && c.async_save) {
    const auto t0 = Clock::now();
    async_save_host_ = async_save_host_buffer(c, model_->parameters(), *optimizer_, *groups_, backend_);
    char line[160];
    std::snprintf(line, sizeof(line),
                  " > --async-save: %.2f GiB of page-locked host memory for rank 0's checkpoint copies, pinned in %.1f s\n",
                  static_cast<double>(async_save_host_->bytes()) / (1 << 30), seconds_since(t0));
    *log0_ << line;
  }
  timers_->stop("model-and-optimizer-setup");
  // Megatron writes TensorBoard from the last rank, the one that has the logged values.
  if (groups_->is_last_rank()) {
    if (c.tensorboard_dir) tensorboard_ = std::make_unique<TensorBoardWriter>(*c.tensorboard_dir, c.tensorboard_queue_size);
    if (c.log_jsonl) jsonl_ = std::make_unique<MetricsJsonlWriter>(*c.log_jsonl);
  }
}

void Trainer::request_exit() { g_exit_requested.store(true); }

void Trainer::install_exit_signal_handler() { std::signal(SIGTERM, on_sigterm); }

std::vector<parallel::PipelineAction> Trainer::pipeline_table(int64_t num_micro, bool forward_only) const {
  const parallel::PipelineShape shape{config_.pipeline_model_parallel_size, groups_->coords.pp, num_micro,
                                      config_.virtual_pipeline_chunks(), forward_only};
  return parallel::pipeline_schedule(shape);  // run_pipeline checks the model's activation sets
}

void Trainer::log_timers(const std::vector<std::string>& names, double normalizer) {
  if (const std::optional<std::string> block = timers_->log(names, *groups_->world, normalizer)) {
    *log_last_ << *block << '\n' << std::flush;
  }
}

// Ranks wait for each other while they write (the parallel save), or while rank 0 writes
// every byte (the streamed save): the watchdog grants them the time the whole checkpoint takes
// at kSaveBandwidthFloor, on top of --distributed-timeout-minutes; a hang during a save is
// still reported after that.
void Trainer::grant_save_time(bool on) {
  constexpr double kSaveBandwidthFloor = 100e6;  // bytes/s: the slowest disk a save is granted time for
  if (on && save_grace_.count() == 0) {  // once: it walks every stage's parameters
    save_grace_ = std::chrono::milliseconds(static_cast<int64_t>(
        1000.0 * static_cast<double>(checkpoint_save_memory(config_).checkpoint_bytes) / kSaveBandwidthFloor));
  }
  groups_->world->set_watchdog_grace(on ? save_grace_ : std::chrono::milliseconds(0));
}

void Trainer::save() {
  if (!config_.save) return;
  finish_pending_save(/*wait=*/true);  // one save at a time
  timers_->start("save-checkpoint", 0, groups_->world.get(), /*barrier=*/true);
  grant_save_time(true);
  // The model values are read below: the parameter gather must have landed.
  optimizer_->grad_buffer().finish_param_gather();
  // Collective over the world: every rank writes what it holds (--async-save: copies it and
  // writes it in the background), or rank 0 writes, tensor by tensor, what the other ranks
  // gather and send it (train/checkpoint.h).
  pending_save_ = save_training_checkpoint(config_, progress_, model_->parameters(), *optimizer_, *scheduler_, *groups_,
                                           backend_, *log0_, &async_save_host_);
  // Nobody goes on (and perhaps exits, or reads the checkpoint) before it is complete, or
  // with --async-save before every rank has taken its copy.
  groups_->world->barrier();
  timers_->stop("save-checkpoint", groups_->world.get(), /*barrier=*/true);
  grant_save_time(false);
  log_timers({"save-checkpoint"});
  if (config_.log_progress) append_checkpoint_progress();
}

void Trainer::append_checkpoint_progress() {
  if (!groups_->is_first_rank()) return;
  // Megatron's compute_throughputs_and_append_to_progress_log.
  const double gpus = static_cast<double>(config_.world_size);
  const double flops = static_cast<double>(progress_.consumed_train_samples) * flops_per_sample_;
  const auto now = std::chrono::system_clock::now();
  auto tflops_per_gpu = [&](double done, std::chrono::system_clock::time_point since) {
    const double seconds = std::chrono::duration<double>(now - since).count();
    return seconds > 0 ? done / (seconds * 1e12 * gpus) : 0.0;
  };
  const double cumulative =
      progress_run_start_ ? tflops_per_gpu(flops - progress_run_start_->flops, progress_run_start_->time) : 0.0;
  append_progress(checkpoint_progress_text(config_.async_save, progress_.iteration,
                                           tflops_per_gpu(flops - job_start_flops_, job_start_), cumulative, flops,
                                           static_cast<double>(progress_.consumed_train_samples) *
                                               static_cast<double>(config_.model.seq_length)));
}

void Trainer::append_progress(const std::string& text) {
  if (!config_.save || !groups_->is_first_rank()) return;
  const char* job = std::getenv("SLURM_JOB_ID");
  const std::string path = *config_.save + "/progress.txt";
  try {
    append_progress_line(path, progress_line(std::chrono::system_clock::now(), job != nullptr ? job : "",
                                             config_.world_size, text));
  } catch (const Error& e) {
    *log0_ << " > warning: " << e.what() << "; training goes on\n" << std::flush;
  }
}

void Trainer::check_weight_hashes() {
  if (groups_->dp->size() == 1) {
    // No replicas: nothing can differ (the DP size is the same on every rank: no rank waits).
    if (!weight_hash_skip_reported_) {
      *log0_ << ">>> Weight hashes: data-parallel size 1, no replicas to compare (no check)\n" << std::flush;
      weight_hash_skip_reported_ = true;
    }
    return;
  }
  optimizer_->grad_buffer().finish_param_gather();  // --overlap-param-gather: the values must have landed
  const auto t0 = Clock::now();
  const WeightHashCheck r = compare_weights_across_dp_replicas(model_->parameters(), backend_, *groups_->dp,
                                                               *groups_->world, progress_.iteration);
  if (r.mismatches == 0) {
    *log0_ << ">>> Weight hashes match after " << progress_.iteration << " iterations (checked in "
           << seconds_since(t0) << " s)\n" << std::flush;
    return;
  }
  if (groups_->rank() == 0) throw_error(r.message);
  // Rank 0 names the count and the first rank; a differing rank adds its parameters.
  comm::let_rank0_report_first(r.message);
  throw_error("[--check-weight-hash-across-dp-replicas-interval] weights differ across data-parallel replicas (rank 0 "
              "says where)");
}

void Trainer::finish_pending_save(bool wait) {
  if (!pending_save_) return;
  grant_save_time(true);  // also without `wait`: rank 0's commit (fsyncs, --save-keep-last) is waited for
  if (finish_checkpoint_save(*pending_save_, *groups_->world, wait, *log0_)) pending_save_.reset();
  grant_save_time(false);
}

Trainer::~Trainer() {
  if (pending_save_) {
    *log0_ << "WARNING: the --async-save checkpoint of iteration " << pending_save_->iteration()
           << " was not committed (the run stopped while it was being written)\n"
           << std::flush;
  }
}

void Trainer::log_to_tensorboard(const StepResult& step, double loss, int64_t gbs, std::optional<double> params_norm) {
  const TrainConfig& c = config_;
  const int64_t it = progress_.iteration, samples = progress_.consumed_train_samples;
  auto both = [&](std::string_view tag, std::string_view vs_samples, double value) {
    tensorboard_->add_scalar(std::string(tag), value, it);
    tensorboard_->add_scalar(std::string(vs_samples), value, samples);
  };
  if (c.log_learning_rate_to_tensorboard) both(tb_tags::kLearningRate, tb_tags::kLearningRateVsSamples, scheduler_->lr());
  if (c.log_batch_size_to_tensorboard) both(tb_tags::kBatchSize, tb_tags::kBatchSizeVsSamples, static_cast<double>(gbs));
  if (step.success) both(tb_tags::kLmLoss, tb_tags::kLmLossVsSamples, loss);
  if (c.log_loss_scale_to_tensorboard) {
    both(tb_tags::kLossScale, tb_tags::kLossScaleVsSamples, optimizer_->loss_scale());
  }
  if (step.grad_norm) both(tb_tags::kGradNorm, tb_tags::kGradNormVsSamples, *step.grad_norm);
  if (step.num_zeros) both(tb_tags::kNumZeros, tb_tags::kNumZerosVsSamples, static_cast<double>(*step.num_zeros));
  if (params_norm) both(tb_tags::kParamsNorm, tb_tags::kParamsNormVsSamples, *params_norm);
  if (c.log_memory_to_tensorboard) {
    const MemorySnapshot m = memory_tracker(backend_.device()).snapshot();
    tensorboard_->add_scalar(std::string(tb_tags::kMemReservedBytes), static_cast<double>(m.current_total), it);
    tensorboard_->add_scalar(std::string(tb_tags::kMemAllocatedBytes), static_cast<double>(m.current_total), it);
    tensorboard_->add_scalar(std::string(tb_tags::kMemAllocatedCount), static_cast<double>(m.live_allocations), it);
  }
  if (c.log_world_size_to_tensorboard) {
    both(tb_tags::kWorldSize, tb_tags::kWorldSizeVsSamples, static_cast<double>(groups_->world_size()));
  }
}

void Trainer::load_micro_batch(const data::TokenDataset& dataset, int64_t first_sample, int64_t k,
                               model::MicroBatch* mb) const {
  const int64_t b = config_.micro_batch_size, s = config_.model.seq_length;
  mb->batch = b;
  mb->seq = s;
  mb->tokens.resize(static_cast<size_t>(b * s));
  mb->labels.resize(static_cast<size_t>(b * s));
  mb->loss_mask.assign(static_cast<size_t>(b * s), 1.0f);
  std::vector<int64_t> sample;
  for (int64_t i = 0; i < b; ++i) {
    // MegatronPretrainingSampler never wraps: the datasets were built with at least the
    // samples the run reads (data::target_sample_counts).
    const int64_t index = sampler_index(first_sample, k, i, b, config_.data_parallel_size, groups_->coords.dp);
    MT_CHECK(index < dataset.size()) << "sample " << index << " of a dataset of " << dataset.size();
    dataset.sample(index, &sample);
    MT_CHECK(static_cast<int64_t>(sample.size()) == s + 1) << "sample of " << sample.size() << " tokens";
    for (const int64_t id : sample) {
      // A dataset tokenized with another vocabulary (or a NullTokenizer --vocab-size below the
      // data's ids) would index past the embedding: say so instead.
      if (id < 0 || id >= config_.model.padded_vocab_size) {
        throw_error("[--vocab-size/--vocab-file] sample ", index, " holds token id ", id,
                    ", outside the padded vocabulary of ", config_.model.padded_vocab_size,
                    " ids: the data was tokenized with another vocabulary");
      }
    }
    for (int64_t t = 0; t < s; ++t) {
      const int64_t token = sample[static_cast<size_t>(t)];
      mb->tokens[static_cast<size_t>(i * s + t)] = static_cast<int32_t>(token);
      mb->labels[static_cast<size_t>(i * s + t)] = static_cast<int32_t>(sample[static_cast<size_t>(t) + 1]);
      // Megatron's get_ltor_masks_and_position_ids: loss_mask[tokens == eod] = 0, i.e. the
      // prediction of the token after an end of document does not count.
      if (config_.eod_mask_loss && token == config_.eod_token) mb->loss_mask[static_cast<size_t>(i * s + t)] = 0.0f;
    }
  }
  mark_documents(config_.model, config_.eod_token, mb);  // --reset-position-ids, --reset-attention-mask
}

double Trainer::loss_tokens(const data::TokenDataset& dataset, int64_t first_sample, int64_t global_batch) const {
  const int64_t s = config_.model.seq_length;
  if (!config_.eod_mask_loss) return static_cast<double>(global_batch * s);
  // This rank's micro-batches as the step loads them: their loss masks are the count.
  double counted = 0.0;
  model::MicroBatch mb;
  for (int64_t k = 0; k < global_batch / (config_.micro_batch_size * config_.data_parallel_size); ++k) {
    load_micro_batch(dataset, first_sample, k, &mb);
    for (const float m : mb.loss_mask) counted += m;
  }
  return comm::all_reduce_scalar(*groups_->dp_cp, counted, comm::ReduceOp::kSum);
}

double Trainer::evaluate(const data::TokenDataset& dataset, int64_t* consumed, int64_t global_batch) {
  const int64_t num_micro = global_batch / (config_.micro_batch_size * config_.data_parallel_size);
  model::DropoutContext no_dropout;
  no_dropout.training = false;
  // Forward only through the pipeline; the losses appear on the last stage (0 elsewhere).
  const auto table = pipeline_table(num_micro, /*forward_only=*/true);
  const bool last_stage = groups_->coords.pp == groups_->sizes.pp - 1;
  double total = 0.0, tokens = 0.0;
  for (int64_t it = 0; it < config_.eval_iters; ++it) {
    if (config_.calculate_per_token_loss && last_stage) tokens += loss_tokens(dataset, *consumed, global_batch);
    PipelineCallbacks cb;
    cb.load = [&](int64_t k, model::MicroBatch* mb) { load_micro_batch(dataset, *consumed, k, mb); };
    cb.dropout = [&](int64_t) { return no_dropout; };
    cb.overlap_p2p = config_.overlap_p2p_communication;
    total += run_pipeline(table, *model_, *groups_->pp, cb);
    *consumed += global_batch;
  }
  // C23: the sum of micro-batch means over eval_iters * num_microbatches, averaged over DP
  // (Megatron averages each micro-batch's loss across the data-parallel group). Per token: the
  // summed token losses over the tokens counted.
  total = comm::all_reduce_scalar(*groups_->dp_cp, total, comm::ReduceOp::kSum);
  if (config_.calculate_per_token_loss) return tokens > 0.0 ? total / tokens : 0.0;
  return total / static_cast<double>(config_.eval_iters * num_micro * groups_->dp_cp->size());
}

void Trainer::evaluate_and_print(const std::string& prefix, const data::TokenDataset& dataset, int64_t* consumed,
                                 int64_t global_batch, double* loss_out) {
  const double loss = evaluate(dataset, consumed, global_batch);
  if (loss_out) *loss_out = loss;
  *log_last_ << format_validation_block(prefix, {{"lm loss", loss}}) << std::flush;
  const double ppl = std::exp(std::min(20.0, loss));
  const bool test_set = prefix.ends_with("on test set");
  if (tensorboard_ && !test_set) {
    const int64_t it = progress_.iteration, samples = progress_.consumed_train_samples;
    tensorboard_->add_scalar(std::string(tb_tags::kLmLossValidation), loss, it);
    tensorboard_->add_scalar(std::string(tb_tags::kLmLossValidationVsSamples), loss, samples);
    if (config_.log_validation_ppl_to_tensorboard) {
      tensorboard_->add_scalar(std::string(tb_tags::kLmLossValidationPpl), ppl, it);
      tensorboard_->add_scalar(std::string(tb_tags::kLmLossValidationPplVsSamples), ppl, samples);
    }
    tensorboard_->flush();
  }
  if (jsonl_) {
    jsonl_->write({{"iteration", progress_.iteration},
                   {"split", test_set ? "test" : "validation"},
                   {"lm_loss", loss},
                   {"ppl", ppl}});
  }
}

TrainSummary Trainer::run() {
  const TrainConfig& c = config_;
  // Megatron's do_valid / do_test: a dataset to read and --eval-iters > 0.
  const bool do_valid = datasets_.valid() && c.eval_iters > 0;
  TrainSummary summary;
  summary.final_valid_loss = std::numeric_limits<double>::quiet_NaN();
  const auto start = Clock::now();

  // The iterations after the first log interval (warm-up left out), against megatron plan's
  // prediction at the end of training.
  double steady_seconds = 0.0;
  int64_t steady_iterations = 0, steady_from = 0;
  bool first_interval = true;
  // Accumulators since the last log line (reset there), as Megatron's training_log.
  // The logged loss is loss_sum / loss_weight: iterations' losses over iterations, or (per
  // token) summed token losses over tokens counted, as Megatron's total_loss_dict.
  double loss_sum = 0.0, loss_weight = 0.0, interval_tokens = 0.0;
  int64_t advanced = 0, skipped = 0, nans = 0;
  auto interval_start = Clock::now();
  // Megatron stops its interval timer around evaluation and checkpoint saves: their seconds are
  // left out of the next log line's time per iteration (and tokens/s).
  double paused_seconds = 0.0;
  auto paused = [&](auto&& work) {
    const auto t0 = Clock::now();
    work();
    paused_seconds += seconds_since(t0);
  };
  bool memory_reported = false, first = true;
  // Megatron's timers (train/timers.h): level 1 brackets forward-backward, the gradient
  // reductions and the optimizer (after a barrier unless --no-barrier-with-level-1-timing),
  // level 2 also each batch, compute and exchange; those above --timing-log-level cost nothing.
  comm::Communicator* world = groups_->world.get();
  const bool l1_barrier = c.barrier_with_l1_time;
  *log0_ << "done with setup ...\n" << std::flush;
  log_timers({"model-and-optimizer-setup", "train/valid/test-data-iterators-setup"});
  if (c.skip_train) {
    // Megatron HEAD's --skip-train: straight to the final validation and test evaluations.
    *log0_ << "skipping training (--skip-train is on) ...\n" << std::flush;
    summary.iterations = progress_.iteration;
    summary.consumed_samples = progress_.consumed_train_samples;
    microbatches_->update(progress_.consumed_train_samples);  // the batch size a resume would have
    evaluate_final(&summary);
    return summary;
  }
  *log0_ << "training ...\n" << std::flush;
  if (c.log_progress && c.save && groups_->is_first_rank()) {
    append_progress("Starting job");
    std::ifstream in(*c.save + "/progress.txt", std::ios::binary);
    progress_run_start_ = cumulative_start(
        std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), c.world_size);
  }
  // --profile: Megatron's nsys hooks. The capture starts when profile_step_start iterations are
  // done and stops after iteration profile_step_end; NVTX ranges name every iteration and phase.
  const bool profiled = c.profile && std::find(c.profile_ranks.begin(), c.profile_ranks.end(), groups_->rank()) !=
                                         c.profile_ranks.end();
  if (c.profile) {
    if (backend_.device() == Device::kCUDA) {
      *log0_ << " > --profile: the CUDA profiler captures iterations " << c.profile_step_start + 1 << "-"
             << c.profile_step_end << " on rank(s)";
      for (int64_t r : c.profile_ranks) *log0_ << ' ' << r;
      *log0_ << " (run under nsys profile --capture-range=cudaProfilerApi)\n" << std::flush;
    } else {
      *log0_ << " > --profile: no CUDA profiler on the CPU backend; NVTX ranges only\n" << std::flush;
    }
    // A window this run does not cover (a resume past its start, an end after the last
    // iteration) would capture nothing, or never stop the capture before exit: say so.
    if (progress_.iteration > c.profile_step_start || c.profile_step_end > train_iters_) {
      *log0_ << " > warning: [--profile-step-start/--profile-step-end] the capture window (iterations "
             << c.profile_step_start + 1 << "-" << c.profile_step_end << ") is not inside this run's iterations ("
             << progress_.iteration + 1 << "-" << train_iters_ << ")\n"
             << std::flush;
    }
  }
  auto profiler = [&](bool start) {
    if (backend_.device() != Device::kCUDA) return;
    const std::string why = start ? backend::cuda_profiler_start() : backend::cuda_profiler_stop();
    if (!why.empty()) {
      std::cerr << " > warning: [--profile] rank " << groups_->rank() << ": the CUDA profiler did not "
                << (start ? "start" : "stop") << ": " << why << '\n' << std::flush;
    }
  };
  // One NVTX range per phase while --profile is on (nothing otherwise).
  auto mark = [&](const char* name) {
    if (c.profile) backend::nvtx_push(name);
  };
  auto unmark = [&] {
    if (c.profile) backend::nvtx_pop();
  };
  // Megatron checks once before the first step ("to be very pedantic"): a load or an
  // initialisation that differs between replicas shows here.
  if (c.check_weight_hash_interval) check_weight_hashes();
  while (progress_.iteration < train_iters_) {
    microbatches_->update(progress_.consumed_train_samples);
    const int64_t gbs = microbatches_->current_global_batch_size();
    const int64_t num_micro = microbatches_->num_microbatches();

    if (profiled && progress_.iteration == c.profile_step_start) profiler(true);
    const std::string iteration_mark = c.profile ? "iteration " + std::to_string(progress_.iteration + 1) : "";
    mark(iteration_mark.c_str());
    if (straggler_) straggler_->begin_iteration();
    // --calculate-per-token-loss: each counted token's loss weighs 1 / (the global batch's
    // counted tokens). The DP reduction averages, hence the factor DP. (Megatron sums over DP
    // and scales the gradients by 1 / tokens afterwards: the same up to rounding.)
    double step_tokens = 0.0;
    float grad_scale = 1.0f / static_cast<float>(num_micro);
    const bool last_stage = groups_->coords.pp == groups_->sizes.pp - 1;
    if (c.calculate_per_token_loss && last_stage) {
      step_tokens = loss_tokens(*datasets_.train(), progress_.consumed_train_samples, gbs);
      grad_scale = step_tokens > 0.0 ? static_cast<float>(static_cast<double>(c.data_parallel_size) / step_tokens) : 0.0f;
    }
    const std::vector<parallel::PipelineAction> table = pipeline_table(num_micro, /*forward_only=*/false);
    TrainStepInputs in;
    in.table = &table;
    in.num_micro = num_micro;
    in.iteration = progress_.iteration;
    in.grad_scale = grad_scale;
    in.lr = static_cast<float>(scheduler_->lr());
    in.weight_decay = static_cast<float>(scheduler_->weight_decay());
    in.load = [&](int64_t k, model::MicroBatch* mb) {
      timers_->start("batch-generator", 2);
      const auto loading = Clock::now();
      load_micro_batch(*datasets_.train(), progress_.consumed_train_samples, k, mb);
      if (straggler_) straggler_->add_batch_seconds(seconds_since(loading));
      timers_->stop("batch-generator");
    };
    // Megatron's level-1 timers (with their barrier at level 2) and, for the two big phases,
    // an NVTX range under --profile.
    in.phase = [&](const char* name, bool started) {
      const bool ranged = std::string_view(name) == "forward-backward" || std::string_view(name) == "optimizer";
      if (started) {
        if (ranged) mark(name);
        timers_->start(name, 1, world, l1_barrier);
      } else {
        timers_->stop(name);
        if (ranged) unmark();
      }
    };
    if (timers_->active(2)) {
      in.pipeline_phase = [&](const parallel::PipelineAction& a, bool started) {
        const char* name = megatron_timer_name(a);
        started ? timers_->start(name, 2) : timers_->stop(name);
      };
    }
    double local_loss = 0.0;  // this rank's sum of micro-batch losses (last stage)
    double iter_loss = 0.0, iter_weight = 1.0;
    in.before_optimizer = [&](double loss_sum) {
      local_loss = loss_sum;
      // The loss of the global batch: this rank's micro-batch mean, averaged over DP; per
      // token, the summed token losses over the tokens counted.
      const double summed = comm::all_reduce_scalar(*groups_->dp_cp, loss_sum, comm::ReduceOp::kSum);
      iter_weight = c.calculate_per_token_loss ? step_tokens : 1.0;
      if (c.calculate_per_token_loss) {
        iter_loss = step_tokens > 0.0 ? summed / step_tokens : 0.0;
      } else {
        iter_loss = summed / static_cast<double>(num_micro * groups_->dp_cp->size());
      }
      if (!recording_failure_reported_ && !model_->recording_failure().empty()) {
        *log0_ << " > warning: recording the step's device work (CUDA graphs) stopped: "
               << model_->recording_failure() << "; its ops are issued one by one from now on\n";
        recording_failure_reported_ = true;
      }
    };
    const TrainStepResult result = train_step(c, *model_, *optimizer_, *groups_, in);
    const StepResult& step = result.step;
    if (straggler_) {
      straggler_->end_iteration(flops_per_sample_ * static_cast<double>(gbs) / static_cast<double>(c.world_size));
    }
    if (c.check_for_nan_in_loss_and_grad) {
      // Megatron's check_for_nan_in_loss_and_grad, fatal. A NaN or Inf loss makes the
      // gradients NaN, and the NaN norm (the same on every rank) stopped the step before AdamW,
      // so every rank stops here; the last stage names its loss first.
      if (groups_->coords.pp == groups_->sizes.pp - 1 && !std::isfinite(local_loss)) {
        throw_error("[--no-check-for-nan-in-loss-and-grad] rank ", groups_->rank(), ": found ",
                    std::isnan(local_loss) ? "NaN" : "Inf", " in the local forward loss at iteration ",
                    progress_.iteration + 1, " (node ", host_name("unknown"), ")");
      }
      if (step.nan_grad_norm) {
        throw_error("[--no-check-for-nan-in-loss-and-grad] rank ", groups_->rank(),
                    ": found NaN in the gradients (grad norm) at iteration ", progress_.iteration + 1,
                    "; the step was not applied");
      }
    }
    if (step.success) scheduler_->step(gbs);
    progress_.consumed_train_samples += gbs;
    ++progress_.iteration;
    const int64_t iteration = progress_.iteration;
    unmark();  // the iteration's range
    if (profiled && iteration == c.profile_step_end) profiler(false);
    interval_tokens += static_cast<double>(gbs * c.model.seq_length);

    if (step.success) {
      ++advanced;
      loss_sum += iter_loss * iter_weight;
      loss_weight += iter_weight;
      if (first) summary.first_loss = iter_loss;
      first = false;
    } else {
      ++skipped;
      if (!std::isfinite(iter_loss)) ++nans;
    }
    if (c.tensorboard_dir && iteration % c.tensorboard_log_interval == 0) {
      // The parameter norm is collective under the distributed optimizer: every rank takes
      // part, the last one (which has the writer) logs it.
      std::optional<double> params_norm;
      if (c.log_params_norm) params_norm = optimizer_->params_norm();
      if (tensorboard_) log_to_tensorboard(step, iter_loss, gbs, params_norm);
      if (c.log_timers_to_tensorboard) {
        // Megatron's timers.write: each timer's largest time over the ranks, per iteration of
        // the log interval so far, in seconds (collective; resets nothing).
        const auto times = timers_->max_seconds(iteration_timer_names(), *world, static_cast<double>(advanced + skipped));
        if (tensorboard_) {
          for (const auto& [tag, seconds] : times) tensorboard_->add_scalar(tag, seconds, iteration);
        }
      }
    }

    if (iteration % c.log_interval == 0) {
      const double elapsed = seconds_since(interval_start) - paused_seconds;
      const int64_t iters = advanced + skipped;
      if (!first_interval) {
        if (steady_iterations == 0) steady_from = iteration - iters + 1;
        steady_seconds += elapsed;
        steady_iterations += iters;
      }
      first_interval = false;
      const double per_iter = elapsed / static_cast<double>(iters);
      IterationLog log;
      log.timestamp = format_timestamp(std::chrono::system_clock::now());
      log.iteration = iteration;
      log.train_iters = train_iters_;
      log.consumed_samples = progress_.consumed_train_samples;
      log.elapsed_ms = per_iter * 1000.0;
      if (c.log_throughput) {
        log.tflops_per_gpu = tflops_per_gpu(flops_per_sample_ * static_cast<double>(gbs), per_iter, c.world_size);
      }
      log.learning_rate = scheduler_->lr();
      log.global_batch_size = gbs;
      if (loss_weight > 0) log.losses.push_back({"lm loss", loss_sum / loss_weight});
      log.loss_scale = optimizer_->loss_scale();
      log.grad_norm = step.grad_norm;
      if (step.num_zeros) log.num_zeros = static_cast<double>(*step.num_zeros);
      if (c.log_params_norm) log.params_norm = optimizer_->params_norm();
      log.skipped_iterations = skipped;
      log.nan_iterations = nans;
      log.tokens_per_second = interval_tokens / elapsed;
      log.eta_seconds = per_iter * static_cast<double>(train_iters_ - iteration);
      *log_last_ << format_iteration_line(log) << '\n' << std::flush;
      if (loss_weight > 0) summary.last_loss = loss_sum / loss_weight;
      if (tensorboard_ && c.log_timers_to_tensorboard) {
        tensorboard_->add_scalar(std::string(tb_tags::kIterationTime), per_iter, iteration);
        if (log.tflops_per_gpu) tensorboard_->add_scalar(std::string(tb_tags::kThroughput), *log.tflops_per_gpu, iteration);
      }
      if (tensorboard_) tensorboard_->flush();
      if (jsonl_) {
        jsonl_->write({{"iteration", iteration},
                       {"consumed_samples", progress_.consumed_train_samples},
                       {"elapsed_ms_per_iteration", log.elapsed_ms},
                       {"throughput_tflops_per_gpu", log.tflops_per_gpu},
                       {"learning_rate", log.learning_rate},
                       {"global_batch_size", gbs},
                       {"lm_loss", loss_weight > 0 ? MetricValue(loss_sum / loss_weight) : MetricValue()},
                       {"loss_scale", static_cast<double>(log.loss_scale)},
                       {"grad_norm", step.grad_norm},
                       {"params_norm", log.params_norm},
                       {"skipped_iterations", skipped},
                       {"nan_iterations", nans},
                       {"tokens_per_second", *log.tokens_per_second}});
      }
      if (!memory_reported) {
        const MemorySnapshot m = memory_tracker(backend_.device()).snapshot();
        *log_last_ << format_memory_line(groups_->rank(), iteration, m.current_total, m.peak_total, m.current_total, m.peak_total)
             << '\n';
        memory_reported = true;
      }
      log_timers(iteration_timer_names(), static_cast<double>(c.log_interval));
      if (straggler_) {
        if (const std::optional<std::string> text = straggler_->report(*world)) *log0_ << *text << std::flush;
      }
      loss_sum = loss_weight = 0.0;
      interval_tokens = 0.0;
      advanced = skipped = nans = 0;
      interval_start = Clock::now();
      paused_seconds = 0.0;
    }

    if (c.check_weight_hash_interval && iteration % *c.check_weight_hash_interval == 0) check_weight_hashes();
    // An --async-save in flight is committed once every rank has written its part.
    finish_pending_save(/*wait=*/false);
    // Megatron's order after the log (docs/megatron-formats.md §3.8): evaluate, signal, save,
    // duration, interval.
    if (c.eval_interval > 0 && iteration % c.eval_interval == 0 && do_valid) {
      paused([&] {
        evaluate_and_print("iteration " + std::to_string(iteration), *datasets_.valid(),
                           &progress_.consumed_valid_samples, gbs, nullptr);
      });
    }
    // Any rank's SIGTERM stops every rank (Megatron all-gathers the flag).
    if (c.exit_signal_handler &&
        comm::all_reduce_scalar(*groups_->world, g_exit_requested.load() ? 1.0 : 0.0, comm::ReduceOp::kMax) > 0.0) {
      save();
      *log0_ << "exiting program after receiving SIGTERM.\n" << std::flush;
      summary.exited_early = true;
      break;
    }
    bool saved = false;
    if (c.save && c.save_interval && iteration % *c.save_interval == 0) {
      paused([&] { save(); });
      saved = true;
    }
    if (c.exit_duration_in_mins) {
      // The slowest rank's clock decides, so that all ranks stop at the same iteration.
      const double minutes = comm::all_reduce_scalar(*groups_->world, seconds_since(start) / 60.0, comm::ReduceOp::kMax);
      if (minutes > static_cast<double>(*c.exit_duration_in_mins)) {
        if (!saved) save();
        *log0_ << "exiting program after " << minutes << " minutes\n" << std::flush;
        summary.exited_early = true;
        break;
      }
    }
    if (c.exit_interval && iteration % *c.exit_interval == 0) {
      if (!saved) save();
      *log0_ << "exiting program at iteration " << iteration << '\n' << std::flush;
      summary.exited_early = true;
      break;
    }
  }
  summary.iterations = progress_.iteration;
  summary.consumed_samples = progress_.consumed_train_samples;
  if (c.predicted_iteration_ms > 0 && steady_iterations > 0) {
    const double measured = 1000.0 * steady_seconds / static_cast<double>(steady_iterations);
    char line[200];
    std::snprintf(line, sizeof(line),
                  " > measured %.1f ms per iteration (iterations %lld-%lld), megatron plan predicted %.1f ms (%+.1f%%)\n",
                  measured, static_cast<long long>(steady_from),
                  static_cast<long long>(steady_from + steady_iterations - 1), c.predicted_iteration_ms,
                  100.0 * (c.predicted_iteration_ms / measured - 1.0));
    *log_last_ << line << std::flush;
  }
  if (summary.exited_early) {  // Megatron exits right there: no final evaluation
    finish_pending_save(/*wait=*/true);
    return summary;
  }

  *log0_ << "after training is done\n";
  // HEAD: the final save unless the last iteration was just saved.
  if (c.save && progress_.iteration != 0 && !(c.save_interval && progress_.iteration % *c.save_interval == 0)) save();
  evaluate_final(&summary);  // an --async-save goes on meanwhile
  finish_pending_save(/*wait=*/true);
  return summary;
}

void Trainer::evaluate_final(TrainSummary* summary) {
  const TrainConfig& c = config_;
  const int64_t gbs = microbatches_->current_global_batch_size();
  const std::string at = "iteration " + std::to_string(progress_.iteration);
  if (datasets_.valid() && c.eval_iters > 0) {
    evaluate_and_print(at + " on validation set", *datasets_.valid(), &progress_.consumed_valid_samples, gbs,
                       &summary->final_valid_loss);
  }
  if (datasets_.test() && c.eval_iters > 0) {
    int64_t consumed_test = 0;
    evaluate_and_print(at + " on test set", *datasets_.test(), &consumed_test, gbs, nullptr);
  }
  if (tensorboard_) tensorboard_->flush();
}

}  // namespace megatron::train
