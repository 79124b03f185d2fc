#include "cli/bench_table.h"

#include <simdjson.h>

#include <cstdio>
#include <fstream>

#include "core/error.h"

namespace megatron::cli {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string row_text(const char* f, const BenchRow& r) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), f, r.model_size_b, static_cast<long long>(r.nodes),
                static_cast<long long>(r.gpus_per_node), static_cast<long long>(r.global_batch),
                static_cast<long long>(r.pp), static_cast<long long>(r.tp), static_cast<long long>(r.dp),
                static_cast<long long>(r.micro_batch), r.tokens_per_s, r.report_time_s, r.tflops_per_gpu,
                r.memory_per_gpu_bytes / kGiB);
  return buf;
}

}  // namespace

std::string format_bench_table(const std::vector<BenchRow>& rows) {
  std::string out =
      "| Model Size [B] | Nodes | GPUs/node | Batch Size | Pipeline Parallel | Tensor Parallel | Data Parallel | "
      "Micro-batch | Tokens/sec | Report Time [s] | TFLOP/s/GPU | Memory/GPU [GiB] |\n"
      "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const BenchRow& r : rows) {
    out += row_text("| %.2f | %lld | %lld | %lld | %lld | %lld | %lld | %lld | %.1f | %.1f | %.1f | %.2f |\n", r);
  }
  return out;
}

std::string format_bench_csv(const std::vector<BenchRow>& rows) {
  std::string out =
      "model_size_b,nodes,gpus_per_node,batch_size,pipeline_parallel,tensor_parallel,data_parallel,micro_batch,"
      "tokens_per_s,report_time_s,tflops_per_gpu,memory_per_gpu_gib\n";
  for (const BenchRow& r : rows) out += row_text("%.4f,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%.1f,%.2f,%.2f,%.3f\n", r);
  return out;
}

std::string bench_row_json_fields(const BenchRow& r) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "\"model_size_b\": %.4f, \"nodes\": %lld, \"gpus_per_node\": %lld, \"tensor_model_parallel_size\": "
                "%lld, \"pipeline_model_parallel_size\": %lld, \"data_parallel_size\": %lld, "
                "\"tflops_per_gpu\": %.2f, \"memory_per_gpu_bytes\": %.0f",
                r.model_size_b, static_cast<long long>(r.nodes), static_cast<long long>(r.gpus_per_node),
                static_cast<long long>(r.tp), static_cast<long long>(r.pp), static_cast<long long>(r.dp),
                r.tflops_per_gpu, r.memory_per_gpu_bytes);
  return buf;
}

BenchRow parse_bench_row(const std::string& json, const std::string& where) {
  simdjson::dom::parser parser;
  simdjson::dom::object obj;
  if (parser.parse(simdjson::padded_string(json)).get_object().get(obj) != simdjson::SUCCESS) {
    throw_error("[--table] ", where, ": not a JSON object (expected one `megatron bench --json` line)");
  }
  auto number_of = [&](const char* key) {
    simdjson::dom::element e;
    if (obj[key].get(e) != simdjson::SUCCESS) throw_error("[--table] ", where, ": missing field \"", key, "\"");
    double v = 0;
    if (e.is_int64()) return static_cast<double>(e.get_int64().value());
    if (e.get_double().get(v) != simdjson::SUCCESS)
      throw_error("[--table] ", where, ": field \"", key, "\" is not a number");
    return v;
  };
  BenchRow r;
  r.model_size_b = number_of("model_size_b");
  r.nodes = static_cast<int64_t>(number_of("nodes"));
  r.gpus_per_node = static_cast<int64_t>(number_of("gpus_per_node"));
  r.global_batch = static_cast<int64_t>(number_of("global_batch"));
  r.pp = static_cast<int64_t>(number_of("pipeline_model_parallel_size"));
  r.tp = static_cast<int64_t>(number_of("tensor_model_parallel_size"));
  r.dp = static_cast<int64_t>(number_of("data_parallel_size"));
  r.micro_batch = static_cast<int64_t>(number_of("micro_batch"));
  r.tokens_per_s = number_of("tokens_per_s");
  r.report_time_s = number_of("report_time_s");
  r.tflops_per_gpu = number_of("tflops_per_gpu");
  r.memory_per_gpu_bytes = number_of("memory_per_gpu_bytes");
  simdjson::dom::element ms;
  if (obj["ms_per_iter"].get(ms) == simdjson::SUCCESS) r.ms_per_iteration = number_of("ms_per_iter");
  return r;
}

std::vector<BenchRow> read_bench_rows(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_error("[--table] cannot open '", path, "': ", errno_string(errno));
  std::vector<BenchRow> rows;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (line.find("\"status\":\"skipped\"") != std::string::npos) continue;  // a sweep's skipped case
    rows.push_back(parse_bench_row(line, str_cat(path, ":", number)));
  }
  if (rows.empty()) throw_error("[--table] '", path, "' holds no results");
  return rows;
}

}  // namespace megatron::cli
