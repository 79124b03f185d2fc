// `megatron plan` against our own recorded runs (docs/planner.md, "How good it is").
//
// 2 x H200: the ten rows of bench/results/2026-11-23.md, "`megatron bench` rows with PP, TP and DP
// on GPUs" (micro-batch 4, bf16, NCCL_NVLS_ENABLE=0) must each be within 5% of the measured device
// memory, and on two GPUs NCCL's buffers (plan/nccl_memory.h) must bring the plan closer than it is
// without them. Their tokens/s is printed; planned with the flags they ran with, every row must be
// within 10% but 1.3B TP2 + SP (a known miss, see the test).
//
// One H100: the twelve rows of `bench/gpu_plan_validation.sh PACK OUT 1` (2026-11-23,
// bench/recorded/one_{350m,1.3b,2.7b}.json; bench/results/2026-11-23.md, "plan validation (a) on
// one H100, 12 runs; refit") and the four side-by-side runs of tree 3651ee3
// (bench/recorded/one_side_by_side_s3.json; bench/results/2026-11-23.md, "planner: memory-bound
// bytes from the fused engine") must each be within 10% in tokens/s and 5% in memory. The GEMM
// curve was fitted on three of the twelve (the "fit" rows); the other thirteen are held out.
//
// Each row is predicted with the engine settings of the code that ran it (engine_profile.h):
// the H200 rows predate both residual fusions, the sweep the residual add in the GEMM epilogue.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "plan/search.h"
#include "support/plan_models.h"

namespace megatron::plan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct RecordedRun {
  const char* model;
  int64_t layers, hidden, heads, gpus, global_batch, pp, tp, dp;
  double measured_gib;  // Memory/GPU [GiB], as `megatron bench` printed it
  double measured_tokens_per_s;
};

const RecordedRun kRuns[] = {
    {"gpt3-1.3b", 24, 2048, 16, 1, 32, 1, 1, 1, 35.32, 65228},
    {"gpt3-1.3b", 24, 2048, 16, 2, 32, 2, 1, 1, 25.92, 112328},
    {"gpt3-1.3b", 24, 2048, 16, 1, 4, 1, 1, 1, 35.32, 61101},
    {"gpt3-1.3b", 24, 2048, 16, 2, 4, 1, 2, 1, 18.80, 80439},
    {"gpt3-1.3b", 24, 2048, 16, 2, 8, 1, 1, 2, 36.07, 107714},
    {"gpt3-2.7b", 32, 2560, 32, 1, 32, 1, 1, 1, 65.86, 32308},
    {"gpt3-2.7b", 32, 2560, 32, 2, 32, 2, 1, 1, 45.49, 56196},
    {"gpt3-2.7b", 32, 2560, 32, 1, 4, 1, 1, 1, 65.86, 29790},
    {"gpt3-2.7b", 32, 2560, 32, 2, 4, 1, 2, 1, 34.10, 44161},
    {"gpt3-2.7b", 32, 2560, 32, 2, 8, 1, 1, 2, 66.60, 53559},
};

Candidate plan_run(const RecordedRun& r) {
  const PlanModel m = test::gpt_plan_model(r.layers, r.hidden, r.heads, 2048);
  Cluster cl;
  cl.gpu = find_gpu("h200-141gb");
  cl.gpus_per_node = r.gpus;
  cl.nodes = 1;
  // The engine before the residual fusions (bench/results/2026-11-23.md, "LayerNorm: warp-per-row
  // forward by default, residual add fused into the backward"): bias-dropout-add and a separate
  // residual-gradient add.
  cl.engine.residual_add_in_gemm_epilogue = false;
  cl.engine.residual_grad_add_in_layernorm = false;
  cl.engine.shared_process_groups = false;  // every process-group kind its own communicator then
  // Then TP all-reduced the input gradient before the weight-gradient GEMM, and DP reduced
  // without --overlap-grad-reduce.
  cl.engine.async_tp_allreduce = false;
  cl.overlap_grad_reduce = cl.overlap_param_gather = false;
  // The bench's TP rows ran with --sequence-parallel.
  const ParallelConfig p{r.tp, r.pp, 1, r.dp, 4, r.global_batch, PlanRecompute::kNone, false, r.tp > 1};
  return evaluate_layout(m, cl, p);
}

