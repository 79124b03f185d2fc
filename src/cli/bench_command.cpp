// megatron bench: the training step's speed and memory on synthetic tokens, with the numbers
// the NLP benchmark reports (tokens/s, report time = 20e6 / tokens_per_s) and Megatron's
// TFLOP/s per GPU and MFU under both FLOPs conventions. Takes any `megatron train` flag
// (shape, --model preset, batch, precision); data and tokenizer files are not needed.
// At the end it prints the benchmark's result table (cli/bench_table.h); --json adds the row's
// fields to its object, --csv prints the row as CSV instead, and `megatron bench --table
// a.json b.json ...` merges saved --json results into one table (text, or CSV with --csv).
// With --nproc-per-node N (or under torchrun / mpirun / srun) every rank runs the same steps
// as one rank of a data- and tensor-parallel job (--tensor-model-parallel-size, the rest data
// parallel; gradients reduced over DP as `megatron train` does) and rank 0 reports: tokens/s
// of the whole job, TFLOP/s per GPU over all ranks, its own memory, and the real layout in the
// table (nodes = ranks / ranks per node, TP, PP, DP). Rank 0 reports: with pipeline
// parallelism its memory is the first stage's and its loss 0 (the loss lives on the last).
// `megatron bench --sweep KEY=V,... [--dry-run]` runs (or, with --dry-run, plans) a matrix of
// configurations (cli/bench_sweep_command.cpp).
// --profile-ops wraps the backend in a ProfilingBackend (backend/profiling_backend.h) and
// prints where the timed iterations spent their time, per op and per GEMM shape.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/attention_impl.h"
#include "backend/device.h"
#include "backend/gpu_telemetry.h"
#include "backend/ops.h"
#include "backend/profiling_backend.h"
#include "cli/args.h"
#include "cli/backend_choice.h"
#include "cli/bench_table.h"
#include "cli/commands.h"
#include "cli/flag_agreement.h"
#include "cli/host_memory.h"
#include "cli/train_args.h"
#include "comm/launch.h"
#include "comm/launch_env.h"
#include "comm/profiled_communicator.h"
#include "comm/self_communicator.h"
#include "comm/watchdog.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/rng.h"
#include "model/gpt_model.h"
#include "model/memory_plan.h"
#include "optim/loss_scaler.h"
#include "parallel/data_parallel_setup.h"
#include "parallel/optimizer.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/process_groups.h"
#include "train/config.h"
#include "train/flops.h"
#include "train/micro_batch_documents.h"
#include "train/sub_configs.h"
#include "train/train_step.h"

namespace megatron::cli {

namespace {

// What cuDNN runs for this job's attention (one TP rank's heads, the step's micro-batch): its
// version, the engines chosen forward and backward with their numerical notes and workspace,
// or why cuDNN does not take the case. For --profile-ops, beside the attention rows.
std::string cudnn_attention_text(const train::TrainConfig& c, backend::Backend& cuda_backend, DType dtype) {
  const model::GPTConfig& m = c.model;
  backend::AttentionParams a;
  a.heads = m.num_attention_heads / c.tensor_model_parallel_size;
  a.query_groups = m.query_groups() / c.tensor_model_parallel_size;
  a.head_dim = m.kv_channels;
  a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(m.kv_channels));
  a.dropout.p = m.attention_dropout;
  a.dropout_heads = m.num_attention_heads;
  try {
    return backend::describe_cudnn_attention(cuda_backend, dtype, m.seq_length, c.micro_batch_size, a);
  } catch (const Error& e) {
    return e.what();
  }
}

// Dense bf16 tensor-core peak (TFLOP/s) by device name; 0 when unknown.
double peak_tflops(const std::string& name) {
  struct Row {
    const char* key;
    double tflops;
  };
  static const Row kPeaks[] = {{"H200", 989.0}, {"H100", 989.0}, {"H800", 989.0},  {"GH200", 989.0},
                               {"A100", 312.0}, {"A800", 312.0}, {"B200", 2250.0}, {"L40S", 362.0}};
  for (const Row& r : kPeaks) {
    if (name.find(r.key) != std::string::npos) return r.tflops;
  }
  return 0.0;
}

// The bench line on recorded work: how often the step ran from a recording, or why it stopped.
std::string recorded_work_text(const model::GPTModel& model) {
  if (!model.recording_failure().empty()) return "stopped: " + model.recording_failure();
  return std::to_string(model.replays()) + " runs from a recording";
}

// megatron bench --table FILE... [--csv]
int run_bench_table(const CommandArgs& argv) {
  Args args("bench --table", "merge `megatron bench --json` results into the benchmark's table");
  args.list("--table", "FILE", "result files (one JSON object per line)", 0, true)
      .flag("--csv", "print CSV instead of the text table");
  if (!args.parse(argv)) {
    std::cout << args.usage();
    return 0;
  }
  std::vector<BenchRow> rows;
  for (const std::string& path : args.get_list("--table")) {
    for (const BenchRow& r : read_bench_rows(path)) rows.push_back(r);
  }
  std::cout << (args.get_flag("--csv") ? format_bench_csv(rows) : format_bench_table(rows)) << std::flush;
  return 0;
}

}  // namespace

