// Trainer::run: Megatron's train() loop (docs/megatron-formats.md §3.8), one named step per phase of an
// iteration: run_iteration (the step and its counters), log_iteration (training_log),
// evaluate_if_due, save_or_exit; and after the loop the prediction check and the final save
// and evaluations.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "backend/profiler_marks.h"
#include "core/error.h"
#include "core/host_name.h"
#include "core/memory.h"
#include "obs/progress_log.h"
#include "obs/tensorboard_tags.h"
#include "obs/training_log.h"
#include "train/flops.h"
#include "train/sub_configs.h"
#include "train/train_step.h"
#include "train/trainer.h"

namespace megatron::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// --exit-signal-handler: SIGTERM only sets this flag; the loop checks it after each iteration.
std::atomic<bool> g_exit_requested{false};
extern "C" void on_sigterm(int) { g_exit_requested.store(true); }

}  // namespace

void Trainer::request_exit() { g_exit_requested.store(true); }

void Trainer::install_exit_signal_handler() { std::signal(SIGTERM, on_sigterm); }

// What the loop keeps between iterations: Megatron's training_log accumulators since the last
// log line (reset there), the interval clock, and the steady state measured against megatron
// plan's prediction.
struct Trainer::LoopState {
  Clock::time_point start = Clock::now();  // --exit-duration-in-mins counts from here
  bool profiled = false;                   // --profile captures on this rank
  bool first = true;                       // no iteration has advanced yet (TrainSummary::first_loss)
  bool memory_reported = false;            // the memory line follows the first log line only
  // The logged loss is loss_sum / loss_weight: iterations' losses over iterations, or (per
  // token) summed token losses over tokens counted, as Megatron's total_loss_dict.
  double loss_sum = 0.0, loss_weight = 0.0, interval_tokens = 0.0;
  int64_t advanced = 0, skipped = 0, nans = 0;
  Clock::time_point interval_start = Clock::now();
  // Megatron stops its interval timer around evaluation and checkpoint saves: their seconds are
  // left out of the next log line's time per iteration (and tokens/s).
  double paused_seconds = 0.0;
  obs::EnergyMonitor* energy = nullptr;  // --log-energy: paused with the interval clock
  // The iterations after the first log interval (warm-up left out).
  double steady_seconds = 0.0;
  int64_t steady_iterations = 0, steady_from = 0;
  bool first_interval = true;

  template <class Work>
  void paused(Work&& work) {
    const auto t0 = Clock::now();
    if (energy) energy->pause();
    work();
    if (energy) energy->resume();
    paused_seconds += seconds_since(t0);
  }
};

// The iteration just run: its step, the global batch's loss as logged with its weight in the
// interval's average (1, or per token the tokens counted), and its global batch.
struct Trainer::Iteration {
  parallel::StepResult step;
  double loss = 0.0;
  double weight = 1.0;
  int64_t global_batch = 0;
};

void Trainer::mark(const char* name) const {
  if (config_.profile) backend::nvtx_push(name);
}

void Trainer::unmark() const {
  if (config_.profile) backend::nvtx_pop();
}

void Trainer::cuda_profiler(bool start) const {
  if (backend_.device() != Device::kCUDA) return;
  const std::string why = start ? backend::cuda_profiler_start() : backend::cuda_profiler_stop();
  if (!why.empty()) {
    std::cerr << " > warning: [--profile] rank " << groups_->rank() << ": the CUDA profiler did not "
              << (start ? "start" : "stop") << ": " << why << '\n'
              << std::flush;
  }
}