// What NCCL's communicator creation (plan/nccl_memory.h kCommunicatorCreationBytes) adds to the
// plan of `k`'s worst stage, which `megatron bench`'s "device in use" does not see: it counts
// from after the process groups are made. These runs had every kind its own communicator.
int64_t creation_bytes(const Candidate& k, const RecordedRun& r) {
  const NcclLayout l{r.tp, r.pp, r.dp, 1, r.gpus, true, /*shared_groups=*/false};
  return nccl_memory(l, k.memory.worst_stage).created * kCommunicatorCreationBytes;
}

TEST(PlanRecordedRuns, TwoH200RunsMemoryAndTokensPerSecond) {
  std::printf(
      "| model | GPUs | batch | PP | TP | DP | measured tok/s | predicted | error | measured GiB/GPU | planned | error "
      "| of which NCCL | error without NCCL |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const RecordedRun& r : kRuns) {
    const Candidate k = plan_run(r);
    const int64_t creation = creation_bytes(k, r);
    const double planned = static_cast<double>(k.memory.worst.total() - creation) / kGiB;
    const double nccl = static_cast<double>(k.memory.worst.nccl - creation) / kGiB;
    const double error = planned / r.measured_gib - 1.0;
    const double error_without = (planned - nccl) / r.measured_gib - 1.0;
    const double speed_error = k.prediction.tokens_per_s / r.measured_tokens_per_s - 1.0;
    std::printf(
        "| %s | %lld | %lld | %lld | %lld | %lld | %.0f | %.0f | %+.1f%% | %.2f | %.2f | %+.1f%% | %.3f | %+.1f%% |\n",
        r.model, static_cast<long long>(r.gpus), static_cast<long long>(r.global_batch), static_cast<long long>(r.pp),
        static_cast<long long>(r.tp), static_cast<long long>(r.dp), r.measured_tokens_per_s, k.prediction.tokens_per_s,
        100.0 * speed_error, r.measured_gib, planned, 100.0 * error, nccl, 100.0 * error_without);
    EXPECT_LT(std::fabs(error), 0.05) << r.model << " on " << r.gpus << " GPUs: planned " << planned
                                      << " GiB, measured " << r.measured_gib;
    if (r.gpus == 1) {
      EXPECT_EQ(k.memory.worst.nccl, 0) << r.model;
    } else {
      EXPECT_LT(std::fabs(error), std::fabs(error_without)) << r.model << " pp " << r.pp << " tp " << r.tp;
    }
    // Planned with the flags they ran with (blocking TP all-reduces, no --overlap-grad-reduce):
    // within 10% but for the 1.3B TP2 + SP row (+10.8%; the 2026-11-24 TP2 rows below miss too).
    if (!(r.tp == 2 && r.hidden == 2048)) {
      EXPECT_LT(std::fabs(speed_error), 0.10)
          << r.model << " on " << r.gpus << " GPUs, batch " << r.global_batch << ": predicted "
          << k.prediction.tokens_per_s << " tokens/s, measured " << r.measured_tokens_per_s;
    } else {
      EXPECT_GT(speed_error, 0.10) << r.model << " tp " << r.tp
                                   << " is a known miss but is now within 10%: take it off";
    }
  }
}

// 2 x H200 again (bench/results/2026-11-24.md, "every parallel layout on one GPU; can AdamW hide
// behind the forward?", call 12): the same ten layouts measured on the tree of that day (both
// residual fusions; the TP input gradient's reduction overlapped with the weight-gradient GEMM),
// the DP2 rows now with the distributed optimizer and both overlaps. Memory within 5% on every row,
// tokens/s within 10% on every row but TP2 + SP (see the test).
const RecordedRun kTwoH200FusedRuns[] = {
    {"gpt3-1.3b", 24, 2048, 16, 1, 4, 1, 1, 1, 35.36, 64033.1},
    {"gpt3-1.3b", 24, 2048, 16, 2, 4, 1, 2, 1, 18.80, 83073.7},
    {"gpt3-1.3b", 24, 2048, 16, 1, 32, 1, 1, 1, 35.36, 68107.7},
    {"gpt3-1.3b", 24, 2048, 16, 2, 32, 2, 1, 1, 25.93, 115584.1},
    {"gpt3-1.3b", 24, 2048, 16, 2, 8, 1, 1, 2, 28.72, 120101.9},
    {"gpt3-2.7b", 32, 2560, 32, 1, 4, 1, 1, 1, 65.89, 31057.4},
    {"gpt3-2.7b", 32, 2560, 32, 2, 4, 1, 2, 1, 34.10, 45933.5},
    {"gpt3-2.7b", 32, 2560, 32, 1, 32, 1, 1, 1, 65.89, 33401.1},
    {"gpt3-2.7b", 32, 2560, 32, 2, 32, 2, 1, 1, 45.49, 57043.0},
    {"gpt3-2.7b", 32, 2560, 32, 2, 8, 1, 1, 2, 51.79, 58703.9},
};

