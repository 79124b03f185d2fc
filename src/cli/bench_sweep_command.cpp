// megatron bench --sweep KEY=V[,V...] ... [--dry-run] [--gpu NAME] [--json | --csv] [bench flags]
//
// Runs `megatron bench` once per point of the matrix (cli/bench_sweep.h) and prints, per
// configuration, the iteration latency (ms) and memory per GPU (docs/benchmarking.md, "Sweeps"),
// then the benchmark's result table (cli/bench_table.h) of the configurations that produced
// numbers.
//  - Every point is checked first: its flags must parse (the model shape, batch, recompute) and
//    its layout must be valid (plan::validate_layout: divisibility, SP, batch); otherwise it is
//    listed as skipped with the one-line reason.
//  - --dry-run: nothing runs; each valid point gets the planner's memory per GPU and predicted
//    latency / tokens/s / TFLOP/s on --gpu (default h100-80gb; 8 GPUs per node), so the whole
//    matrix can be produced without GPUs.
//  - Otherwise each runnable point runs as a child `megatron bench ... --json` (a fresh process:
//    its memory, and a crash, stay its own), with `--nproc-per-node dp*tp*pp` when it has more
//    than one rank; the prediction is kept alongside. Not runnable, and listed as skipped with
//    the reason: more ranks than this machine has GPUs ("does not fit on N GPUs"; CPU ranks:
//    its cores).
// --json prints one JSON object per configuration (`megatron bench --table` reads them back,
// passing over the skipped ones); --csv one CSV line per configuration.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend/device.h"
#include "cli/args.h"
#include "cli/backend_choice.h"
#include "cli/bench_sweep.h"
#include "cli/bench_table.h"
#include "cli/commands.h"
#include "cli/train_args.h"
#include "comm/launch.h"
#include "comm/mpirun.h"
#include "core/error.h"
#include "core/json_writer.h"
#include "plan/search.h"
#include "train/config.h"

namespace megatron::cli {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// The value of `flag` in argv ("--flag v" or "--flag=v"), if given.
std::optional<std::string> flag_value(const std::vector<std::string>& argv, const std::string& flag) {
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == flag && i + 1 < argv.size()) return argv[i + 1];
    if (argv[i].rfind(flag + "=", 0) == 0) return argv[i].substr(flag.size() + 1);
  }
  return std::nullopt;
}

bool has_flag(const std::vector<std::string>& argv, const std::string& flag) {
  for (const std::string& a : argv) {
    if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
  }
  return false;
}

// argv without `flags` (and the value after each valued one; switches take none).
std::vector<std::string> without(const std::vector<std::string>& argv, const std::vector<std::string>& flags) {
  static const std::vector<std::string> kSwitches = {"--sequence-parallel", "--use-distributed-optimizer",
                                                     "--recompute-activations"};
  std::vector<std::string> out;
  for (size_t i = 0; i < argv.size(); ++i) {
    bool drop = false;
    for (const std::string& f : flags) {
      if (argv[i] == f) {
        drop = true;
        const bool is_switch = std::find(kSwitches.begin(), kSwitches.end(), f) != kSwitches.end();
        if (!is_switch) ++i;
      } else if (argv[i].rfind(f + "=", 0) == 0) {
        drop = true;
      }
      if (drop) break;
    }
    if (!drop) out.push_back(argv[i]);
  }
  return out;
}

struct SweepResult {
  std::string name;
  plan::ParallelConfig layout;
  std::string status;  // "measured", "predicted" or "skipped"
  std::string reason;  // why skipped
  BenchRow row;        // measured or predicted numbers
  bool fits = false;   // planned memory fits --gpu
  double predicted_ms = 0, planned_bytes = 0;
};

// The bench Args, so that the base flags parse exactly as `megatron bench` parses them.
train::TrainConfig parse_point_config(const std::vector<std::string>& model_argv) {
  Args args("bench", "");
  declare_train_flags(args);
  declare_device_flag(args);
  args.option("--bench-iters", "N", "", "20").option("--warmup-iters", "N", "", "5").flag("--profile-ops", "");
  std::vector<std::string> argv = model_argv;
  if (!has_flag(argv, "--train-iters") && !has_flag(argv, "--train-samples")) {
    argv.insert(argv.end(), {"--train-iters", "1000000"});
  }
  if (!has_flag(argv, "--lr")) argv.insert(argv.end(), {"--lr", "1e-4"});
  argv.push_back("--dry-run");
  args.parse(argv);
  return parse_train_config(args, 1, nullptr);
}

