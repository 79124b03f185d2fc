// `megatron preflight`: before a long job, measure what it will run on (cli/preflight_report.h).
// Every rank, after a barrier so that all measure together:
//   - GEMM: [N, N] x [N, N]^T in bf16 on a GPU (fp32 on the CPU), normal-distributed inputs (a
//     GPU draws more power on random bits than on constants, and may clock lower);
//   - device copy of a buffer (read + write bytes per second);
//   - per parallel group of the layout (--tensor-model-parallel-size, --pipeline-model-parallel-size,
//     the rest data parallel, Megatron's rank order) and the world: all-reduce and all-gather bus
//     bandwidth (NCCL's convention: all-reduce 2(n-1)/n x bytes / t, all-gather (n-1)/n x bytes
//     / t), the group's time being its slowest rank's; pipeline groups exchange with their ring
//     neighbours (bytes / t).
// Each is timed over --iterations repetitions after one untimed. Rank 0 prints the report: each
// kind's least value with its rank and host, median and greatest value, then whatever is more than
// --tolerance below its median (exit status 1 then, on every rank), then the `megatron plan` flags
// for this cluster's links.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/device.h"
#include "backend/ops.h"
#include "cli/args.h"
#include "cli/backend_choice.h"
#include "cli/commands.h"
#include "cli/flag_agreement.h"
#include "cli/preflight_report.h"
#include "comm/launch.h"
#include "comm/launch_env.h"
#include "comm/self_communicator.h"
#include "comm/watchdog.h"
#include "core/error.h"
#include "core/host_name.h"
#include "parallel/process_groups.h"

namespace megatron::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds per repetition of `work` on this rank (device work included), after one untimed
// repetition; every rank of `world` starts together.
template <class F>
double seconds_per(F&& work, int64_t iterations, backend::Backend& be, comm::Communicator& world) {
  work();
  be.synchronize();
  world.barrier();
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < iterations; ++i) work();
  be.synchronize();
  return std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(iterations);
}

// A collective measured on one kind of group: its bus bandwidth (GB/s, the same on every rank of
// a group instance) and the instance's lowest world rank (its key in the gathered table).
struct GroupMeasure {
  std::string what;
  double bus_gbps = 0.0;
  double key = 0.0;
};

}  // namespace