TEST(PlanRecordedRuns, TwoH200FusedRunsMemoryAndTokensPerSecond) {
  std::printf(
      "| model | GPUs | batch | PP | TP | DP | measured tok/s | predicted | error | measured GiB/GPU | planned | error "
      "|\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const RecordedRun& r : kTwoH200FusedRuns) {
    const PlanModel m = test::gpt_plan_model(r.layers, r.hidden, r.heads, 2048);
    Cluster cl;
    cl.gpu = find_gpu("h200-141gb");
    cl.gpus_per_node = r.gpus;
    cl.nodes = 1;
    cl.engine.shared_process_groups = false;  // every process-group kind its own communicator then
    const ParallelConfig p{r.tp, r.pp, 1, r.dp, 4, r.global_batch, PlanRecompute::kNone, r.dp > 1, r.tp > 1};
    const Candidate k = evaluate_layout(m, cl, p);
    const double planned = static_cast<double>(k.memory.worst.total() - creation_bytes(k, r)) / kGiB;
    const double error = planned / r.measured_gib - 1.0;
    const double speed_error = k.prediction.tokens_per_s / r.measured_tokens_per_s - 1.0;
    std::printf("| %s | %lld | %lld | %lld | %lld | %lld | %.0f | %.0f | %+.1f%% | %.2f | %.2f | %+.1f%% |\n", r.model,
                static_cast<long long>(r.gpus), static_cast<long long>(r.global_batch), static_cast<long long>(r.pp),
                static_cast<long long>(r.tp), static_cast<long long>(r.dp), r.measured_tokens_per_s,
                k.prediction.tokens_per_s, 100.0 * speed_error, r.measured_gib, planned, 100.0 * error);
    EXPECT_LT(std::fabs(error), 0.05) << r.model << " tp " << r.tp << " pp " << r.pp << " dp " << r.dp;
    // Known miss: under TP2 + SP the ops take half the one-GPU time, as planned, but the
    // collectives leave ~39 ms of the 1.3B step exposed (call 13's profile: ~1.6 ms per layer, ~105
    // GB/s effective for ~10 all-gathers / reduce-scatters of [8192, 2048] bf16 per layer), where
    // the planner's NVLink term, even at our measured share of the link for these messages
    // (engine_profile.h) and with the dy gathers counted, expects less: +19.6% at 1.3B, +11.4% at
    // 2.7B. The same layouts with the binary of 2026-11-28 are within 10%
    // (FourH200RunsWithOverlapContention). The DP2 and PP2 rows are within 10%.
    if (r.tp == 1) {
      EXPECT_LT(std::fabs(speed_error), 0.10) << r.model << " pp " << r.pp << " dp " << r.dp;
    } else {
      EXPECT_GT(speed_error, 0.10) << r.model << " tp " << r.tp
                                   << " is a known miss but is now within 10%: take it off";
    }
  }
}

// One H100 80GB, 2026-11-23, measured ms/iter and device memory:
// "sweep": `megatron bench --sweep mbs=.. recompute=none,full` (bf16, dropout 0, TP = PP = DP =
//   1, global batch = micro-batch) as bench/gpu_plan_validation.sh ran it on tree 42f7df9 (the
//   residual add still a bias-dropout-add kernel), copied from
//   bench/recorded/one_{350m,1.3b,2.7b}.json;
// "side by side": `megatron bench` at the four reference shapes (same flags) next to PyTorch on tree
//   3651ee3 (the residual add in the projection / FC2 GEMM epilogue), copied
//   from bench/recorded/one_side_by_side_s3.json.
struct H100Run {
  const char* model;
  int64_t layers, hidden, heads, seq, micro_batch;
  bool full_recompute;
  const char* ran;  // "sweep" or "side by side"
  bool fit;         // one of the runs the GEMM curve was fitted on
  double measured_ms;
  double measured_bytes;
};