TrainSummary Trainer::run() {
  const TrainConfig& c = config_;
  TrainSummary summary;
  summary.final_valid_loss = std::numeric_limits<double>::quiet_NaN();
  LoopState loop;
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
  begin_training(&loop);
  // Megatron checks once before the first step ("to be very pedantic"): a load or an
  // initialisation that differs between replicas shows here.
  if (c.check_weight_hash_interval) check_weight_hashes();
  while (progress_.iteration < train_iters_) {
    const Iteration it = run_iteration(&loop);
    log_iteration(it, &loop, &summary);
    if (c.check_weight_hash_interval && progress_.iteration % *c.check_weight_hash_interval == 0) {
      check_weight_hashes();
    }
    // An --async-save in flight is committed once every rank has written its part.
    finish_pending_save(/*wait=*/false);
    // Megatron's order after the log (docs/megatron-formats.md §3.8): evaluate, signal, save,
    // duration, interval.
    evaluate_if_due(&loop);
    if (save_or_exit(&loop, &summary)) break;
  }
  summary.iterations = progress_.iteration;
  summary.consumed_samples = progress_.consumed_train_samples;
  report_against_prediction(loop);
  if (energy_) {
    energy_->lap(*groups_->world);
    if (c.log_energy) {
      char line[96];
      std::snprintf(line, sizeof(line), "Total training energy (GPU): %.3f MJ\n", energy_->total_joules() / 1e6);
      *log0_ << line << std::flush;
    }
    write_emissions();
  }
  if (summary.exited_early) {  // Megatron exits right there: no final evaluation
    finish_pending_save(/*wait=*/true);
    return summary;
  }

  *log0_ << "after training is done\n";
  // HEAD: the final save unless the last iteration was just saved.
  if (c.save && progress_.iteration != 0 && !(c.save_interval && c.save_interval->due(progress_.iteration))) save();
  evaluate_final(&summary);  // an --async-save goes on meanwhile
  finish_pending_save(/*wait=*/true);
  return summary;
}

void Trainer::begin_training(LoopState* loop) {
  const TrainConfig& c = config_;
  *log0_ << "training ...\n" << std::flush;
  if (c.log_energy || c.codecarbon_dir) {
    if (!energy_) energy_ = std::make_unique<obs::EnergyMonitor>(nullptr);
    energy_->resume();
    loop->energy = energy_.get();
    energy_start_ = Clock::now();
    if (c.codecarbon_dir && groups_->rank() == 0) emissions_run_id_ = obs::random_run_id();
    write_emissions();  // a directory that cannot take the file fails here, not at the first log line
  } else {
    energy_.reset();
  }
  if (c.log_progress && c.save && groups_->is_first_rank()) {
    append_progress("Starting job");
    std::ifstream in(*c.save + "/progress.txt", std::ios::binary);
    progress_run_start_ = obs::cumulative_start(
        std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), c.world_size);
  }
  // --profile: Megatron's nsys hooks. The capture starts when profile_step_start iterations are
  // done and stops after iteration profile_step_end; NVTX ranges name every iteration and phase.
  loop->profiled =
      c.profile && std::find(c.profile_ranks.begin(), c.profile_ranks.end(), groups_->rank()) != c.profile_ranks.end();
  if (!c.profile) return;
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