plan::Cluster cluster_for(const plan::GpuSpec& gpu, int64_t world) {
  plan::Cluster cl;
  cl.gpu = gpu;
  cl.gpus_per_node = world <= 8 || world % 8 != 0 ? world : 8;
  cl.nodes = world / cl.gpus_per_node;
  return cl;
}

// Runs `megatron bench <argv> --json` and reads its result line.
BenchRow run_child(const std::vector<std::string>& argv, std::string& error) {
  std::vector<std::string> words = {comm::self_executable(), "bench"};
  words.insert(words.end(), argv.begin(), argv.end());
  words.push_back("--json");
  const std::string command = comm::shell_join(words);
  std::cerr << " > sweep: " << command << "\n";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) throw_error("[--sweep] cannot start '", command, "': ", errno_string(errno));
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) out.append(buf, n);
  const int status = pclose(pipe);
  // The result is the last line that is a JSON object (mpirun and the ranks may print more).
  size_t start = std::string::npos;
  for (size_t at = 0; at < out.size();) {
    if (out[at] == '{') start = at;
    const size_t eol = out.find('\n', at);
    if (eol == std::string::npos) break;
    at = eol + 1;
  }
  if (status != 0 || start == std::string::npos) {
    error = str_cat("bench exited with status ", status, " (its messages are above)");
    return {};
  }
  return parse_bench_row(out.substr(start, out.find('\n', start) - start), "bench --json");
}

std::string json_line(const SweepResult& r) {
  JsonWriter w(0);
  w.begin_object();
  w.key("case").value(r.name);
  w.key("status").value(r.status);
  if (!r.reason.empty()) w.key("reason").value(r.reason);
  w.key("data_parallel_size").value(r.layout.dp);
  w.key("tensor_model_parallel_size").value(r.layout.tp);
  w.key("pipeline_model_parallel_size").value(r.layout.pp);
  w.key("micro_batch").value(r.layout.micro_batch);
  w.key("global_batch").value(r.layout.global_batch);
  w.key("recompute").value(plan::recompute_name(r.layout.recompute));
  w.key("sequence_parallel").value(r.layout.sequence_parallel);
  w.key("use_distributed_optimizer").value(r.layout.distributed_optimizer);
  if (r.status != "skipped") {
    const BenchRow& b = r.row;
    w.key("ms_per_iter").value(b.ms_per_iteration);
    w.key("memory_per_gpu_bytes").value(b.memory_per_gpu_bytes);
    w.key("memory_per_gpu_mib").value(b.memory_per_gpu_bytes / kMiB);
    w.key("tokens_per_s").value(b.tokens_per_s);
    w.key("report_time_s").value(b.report_time_s);
    w.key("tflops_per_gpu").value(b.tflops_per_gpu);
    w.key("model_size_b").value(b.model_size_b);
    w.key("nodes").value(b.nodes);
    w.key("gpus_per_node").value(b.gpus_per_node);
    w.key("fits").value(r.fits);
    w.key("predicted_ms_per_iter").value(r.predicted_ms);
    w.key("planned_memory_per_gpu_bytes").value(r.planned_bytes);
  }
  w.end_object();
  return w.take();
}

std::string csv(const std::vector<SweepResult>& results) {
  std::string out =
      "case,status,data_parallel,tensor_parallel,pipeline_parallel,micro_batch,batch_size,recompute,ms_per_iter,"
      "memory_per_gpu_mib,tokens_per_s,report_time_s,tflops_per_gpu,predicted_ms_per_iter,reason\n";
  for (const SweepResult& r : results) {
    const plan::ParallelConfig& p = r.layout;
    const bool numbers = r.status != "skipped";
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%s,%s,%lld,%lld,%lld,%lld,%lld,%s,", r.name.c_str(), r.status.c_str(),
                  static_cast<long long>(p.dp), static_cast<long long>(p.tp), static_cast<long long>(p.pp),
                  static_cast<long long>(p.micro_batch), static_cast<long long>(p.global_batch),
                  plan::recompute_name(p.recompute));
    out += buf;
    if (numbers) {
      std::snprintf(buf, sizeof(buf), "%.2f,%.1f,%.1f,%.2f,%.2f,%.2f,", r.row.ms_per_iteration,
                    r.row.memory_per_gpu_bytes / kMiB, r.row.tokens_per_s, r.row.report_time_s, r.row.tflops_per_gpu,
                    r.predicted_ms);
      out += buf;
    } else {
      out += ",,,,,,";
    }
    std::string reason = r.reason;
    for (char& c : reason) c = c == '"' ? '\'' : c;
    out += reason.empty() ? "\n" : "\"" + reason + "\"\n";
  }
  return out;
}

