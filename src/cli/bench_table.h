// The NLP benchmark's result table (docs/benchmarking.md, "The NLP (Megatron-LM) benchmark"): one
// row per run, printed by `megatron bench` at the end of a run, written as JSON fields and CSV, and
// merged from several runs' JSON files by `megatron bench --table results/*.json`.
//
// Columns: Model Size [B] | Nodes | GPUs/node | Batch Size | Pipeline Parallel | Tensor Parallel |
// Data Parallel | Micro-batch | Tokens/sec | Report Time [s] | TFLOP/s/GPU | Memory/GPU [GiB]
// (report time = 20e6 / tokens per second).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace megatron::cli {

struct BenchRow {
  double model_size_b = 0;  // parameters / 1e9
  int64_t nodes = 1, gpus_per_node = 1, global_batch = 0, pp = 1, tp = 1, dp = 1, micro_batch = 0;
  double tokens_per_s = 0, report_time_s = 0, tflops_per_gpu = 0;
  double memory_per_gpu_bytes = 0;
  double ms_per_iteration = 0;  // not a column of the table; the sweep's latency (0: unknown)
};

std::string format_bench_table(const std::vector<BenchRow>& rows);  // aligned text, header first
std::string format_bench_csv(const std::vector<BenchRow>& rows);    // header line, then one line per row
// The row's fields as JSON members without braces ("\"model_size_b\": 1.3, ..."), for bench --json.
std::string bench_row_json_fields(const BenchRow& row);

// One `megatron bench --json` object (ms_per_iter optional). Throws megatron::Error
// "[--table] WHERE: ..." naming the missing field or the parse error.
BenchRow parse_bench_row(const std::string& json, const std::string& where);

// Reads every row of a bench --json file: one JSON object per non-empty line; lines of a
// sweep with "status": "skipped" (no numbers) are passed over. Throws megatron::Error
// "[--table] FILE:LINE: ..." naming the missing field or the parse error.
std::vector<BenchRow> read_bench_rows(const std::string& path);

}  // namespace megatron::cli
