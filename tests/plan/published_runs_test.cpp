// The throughput model against published large-scale Megatron-LM runs (docs/planner.md, "How good
// it is"): every row's predicted tokens/s per GPU must lie within 20% of the published figure,
// except the rows listed as known misses, which must stay outside it (so the list is kept honest: a
// model change that fixes one fails here until the row moves out of the list).
//
// Published figures are TFLOP/s per GPU, turned into tokens/s per GPU with each source's own
// FLOPs-per-token formula (docs/performance-references.md, "FLOPs-per-token conventions"):
//   Narayanan et al. 2021 (SC21, arXiv 2104.04473) Table 1, A100 80GB on Selene:
//     96*L*h^2*(1 + s/(6h) + V/(16*L*h)), V = 51,200 (counts the recompute forward)
//     Layouts, batch sizes and the virtual pipeline from Megatron-LM examples/sc21/run_table_1.sh
//     and CONFIG.sh (commit 79a3bb6bf2): seq 2048, --fp16, dropout 0.1 (Megatron's default),
//     activation recompute on every row, --DDP-impl torch (overlapped all-reduce) up to 18.4B
//     and local (all-reduce after the backward) from 39.1B; no flash attention existed.
//     Engine megatron-2021 (engine_profile.h): what that code did, each setting sourced there.
//   Megatron-LM README H100 weak-scaling table (Megatron-Core r0.8.0, commit f2e5db402c):
//     72*L*h^2*(1 + s/(6h) + V/(12*L*h)), V = 131,072, seq 4096, DP 48, DP/TP/PP overlap.
//     Not published: micro-batch (1 assumed), virtual pipeline (1 assumed), precision (bf16
//     assumed); distributed optimizer and SP for TP > 1 assumed (Megatron-Core's recommended
//     setting for these runs).
//   BLOOM 176B (Megatron-DeepSpeed, 2022): see kBloom.
// bench/results/2026-11-23.md, "plan validation vs published", records the table this test prints;
// docs/planner.md, "How good it is", the current one with each row's source.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "plan/search.h"
#include "plan/throughput_model.h"
#include "support/plan_models.h"