int run_preflight(const CommandArgs& argv) {
  Args args("preflight", "measure every GPU and every parallel group's links before a long job; name the slow ones");
  declare_device_flag(args);
  args.option("--nproc-per-node", "N", "start N local worker processes (torchrun's flag)")
      .option("--distributed-backend", "B", "nccl, or mpi / gloo (host-staged collectives)", "nccl")
      .option("--distributed-timeout-minutes", "M", "a collective waiting longer ends the job", "10")
      .option("--tensor-model-parallel-size", "T", "the layout whose groups are measured", "1")
      .option("--pipeline-model-parallel-size", "P", "the layout whose groups are measured", "1")
      .option("--gemm-size", "N", "GEMM [N, N] x [N, N] (default 8192 on a GPU, 256 on the CPU)")
      .option("--copy-size-mb", "M", "the copied buffer in MiB (default 1024 on a GPU, 32 on the CPU)")
      .option("--message-size-mb", "M", "each collective's buffer in MiB, fp32 (default 256 on a GPU, 8 on the CPU)")
      .option("--iterations", "N", "timed repetitions of each measurement", "10")
      .option("--tolerance", "F", "values more than F (a fraction) below their median are slow: exit status 1", "0.1")
      .flag("--json", "print the report as one JSON object (on rank 0) instead of the table");
  if (!args.parse(argv)) {
    std::cout << args.usage();
    return 0;
  }
  if (args.given("--nproc-per-node")) {
    return comm::spawn_local_workers(args.get_int("--nproc-per-node"), comm::worker_command("preflight", argv),
                                     uses_nccl(args));
  }
  const comm::LaunchEnv env = comm::detect_launch_env(comm::process_environment());
  const parallel::ParallelSizes sizes = parallel::parallel_sizes(
      env.world_size, args.get_int("--tensor-model-parallel-size"), args.get_int("--pipeline-model-parallel-size"));
  const int64_t iterations = args.get_int("--iterations");
  if (iterations < 1) throw_error("[--iterations] must be at least 1, got ", iterations);
  const double tolerance = args.get_double("--tolerance");
  if (!(tolerance >= 0.0 && tolerance <= 1.0)) throw_error("[--tolerance] must be within [0, 1], got ", tolerance);
  const std::chrono::milliseconds timeout =
      comm::timeout_from_minutes(args.get_double("--distributed-timeout-minutes"));

  std::ostream null_stream(nullptr);
  // With --json stdout holds the JSON object alone: the device line goes to stderr.
  std::ostream& log0 = env.rank != 0 ? null_stream : args.get_flag("--json") ? std::cerr : std::cout;
  const int device = static_cast<int>(cuda_device_for_rank(args, env.local_rank));
  std::unique_ptr<backend::Backend> be = make_backend(args, log0, device);
  const bool gpu = be->device() == Device::kCUDA;
  auto size_flag = [&](const char* flag, int64_t on_gpu, int64_t on_cpu) {
    const int64_t v = args.given(flag) ? args.get_int(flag) : gpu ? on_gpu : on_cpu;
    if (v < 1) throw_error("[", flag, "] must be at least 1, got ", v);
    return v;
  };
  const int64_t n = size_flag("--gemm-size", 8192, 256);
  const int64_t copy_bytes = size_flag("--copy-size-mb", 1024, 32) << 20;
  const int64_t message_bytes = size_flag("--message-size-mb", 256, 8) << 20;

  comm::RankConnection connection;
  if (env.world_size > 1) {
    connection = comm::connect_ranks(env, *be, timeout, host_collectives(args));
    if (!flags_agree_across_ranks(args, *connection.world)) return 1;
  } else {
    connection.world = std::make_unique<comm::SelfCommunicator>(*be, "world");
  }
  parallel::ProcessGroups groups = parallel::make_process_groups(std::move(connection.world), sizes);
  comm::Communicator& world = *groups.world;
  const std::vector<std::string> hosts = comm::all_gather_strings(world, host_name("unknown"));

  // This rank's GEMM and copy rates.
  const DType gemm_dtype = gpu ? DType::kBF16 : DType::kF32;
  double gemm_tflops = 0.0, copy_gbps = 0.0;
  {
    Tensor a = be->empty({n, n}, gemm_dtype, MemoryKind::kOther), b = be->empty({n, n}, gemm_dtype, MemoryKind::kOther);
    Tensor c = be->empty({n, n}, gemm_dtype, MemoryKind::kOther);
    be->init_normal(a, backend::NormalInit{1, 1, 1.0f, 0, n, n});
    be->init_normal(b, backend::NormalInit{1, 2, 1.0f, 0, n, n});
    const double s = seconds_per([&] { be->matmul(a, false, b, true, c, 1.0f, 0.0f); }, iterations, *be, world);
    gemm_tflops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / s / 1e12;
  }
  {
    Tensor x = be->empty({copy_bytes / 4}, DType::kF32, MemoryKind::kOther);
    Tensor y = be->empty({copy_bytes / 4}, DType::kF32, MemoryKind::kOther);
    const double s = seconds_per([&] { be->copy(x, y); }, iterations, *be, world);
    copy_gbps = 2.0 * static_cast<double>(copy_bytes) / s / 1e9;
  }

  // The collectives of each group kind with more than one rank (the world too when it is none of them).
  std::vector<GroupMeasure> measures;
  const std::string mib = std::to_string(message_bytes >> 20) + " MiB fp32";
  auto group_time = [&](comm::Communicator& g, double seconds) {
    return comm::all_reduce_scalar(g, seconds, comm::ReduceOp::kMax);  // the slowest rank's
  };
  auto group_key = [&](comm::Communicator& g) {
    return comm::all_reduce_scalar(g, static_cast<double>(world.rank()), comm::ReduceOp::kMin);
  };
  auto measure_reductions = [&](comm::Communicator& g, const std::string& name) {
    const double p = static_cast<double>(g.size()), bytes = static_cast<double>(message_bytes);
    Tensor buf = be->empty({message_bytes / 4}, DType::kF32, MemoryKind::kOther);
    be->fill(buf, 1.0f);
    double s = group_time(g, seconds_per([&] { g.all_reduce(buf, comm::ReduceOp::kSum); }, iterations, *be, world));
    measures.push_back({str_cat("all_reduce [", name, "] ", mib), 2.0 * (p - 1.0) / p * bytes / s / 1e9, group_key(g)});
    const int64_t piece = message_bytes / 4 / g.size();
    Tensor in = be->empty({piece}, DType::kF32, MemoryKind::kOther);
    Tensor out = be->empty({piece * g.size()}, DType::kF32, MemoryKind::kOther);
    s = group_time(g, seconds_per([&] { comm::all_gather(g, in, out); }, iterations, *be, world));
    measures.push_back({str_cat("all_gather [", name, "] ", mib),
                        (p - 1.0) / p * static_cast<double>(out.nbytes()) / s / 1e9, group_key(g)});
  };
  if (groups.tp->size() > 1) measure_reductions(*groups.tp, "tp");
  if (groups.dp->size() > 1) measure_reductions(*groups.dp, "dp");
  if (groups.pp->size() > 1) {
    comm::Communicator& pp = *groups.pp;
    Tensor send = be->empty({message_bytes / 4}, DType::kF32, MemoryKind::kOther);
    Tensor recv = be->empty({message_bytes / 4}, DType::kF32, MemoryKind::kOther);
    const int64_t next = (pp.rank() + 1) % pp.size(), prev = (pp.rank() + pp.size() - 1) % pp.size();
    const std::vector<comm::PointToPoint> ops = {{true, send, next}, {false, recv, prev}};
    const double s = group_time(pp, seconds_per([&] { pp.send_recv(ops); }, iterations, *be, world));
    measures.push_back({str_cat("send_recv [pp] ", mib), static_cast<double>(message_bytes) / s / 1e9, group_key(pp)});
  }
  const int64_t w = world.size();
  if (w > 1 && w != groups.tp->size() && w != groups.dp->size() && w != groups.pp->size()) {
    measure_reductions(world, "world");
  }

  // Rank 0 gathers every rank's values: [gemm, copy, then (bus GB/s, group key) per collective].
  const size_t fields = 2 + 2 * measures.size();
  std::vector<double> row = {gemm_tflops, copy_gbps};
  for (const GroupMeasure& m : measures) row.insert(row.end(), {m.bus_gbps, m.key});
  const std::vector<double> table = comm::all_gather_host(world, row);

  int64_t slow = 0;
  if (world.rank() == 0) {
    PreflightReport report;
    report.hosts = hosts;
    std::vector<std::string> distinct;
    for (const std::string& h : hosts) {
      if (std::find(distinct.begin(), distinct.end(), h) == distinct.end()) distinct.push_back(h);
    }
    report.header = str_cat("preflight: ", w, " rank(s) on ", distinct.size(), " host(s), ",
                            gpu ? backend::cuda_device_name(device) : std::string("CPU"), ", TP ", sizes.tp, " x PP ",
                            sizes.pp, " x DP ", sizes.dp, ", ", iterations, " timed repetitions of each");
    report.host_staged = gpu && host_collectives(args) && w > 1;
    if (report.host_staged) {
      report.header += str_cat("\n(--distributed-backend ", args.get_string("--distributed-backend"),
                               ": collectives are staged through host memory, so their bandwidths are the staging's, "
                               "not the GPU links')");
    }
    PreflightRow gemm{str_cat("GEMM ", gpu ? "bf16 " : "fp32 ", n, " x ", n, " x ", n), "TFLOP/s", false, {}};
    PreflightRow copy{str_cat("device copy ", copy_bytes >> 20, " MiB"), "GB/s", false, {}};
    for (int64_t r = 0; r < w; ++r) {
      gemm.values.push_back({{r}, table[static_cast<size_t>(r) * fields], false});
      copy.values.push_back({{r}, table[static_cast<size_t>(r) * fields + 1], false});
    }
    report.rows = {gemm, copy};
    for (size_t i = 0; i < measures.size(); ++i) {
      PreflightRow row{measures[i].what, "GB/s", true, {}};
      for (int64_t r = 0; r < w; ++r) {
        const size_t base = static_cast<size_t>(r) * fields + 2 + 2 * i;
        if (static_cast<int64_t>(table[base + 1]) != r) continue;  // one value per group, at its lowest rank
        PreflightValue v{{}, table[base], false};
        for (int64_t q = 0; q < w; ++q) {
          if (table[static_cast<size_t>(q) * fields + 3 + 2 * i] == static_cast<double>(r)) {
            v.ranks.push_back(q);
            v.across_nodes = v.across_nodes || hosts[static_cast<size_t>(q)] != hosts[static_cast<size_t>(r)];
          }
        }
        row.values.push_back(v);
      }
      report.rows.push_back(row);
    }
    const std::string table = format_preflight(report, tolerance, &slow);
    std::cout << (args.get_flag("--json") ? preflight_json(report, tolerance) : table) << std::flush;
  }
  const double any_slow = comm::all_reduce_scalar(world, static_cast<double>(slow), comm::ReduceOp::kMax);
  return any_slow > 0 ? 1 : 0;
}

}  // namespace megatron::cli