Trainer::Iteration Trainer::run_iteration(LoopState* loop) {
  const TrainConfig& c = config_;
  microbatches_->update(progress_.consumed_train_samples);
  const int64_t gbs = microbatches_->current_global_batch_size();
  const int64_t num_micro = microbatches_->num_microbatches();

  if (loop->profiled && progress_.iteration == c.profile_step_start) cuda_profiler(true);
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
    step_tokens = loss_tokens(*datasets_.train(), progress_.consumed_train_samples);
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
  if (const std::optional<double> d = scheduler_->decoupled_lr()) in.decoupled_lr = static_cast<float>(*d);
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
      timers_->start(name, 1, groups_->world.get(), c.barrier_with_l1_time);
    } else {
      timers_->stop(name);
      if (ranged) unmark();
    }
  };
  if (timers_->active(2)) {
    in.pipeline_phase = [&](const parallel::PipelineAction& a, bool started) {
      const char* name = parallel::megatron_timer_name(a);
      started ? timers_->start(name, 2) : timers_->stop(name);
    };
  }
  Iteration it;
  it.global_batch = gbs;
  double local_loss = 0.0;  // this rank's sum of micro-batch losses (last stage)
  in.before_optimizer = [&](double loss_sum) {
    local_loss = loss_sum;
    // The loss of the global batch: this rank's micro-batch mean, averaged over DP; per
    // token, the summed token losses over the tokens counted.
    const double summed = comm::all_reduce_scalar(*groups_->dp_cp, loss_sum, comm::ReduceOp::kSum);
    it.weight = c.calculate_per_token_loss ? step_tokens : 1.0;
    if (c.calculate_per_token_loss) {
      it.loss = step_tokens > 0.0 ? summed / step_tokens : 0.0;
    } else {
      it.loss = summed / static_cast<double>(num_micro * groups_->dp_cp->size());
    }
    if (!recording_failure_reported_ && !model_->recording_failure().empty()) {
      *log0_ << " > warning: recording the step's device work (CUDA graphs) stopped: " << model_->recording_failure()
             << "; its ops are issued one by one from now on\n";
      recording_failure_reported_ = true;
    }
  };
  it.step = train_step(step_flags(c), *model_, *optimizer_, *groups_, in).step;
  if (straggler_) {
    straggler_->end_iteration(flops_per_sample_ * static_cast<double>(gbs) / static_cast<double>(c.world_size));
  }
  if (c.check_for_nan_in_loss_and_grad) {
    // Megatron's check_for_nan_in_loss_and_grad, fatal. A NaN or Inf loss makes the
    // gradients NaN, and the NaN norm (the same on every rank) stopped the step before AdamW,
    // so every rank stops here; the last stage names its loss first.
    if (last_stage && !std::isfinite(local_loss)) {
      throw_error("[--no-check-for-nan-in-loss-and-grad] rank ", groups_->rank(), ": found ",
                  std::isnan(local_loss) ? "NaN" : "Inf", " in the local forward loss at iteration ",
                  progress_.iteration + 1, " (node ", host_name("unknown"), ")");
    }
    if (it.step.nan_grad_norm) {
      throw_error("[--no-check-for-nan-in-loss-and-grad] rank ", groups_->rank(),
                  ": found NaN in the gradients (grad norm) at iteration ", progress_.iteration + 1,
                  "; the step was not applied");
    }
  }
  if (it.step.success) scheduler_->step(gbs);
  progress_.consumed_train_samples += gbs;
  ++progress_.iteration;
  unmark();  // the iteration's range
  if (loop->profiled && progress_.iteration == c.profile_step_end) cuda_profiler(false);
  loop->interval_tokens += static_cast<double>(gbs * c.model.seq_length);
  return it;
}