int run_bench(const CommandArgs& argv_in) {
  for (const std::string& a : argv_in) {
    if (a == "--table" || a.rfind("--table=", 0) == 0) return run_bench_table(argv_in);
    if (a == "--sweep" || a.rfind("--sweep=", 0) == 0) return run_bench_sweep(argv_in);
  }
  Args args("bench", "training-step throughput and memory on synthetic tokens");
  declare_train_flags(args);
  declare_device_flag(args);
  args.option("--bench-iters", "N", "timed iterations", "20")
      .option("--warmup-iters", "N", "untimed iterations first", "5")
      .flag("--json", "print one JSON object instead of the table")
      .flag("--csv", "print the benchmark result row as CSV (header + one line) instead of the table")
      .list("--table", "FILE", "merge saved --json results into one table (no run)")
      .list("--sweep", "KEY=V,...",
            "run a matrix of configurations (tp, pp, dp, mbs, gbs, recompute, sp, dist-opt, "
            "model, layers, hidden, heads, seq); with --dry-run only plan them")
      .flag("--profile-ops",
            "time every backend op of the timed iterations (CUDA events on a GPU, host clock on the CPU) and "
            "print the time per op and per GEMM shape");
  // Benchmarks need no data, tokenizer or schedule: fill what train requires.
  CommandArgs argv = argv_in;
  auto absent = [&](const char* flag) {
    for (const std::string& a : argv) {
      if (a == flag || a.rfind(std::string(flag) + "=", 0) == 0) return false;
    }
    return true;
  };
  if (absent("--train-iters") && absent("--train-samples")) argv.insert(argv.end(), {"--train-iters", "1000000"});
  if (absent("--lr")) argv.insert(argv.end(), {"--lr", "1e-4"});
  if (absent("--dry-run")) argv.push_back("--dry-run");  // no --data-path / --vocab-file needed
  if (!args.parse(argv)) {
    std::cout << args.usage();
    return 0;
  }
  if (args.given("--nproc-per-node")) {
    return comm::spawn_local_workers(args.get_int("--nproc-per-node", 1, kMaxLocalWorkers),
                                     comm::worker_command("bench", argv), uses_nccl(args));
  }
  // One rank of a data / tensor parallel job when a launcher started several: every rank
  // runs the same steps; rank 0 reports.
  const comm::LaunchEnv env = comm::detect_launch_env(comm::process_environment());
  const int64_t world = env.world_size;
  train::TrainConfig c;
  try {
    c = parse_train_config(args, world, nullptr);
    host_collectives(args);  // a bad --distributed-backend is rank 0's one line too
  } catch (const Error&) {
    if (env.rank != 0) {
      comm::let_rank0_report_first();  // as `megatron train`: rank 0 prints the one line
      return 1;
    }
    throw;
  }
  if (env.rank == 0) {
    // Flags of `megatron train`'s loop that the benchmark's own loop does not have.
    for (const char* flag : {"--log-straggler", "--log-progress", "--check-weight-hash-across-dp-replicas-interval",
                             "--profile", "--save", "--load"}) {
      if (args.given(flag)) std::cerr << "warning: [" << flag << "] is a `megatron train` flag; bench ignores it\n";
    }
  }
  const int64_t vocab = vocab_size_without_files(c);
  c.model.vocab_size = vocab;
  c.model.padded_vocab_size =
      model::padded_vocab_size(vocab, c.make_vocab_size_divisible_by, c.tensor_model_parallel_size);
  // Up to 2^31 - 1 iterations each (their sum is a loop bound).
  const int64_t iters = args.get_int("--bench-iters", 1, kMaxDimension);
  const int64_t warmup = args.get_int("--warmup-iters", 0, kMaxDimension);
  const bool json = args.get_flag("--json"), csv = args.get_flag("--csv");
  if (json && csv) throw_error("[--csv] give --json or --csv, not both");
  std::ostream null_stream(nullptr);
  const bool reporter = env.rank == 0;
  std::ostream& log = !reporter ? null_stream : json || csv ? std::cerr : std::cout;

  if (uses_cuda(args)) {
    if (const std::string problem = cuda_attention_problem(c); !problem.empty()) throw_error(problem);
  }
  const int device_index = static_cast<int>(cuda_device_for_rank(args, env.local_rank));
  std::unique_ptr<backend::Backend> be = make_backend(args, log, device_index);
  log << host_collectives_note(args, comm::ranks_per_node(comm::process_environment(), world));
  // The connection to the other ranks outlives the groups split from it.
  comm::RankConnection connection;
  std::unique_ptr<comm::Communicator> world_comm;
  c.nccl_collectives = world > 1 && uses_nccl(args);
  if (world > 1) {
    connection = comm::connect_ranks(env, *be, comm::timeout_from_minutes(c.distributed_timeout_minutes),
                                     host_collectives(args));
    if (!flags_agree_across_ranks(args, *connection.world)) return 1;
    world_comm = std::move(connection.world);
  } else {
    world_comm = std::make_unique<comm::SelfCommunicator>(*be, "world");
  }
  // The model and optimizer are built on the wrapper so that every op they issue is seen;
  // timing is switched on for the timed iterations only. With several ranks the groups' collectives
  // are timed too, as rows of the same table (comm/profiled_communicator.h).
  backend::ProfilingBackend* profiler = nullptr;
  if (args.get_flag("--profile-ops")) {
    auto wrapped = std::make_unique<backend::ProfilingBackend>(std::move(be));
    wrapped->set_enabled(false);
    profiler = wrapped.get();
    be = std::move(wrapped);
    if (world > 1) world_comm = std::make_unique<comm::ProfiledCommunicator>(std::move(world_comm), *profiler);
  }
  parallel::ProcessGroups groups = parallel::make_process_groups(
      std::move(world_comm),
      parallel::parallel_sizes(world, c.tensor_model_parallel_size, c.pipeline_model_parallel_size));
  const DType dtype = train::model_dtype(c);
  const int64_t mbs = c.micro_batch_size, s = c.model.seq_length, gbs = c.global_batch_size;
  const int64_t num_micro = c.num_microbatches();  // at --global-batch-size: the bench times no ramp
  const bool cuda = be->device() == Device::kCUDA;
  if (!cuda) {
    check_host_memory("bench", c, groups.coords.pp);
  }
  const int64_t used_before = cuda ? backend::cuda_device_memory_used(device_index) : 0;
  memory_tracker(be->device()).reset_peak();

  const auto t_start = std::chrono::steady_clock::now();
  model::TensorParallelOptions tp;
  tp.group = groups.tp.get();
  tp.sequence_parallel = c.sequence_parallel;
  const parallel::DataParallelFlags dp_flags = train::data_parallel_flags(c);
  const bool copy_engine = parallel::prepare_copy_engine(dp_flags, groups);
  model::GPTModel model(c.model, *be, dtype, mbs, tp, train::pipeline_stage(c, groups.coords.pp), dp_flags.grad_dtype);
  model.parameters().initialize(*be, static_cast<uint64_t>(c.seed), c.model.init_method_std, c.model.num_layers);
  parallel::OptimizerConfig oc;
  oc.clip_grad = c.clip_grad;
  optim::GradScaler scaler = optim::GradScaler::constant(c.fp16 ? 4096.0f : 1.0f);
  // The same data-parallel reduction as `megatron train` (buckets, --overlap-*).
  parallel::MixedPrecisionOptimizer opt(model.parameters(), *be, oc, std::move(scaler),
                                        parallel::data_parallel_options(dp_flags, groups, model));
  log << parallel::copy_engine_text(copy_engine, dp_flags, opt);
  parallel::connect_overlap_hooks(dp_flags, model, opt);
  // Synthetic tokens (ids of the vocabulary), a fresh batch per micro-batch slot, fixed across
  // iterations.
  std::vector<model::MicroBatch> batches(static_cast<size_t>(num_micro));
  for (int64_t k = 0; k < num_micro; ++k) {
    model::MicroBatch& mb = batches[static_cast<size_t>(k)];
    // This DP rank's slice: the single process's micro-batch k * dp + dp_rank (TP ranks share it).
    const int64_t sample0 = (k * c.data_parallel_size + groups.coords.dp) * mbs;
    mb.batch = mbs;
    mb.seq = s;
    for (int64_t i = 0; i < mbs * s; ++i) {
      const auto draw = [&](uint64_t stream) {
        return static_cast<int32_t>(
            philox_uniform(static_cast<uint64_t>(c.seed), stream, static_cast<uint64_t>(sample0 * s + i)) *
            static_cast<float>(vocab));
      };
      mb.tokens.push_back(std::min<int32_t>(draw(1), static_cast<int32_t>(vocab - 1)));
      mb.labels.push_back(std::min<int32_t>(draw(2), static_cast<int32_t>(vocab - 1)));
      mb.loss_mask.push_back(1.0f);
    }
    // --reset-position-ids / --reset-attention-mask: uniform ids hold almost no end of document
    // (the last id), so each row is about one document: the masked attention's slowest case.
    train::mark_documents(c.model, vocab - 1, &mb);
  }
  // The step runs the pipeline schedule as `megatron train` does (one stage: forward k,
  // backward k, the loss head's backward right after each loss).
  parallel::connect_pipeline_neighbours(groups, c.virtual_pipeline_chunks() > 1);
  const parallel::PipelineShape shape{c.pipeline_model_parallel_size, groups.coords.pp, num_micro,
                                      c.virtual_pipeline_chunks(), /*forward_only=*/false};
  const std::vector<parallel::PipelineAction> table = parallel::pipeline_schedule(shape);
  be->synchronize();
  const double setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();

  double timed = 0.0;
  float loss = 0.0f;
  // The GPU's clock and power over the timed iterations, every 20 ms (NVML; none without it).
  std::unique_ptr<backend::TelemetrySampler> telemetry;
  std::string telemetry_missing;
  for (int64_t it = 0; it < warmup + iters; ++it) {
    be->synchronize();
    groups.world->barrier();
    if (profiler != nullptr && it == warmup) {
      profiler->reset();
      profiler->set_enabled(true);
    }
    if (cuda && it == warmup) telemetry = backend::start_telemetry(device_index, 20, &telemetry_missing);
    const auto t0 = std::chrono::steady_clock::now();
    // The step of `megatron train` (train/train_step.h) on the synthetic batches.
    train::TrainStepInputs in;
    in.table = &table;
    in.num_micro = num_micro;
    in.iteration = it;
    in.grad_scale = 1.0f / static_cast<float>(num_micro);
    in.lr = 1e-4f;
    in.weight_decay = 0.01f;
    in.load = [&](int64_t k, model::MicroBatch* mb) { *mb = batches[static_cast<size_t>(k)]; };
    // The mean micro-batch loss (on the last stage; 0 on the others).
    loss = static_cast<float>(train::train_step(train::step_flags(c), model, opt, groups, in).loss_sum /
                              static_cast<double>(num_micro));
    be->synchronize();
    groups.world->barrier();  // the iteration ends when the slowest rank's does
    if (it >= warmup) timed += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double per_iter = timed / static_cast<double>(iters);
  const backend::TelemetrySummary gpu = telemetry ? telemetry->stop() : backend::TelemetrySummary{};
  backend::OpProfile op_profile;
  if (profiler != nullptr) {
    profiler->set_enabled(false);
    op_profile = profiler->report();
  }
  const double tokens_per_s = static_cast<double>(gbs) * static_cast<double>(s) / per_iter;
  const double f2025 = train::flops_per_iteration(c.model, gbs, train::FlopsConvention::k2025);
  const double f2024 = train::flops_per_iteration(c.model, gbs, train::FlopsConvention::k2024);
  // Per GPU: the job's FLOPs over all ranks.
  const double tf2025 = f2025 / per_iter / 1e12 / static_cast<double>(world);
  const double tf2024 = f2024 / per_iter / 1e12 / static_cast<double>(world);
  if (!reporter) return 0;
  const std::string device_name = cuda ? backend::cuda_device_name(device_index) : "cpu";
  const double peak = cuda ? peak_tflops(device_name) : 0.0;
  const MemorySnapshot mem = memory_tracker(be->device()).snapshot();
  const int64_t device_used = cuda ? backend::cuda_device_memory_used(device_index) - used_before : 0;
  // This rank's planned bytes (TP shards, distributed optimizer), and the whole model's size.
  model::MemoryPlan plan = train::train_memory_plan(c, groups.coords.pp);
  plan.copy_engine = parallel::copy_engine_plan_bytes(opt);  // the receive buffer, when the copy engines are on
  const int64_t model_parameters = model::plan_memory(c.model, dtype, mbs).num_parameters;
  const double report_time = 20e6 / tokens_per_s;
  // The layout the ranks ran.
  BenchRow row;
  row.model_size_b = static_cast<double>(model_parameters) / 1e9;
  row.gpus_per_node = comm::ranks_per_node(comm::process_environment(), world);
  row.nodes = world / row.gpus_per_node;
  row.tp = c.tensor_model_parallel_size;
  row.pp = c.pipeline_model_parallel_size;
  row.dp = c.data_parallel_size;
  row.global_batch = gbs;
  row.micro_batch = mbs;
  row.tokens_per_s = tokens_per_s;
  row.report_time_s = report_time;
  row.tflops_per_gpu = c.flops_convention == train::FlopsConvention::k2025 ? tf2025 : tf2024;
  row.memory_per_gpu_bytes = static_cast<double>(cuda ? device_used : plan.total());
  if (csv) {
    std::cout << format_bench_csv({row}) << std::flush;
    return 0;
  }

  char buf[2048];
  if (json) {
    std::snprintf(buf, sizeof(buf),
                  "{\"device\": \"%s\", \"layers\": %lld, \"hidden\": %lld, \"heads\": %lld, \"seq\": %lld, "
                  "\"micro_batch\": %lld, \"global_batch\": %lld, \"dtype\": \"%s\", \"params\": %lld, "
                  "\"ms_per_iter\": %.3f, \"tokens_per_s\": %.1f, \"tflops_2025\": %.2f, \"tflops_2024\": %.2f, "
                  "\"mfu_2025\": %.4f, \"mfu_2024\": %.4f, \"planned_bytes\": %lld, \"peak_tracked_bytes\": %lld, "
                  "\"device_bytes\": %lld, \"report_time_s\": %.2f, \"setup_s\": %.2f, \"loss\": %.4f",
                  device_name.c_str(), static_cast<long long>(c.model.num_layers),
                  static_cast<long long>(c.model.hidden_size), static_cast<long long>(c.model.num_attention_heads),
                  static_cast<long long>(s), static_cast<long long>(mbs), static_cast<long long>(gbs),
                  std::string(dtype_name(dtype)).c_str(), static_cast<long long>(model_parameters), per_iter * 1e3,
                  tokens_per_s, tf2025, tf2024, peak > 0 ? tf2025 / peak : 0.0, peak > 0 ? tf2024 / peak : 0.0,
                  static_cast<long long>(plan.total()), static_cast<long long>(mem.peak_total),
                  static_cast<long long>(device_used), report_time, setup_s, static_cast<double>(loss));
    std::string out = buf;
    out += ", " + bench_row_json_fields(row);
    out += ", \"recorded_runs\": " + std::to_string(model.replays());
    if (gpu.samples > 0) {
      std::snprintf(buf, sizeof(buf),
                    ", \"gpu_samples\": %lld, \"sm_clock_median_mhz\": %.0f, \"sm_clock_max_mhz\": %.0f, "
                    "\"power_median_w\": %.1f, \"power_limit_w\": %.1f, \"power_capped_fraction\": %.3f, "
                    "\"thermal_capped_fraction\": %.3f",
                    static_cast<long long>(gpu.samples), gpu.sm_clock_median_mhz, gpu.sm_clock_max_mhz,
                    gpu.power_median_w, gpu.power_limit_w, gpu.power_capped, gpu.thermal_capped);
      out += buf;
    }
    if (profiler != nullptr) {
      out += ", \"op_profile_clock\": " + backend::profile_json_string(op_profile.clock) +
             ", \"op_profile\": " + backend::op_profile_json_ops(op_profile, iters, per_iter * 1e3) +
             ", \"op_profile_gemms\": " + backend::op_profile_json_gemms(op_profile, iters, per_iter * 1e3);
    }
    std::cout << out << "}\n" << std::flush;
    return 0;
  }
  std::snprintf(buf, sizeof(buf),
                " > bench: %s, %lld layers, hidden %lld, %lld heads, seq %lld, micro-batch %lld, global batch %lld, "
                "%s, %lld parameters\n"
                "    ms per iteration            %10.2f   (%lld timed after %lld warm-up)\n"
                "    tokens per second           %10.0f\n"
                "    TFLOP/s per GPU (2025 / 2024 convention)  %8.1f / %.1f\n"
                "    MFU (2025 / 2024, peak %.0f TFLOP/s)       %7.1f%% / %.1f%%\n"
                "    memory: planned %.2f GiB, tracked peak %.2f GiB, device in use %.2f GiB\n"
                "    report time (20e6 tokens)   %10.1f s\n"
                "    setup (model, optimizer)    %10.2f s; last loss %.4f\n",
                device_name.c_str(), static_cast<long long>(c.model.num_layers),
                static_cast<long long>(c.model.hidden_size), static_cast<long long>(c.model.num_attention_heads),
                static_cast<long long>(s), static_cast<long long>(mbs), static_cast<long long>(gbs),
                std::string(dtype_name(dtype)).c_str(), static_cast<long long>(model_parameters), per_iter * 1e3,
                static_cast<long long>(iters), static_cast<long long>(warmup), tokens_per_s, tf2025, tf2024, peak,
                peak > 0 ? 100 * tf2025 / peak : 0.0, peak > 0 ? 100 * tf2024 / peak : 0.0,
                static_cast<double>(plan.total()) / (1 << 30), static_cast<double>(mem.peak_total) / (1 << 30),
                static_cast<double>(device_used) / (1 << 30), report_time, setup_s, static_cast<double>(loss));
  std::cout << buf;
  std::cout << "    recorded work (CUDA graphs)  " << recorded_work_text(model) << '\n';
  if (gpu.samples > 0) {
    std::cout << "    GPU during the timed steps   " << backend::describe_telemetry(gpu) << '\n';
  } else if (cuda) {
    std::cout << "    GPU during the timed steps   not sampled: "
              << (telemetry_missing.empty() ? std::string("the steps ended before the first sample")
                                            : telemetry_missing)
              << '\n';
  }
  if (profiler != nullptr) {
    std::cout << backend::format_op_profile(op_profile, iters, per_iter * 1e3);
    if (cuda)
      std::cout << "    attention on cuDNN           " << cudnn_attention_text(c, profiler->inner(), dtype) << '\n';
  }
  std::cout << " > benchmark result (TFLOP/s/GPU: "
            << (c.flops_convention == train::FlopsConvention::k2025 ? "2025" : "2024")
            << " convention; memory: " << (cuda ? "device memory in use" : "planned") << "):\n"
            << format_bench_table({row}) << std::flush;
  return 0;
}

}  // namespace megatron::cli
