// `megatron bench --sweep`: the grammar of a configuration matrix and its expansion
// (cli/bench_sweep_command.cpp runs it). The reproduction study of docs/benchmarking.md, "Sweeps"
// is such a matrix: data, tensor and pipeline parallel sizes x micro-batch x global batch x model
// shape, with the iteration latency and memory per GPU of each case.
//
//   --sweep tp=1,2,4 pp=1,2 mbs=1,2,4 recompute=none,full
//
// Each token is KEY=V[,V...]; the matrix is the cartesian product of the keys, in the order
// given, the last key varying fastest. Keys and the Megatron flag each one sets:
//   dp          data-parallel size (the world is dp * tp * pp)
//   tp          --tensor-model-parallel-size
//   pp          --pipeline-model-parallel-size
//   mbs         --micro-batch-size
//   gbs         --global-batch-size
//   recompute   none | selective | full   (full = --recompute-granularity full
//               --recompute-method uniform --recompute-num-layers 1)
//   sp          on | off   --sequence-parallel
//   dist-opt    on | off   --use-distributed-optimizer
//   model       --model preset
//   layers, hidden, heads, seq   --num-layers, --hidden-size, --num-attention-heads, --seq-length
// Errors are one line naming --sweep and the token.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace megatron::cli {

struct SweepAxis {
  std::string key;
  std::vector<std::string> values;  // as given, validated for the key
};

// Parses the --sweep tokens; throws megatron::Error "[--sweep] ..." on an unknown key, a
// repeated key, an empty or invalid value ("tp=0", "recompute=some", "mbs=x").
std::vector<SweepAxis> parse_sweep(const std::vector<std::string>& tokens);

// One point of the matrix: key -> value for every axis.
using SweepPoint = std::map<std::string, std::string>;
std::vector<SweepPoint> expand_sweep(const std::vector<SweepAxis>& axes);

// The Megatron flags a point sets, in a fixed order, ready to append to a command line
// (e.g. {"--tensor-model-parallel-size", "2", "--micro-batch-size", "4"}). dp sets no flag:
// the launcher's rank count does.
std::vector<std::string> sweep_point_flags(const SweepPoint& point);
// The flags a key sets (to strip them from the base command line), e.g. tp ->
// {"--tensor-model-parallel-size"}; recompute -> the four recompute flags.
std::vector<std::string> sweep_key_flags(const std::string& key);

// The study's case name (docs/benchmarking.md, "Sweeps"): KIND_DPxTPxPP_GBS_HIDDENxLAYERS, KIND =
// the parallelisms in use (DP, TP, PP joined by '-', "1GPU" when none), e.g. DP_8x1x1_16_1536x16.
std::string sweep_case_name(int64_t dp, int64_t tp, int64_t pp, int64_t global_batch, int64_t hidden, int64_t layers);

}  // namespace megatron::cli