const H100Run kH100Runs[] = {
    {"gpt2-350m", 24, 1024, 16, 1024, 8, false, "sweep", false, 44.356, 13939769344},
    {"gpt2-350m", 24, 1024, 16, 1024, 8, true, "sweep", false, 55.835, 8136949760},
    {"gpt2-350m", 24, 1024, 16, 1024, 16, false, "sweep", true, 82.707, 21474836480},
    {"gpt2-350m", 24, 1024, 16, 1024, 16, true, "sweep", false, 105.64, 9867100160},
    {"gpt3-1.3b", 24, 2048, 16, 2048, 2, false, "sweep", false, 78.627, 30817648640},
    {"gpt3-1.3b", 24, 2048, 16, 2048, 2, true, "sweep", false, 97.64, 25023217664},
    {"gpt3-1.3b", 24, 2048, 16, 2048, 4, false, "sweep", true, 137.878, 37931188224},
    {"gpt3-1.3b", 24, 2048, 16, 2048, 4, true, "sweep", false, 177.064, 26340229120},
    {"gpt3-2.7b", 32, 2560, 32, 2048, 2, false, "sweep", false, 159.175, 59234058240},
    {"gpt3-2.7b", 32, 2560, 32, 2048, 2, true, "sweep", false, 199.463, 49463427072},
    {"gpt3-2.7b", 32, 2560, 32, 2048, 4, false, "sweep", true, 282.132, 70715965440},
    {"gpt3-2.7b", 32, 2560, 32, 2048, 4, true, "sweep", false, 361.18, 51174703104},
    {"gpt2-124m", 12, 768, 12, 1024, 16, false, "side by side", false, 31.318, 9133096960},
    {"gpt2-350m", 24, 1024, 16, 1024, 16, false, "side by side", false, 82.025, 21474836480},
    {"gpt3-1.3b", 24, 2048, 16, 2048, 4, false, "side by side", false, 137.568, 37931188224},
    {"gpt3-2.7b", 32, 2560, 32, 2048, 4, false, "side by side", false, 281.216, 70715965440},
};