std::string text_table(const std::vector<SweepResult>& results) {
  std::string out =
      "| case | DP x TP x PP | MBS | GBS | recompute | status | ms/iter | memory/GPU [MiB] | fits | tokens/s | "
      "TFLOP/s/GPU | predicted ms/iter | note |\n"
      "| --- | --- | ---: | ---: | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | --- |\n";
  for (const SweepResult& r : results) {
    const plan::ParallelConfig& p = r.layout;
    char buf[512];
    std::snprintf(buf, sizeof(buf), "| %s | %lld x %lld x %lld | %lld | %lld | %s | %s |", r.name.c_str(),
                  static_cast<long long>(p.dp), static_cast<long long>(p.tp), static_cast<long long>(p.pp),
                  static_cast<long long>(p.micro_batch), static_cast<long long>(p.global_batch),
                  plan::recompute_name(p.recompute), r.status.c_str());
    out += buf;
    if (r.status != "skipped") {
      std::snprintf(buf, sizeof(buf), " %.1f | %.0f | %s | %.0f | %.1f | %.1f |", r.row.ms_per_iteration,
                    r.row.memory_per_gpu_bytes / kMiB, r.fits ? "yes" : "NO", r.row.tokens_per_s, r.row.tflops_per_gpu,
                    r.predicted_ms);
      out += buf;
    } else {
      out += " | | | | | |";
    }
    out += " " + r.reason + " |\n";
  }
  return out;
}

}  // namespace

