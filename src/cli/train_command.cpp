// megatron train: Megatron-LM's pretrain_gpt.py on this process, one rank of a data-parallel
// job when a launcher started several (comm/launch_env.h), or the launcher itself with
// --nproc-per-node (cli/train_launcher.h).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <optional>
#include <sstream>

#include "backend/device.h"
#include "backend/gpu_telemetry.h"
#include "backend/ops.h"
#include "ckpt/checkpoint.h"
#include "cli/args.h"
#include "cli/backend_choice.h"
#include "cli/commands.h"
#include "cli/flag_agreement.h"
#include "cli/host_memory.h"
#include "cli/train_args.h"
#include "cli/train_prediction.h"
#include "cli/wandb_sync.h"
#include "comm/launch.h"
#include "comm/launch_env.h"
#include "comm/watchdog.h"
#include "core/error.h"
#include "data/tokenizer/tokenizer.h"
#include "model/memory_plan.h"
#include "obs/straggler_detector.h"
#include "parallel/data_parallel_setup.h"
#include "parallel/process_groups.h"
#include "plan/gpu_spec.h"
#include "plan/memory_model.h"
#include "plan/nccl_memory.h"
#include "plan/throughput_model.h"
#include "train/config.h"
#include "train/flops.h"
#include "train/sub_configs.h"
#include "train/trainer.h"