TEST(PlanRecordedRuns, SixteenSingleH100RunsWithinTenPercentAndFivePercent) {
  std::printf(
      "| model | mbs | recompute | run | set | measured ms | predicted | tok/s error | measured MiB | planned | error "
      "|\n"
      "| --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  double worst_held_out = 0;
  for (const H100Run& r : kH100Runs) {
    const PlanModel m = test::gpt_plan_model(r.layers, r.hidden, r.heads, r.seq);
    Cluster cl;
    cl.gpu = find_gpu("h100-80gb");
    cl.gpus_per_node = 1;
    cl.nodes = 1;
    // The sweep's engine ran Megatron's bias-dropout-add after the projection and FC2.
    cl.engine.residual_add_in_gemm_epilogue = std::string(r.ran) != "sweep";
    const ParallelConfig p{
        1,     1,    1, 1, r.micro_batch, r.micro_batch, r.full_recompute ? PlanRecompute::kFull : PlanRecompute::kNone,
        false, false};
    const Candidate k = evaluate_layout(m, cl, p);
    const double predicted_ms = 1e3 * k.prediction.seconds_per_iteration;
    // tokens/s error = predicted tokens/s / measured - 1 = measured ms / predicted ms - 1.
    const double speed_error = r.measured_ms / predicted_ms - 1.0;
    const double planned = static_cast<double>(k.memory.worst.total());
    const double memory_error = planned / r.measured_bytes - 1.0;
    if (!r.fit) worst_held_out = std::max(worst_held_out, std::fabs(speed_error));
    std::printf("| %s | %lld | %s | %s | %s | %.1f | %.1f | %+.1f%% | %.0f | %.0f | %+.1f%% |\n", r.model,
                static_cast<long long>(r.micro_batch), r.full_recompute ? "full" : "none", r.ran,
                r.fit ? "fit" : "held out", r.measured_ms, predicted_ms, 100.0 * speed_error,
                r.measured_bytes / 1048576.0, planned / 1048576.0, 100.0 * memory_error);
    EXPECT_LT(std::fabs(speed_error), 0.10)
        << r.model << " mbs " << r.micro_batch << " recompute " << r.full_recompute << " (" << r.ran << "): predicted "
        << predicted_ms << " ms, measured " << r.measured_ms;
    EXPECT_LT(std::fabs(memory_error), 0.05)
        << r.model << " mbs " << r.micro_batch << " recompute " << r.full_recompute << " (" << r.ran << "): planned "
        << planned << " bytes, measured " << r.measured_bytes;
  }
  std::printf("worst held-out tokens/s error: %.1f%%\n", 100.0 * worst_held_out);
}

// 4 x H100 80GB (bench/results/2026-11-28.md, "the first 4-GPU machine"): `megatron train` on the
// Brown Corpus (bf16, dropout 0), the measured ms per iteration its closing line printed (after the
// first log interval) for every layout of bench/gpu_data_parallel.sh and
// bench/gpu_model_parallel.sh, with the flags each ran with. Within 10% in tokens/s (predicted /
// measured - 1), all 14: the 1-GPU rows, DP4, PP4, and, since the TP collectives run at our
// measured share of NVLink for their message size (engine_profile.h our_tp_collective_share, taken
// from collective timings, not from these step times) and the SP backward's all-gathers of dy are
// counted (bench/results/2026-11-28.md, "DP4 on 4 x H200 after the in-collective average"), TP4 +
// SP and TP2 + SP x PP2 at both sizes. The 1.3B DP4 rows with overlap (+10.5%, and +11.9% with the
// distributed optimizer) came within 10% (+1.2%, +4.0%) when the GEMMs' loss beside NVLink
// collectives was counted (throughput_model.h kOverlapContention, measured on H200 profiles).
struct FourGpuRun {
  const char* model;
  int64_t layers, hidden, heads, seq, gpus, micro_batch, global_batch, tp, pp;
  bool distributed, overlap;  // --use-distributed-optimizer; --overlap-grad-reduce (+ param gather)
  double measured_ms;
  bool known_miss;  // none today; kept so that a row the planner misses stays listed, not dropped
};

const FourGpuRun kFourGpuRuns[] = {
    {"gpt2-350m", 24, 1024, 16, 1024, 1, 16, 16, 1, 1, false, false, 79.9, false},
    {"gpt2-350m", 24, 1024, 16, 1024, 4, 16, 64, 1, 1, false, false, 87.0, false},
    {"gpt2-350m", 24, 1024, 16, 1024, 4, 16, 64, 1, 1, false, true, 87.3, false},
    {"gpt3-1.3b", 24, 2048, 16, 2048, 1, 4, 4, 1, 1, false, false, 134.3, false},
    {"gpt3-1.3b", 24, 2048, 16, 2048, 4, 4, 16, 1, 1, false, false, 156.6, false},
    {"gpt3-1.3b", 24, 2048, 16, 2048, 4, 4, 16, 1, 1, false, true, 152.6, false},
    {"gpt3-1.3b", 24, 2048, 16, 2048, 4, 4, 16, 1, 1, true, true, 142.6, false},
    {"gpt3-1.3b", 24, 2048, 16, 2048, 4, 4, 4, 4, 1, false, false, 67.0, false},
    {"gpt3-1.3b", 24, 2048, 16, 2048, 4, 4, 32, 1, 4, false, false, 368.7, false},
    {"gpt3-1.3b", 24, 2048, 16, 2048, 4, 4, 32, 2, 2, false, false, 398.1, false},
    {"gpt3-2.7b", 32, 2560, 32, 2048, 1, 4, 4, 1, 1, false, false, 274.4, false},
    {"gpt3-2.7b", 32, 2560, 32, 2048, 4, 4, 4, 4, 1, false, false, 117.6, false},
    {"gpt3-2.7b", 32, 2560, 32, 2048, 4, 4, 32, 1, 4, false, false, 718.4, false},
    {"gpt3-2.7b", 32, 2560, 32, 2048, 4, 4, 32, 2, 2, false, false, 744.7, false},
};

// The planner's ms per iteration for run `r` on one node of r.gpus `gpu`s, with the flags it ran
// with (SP wherever TP > 1; --overlap-param-gather with the overlap, which only the distributed
// optimizer reads).
double planned_ms(const FourGpuRun& r, const char* gpu) {
  const PlanModel m = test::gpt_plan_model(r.layers, r.hidden, r.heads, r.seq);
  Cluster cl;
  cl.gpu = find_gpu(gpu);
  cl.gpus_per_node = r.gpus;
  cl.nodes = 1;
  cl.overlap_grad_reduce = cl.overlap_param_gather = r.overlap;
  const ParallelConfig p{
      r.tp,          r.pp,    1, r.gpus / (r.tp * r.pp), r.micro_batch, r.global_batch, PlanRecompute::kNone,
      r.distributed, r.tp > 1};
  return 1e3 * evaluate_layout(m, cl, p).prediction.seconds_per_iteration;
}

TEST(PlanRecordedRuns, FourH100RunsTokensPerSecondWithinTenPercent) {
  std::printf(
      "| model | GPUs | batch | TP | PP | DP | dist-opt | overlap | measured ms | predicted | tok/s error |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |\n");
  for (const FourGpuRun& r : kFourGpuRuns) {
    const int64_t dp = r.gpus / (r.tp * r.pp);
    const double predicted_ms = planned_ms(r, "h100-80gb");
    const double speed_error = r.measured_ms / predicted_ms - 1.0;  // predicted tokens/s / measured - 1
    std::printf("| %s | %lld | %lld | %lld | %lld | %lld | %s | %s | %.1f | %.1f | %+.1f%% |\n", r.model,
                static_cast<long long>(r.gpus), static_cast<long long>(r.global_batch), static_cast<long long>(r.tp),
                static_cast<long long>(r.pp), static_cast<long long>(dp), r.distributed ? "yes" : "no",
                r.overlap ? "yes" : "no", r.measured_ms, predicted_ms, 100.0 * speed_error);
    const std::string what = std::string(r.model) + " tp " + std::to_string(r.tp) + " pp " + std::to_string(r.pp) +
                             " dp " + std::to_string(dp) + (r.distributed ? " dist-opt" : "") +
                             (r.overlap ? " overlap" : "");
    if (r.known_miss) {
      EXPECT_GT(std::fabs(speed_error), 0.10) << what << " is a known miss but is now within 10%: take it off";
    } else {
      EXPECT_LT(std::fabs(speed_error), 0.10)
          << what << ": predicted " << predicted_ms << " ms, measured " << r.measured_ms;
    }
  }
}

// 4 x H200 (bench/results/2026-11-28.md, "the PP4 hang found and fixed, NCCL's memory per
// communicator, the 13B rows"): tokens/s, and memory against nvidia-smi's peak less the CUDA
// context and handles (572 MiB, the 1-GPU run), where it was sampled. `shared`: the run's binary
// gave kinds with the same groups one communicator (call 5); the others ran with each kind its own
// (one-rank groups without NCCL). All within 10% since the SP backward's all-gathers of dy are
// counted (bench/results/2026-11-28.md, "DP4 on 4 x H200 after the in-collective average": the TP2
// x PP2 13B row +12.3% -> +8.9%, the 16.63B TP4 row +11.9% -> +3.3%; that run's binary still made
// one-rank NCCL communicators, so its memory is not compared).
struct H200Run {
  const char* model;
  int64_t layers, hidden, heads, seq, gpus, micro_batch, global_batch, tp, pp;
  bool distributed_and_overlap, full_recompute, shared;
  double measured_ms, smi_peak_mib;  // 0: not sampled
  bool known_miss;                   // none today (see FourGpuRun)
};

const H200Run kH200Runs[] = {
    {"gpt3-13b", 40, 5120, 32, 2048, 4, 1, 64, 1, 4, false, false, false, 5110.20, 74879, false},
    {"gpt3-13b", 40, 5120, 32, 2048, 4, 2, 64, 2, 2, false, false, false, 5401.69, 73603, false},
    {"32.44B", 52, 7168, 56, 2048, 4, 1, 8, 4, 1, false, true, false, 2442.13, 143053, false},
    {"16.63B", 52, 5120, 40, 2048, 4, 1, 8, 4, 1, false, false, false, 1105.92, 0, false},
    {"gpt3-2.7b", 32, 2560, 32, 2048, 4, 4, 4, 4, 1, false, false, true, 112.59, 19005, false},
    {"gpt3-1.3b", 24, 2048, 16, 2048, 1, 4, 4, 1, 1, false, false, true, 4.0 * 2048 / 64460 * 1e3, 0, false},
    {"gpt3-1.3b", 24, 2048, 16, 2048, 4, 4, 16, 1, 1, true, false, true, 4.0 * 2048 / 60620 * 1e3, 0, false},
    {"gpt2-350m", 24, 1024, 16, 1024, 1, 16, 16, 1, 1, false, false, false, 16.0 * 1024 / 208909 * 1e3, 0, false},
    {"gpt2-350m", 24, 1024, 16, 1024, 4, 16, 64, 1, 1, false, false, false, 16.0 * 1024 / 192332 * 1e3, 0, false},
};

TEST(PlanRecordedRuns, FourH200RunsTokensPerSecondAndNvidiaSmiMemory) {
  std::printf(
      "| model | GPUs | batch | TP | PP | measured ms | predicted | tok/s error | nvidia-smi - context GiB | planned | "
      "error |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const H200Run& r : kH200Runs) {
    const PlanModel m = test::gpt_plan_model(r.layers, r.hidden, r.heads, r.seq);
    Cluster cl;
    cl.gpu = find_gpu("h200-141gb");
    cl.gpus_per_node = r.gpus;
    cl.nodes = 1;
    cl.overlap_grad_reduce = cl.overlap_param_gather = r.distributed_and_overlap;
    cl.engine.shared_process_groups = r.shared;
    const int64_t dp = r.gpus / (r.tp * r.pp);
    const ParallelConfig p{r.tp,
                           r.pp,
                           1,
                           dp,
                           r.micro_batch,
                           r.global_batch,
                           r.full_recompute ? PlanRecompute::kFull : PlanRecompute::kNone,
                           r.distributed_and_overlap,
                           r.tp > 1};
    const Candidate k = evaluate_layout(m, cl, p);
    const double predicted_ms = 1e3 * k.prediction.seconds_per_iteration;
    const double speed_error = r.measured_ms / predicted_ms - 1.0;  // predicted tokens/s / measured - 1
    const double planned = static_cast<double>(k.memory.worst.total()) / kGiB;
    const double measured = (r.smi_peak_mib - 572.0) / 1024.0;
    const double memory_error = planned / measured - 1.0;
    std::printf("| %s | %lld | %lld | %lld | %lld | %.1f | %.1f | %+.1f%% | %.2f | %.2f | %+.1f%% |\n", r.model,
                static_cast<long long>(r.gpus), static_cast<long long>(r.global_batch), static_cast<long long>(r.tp),
                static_cast<long long>(r.pp), r.measured_ms, predicted_ms, 100.0 * speed_error,
                r.smi_peak_mib > 0 ? measured : 0.0, planned, r.smi_peak_mib > 0 ? 100.0 * memory_error : 0.0);
    const std::string what = std::string(r.model) + " tp " + std::to_string(r.tp) + " pp " + std::to_string(r.pp) +
                             " on " + std::to_string(r.gpus);
    if (r.known_miss) {
      EXPECT_GT(std::fabs(speed_error), 0.10) << what << " is a known miss but is now within 10%: take it off";
    } else {
      EXPECT_LT(std::fabs(speed_error), 0.10)
          << what << ": predicted " << predicted_ms << " ms, measured " << r.measured_ms;
    }
    if (r.smi_peak_mib > 0) {
      EXPECT_LT(std::fabs(memory_error), 0.05) << what << ": planned " << planned << " GiB";
    }
  }
}

// One H200 (bench/results/2026-11-28.md, "the data-parallel average moves into the collective; what
// the DP step and the h = 5120 layers spend", calls 6-10): a TP4 rank of the 16.63B model run as a
// one-GPU model (52 layers, h 5120, 10 heads of 128, FFN 5120, the 12,672-row vocabulary shard;
// micro-batch 1, global batch 8): 830.36 ms per iteration, 77.15 GiB planned by the bench's own
// accounting. Its attention has 10 heads per micro-batch: without flash_wave_factor (1.55 here) the
// prediction was 790 ms, -4.9% too fast.
TEST(PlanRecordedRuns, TensorParallelShardsAsOneH200Models) {
  PlanModel m = test::gpt_plan_model(52, 5120, 10, 2048, 12672);
  m.config.kv_channels = 128;
  m.config.ffn_hidden_size = 5120;
  Cluster cl;
  cl.gpu = find_gpu("h200-141gb");
  cl.gpus_per_node = 1;
  cl.nodes = 1;
  const ParallelConfig p{1, 1, 1, 1, 1, 8, PlanRecompute::kNone, false, false};
  const Candidate k = evaluate_layout(m, cl, p);
  const double predicted_ms = 1e3 * k.prediction.seconds_per_iteration;
  EXPECT_LT(std::fabs(830.36 / predicted_ms - 1.0), 0.05) << "predicted " << predicted_ms << " ms";
  EXPECT_NEAR(static_cast<double>(k.memory.worst.total()) / kGiB, 77.15, 0.01);
  EXPECT_NEAR(flash_wave_factor(10, 2048, 132), 2.0 * 132 / (10 * 17), 1e-12);
  EXPECT_EQ(flash_wave_factor(64, 2048, 132), 1.0);  // gpt3-1.3b's micro-batch of 4 x 16 heads

  // Call 10: a 13B TP2 x PP2 rank's shapes (20 layers, 16 heads of 160, FFN 10240, the 25,216-row
  // vocabulary shard, micro-batch 2, global batch 64): 4,779.84 ms, 63.45 GiB planned by the
  // bench. B = 32: no wave factor. Predicted 8% fast (the SM clock sat at 1500 MHz under the
  // power cap, lower than in the 1.3B-2.7B runs the GEMM curve came from).
  PlanModel m13 = test::gpt_plan_model(20, 5120, 16, 2048, 25216);
  m13.config.kv_channels = 160;
  m13.config.ffn_hidden_size = 10240;
  const ParallelConfig p13{1, 1, 1, 1, 2, 64, PlanRecompute::kNone, false, false};
  const Candidate k13 = evaluate_layout(m13, cl, p13);
  const double predicted13_ms = 1e3 * k13.prediction.seconds_per_iteration;
  EXPECT_LT(std::fabs(4779.84 / predicted13_ms - 1.0), 0.10) << "predicted " << predicted13_ms << " ms";
  EXPECT_NEAR(static_cast<double>(k13.memory.worst.total()) / kGiB, 63.45, 0.01);
}

// 4 x H200 (bench/results/2026-11-28.md, "DP4 on 4 x H200 after the in-collective average", calls
// 1, 2 and 9): `megatron train` tokens/s of the last 10 of 30 iterations (call 1) and `megatron
// bench` ms per iteration (calls 2 and 9), each with the flags it ran with. kOverlapContention came
// from the 1.3B DP profiles (call 2's DP4 and the DP2 of bench/results/2026-11-28.md, "the
// data-parallel average moves into the collective", call 3), so the 1.3B DP4 row is the
// configuration it was taken from; the 350M DP4 rows check it independently.
TEST(PlanRecordedRuns, FourH200RunsWithOverlapContention) {
  const FourGpuRun runs[] = {
      {"gpt2-350m", 24, 1024, 16, 1024, 1, 16, 16, 1, 1, false, false, 16.0 * 1024 / 211503 * 1e3, false},
      {"gpt2-350m", 24, 1024, 16, 1024, 4, 16, 64, 1, 1, true, true, 16.0 * 1024 / 200568 * 1e3, false},
      {"gpt2-350m", 24, 1024, 16, 1024, 4, 16, 64, 1, 1, false, true, 16.0 * 1024 / 195454 * 1e3, false},
      {"gpt3-1.3b", 24, 2048, 16, 2048, 1, 4, 4, 1, 1, false, false, 4.0 * 2048 / 62797 * 1e3, false},
      {"gpt3-1.3b", 24, 2048, 16, 2048, 4, 4, 16, 1, 1, true, true, 4.0 * 2048 / 60144 * 1e3, false},
      {"16.63B", 52, 5120, 40, 2048, 4, 1, 8, 4, 1, false, false, 1100.40, false},
      {"gpt3-13b", 40, 5120, 32, 2048, 4, 2, 64, 2, 2, false, false, 5364.07, false},
      // Call 9: TP2 + SP on two of the GPUs (bench), the 2026-11-24 misses with the binary before
      // 3647a8d (88.40 / 168.32 ms since, call 11: the norm's single wait).
      {"gpt3-1.3b", 24, 2048, 16, 2048, 2, 4, 4, 2, 1, false, false, 90.082, false},
      {"gpt3-2.7b", 32, 2560, 32, 2048, 2, 4, 4, 2, 1, false, false, 172.350, false},
  };
  std::printf(
      "| model | GPUs | TP | PP | DP | dist-opt + overlaps | measured ms | predicted | tok/s error |\n"
      "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n");
  for (const FourGpuRun& r : runs) {
    const int64_t dp = r.gpus / (r.tp * r.pp);
    const double predicted_ms = planned_ms(r, "h200-141gb");
    const double speed_error = r.measured_ms / predicted_ms - 1.0;
    std::printf("| %s | %lld | %lld | %lld | %lld | %s | %.1f | %.1f | %+.1f%% |\n", r.model,
                static_cast<long long>(r.gpus), static_cast<long long>(r.tp), static_cast<long long>(r.pp),
                static_cast<long long>(dp), r.distributed ? "yes" : (r.overlap ? "overlap only" : "no"), r.measured_ms,
                predicted_ms, 100.0 * speed_error);
    EXPECT_LT(std::fabs(speed_error), 0.10) << r.model << " tp " << r.tp << " pp " << r.pp << " dp " << dp
                                            << ": predicted " << predicted_ms << " ms, measured " << r.measured_ms;
  }
}

}  // namespace
}  // namespace megatron::plan