int run_bench_sweep(const CommandArgs& argv_in) {
  // Split the command line: the tokens after --sweep (up to the next --flag) are the matrix;
  // --dry-run, --gpu, --json and --csv belong to the sweep; the rest is every point's base.
  std::vector<std::string> tokens, base;
  bool dry_run = false, json = false, want_csv = false;
  std::string gpu_name = "h100-80gb";
  for (size_t i = 0; i < argv_in.size(); ++i) {
    const std::string& a = argv_in[i];
    if (a == "--sweep" || a.rfind("--sweep=", 0) == 0) {
      if (a != "--sweep") tokens.push_back(a.substr(8));
      while (i + 1 < argv_in.size() && argv_in[i + 1].rfind("--", 0) != 0) tokens.push_back(argv_in[++i]);
    } else if (a == "--dry-run") {
      dry_run = true;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--csv") {
      want_csv = true;
    } else if (a == "--gpu") {
      if (i + 1 >= argv_in.size()) throw_error("[--gpu] expected a value");
      gpu_name = argv_in[++i];
    } else {
      base.push_back(a);
    }
  }
  if (json && want_csv) throw_error("[--csv] give --json or --csv, not both");
  if (has_flag(base, "--nproc-per-node")) throw_error("[--nproc-per-node] give dp=... in --sweep instead");
  const plan::GpuSpec& gpu = plan::find_gpu(gpu_name);
  const std::vector<SweepAxis> axes = parse_sweep(tokens);
  for (const SweepAxis& axis : axes) {
    for (const std::string& flag : sweep_key_flags(axis.key)) {
      if (has_flag(base, flag)) throw_error("[--sweep] ", axis.key, " is swept; drop ", flag);
    }
  }
  const std::vector<std::string> parallel_flags = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                                                   "--micro-batch-size",           "--global-batch-size",
                                                   "--sequence-parallel",          "--use-distributed-optimizer"};
  const std::string device = flag_value(base, "--device").value_or("auto");
  const int gpus = device == "cpu" ? 0 : backend::cuda_device_count();
  const int64_t ranks = gpus > 0 ? gpus : std::max<int64_t>(1, std::thread::hardware_concurrency());

  std::vector<SweepResult> results;
  for (const SweepPoint& point : expand_sweep(axes)) {
    std::vector<std::string> merged = base;
    const std::vector<std::string> point_flags = sweep_point_flags(point);
    merged.insert(merged.end(), point_flags.begin(), point_flags.end());
    auto int_of = [&](const char* key, const char* flag, int64_t fallback) {
      if (point.count(key)) return parse_int(point.at(key), "--sweep");
      if (const auto v = flag_value(base, flag)) return parse_int(*v, flag);
      return fallback;
    };
    SweepResult r;
    plan::ParallelConfig& p = r.layout;
    p.tp = int_of("tp", "--tensor-model-parallel-size", 1);
    p.pp = int_of("pp", "--pipeline-model-parallel-size", 1);
    p.dp = point.count("dp") ? parse_int(point.at("dp"), "--sweep") : 1;
    p.micro_batch = int_of("mbs", "--micro-batch-size", 0);
    if (p.micro_batch == 0) throw_error("[--sweep] give mbs=... or --micro-batch-size");
    p.global_batch = int_of("gbs", "--global-batch-size", p.micro_batch * p.dp);
    p.sequence_parallel = has_flag(merged, "--sequence-parallel");
    p.distributed_optimizer = has_flag(merged, "--use-distributed-optimizer");
    const std::optional<std::string> granularity = flag_value(merged, "--recompute-granularity");
    p.recompute = granularity == "full" ? plan::PlanRecompute::kFull
                  : granularity == "selective" || has_flag(merged, "--recompute-activations")
                      ? plan::PlanRecompute::kSelective
                      : plan::PlanRecompute::kNone;
    plan::PlanModel pm;
    train::TrainConfig tc;
    try {
      std::vector<std::string> model_argv = without(merged, parallel_flags);
      model_argv.insert(model_argv.end(), {"--micro-batch-size", std::to_string(p.micro_batch)});
      tc = parse_point_config(model_argv);
      pm.config = tc.model;
      pm.config.vocab_size = vocab_size_without_files(tc);
      pm.make_vocab_size_divisible_by = tc.make_vocab_size_divisible_by;
      pm.dtype = train::model_dtype(tc);
      plan::validate_layout(plan::config_for_tp(pm, p.tp), p, p.world());
    } catch (const Error& e) {
      r.name = sweep_case_name(p.dp, p.tp, p.pp, p.global_batch, tc.model.hidden_size, tc.model.num_layers);
      r.status = "skipped";
      r.reason = e.what();
      results.push_back(r);
      continue;
    }
    r.name = sweep_case_name(p.dp, p.tp, p.pp, p.global_batch, pm.config.hidden_size, pm.config.num_layers);
    plan::Cluster cluster = cluster_for(gpu, p.world());
    cluster.engine.attention_dropout = tc.model.attention_dropout;  // the run's (Megatron's defaults 0.1)
    cluster.engine.hidden_dropout = tc.model.hidden_dropout;
    const plan::Candidate k = plan::evaluate_layout(pm, cluster, p);
    r.fits = k.fits;
    r.predicted_ms = k.prediction.seconds_per_iteration * 1e3;
    r.planned_bytes = static_cast<double>(k.memory.worst.total());
    const bool k2025 = tc.flops_convention == train::FlopsConvention::k2025;
    if (dry_run) {
      r.status = "predicted";
      BenchRow& b = r.row;
      b.model_size_b =
          static_cast<double>(plan::stage_num_parameters(plan::config_for_tp(pm, 1), plan::ParallelConfig{}, 0)) / 1e9;
      b.nodes = cluster.nodes;
      b.gpus_per_node = cluster.gpus_per_node;
      b.global_batch = p.global_batch;
      b.pp = p.pp;
      b.tp = p.tp;
      b.dp = p.dp;
      b.micro_batch = p.micro_batch;
      b.tokens_per_s = k.prediction.tokens_per_s;
      b.report_time_s = k.prediction.report_time_s;
      b.tflops_per_gpu = k2025 ? k.prediction.tflops_per_gpu_2025 : k.prediction.tflops_per_gpu_2024;
      b.memory_per_gpu_bytes = r.planned_bytes;
      b.ms_per_iteration = r.predicted_ms;
      results.push_back(r);
      continue;
    }
    r.status = "skipped";
    if (p.world() > ranks) {
      r.reason =
          str_cat("does not fit on ", ranks, gpus > 0 ? " GPUs" : " CPU cores", " (needs ", p.world(), " ranks)");
    } else {
      std::string error;
      std::vector<std::string> child = merged;
      if (p.world() > 1) child.insert(child.end(), {"--nproc-per-node", std::to_string(p.world())});
      BenchRow b = run_child(child, error);
      if (error.empty()) {
        r.status = "measured";
        r.row = b;
      } else {
        r.status = "skipped";
        r.reason = error;
      }
    }
    results.push_back(r);
  }

  if (json) {
    for (const SweepResult& r : results) std::cout << json_line(r) << "\n";
  } else if (want_csv) {
    std::cout << csv(results);
  } else {
    std::vector<BenchRow> rows;
    for (const SweepResult& r : results) {
      if (r.status != "skipped") rows.push_back(r.row);
    }
    std::cout << " > sweep: " << results.size() << " configuration(s), " << rows.size() << " "
              << (dry_run ? "predicted (--dry-run: planner on " + gpu_name + ")" : "measured") << ", "
              << results.size() - rows.size()
              << " skipped; latency = ms per iteration, memory = " << (dry_run ? "planned" : "measured") << " per GPU\n"
              << text_table(results);
    if (!rows.empty()) std::cout << " > benchmark result table:\n" << format_bench_table(rows);
  }
  std::cout << std::flush;
  return 0;
}

}  // namespace megatron::cli