namespace megatron::cli {
namespace {

constexpr int64_t kMaxDryRunWorld = 1 << 20;

// predict_speed, or why there is none (a layout the planner rejects).
SpeedPrediction prediction(const train::TrainConfig& config, const plan::GpuSpec& gpu, int64_t gpus_per_node) {
  try {
    return predict_speed(config, gpu, gpus_per_node);
  } catch (const Error& e) {
    return {str_cat(" > no prediction by megatron plan for ", gpu.name, ": ", e.what(), "\n"), 0.0};
  }
}

// Every problem of a command line that did not parse: the parse errors, then what validating
// the rest finds, less what names a flag already in error (its value was dropped).
std::vector<std::string> with_validation_errors(const Args& args, std::vector<std::string> errors) {
  std::vector<std::string> flagged;
  for (const std::string& e : errors) {
    if (e.starts_with("[")) flagged.push_back(e.substr(0, e.find(']') + 1));
  }
  try {
    int64_t world = 1;
    try {
      if (args.given("--world-size")) world = args.get_int("--world-size", 1, kMaxDryRunWorld);
    } catch (const Error&) {
    }
    parse_train_config(args, world, nullptr);
  } catch (const Error& e) {
    std::istringstream lines(e.what());
    for (std::string line; std::getline(lines, line);) {
      const bool same_flag =
          std::any_of(flagged.begin(), flagged.end(), [&](const std::string& f) { return line.starts_with(f); });
      if (!same_flag) errors.push_back(line);
    }
  }
  return errors;
}

// --log-energy / --codecarbon-dir: this rank's GPU energy counter (null on the CPU or without
// NVML: the rank's energy reads 0), and rank 0's start-up lines saying what is measured.
std::unique_ptr<backend::EnergyCounter> energy_counter(const Args& args, const train::TrainConfig& config,
                                                       const backend::Backend& backend, const comm::LaunchEnv& env,
                                                       std::ostream& log0) {
  std::string why = "the CPU backend";
  std::unique_ptr<backend::EnergyCounter> counter;
  if (backend.device() == Device::kCUDA) {
    counter = backend::open_energy_counter(static_cast<int>(cuda_device_for_rank(args, env.local_rank)), &why);
  }
  const char* flag = config.log_energy ? "--log-energy" : "--codecarbon-dir";
  if (counter) {
    log0 << " > " << flag << ": each GPU's energy from NVML's counter (nvmlDeviceGetTotalEnergyConsumption), summed "
         << "over " << config.world_size << " rank(s)\n";
  } else {
    log0 << "note: [" << flag << "] no GPU energy counter on rank 0 (" << why << "): its energy reads 0\n";
  }
  if (config.codecarbon_dir) {
    log0 << " > --codecarbon-dir: the GPUs' energy (kWh) goes to " << *config.codecarbon_dir
         << "/emissions.csv at every log line and at the end; ";
    if (config.carbon_intensity_g_per_kwh) {
      log0 << "emissions at " << *config.carbon_intensity_g_per_kwh << " g CO2eq/kWh (--carbon-intensity-g-per-kwh)\n";
    } else {
      log0 << "no emissions without the grid's intensity (--carbon-intensity-g-per-kwh G, ours)\n";
    }
  }
  return counter;
}

// The world a run plans for: the launcher's, or --dry-run's --world-size N (a dry run connects
// to nobody, so one process checks any layout).
int64_t dry_run_world_size(const Args& args, const comm::LaunchEnv& env) {
  if (args.given("--gpus-per-node") && !args.get_flag("--dry-run")) {
    throw_error("[--gpus-per-node] is for --dry-run only: a run's ranks per node come from its launcher");
  }
  if (!args.given("--world-size")) return env.world_size;
  if (!args.get_flag("--dry-run")) {
    throw_error(
        "[--world-size] is for --dry-run only: a run's world size comes from its launcher (torchrun, mpirun, "
        "srun or --nproc-per-node)");
  }
  return args.get_int("--world-size", 1, kMaxDryRunWorld);
}

// The ranks per node a dry run plans for: --gpus-per-node, else with --world-size at most 8
// (megatron plan's default), else the launcher's (comm::ranks_per_node).
int64_t dry_run_ranks_per_node(const Args& args, int64_t world) {
  if (args.given("--gpus-per-node")) {
    const int64_t g = args.get_int("--gpus-per-node", 1, kMaxDryRunWorld);
    if (world % g != 0 && g < world) {
      throw_error("[--gpus-per-node] world size (", world, ") is not a multiple of --gpus-per-node (", g, ")");
    }
    return std::min(g, world);
  }
  if (args.given("--world-size")) {
    const int64_t g = std::min<int64_t>(world, 8);
    return world % g == 0 ? g : world;
  }
  return comm::ranks_per_node(comm::process_environment(), world);
}

}  // namespace

int run_train(const CommandArgs& argv) {
  auto make_args = [] {
    Args a("train", "pretrain a GPT with Megatron-LM's pretrain_gpt.py flags");
    declare_train_flags(a);
    declare_device_flag(a);
    return a;
  };
  Args args = make_args();
  std::vector<std::string> parse_errors;
  if (!args.parse(argv, &parse_errors)) {
    std::cout << args.usage();
    return 0;
  }
  if (!parse_errors.empty()) throw_errors(with_validation_errors(args, parse_errors));
  if (args.given("--nproc-per-node")) {
    return comm::spawn_local_workers(args.get_int("--nproc-per-node", 1, kMaxLocalWorkers),
                                     comm::worker_command("train", argv), uses_nccl(args));
  }

  const comm::LaunchEnv env = comm::detect_launch_env(comm::process_environment());
  // Rank 0 speaks for everyone before the ranks are connected: the other ranks print nothing,
  // and a configuration error is one line from rank 0 while every rank exits non-zero.
  const bool rank0 = env.rank == 0;
  std::ostream null_stream(nullptr);
  std::ostream& log0 = rank0 ? std::cout : null_stream;
  train::TrainConfig config;
  try {
    // --use-checkpoint-args: the checkpoint's shape flags join the command line, then it is
    // parsed again.
    if (const std::vector<std::string> extra = checkpoint_model_args(args, &log0); !extra.empty()) {
      CommandArgs full = argv;
      full.insert(full.end(), extra.begin(), extra.end());
      args = make_args();
      args.parse(full);
    }
    config = parse_train_config(args, dry_run_world_size(args, env), &log0);
    host_collectives(args);  // a bad --distributed-backend is rank 0's one line too
  } catch (const Error&) {
    if (!rank0) {
      comm::let_rank0_report_first();  // rank 0 finds the same error and prints the one line
      return 1;
    }
    throw;
  }
  // --exit-signal-handler covers the start-up too (connecting ranks, building the sample
  // index, loading a checkpoint): a SIGTERM from here on is honoured at the first iteration
  // boundary (save, exit 0), as in Megatron, whose handler is set before the model and data.
  if (config.exit_signal_handler) train::Trainer::install_exit_signal_handler();
  const std::optional<WandbSync> wandb = wandb_sync_of(args, config);
  if (wandb) log0 << wandb_sync_note(*wandb, /*at_end=*/false);
  if (env.world_size > 1) {
    log0 << "using world size: " << config.world_size << ", data-parallel size: " << config.data_parallel_size
         << ", context-parallel size: 1, tensor-model-parallel size: " << config.tensor_model_parallel_size
         << ", pipeline-model-parallel size: " << config.pipeline_model_parallel_size << " ("
         << comm::to_string(env.launcher) << ")\n";
  }

  // The tokenizer fixes the vocabulary (Megatron's tokenizer.vocab_size: GPT2BPETokenizer
  // len(encoder) = 50257, Llama2Tokenizer 32000, ...; NullTokenizer: --vocab-size N, its EOD
  // being N - 1, as Megatron-Core's) and the end of document (data/tokenizer/tokenizer.h).
  const data::TokenizerOptions tokenizer_flags = tokenizer_options(config);
  if (config.null_vocab_size) {
    config.model.vocab_size = *config.null_vocab_size;
    config.eod_token = *config.null_vocab_size - 1;
  } else if (!config.dry_run || data::tokenizer_option_errors(tokenizer_flags).empty()) {
    const std::unique_ptr<data::Tokenizer> tokenizer = data::make_tokenizer(tokenizer_flags);
    config.model.vocab_size = tokenizer->vocab_size();
    config.eod_token = tokenizer->eod();  // ends the mock documents; masked by --eod-mask-loss
  } else {
    config.model.vocab_size = vocab_size_without_files(config);
  }
  config.model.padded_vocab_size = model::padded_vocab_size(
      config.model.vocab_size, config.make_vocab_size_divisible_by, config.tensor_model_parallel_size, &log0);

  if (config.dry_run) {
    // GPU ranks add NCCL's communicator buffers, as `megatron plan` does (plan/nccl_memory.h),
    // with the launcher's ranks per node (comm::ranks_per_node; one node when it says nothing).
    // A layout planned for --gpu has GPU ranks even where this machine has none.
    const bool gpu_ranks = uses_cuda(args) || (args.given("--gpu") && args.get_string("--device") != "cpu");
    const bool nccl = config.world_size > 1 && gpu_ranks && !host_collectives(args);
    const int64_t per_node = dry_run_ranks_per_node(args, config.world_size);
    if (args.given("--world-size")) {
      log0 << " > --dry-run for a world of " << config.world_size << " rank(s), " << per_node
           << " per node (--gpus-per-node): data-parallel size " << config.data_parallel_size
           << ", tensor-model-parallel size " << config.tensor_model_parallel_size << ", pipeline-model-parallel size "
           << config.pipeline_model_parallel_size << "\n";
    }
    const int64_t tp = config.tensor_model_parallel_size, dp = config.data_parallel_size;
    // MEGATRON_DP_COPY_ENGINE takes effect (parallel/data_parallel_setup.h) with the distributed
    // optimizer over data-parallel groups inside a node.
    const bool copy_engine = nccl && parallel::copy_engine_planned() && config.use_distributed_optimizer && dp > 1 &&
                             plan::blocks_within_nodes(tp * dp, per_node);
    plan::NcclLayout layout{tp,       config.pipeline_model_parallel_size,
                            dp,       config.virtual_pipeline_chunks(),
                            per_node, !config.model.untie_embeddings_and_output_weights};
    layout.dp_copy_engine = copy_engine;
    auto stage_plan = [&](int64_t stage) {
      model::MemoryPlan p = train::train_memory_plan(config, stage);
      if (nccl) p.nccl = plan::nccl_memory(layout, stage).total();
      if (copy_engine) {
        const model::PipelineStageOptions pipe = train::pipeline_stage(config, stage);
        const int64_t bucket = parallel::ddp_bucket_size(train::data_parallel_flags(config), dp,
                                                         model::stage_num_parameters(config.model, tp, pipe));
        p.copy_engine = plan::copy_engine_receive_bytes(config.model, tp, pipe, dp, bucket);
      }
      return p;
    };
    if (nccl) {
      log0 << " > NCCL buffers: the model of plan/nccl_memory.h, " << config.world_size << " ranks, " << per_node
           << " per node" << (copy_engine ? "; MEGATRON_DP_COPY_ENGINE: the copy engines' receive buffer" : "") << "\n";
    }
    if (config.pipeline_model_parallel_size == 1) {
      log0 << model::format_memory_plan(stage_plan(0));
    } else {
      for (int64_t stage = 0; stage < config.pipeline_model_parallel_size; ++stage) {
        log0 << " > pipeline stage " << stage << " of " << config.pipeline_model_parallel_size << ":\n"
             << model::format_memory_plan(stage_plan(stage));
      }
    }
    log0 << train::flops_formula_text(config.model, config.global_batch_size, config.flops_convention);
    if (args.given("--gpu")) {
      log0 << prediction(config, plan::find_gpu(args.get_string("--gpu")), per_node).line;
    } else if (args.given("--world-size")) {
      log0 << " > no speed prediction: give the GPU kind with --gpu (" << plan::gpu_names() << ")\n";
    }
    if (config.save) log0 << save_memory_line(config);
    return 0;
  }
  if (config.data_path.empty() && !config.mock_data && config.split_data_path[0].empty()) {
    throw_error(
        "[--data-path] is required (a dataset prefix or weight/prefix pairs), or --train-data-path, or "
        "--mock-data");
  }

  if (uses_cuda(args)) {
    if (const std::string problem = cuda_attention_problem(config); !problem.empty()) throw_error(problem);
  }
  std::unique_ptr<backend::Backend> backend = make_backend(args, log0, cuda_device_for_rank(args, env.local_rank));
  {
    // How fast the run should go, before it goes: megatron plan's prediction for this layout on
    // --gpu, else on this CUDA device's kind when the planner knows it.
    std::optional<std::string> gpu;
    if (args.given("--gpu")) {
      gpu = args.get_string("--gpu");
    } else if (backend->device() == Device::kCUDA) {
      gpu = plan::gpu_for_device_name(
          backend::cuda_device_name(static_cast<int>(cuda_device_for_rank(args, env.local_rank))));
    }
    if (gpu) {
      const SpeedPrediction p =
          prediction(config, plan::find_gpu(*gpu), comm::ranks_per_node(comm::process_environment(), env.world_size));
      log0 << p.line;
      // The run compares at its end, on the GPU it was predicted for only.
      if (backend->device() == Device::kCUDA) config.predicted_iteration_ms = p.ms_per_iteration;
    }
  }
  log0 << host_collectives_note(args, comm::ranks_per_node(comm::process_environment(), env.world_size));
  // The connection to the other ranks outlives the groups split from it.
  comm::RankConnection connection = comm::connect_ranks(
      env, *backend, comm::timeout_from_minutes(config.distributed_timeout_minutes), host_collectives(args));
  if (!flags_agree_across_ranks(args, *connection.world)) return 1;
  // --log-straggler times every group's collectives: the world is wrapped before the groups
  // are split from it (the detector outlives them).
  std::unique_ptr<obs::StragglerDetector> straggler;
  if (config.log_straggler) {
    obs::StragglerOptions options;
    options.on_at_start = !config.disable_straggler_on_startup;
    options.control_port = static_cast<int>(config.straggler_ctrlr_port);
    options.minmax_count = config.straggler_minmax_count;
    const int gpu =
        backend->device() == Device::kCUDA ? static_cast<int>(cuda_device_for_rank(args, env.local_rank)) : -1;
    straggler = std::make_unique<obs::StragglerDetector>(*backend, options, env.rank, gpu);
    connection.world = straggler->watch(std::move(connection.world));
    log0 << straggler->start_up_note();
  }
  parallel::ProcessGroups groups = parallel::make_process_groups(
      std::move(connection.world), parallel::parallel_sizes(config.world_size, config.tensor_model_parallel_size,
                                                            config.pipeline_model_parallel_size));
  if (config.save && config.ckpt_fully_parallel_save && !ckpt::all_ranks_see_directory(*config.save, *groups.world)) {
    config.ckpt_fully_parallel_save = false;
    log0 << " > not every rank sees --save " << *config.save
         << ": rank 0 writes the checkpoints (as with --no-ckpt-fully-parallel-save)"
         << (config.async_save ? ", and not in the background (--async-save needs the parallel save)" : "") << "\n";
    config.async_save = false;
  }
  if (backend->device() == Device::kCPU) {
    check_host_memory("train", config, groups.coords.pp);
  } else if (config.save && !config.ckpt_fully_parallel_save && groups.rank() == 0) {
    check_save_memory(config, train::train_memory_plan(config, 0).total(),
                      backend::cuda_device_memory_total(cuda_device_for_rank(args, env.local_rank)),
                      host_available_bytes());
  }
  config.nccl_collectives = env.world_size > 1 && uses_nccl(args);
  train::Trainer trainer(config, *backend, std::cout, &groups);
  trainer.set_straggler_detector(straggler.get());
  if (config.log_energy || config.codecarbon_dir) {
    trainer.set_energy_counter(energy_counter(args, config, *backend, env, log0));
  }
  trainer.run();
  if (wandb) log0 << wandb_sync_note(*wandb, /*at_end=*/true);
  return 0;
}

}  // namespace megatron::cli