namespace megatron::plan {
namespace {

struct PublishedRun {
  const char* name;
  int64_t layers, hidden, heads, tp, pp, vp, gpus, micro_batch, global_batch;
  double tflops_per_gpu;  // as published
  const char* miss;       // nullptr: must be within 20%; else why the model stays off
  // Layers as the pipeline stages hold them, where they do not split evenly (0: `layers`).
  int64_t planned_layers = 0;
};

struct Source {
  const char* gpu;
  int64_t seq, vocab, flops_vocab;
  double flops_factor, flops_vocab_divisor;  // 96 and 16 (Narayanan) or 72 and 12 (Megatron 2024)
  DType dtype;
  PlanRecompute recompute;
  bool distributed_optimizer;
  Engine engine;
  bool untied_output = false;  // --untie-embeddings-and-output-weights
};

double published_tokens_per_gpu(const Source& src, const PublishedRun& r) {
  const double L = static_cast<double>(r.layers), h = static_cast<double>(r.hidden);
  const double s = static_cast<double>(src.seq), V = static_cast<double>(src.flops_vocab);
  const double per_token = src.flops_factor * L * h * h * (1.0 + s / (6.0 * h) + V / (src.flops_vocab_divisor * L * h));
  return r.tflops_per_gpu * 1e12 / per_token;
}

Prediction predict_run(const Source& src, const PublishedRun& r, bool overlap_grad_reduce) {
  PlanModel m =
      test::gpt_plan_model(r.planned_layers > 0 ? r.planned_layers : r.layers, r.hidden, r.heads, src.seq, src.vocab);
  m.dtype = src.dtype;
  m.config.untie_embeddings_and_output_weights = src.untied_output;
  Cluster cl;
  cl.gpu = find_gpu(src.gpu);
  cl.gpus_per_node = 8;
  cl.nodes = r.gpus / 8;
  cl.overlap_grad_reduce = overlap_grad_reduce;
  cl.overlap_param_gather = overlap_grad_reduce;
  cl.engine = src.engine;
  const int64_t dp = r.gpus / (r.tp * r.pp);
  ParallelConfig p{r.tp,
                   r.pp,
                   r.vp,
                   dp,
                   r.micro_batch,
                   r.global_batch,
                   src.recompute,
                   src.distributed_optimizer && dp > 1,
                   r.tp > 1 && src.engine.attention == AttentionBackend::kFlash};
  return evaluate_layout(m, cl, p).prediction;
}

// Checks every row and prints the comparison table (markdown, for bench/results/), then
// where the predicted iteration goes (percent of the predicted iteration time).
// Returns each row's relative error of the predicted tokens/s per GPU.
std::vector<double> check(const Source& src, const PublishedRun* rows, size_t n, int64_t last_overlapped_size) {
  std::vector<double> errors;
  std::printf(
      "| model | TP x PP x DP (vp) | mbs | GBS | published tok/s/GPU | predicted | error | TFLOP/s pub. | pred. |\n"
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  std::vector<Prediction> predictions;
  for (size_t i = 0; i < n; ++i) {
    const PublishedRun& r = rows[i];
    const bool overlapped = src.engine.overlap_grad_reduce || r.layers * r.hidden <= last_overlapped_size;
    const Prediction pr = predict_run(src, r, overlapped);
    predictions.push_back(pr);
    const double published = published_tokens_per_gpu(src, r);
    const double predicted = pr.tokens_per_s / static_cast<double>(r.gpus);
    const double error = predicted / published - 1.0;
    errors.push_back(error);
    std::printf("| %s | %lld x %lld x %lld (%lld) | %lld | %lld | %.0f | %.0f | %+.1f%% | %.1f | %.1f |\n", r.name,
                static_cast<long long>(r.tp), static_cast<long long>(r.pp),
                static_cast<long long>(r.gpus / (r.tp * r.pp)), static_cast<long long>(r.vp),
                static_cast<long long>(r.micro_batch), static_cast<long long>(r.global_batch), published, predicted,
                100.0 * error, r.tflops_per_gpu, r.tflops_per_gpu * predicted / published);
    if (r.miss == nullptr) {
      EXPECT_LT(std::fabs(error), 0.20) << r.name << ": predicted " << predicted << " tokens/s/GPU, published "
                                        << published;
    } else {
      EXPECT_GE(std::fabs(error), 0.20) << r.name << " is listed as a known miss (" << r.miss
                                        << ") but is now within 20%: take it off the list";
    }
  }
  std::printf(
      "\n| model | predicted s/iter | GEMM | attention | memory-bound | TP | PP p2p | bubble | DP | optimizer |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (size_t i = 0; i < n; ++i) {
    const Prediction& pr = predictions[i];
    const double T = pr.seconds_per_iteration;
    auto pct = [T](double x) { return 100.0 * x / T; };
    std::printf("| %s | %.3f | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% |\n", rows[i].name,
                T, pct(pr.gemm_s), pct(pr.attention_s), pct(pr.memory_bound_s), pct(pr.tp_comm_s), pct(pr.pp_comm_s),
                pct(pr.bubble_s), pct(pr.dp_comm_s), pct(pr.optimizer_s));
  }
  return errors;
}

// Why the listed rows stay off (bench/results/2026-11-23.md, "plan validation vs published", has
// the numbers).
constexpr const char* kSmallMegatron =
    "small TP: at h = 2048..4096 Megatron-Core ran at 41-47% MFU, our engine's calibration at 53%; "
    "the planner predicts our per-layer kernels";

// Narayanan et al. 2021 Table 1 (docs/performance-references.md, "Narayanan et al. 2021, Table 1").
const PublishedRun kNarayanan[] = {
    {"1.7B", 24, 2304, 24, 1, 1, 1, 32, 16, 512, 137, nullptr},
    {"3.6B", 30, 3072, 32, 2, 1, 1, 64, 16, 512, 138, nullptr},
    {"7.5B", 36, 4096, 32, 4, 1, 1, 128, 16, 512, 142, nullptr},
    {"18.4B", 40, 6144, 48, 8, 1, 1, 256, 8, 1024, 135, nullptr},
    {"39.1B", 48, 8192, 64, 8, 2, 1, 512, 4, 1536, 138, nullptr},
    {"76.1B", 60, 10240, 80, 8, 4, 3, 1024, 2, 1792, 140, nullptr},
    {"145.6B", 80, 12288, 96, 8, 8, 2, 1536, 2, 2304, 148, nullptr},
    {"310.1B", 96, 16384, 128, 8, 16, 2, 1920, 1, 2160, 155, nullptr},
    {"529.6B", 105, 20480, 128, 8, 35, 3, 2520, 1, 2520, 163, nullptr},
    {"1008B", 128, 25600, 160, 8, 64, 1, 3072, 1, 3072, 163, nullptr},
};

Source narayanan_source() {
  return Source{"a100-80gb", 2048,
                50257,       51200,
                96.0,        16.0,
                DType::kF16, PlanRecompute::kFull,
                false,       find_engine("megatron-2021")};
}
constexpr int64_t kNarayananLastTorchDdp = 40 * 6144;  // --DDP-impl torch (overlapped) up to 18.4B

TEST(PlanPublished, NarayananTable1OnA100) {
  check(narayanan_source(), kNarayanan, std::size(kNarayanan), kNarayananLastTorchDdp);
}

// BLOOM's 70 layers over 12 stages: Megatron-DeepSpeed partitioned transformer layers and the two
// embeddings together (--pp-partition-method 'type:transformer|embedding', 72 / 12 = 6 each), so
// the middle stages hold 6 layers: priced as 72 layers (the last stage, 5 layers + the head, as
// 6 + the head: slightly slow); the published tokens/s counts the 70.
// BLOOM 176B (BigScience, arXiv 2211.05100 §3.4-3.5; bigscience-workshop/bigscience
// train/tr11-176B-ml): 48 nodes of 8 A100 80GB (Jean Zay), Megatron-DeepSpeed, bf16, ZeRO stage 1,
// activation checkpointing, seq 2048, vocab 250,880, 70 layers, hidden 14336, 112 heads, TP 4 x
// PP 12 x DP 8, micro-batch 2, global batch 2048, no dropout; ~150 TFLOP/s per GPU in
// Megatron-DeepSpeed's own count (the 96-factor formula with recompute, as Narayanan's).
// The figure is as the brief of this work quoted it (the paper's own wording is recalled as
// 150-156, not read here); the row is held out of every fit.
// Engine: megatron-2021 (the same local attention, unfused kernels and era of cuBLAS), with what
// BigScience changed: bf16 with fp32 gradient reduction (DeepSpeed's BF16_Optimizer), ZeRO-1
// (the distributed optimizer's reduce-scatter + gather) after the backward, dropout 0.
const PublishedRun kBloom[] = {
    {"BLOOM-176B", 70, 14336, 112, 4, 12, 1, 384, 2, 2048, 150, nullptr, 72},
};

Source bloom_source() {
  Engine e = find_engine("megatron-2021");
  e.grad_reduce_bytes = 4;
  e.hidden_dropout = 0.0;
  e.attention_dropout = 0.0;
  return Source{"a100-80gb", 2048, 250880, 250880, 96.0, 16.0, DType::kBF16, PlanRecompute::kFull, true, e};
}

TEST(PlanPublished, Bloom176BOnA100) { check(bloom_source(), kBloom, std::size(kBloom), 0); }

// Megatron-LM README, H100 weak scaling (docs/performance-references.md, "H100 weak scaling").
const PublishedRun kMegatronH100[] = {
    {"1.7B", 24, 2048, 16, 1, 1, 1, 48, 1, 192, 408.8, kSmallMegatron},
    {"7.1B", 30, 4096, 32, 2, 1, 1, 96, 1, 192, 465.9, kSmallMegatron},
    {"16B", 32, 6144, 48, 4, 1, 1, 192, 1, 192, 489.1, nullptr},
    {"32B", 48, 7168, 56, 8, 1, 1, 384, 1, 192, 459.6, nullptr},
    {"70B", 84, 8192, 64, 8, 2, 1, 768, 1, 384, 419.7, nullptr},
    {"119B", 92, 10240, 80, 8, 4, 1, 1536, 1, 768, 420.5, nullptr},
    {"177B", 96, 12288, 96, 8, 6, 1, 2304, 1, 1152, 432.8, nullptr},
    {"314B", 96, 16384, 128, 8, 8, 1, 3072, 1, 1536, 474.4, nullptr},
    {"462B", 112, 18432, 144, 8, 16, 1, 6144, 1, 3072, 459.9, nullptr},
};

// The table's model sizes are those of untied input and output embeddings (12 L h^2 + 2 V h:
// 1.75B, 7.11B, 16.1B, 177.1B; tied they would be 1.48B, 6.58B, 15.3B, 175.5B), so the runs
// used --untie-embeddings-and-output-weights.
Source megatron_h100_source() {
  Source s{"h100-80gb",  4096,
           131072,       131072,
           72.0,         12.0,
           DType::kBF16, PlanRecompute::kNone,
           true,         find_engine("megatron-core-2024")};
  s.untied_output = true;
  return s;
}

TEST(PlanPublished, MegatronReadmeH100WeakScaling) {
  check(megatron_h100_source(), kMegatronH100, std::size(kMegatronH100), INT64_MAX);
}

// OneFlow DLPerf's reproduction of Megatron-LM (github.com/Oneflow-Inc/DLPerf, Megatron-LM/README.md
// and scripts/mutil_perf_pretrain_gpt_dp_mp_pp.sh; docs/performance-references.md, "OneFlow DLPerf"):
// Megatron-LM commit 8aa4619f2b (2021-03-22) in NGC PyTorch 20.12 (the SC21 runs' container) on
// 4 servers of 8 V100-SXM2-16GB (NVLink hybrid cube mesh) with ONE InfiniBand EDR 100 Gb/s NIC
// per server (ibstat: one mlx5_0, rate 100; nvidia-smi topo: one mlx5_0), so 12.5 GB/s per node,
// 1.5625 GB/s per GPU: --inter-node-bandwidth 1.5625. Flags: --fp16 --checkpoint-activations
// (full recompute, one layer per checkpoint), seq 2048, GPT-2 vocabulary 50257, dropout 0.1
// (the defaults), --DDP-impl local (the default: all-reduce after the backward). Published:
// "elapsed time per iteration" in ms, per case. Engine megatron-2021: the same code and container.
// The MP rows are the only published runs found with TP groups across nodes: TP 16 over 2
// nodes and TP 32 over 4, each group's rings crossing every node on the one NIC.
// Why the listed rows stay off. The TP groups across nodes: the DP all-reduce over the same 16
// GPUs and NICs (DP_16x1x1: 1 GB of fp16 gradients in one call) costs what the model says (its
// step is 183 ms longer than DP_8x1x1's on one node; the model's, with the all-reduce over the NIC at
// kLinkEfficiency, 185 ms), but the TP all-reduces (201 MB, six per layer) take 1.3x (2 nodes)
// and 1.6x (4 nodes) the model's time if the compute is as far off as on one node: not
// explained yet (the run's NCCL logs are not in the stored sources).
constexpr const char* kTpAcrossOneNic =
    "TP across nodes on one NIC per node: the TP all-reduces take 1.3x (2 nodes) to 1.6x (4 nodes) the ring "
    "model's time, while the DP all-reduce over the same GPUs matches it; unexplained";
// The hybrid cube mesh of these servers (the source's nvidia-smi topo): a TP 2 group {0, 1} or
// {4, 5} is joined by one NVLink (NV1, 25 GB/s a direction), a TP 4 group's rings by one to two;
// the model prices every group at the GPU's 150 GB/s (gpu_spec.h), which holds for 8-GPU rings.
constexpr const char* kCubeMeshSmallTp =
    "TP 2 / 4 inside a DGX-1-style hybrid cube mesh run on 1-2 NVLinks, not the 6 the model prices";

struct MeasuredRun {
  const char* name;
  int64_t layers, hidden, heads, tp, pp, gpus, micro_batch, global_batch;
  double ms_per_iteration;  // as published
  const char* miss;         // nullptr: must be within 20%
};

const MeasuredRun kDlperf[] = {
    {"DP_16x1x1_32_1536x16", 16, 1536, 16, 1, 1, 16, 2, 32, 664.46, nullptr},
    {"DP_32x1x1_64_1536x16", 16, 1536, 16, 1, 1, 32, 2, 64, 683.51, nullptr},
    {"MP_1x16x1_16_3072x16", 16, 3072, 32, 16, 1, 16, 16, 16, 5610.23, kTpAcrossOneNic},
    {"MP_1x32x1_16_3072x32", 32, 3072, 32, 32, 1, 32, 16, 16, 13037.85, kTpAcrossOneNic},
    {"2D_2x8x1_16_2304x24", 24, 2304, 24, 8, 1, 16, 8, 16, 1313.52, nullptr},
    {"2D_4x8x1_32_2304x24", 24, 2304, 24, 8, 1, 32, 8, 32, 1508.48, nullptr},
    {"DP_PP_8x1x4_512_1536x16", 16, 1536, 16, 1, 4, 32, 2, 512, 4893.55, nullptr},
    {"MP_PP_1x8x4_512_2304x24", 24, 2304, 24, 8, 4, 32, 16, 512, 22166.85, nullptr},
    {"2D_PP_2x4x4_512_2304x24", 24, 2304, 24, 4, 4, 32, 8, 512, 15331.23, nullptr},
    {"2D_PP_2x8x2_512_2304x24", 24, 2304, 24, 8, 2, 32, 8, 512, 16281.51, nullptr},
};
// The same study's single-node cases (not multi-node: printed and checked, outside the median).
const MeasuredRun kDlperfOneNode[] = {
    {"DP_8x1x1_16_1536x16", 16, 1536, 16, 1, 1, 8, 2, 16, 480.96, nullptr},
    {"MP_1x8x1_16_1536x16", 16, 1536, 16, 8, 1, 8, 16, 16, 692.44, nullptr},
    {"2D_2x4x1_16_1536x16", 16, 1536, 16, 4, 1, 8, 8, 16, 576.48, kCubeMeshSmallTp},
    {"2D_4x2x1_16_1536x16", 16, 1536, 16, 2, 1, 8, 4, 16, 593.68, kCubeMeshSmallTp},
};
constexpr double kDlperfNicPerGpu = 12.5e9 / 8.0;  // one EDR 100 Gb/s NIC per 8-GPU server

std::vector<double> check_measured(const MeasuredRun* rows, size_t n) {
  std::vector<double> errors;
  std::printf(
      "| case | TP x PP x DP | nodes | published ms | predicted ms | error (tokens/s) | TP | DP | bubble |\n"
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (size_t i = 0; i < n; ++i) {
    const MeasuredRun& r = rows[i];
    PlanModel m = test::gpt_plan_model(r.layers, r.hidden, r.heads, 2048, 50257);
    m.dtype = DType::kF16;
    Cluster cl;
    cl.gpu = find_gpu("v100-16gb");
    cl.gpus_per_node = 8;
    cl.nodes = std::max<int64_t>(1, r.gpus / 8);
    cl.inter_node_bytes_per_s = kDlperfNicPerGpu;
    cl.engine = find_engine("megatron-2021");
    cl.engine.pipeline_scatter_gather = false;  // not yet in 8aa4619f2b: each TP rank sends [s, b, h]
    cl.overlap_grad_reduce = false;
    cl.overlap_param_gather = false;
    const int64_t dp = r.gpus / (r.tp * r.pp);
    ParallelConfig p{r.tp, r.pp, 1, dp, r.micro_batch, r.global_batch, PlanRecompute::kFull, false, false};
    const Prediction pr = evaluate_layout(m, cl, p).prediction;
    const double predicted_ms = 1e3 * pr.seconds_per_iteration;
    const double error = r.ms_per_iteration / predicted_ms - 1.0;  // of tokens/s: published / predicted time
    errors.push_back(error);
    auto pct = [&](double x) { return 100.0 * x / pr.seconds_per_iteration; };
    std::printf("| %s | %lld x %lld x %lld | %lld | %.0f | %.0f | %+.1f%% | %.1f%% | %.1f%% | %.1f%% |\n", r.name,
                static_cast<long long>(r.tp), static_cast<long long>(r.pp), static_cast<long long>(dp),
                static_cast<long long>(cl.nodes), r.ms_per_iteration, predicted_ms, 100.0 * error, pct(pr.tp_comm_s),
                pct(pr.dp_comm_s), pct(pr.bubble_s));
    if (r.miss == nullptr) {
      EXPECT_LT(std::fabs(error), 0.20) << r.name << ": predicted " << predicted_ms << " ms per iteration, published "
                                        << r.ms_per_iteration;
    } else {
      EXPECT_GE(std::fabs(error), 0.20) << r.name << " is listed as a known miss (" << r.miss
                                        << ") but is now within 20%: take it off the list";
    }
  }
  return errors;
}

TEST(PlanPublished, DlperfMegatronOnV100WithOneNicPerNode) { check_measured(kDlperf, std::size(kDlperf)); }

TEST(PlanPublished, DlperfMegatronOnOneV100Node) { check_measured(kDlperfOneNode, std::size(kDlperfOneNode)); }

// The bar of docs/planner.md, "How good it is", over every published multi-node run above
// (all of them span nodes: 32 to 6144 GPUs on 8-GPU nodes): the median error within 15%.
TEST(PlanPublished, MedianErrorOfMultiNodeRunsWithin15Percent) {
  std::vector<double> all = check(narayanan_source(), kNarayanan, std::size(kNarayanan), kNarayananLastTorchDdp);
  for (double e : check(megatron_h100_source(), kMegatronH100, std::size(kMegatronH100), INT64_MAX)) all.push_back(e);
  for (double e : check(bloom_source(), kBloom, std::size(kBloom), 0)) all.push_back(e);
  for (double e : check_measured(kDlperf, std::size(kDlperf))) all.push_back(e);
  for (double& e : all) e = std::fabs(e);
  std::sort(all.begin(), all.end());
  const double median = all.size() % 2 ? all[all.size() / 2] : 0.5 * (all[all.size() / 2 - 1] + all[all.size() / 2]);
  std::printf("median |error| over %zu published multi-node runs: %.1f%%\n", all.size(), 100.0 * median);
  EXPECT_LT(median, 0.15);
}

}  // namespace
}  // namespace megatron::plan