void Trainer::log_iteration(const Iteration& it, LoopState* loop, TrainSummary* summary) {
  const TrainConfig& c = config_;
  const int64_t iteration = progress_.iteration, gbs = it.global_batch;
  const parallel::StepResult& step = it.step;
  if (step.success) {
    ++loop->advanced;
    loop->loss_sum += it.loss * it.weight;
    loop->loss_weight += it.weight;
    if (loop->first) summary->first_loss = it.loss;
    loop->first = false;
  } else {
    ++loop->skipped;
    if (!std::isfinite(it.loss)) ++loop->nans;
  }
  if (c.tensorboard_dir && iteration % c.tensorboard_log_interval == 0) {
    // The parameter norm is collective under the distributed optimizer: every rank takes
    // part, the last one (which has the writer) logs it.
    std::optional<double> params_norm;
    if (c.log_params_norm) params_norm = optimizer_->params_norm();
    if (tensorboard_) log_to_tensorboard(step, it.loss, gbs, params_norm);
    if (c.log_timers_to_tensorboard) {
      // Megatron's timers.write: each timer's largest time over the ranks, per iteration of
      // the log interval so far, in seconds (collective; resets nothing).
      const auto times = timers_->max_seconds(obs::iteration_timer_names(), *groups_->world,
                                              static_cast<double>(loop->advanced + loop->skipped));
      if (tensorboard_) {
        for (const auto& [tag, seconds] : times) tensorboard_->add_scalar(tag, seconds, iteration);
      }
    }
  }
  if (iteration % c.log_interval != 0) return;

  const double elapsed = seconds_since(loop->interval_start) - loop->paused_seconds;
  const int64_t iters = loop->advanced + loop->skipped;
  if (!loop->first_interval) {
    if (loop->steady_iterations == 0) loop->steady_from = iteration - iters + 1;
    loop->steady_seconds += elapsed;
    loop->steady_iterations += iters;
  }
  loop->first_interval = false;
  const double per_iter = elapsed / static_cast<double>(iters);
  obs::IterationLog log;
  log.timestamp = obs::format_timestamp(std::chrono::system_clock::now());
  log.iteration = iteration;
  log.train_iters = train_iters_;
  log.consumed_samples = progress_.consumed_train_samples;
  log.elapsed_ms = per_iter * 1000.0;
  if (c.log_throughput) {
    log.tflops_per_gpu = tflops_per_gpu(flops_per_sample_ * static_cast<double>(gbs), per_iter, c.world_size);
  }
  log.learning_rate = scheduler_->lr();
  log.global_batch_size = gbs;
  if (loop->loss_weight > 0) log.losses.push_back({"lm loss", loop->loss_sum / loop->loss_weight});
  log.loss_scale = optimizer_->loss_scale();
  log.grad_norm = step.grad_norm;
  if (step.num_zeros) log.num_zeros = static_cast<double>(*step.num_zeros);
  if (c.log_params_norm) log.params_norm = optimizer_->params_norm();
  if (energy_) {
    // Megatron's: the lap's joules over the interval's iterations and the ranks.
    const double joules = energy_->lap(*groups_->world);
    if (c.log_energy) {
      log.energy_per_gpu_j = joules / static_cast<double>(iters) / static_cast<double>(c.world_size);
      log.power_per_gpu_w = *log.energy_per_gpu_j / per_iter;
    }
    write_emissions();
  }
  log.skipped_iterations = loop->skipped;
  log.nan_iterations = loop->nans;
  log.tokens_per_second = loop->interval_tokens / elapsed;
  log.eta_seconds = per_iter * static_cast<double>(train_iters_ - iteration);
  *log_last_ << obs::format_iteration_line(log) << '\n' << std::flush;
  if (loop->loss_weight > 0) summary->last_loss = loop->loss_sum / loop->loss_weight;
  if (tensorboard_ && c.log_timers_to_tensorboard) {
    tensorboard_->add_scalar(std::string(tb_tags::kIterationTime), per_iter, iteration);
    if (log.tflops_per_gpu) tensorboard_->add_scalar(std::string(tb_tags::kThroughput), *log.tflops_per_gpu, iteration);
  }
  if (tensorboard_ && log.energy_per_gpu_j) {
    tensorboard_->add_scalar(std::string(tb_tags::kIterEnergyPerGpu), *log.energy_per_gpu_j, iteration);
    tensorboard_->add_scalar(std::string(tb_tags::kPowerPerGpu), *log.power_per_gpu_w, iteration);
  }
  if (tensorboard_) tensorboard_->flush();
  if (jsonl_) {
    jsonl_->write(
        {{"iteration", iteration},
         {"consumed_samples", progress_.consumed_train_samples},
         {"elapsed_ms_per_iteration", log.elapsed_ms},
         {"throughput_tflops_per_gpu", log.tflops_per_gpu},
         {"learning_rate", log.learning_rate},
         {"global_batch_size", gbs},
         {"lm_loss", loop->loss_weight > 0 ? obs::MetricValue(loop->loss_sum / loop->loss_weight) : obs::MetricValue()},
         {"loss_scale", static_cast<double>(log.loss_scale)},
         {"grad_norm", step.grad_norm},
         {"params_norm", log.params_norm},
         {"skipped_iterations", loop->skipped},
         {"nan_iterations", loop->nans},
         {"tokens_per_second", *log.tokens_per_second}});
  }
  if (!loop->memory_reported) {
    const MemorySnapshot m = memory_tracker(backend_.device()).snapshot();
    *log_last_ << obs::format_memory_line(groups_->rank(), iteration, m.current_total, m.peak_total, m.current_total,
                                          m.peak_total)
               << '\n';
    loop->memory_reported = true;
  }
  log_timers(obs::iteration_timer_names(), static_cast<double>(c.log_interval));
  if (straggler_) {
    if (const std::optional<std::string> text = straggler_->report(*groups_->world)) *log0_ << *text << std::flush;
  }
  loop->loss_sum = loop->loss_weight = 0.0;
  loop->interval_tokens = 0.0;
  loop->advanced = loop->skipped = loop->nans = 0;
  loop->interval_start = Clock::now();
  loop->paused_seconds = 0.0;
}

