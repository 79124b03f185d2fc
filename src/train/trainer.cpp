#include "train/trainer.h"

#include <algorithm>
#include <chrono>
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
#include "comm/self_communicator.h"
#include "core/error.h"
#include "core/host_name.h"
#include "core/memory.h"
#include "model/memory_plan.h"
#include "obs/progress_log.h"
#include "obs/tensorboard_tags.h"
#include "obs/training_log.h"
#include "obs/weight_hash.h"
#include "optim/loss_scaler.h"
#include "parallel/data_parallel_setup.h"
#include "parallel/pipeline_executor.h"
#include "parallel/process_groups.h"
#include "train/flops.h"
#include "train/micro_batch_documents.h"
#include "train/sub_configs.h"

namespace megatron::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

Trainer::Trainer(const TrainConfig& config, backend::Backend& backend, std::ostream& out,
                 parallel::ProcessGroups* groups)
    : config_(config), backend_(backend), groups_(groups) {
  if (groups_ == nullptr) {
    own_groups_ = std::make_unique<parallel::ProcessGroups>(parallel::make_process_groups(
        std::make_unique<comm::SelfCommunicator>(backend_, "world"), parallel::ParallelSizes{}));
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
        save_lock_ = std::make_unique<ckpt::SaveDirectoryLock>(*c.save);
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
  parallel::connect_pipeline_neighbours(*groups_, c.virtual_pipeline_chunks() > 1);
  microbatches_ = std::make_unique<NumMicroBatchesCalculator>(c.microbatch_calculator());
  *log0_ << microbatches_->describe() << '\n';
  train_iters_ = c.total_train_iters();
  timers_ = std::make_unique<obs::Timers>(c.timing_log_level, obs::parse_timing_log_option(c.timing_log_option),
                                          [this] { backend_.synchronize(); });
  comm::Communicator* world = groups_->world.get();
  timers_->start("train/valid/test-data-iterators-setup", 0, world, /*barrier=*/true);

  // Data: the sample counts Megatron asks of each split (build_train_valid_test_data_loaders).
  const data::GPTDataConfig dc = data_config(c, train_iters_, log0_);
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
  const bool copy_engine = parallel::prepare_copy_engine(data_parallel_flags(c), *groups_);
  model_ = std::make_unique<model::GPTModel>(c.model, backend_, model_dtype(c), c.micro_batch_size, tp,
                                             pipeline_stage(c, groups_->coords.pp), data_parallel_flags(c).grad_dtype);
  model_->parameters().initialize(backend_, static_cast<uint64_t>(c.seed), c.model.init_method_std, c.model.num_layers);
  if (c.apply_wd_to_qk_layernorm) model_->parameters().apply_weight_decay_to_qk_layernorm();
  model_->set_per_token_loss(c.calculate_per_token_loss);
  *log0_ << " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): "
         << model_->parameters().total_numel() << '\n';

  // Megatron's bucket size and buckets per model chunk; the overlap hooks.
  const parallel::DataParallelFlags dp_flags = data_parallel_flags(c);
  const parallel::DataParallelOptions dp = parallel::data_parallel_options(dp_flags, *groups_, *model_);
  optimizer_ = std::make_unique<parallel::MixedPrecisionOptimizer>(model_->parameters(), backend_, optimizer_config(c),
                                                                   grad_scaler(c), dp);
  *log0_ << parallel::copy_engine_text(copy_engine, dp_flags, *optimizer_);
  optimizer_->set_timers(timers_.get(), world, c.barrier_with_l1_time);
  parallel::connect_overlap_hooks(dp_flags, *model_, *optimizer_);
  scheduler_ = std::make_unique<optim::OptimizerParamScheduler>(optim::make_scheduler_config(schedule_flags(c)));
  model::MemoryPlan plan = train_memory_plan(c, groups_->coords.pp);
  plan.copy_engine = parallel::copy_engine_plan_bytes(*optimizer_);
  *log0_ << model::format_memory_plan(plan);
  *log0_ << flops_formula_text(c.model, c.global_batch_size, c.flops_convention);

  if (c.load) {
    timers_->start("load-checkpoint", 0, world, /*barrier=*/true);
    progress_ = ckpt::load_training_checkpoint(checkpoint_run(c), load_options(c), model_->parameters(), *optimizer_,
                                               fp8_stage_state(), *scheduler_, *world, backend_, *log0_);
    timers_->stop("load-checkpoint", world, /*barrier=*/true);
    log_timers({"load-checkpoint"});
  }
  job_start_flops_ = static_cast<double>(progress_.consumed_train_samples) * flops_per_sample_;
  if (c.save && c.async_save) {
    const auto t0 = Clock::now();
    async_save_host_ = ckpt::async_save_host_buffer(checkpoint_run(c), save_options(c), model_->parameters(),
                                                    *optimizer_, *groups_, backend_);
    char line[160];
    std::snprintf(
        line, sizeof(line),
        " > --async-save: %.2f GiB of page-locked host memory for rank 0's checkpoint copies, pinned in %.1f s\n",
        static_cast<double>(async_save_host_->bytes()) / (1 << 30), seconds_since(t0));
    *log0_ << line;
  }
  timers_->stop("model-and-optimizer-setup");
  // Megatron writes TensorBoard from the last rank, the one that has the logged values.
  if (groups_->is_last_rank()) {
    if (c.tensorboard_dir)
      tensorboard_ = std::make_unique<obs::TensorBoardWriter>(*c.tensorboard_dir, c.tensorboard_queue_size);
    if (c.log_jsonl) jsonl_ = std::make_unique<obs::MetricsJsonlWriter>(*c.log_jsonl);
  }
}

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
  if (on && save_grace_.count() == 0) {          // once: it walks every stage's parameters
    save_grace_ = std::chrono::milliseconds(static_cast<int64_t>(
        1000.0 *
        static_cast<double>(
            ckpt::checkpoint_save_memory(checkpoint_run(config_), !config_.no_save_optim).checkpoint_bytes) /
        kSaveBandwidthFloor));
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
  // gather and send it (ckpt/checkpoint.h).
  pending_save_ = ckpt::save_training_checkpoint(checkpoint_run(config_), save_options(config_), progress_,
                                                 model_->parameters(), *optimizer_, fp8_stage_state(), *scheduler_,
                                                 *groups_, backend_, *log0_, &async_save_host_);
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
  append_progress(obs::checkpoint_progress_text(
      config_.async_save, progress_.iteration, tflops_per_gpu(flops - job_start_flops_, job_start_), cumulative, flops,
      static_cast<double>(progress_.consumed_train_samples) * static_cast<double>(config_.model.seq_length)));
}

void Trainer::append_progress(const std::string& text) {
  if (!config_.save || !groups_->is_first_rank()) return;
  const char* job = std::getenv("SLURM_JOB_ID");
  const std::string path = *config_.save + "/progress.txt";
  try {
    obs::append_progress_line(path, obs::progress_line(std::chrono::system_clock::now(), job != nullptr ? job : "",
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
  const obs::WeightHashCheck r = obs::compare_weights_across_dp_replicas(model_->parameters(), backend_, *groups_->dp,
                                                                         *groups_->world, progress_.iteration);
  if (r.mismatches == 0) {
    *log0_ << ">>> Weight hashes match after " << progress_.iteration << " iterations (checked in " << seconds_since(t0)
           << " s)\n"
           << std::flush;
    return;
  }
  if (groups_->rank() == 0) throw_error(r.message);
  // Rank 0 names the count and the first rank; a differing rank adds its parameters.
  comm::let_rank0_report_first(r.message);
  throw_error(
      "[--check-weight-hash-across-dp-replicas-interval] weights differ across data-parallel replicas (rank 0 "
      "says where)");
}

void Trainer::finish_pending_save(bool wait) {
  if (!pending_save_) return;
  grant_save_time(true);  // also without `wait`: rank 0's commit (fsyncs, --save-keep-last) is waited for
  if (ckpt::finish_checkpoint_save(*pending_save_, *groups_->world, wait, *log0_)) pending_save_.reset();
  grant_save_time(false);
}

Trainer::~Trainer() {
  if (pending_save_) {
    *log0_ << "WARNING: the --async-save checkpoint of iteration " << pending_save_->iteration()
           << " was not committed (the run stopped while it was being written)\n"
           << std::flush;
  }
}

void Trainer::log_to_tensorboard(const parallel::StepResult& step, double loss, int64_t gbs,
                                 std::optional<double> params_norm) {
  const TrainConfig& c = config_;
  const int64_t it = progress_.iteration, samples = progress_.consumed_train_samples;
  auto both = [&](std::string_view tag, std::string_view vs_samples, double value) {
    tensorboard_->add_scalar(std::string(tag), value, it);
    tensorboard_->add_scalar(std::string(vs_samples), value, samples);
  };
  if (c.log_learning_rate_to_tensorboard)
    both(tb_tags::kLearningRate, tb_tags::kLearningRateVsSamples, scheduler_->lr());
  if (c.log_batch_size_to_tensorboard)
    both(tb_tags::kBatchSize, tb_tags::kBatchSizeVsSamples, static_cast<double>(gbs));
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

double Trainer::loss_tokens(const data::TokenDataset& dataset, int64_t first_sample) const {
  const int64_t s = config_.model.seq_length;
  if (!config_.eod_mask_loss) return static_cast<double>(microbatches_->current_global_batch_size() * s);
  // This rank's micro-batches as the step loads them: their loss masks are the count.
  double counted = 0.0;
  model::MicroBatch mb;
  for (int64_t k = 0; k < microbatches_->num_microbatches(); ++k) {
    load_micro_batch(dataset, first_sample, k, &mb);
    for (const float m : mb.loss_mask) counted += m;
  }
  return comm::all_reduce_scalar(*groups_->dp_cp, counted, comm::ReduceOp::kSum);
}

double Trainer::evaluate(const data::TokenDataset& dataset, int64_t* consumed) {
  const int64_t num_micro = microbatches_->num_microbatches();
  const int64_t global_batch = microbatches_->current_global_batch_size();
  model::DropoutContext no_dropout;
  no_dropout.training = false;
  // Forward only through the pipeline; the losses appear on the last stage (0 elsewhere).
  const auto table = pipeline_table(num_micro, /*forward_only=*/true);
  const bool last_stage = groups_->coords.pp == groups_->sizes.pp - 1;
  double total = 0.0, tokens = 0.0;
  for (int64_t it = 0; it < config_.eval_iters; ++it) {
    if (config_.calculate_per_token_loss && last_stage) tokens += loss_tokens(dataset, *consumed);
    parallel::PipelineCallbacks cb;
    cb.load = [&](int64_t k, model::MicroBatch* mb) { load_micro_batch(dataset, *consumed, k, mb); };
    cb.dropout = [&](int64_t) { return no_dropout; };
    cb.overlap_p2p = config_.overlap_p2p_communication;
    total += parallel::run_pipeline(table, *model_, *groups_->pp, cb);
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
                                 double* loss_out) {
  const double loss = evaluate(dataset, consumed);
  if (loss_out) *loss_out = loss;
  *log_last_ << obs::format_validation_block(prefix, {{"lm loss", loss}}) << std::flush;
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

void Trainer::evaluate_final(TrainSummary* summary) {
  const TrainConfig& c = config_;
  const std::string at = "iteration " + std::to_string(progress_.iteration);
  if (datasets_.valid() && c.eval_iters > 0) {
    evaluate_and_print(at + " on validation set", *datasets_.valid(), &progress_.consumed_valid_samples,
                       &summary->final_valid_loss);
  }
  if (datasets_.test() && c.eval_iters > 0) {
    int64_t consumed_test = 0;
    evaluate_and_print(at + " on test set", *datasets_.test(), &consumed_test, nullptr);
  }
  if (tensorboard_) tensorboard_->flush();
}

}  // namespace megatron::train