void Trainer::evaluate_if_due(LoopState* loop) {
  const TrainConfig& c = config_;
  // Megatron's do_valid: a dataset to read and --eval-iters > 0.
  const bool do_valid = datasets_.valid() && c.eval_iters > 0;
  const int64_t iteration = progress_.iteration;
  if (c.eval_interval > 0 && iteration % c.eval_interval == 0 && do_valid) {
    loop->paused([&] {
      evaluate_and_print("iteration " + std::to_string(iteration), *datasets_.valid(),
                         &progress_.consumed_valid_samples, nullptr);
    });
  }
}

bool Trainer::save_or_exit(LoopState* loop, TrainSummary* summary) {
  const TrainConfig& c = config_;
  const int64_t iteration = progress_.iteration;
  // Any rank's SIGTERM stops every rank (Megatron all-gathers the flag).
  if (c.exit_signal_handler &&
      comm::all_reduce_scalar(*groups_->world, g_exit_requested.load() ? 1.0 : 0.0, comm::ReduceOp::kMax) > 0.0) {
    save();
    *log0_ << "exiting program after receiving SIGTERM.\n" << std::flush;
    summary->exited_early = true;
    return true;
  }
  bool saved = false;
  if (c.save && c.save_interval && c.save_interval->due(iteration)) {
    loop->paused([&] { save(); });
    saved = true;
  }
  if (c.exit_duration_in_mins) {
    // The slowest rank's clock decides, so that all ranks stop at the same iteration.
    const double minutes =
        comm::all_reduce_scalar(*groups_->world, seconds_since(loop->start) / 60.0, comm::ReduceOp::kMax);
    if (minutes > static_cast<double>(*c.exit_duration_in_mins)) {
      if (!saved) save();
      *log0_ << "exiting program after " << minutes << " minutes\n" << std::flush;
      summary->exited_early = true;
      return true;
    }
  }
  if (c.exit_interval && iteration % *c.exit_interval == 0) {
    if (!saved) save();
    *log0_ << "exiting program at iteration " << iteration << '\n' << std::flush;
    summary->exited_early = true;
    return true;
  }
  if (c.exit_samples && progress_.consumed_train_samples >= *c.exit_samples) {
    if (!saved) save();
    *log0_ << "exiting program at iteration " << iteration << " after " << progress_.consumed_train_samples
           << " consumed samples (--exit-samples " << *c.exit_samples << ")\n"
           << std::flush;
    summary->exited_early = true;
    return true;
  }
  return false;
}

void Trainer::write_emissions() const {
  if (!config_.codecarbon_dir || groups_->rank() != 0) return;
  obs::EmissionsRecord r;
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &local);
  r.timestamp = stamp;
  r.run_id = emissions_run_id_;
  r.duration_s = seconds_since(energy_start_);
  r.gpu_energy_kwh = energy_->wall_joules() / 3.6e6;
  r.gpu_count = config_.world_size;
  r.carbon_intensity_g_per_kwh = config_.carbon_intensity_g_per_kwh;
  obs::write_emissions_csv(*config_.codecarbon_dir, r);
}

void Trainer::report_against_prediction(const LoopState& loop) {
  const double predicted = config_.predicted_iteration_ms;
  if (predicted <= 0 || loop.steady_iterations == 0) return;
  const double measured = 1000.0 * loop.steady_seconds / static_cast<double>(loop.steady_iterations);
  char line[200];
  std::snprintf(line, sizeof(line),
                " > measured %.1f ms per iteration (iterations %lld-%lld), megatron plan predicted %.1f ms (%+.1f%%)\n",
                measured, static_cast<long long>(loop.steady_from),
                static_cast<long long>(loop.steady_from + loop.steady_iterations - 1), predicted,
                100.0 * (predicted / measured - 1.0));
  *log_last_ << line << std::flush;
}

}  // namespace megatron::train
