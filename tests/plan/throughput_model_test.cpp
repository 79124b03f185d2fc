// The throughput model: its FLOPs equal train/flops.h's, the collective formulas, the pipeline
// bubble, monotone data-parallel scaling, and the calibration runs (our measured single-H100
// numbers, bench/results/) reproduced within the 10% target.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backend/fp8_recipe.h"
#include "core/error.h"
#include "parallel/grad_buckets.h"
#include "plan/comm_model.h"
#include "plan/engine_profile.h"
#include "plan/search.h"
#include "plan/throughput_model.h"
#include "support/plan_models.h"
#include "train/flops.h"

namespace megatron::plan {
namespace {

Cluster h100(int64_t nodes, int64_t gpus_per_node = 8) {
  Cluster c;
  c.gpu = find_gpu("h100-80gb");
  c.nodes = nodes;
  c.gpus_per_node = gpus_per_node;
  return c;
}

TEST(PlanThroughput, FlopsEqualTrainFlops) {
  const model::GPTConfig c = config_for_tp(test::gpt_plan_model(96, 12288, 96, 2048), 8);
  EXPECT_DOUBLE_EQ(model_flops(c, 1536, true), train::flops_per_iteration(c, 1536, train::FlopsConvention::k2025));
  EXPECT_DOUBLE_EQ(model_flops(c, 1536, false), train::flops_per_iteration(c, 1536, train::FlopsConvention::k2024));
}

TEST(PlanThroughput, FlopsEqualTrainFlopsForTheVariants) {
  model::GPTConfig c = config_for_tp(test::gpt_plan_model(32, 4096, 32, 4096), 2);
  c.swiglu = true;
  c.ffn_hidden_size = 4096 / 24 * 64;  // 10880
  c.normalization = model::Normalization::kRMSNorm;
  EXPECT_DOUBLE_EQ(model_flops(c, 512, true), train::flops_per_iteration(c, 512, train::FlopsConvention::k2025));
  EXPECT_DOUBLE_EQ(model_flops(c, 512, false), train::flops_per_iteration(c, 512, train::FlopsConvention::k2024));
  // c = 3: the MLP's 18*B*s*L*h*f against GELU's 12*B*s*L*h*f.
  model::GPTConfig gelu = c;
  gelu.swiglu = false;
  EXPECT_NEAR((model_flops(c, 512, true) - model_flops(gelu, 512, true)) / (6.0 * 512 * 4096 * 32 * 4096 * 10880), 1.0,
              1e-12);
}

TEST(PlanThroughput, CollectiveFormulas) {
  const Link link{100e9, 1e-5};
  // 4 ranks, 1 GB: all-reduce 2*3*1e-5 + 2*3/4 * 1e9 / (100e9 * 0.8) = 6e-5 + 0.01875.
  EXPECT_NEAR(all_reduce_seconds(1e9, 4, link), 6e-5 + 0.01875, 1e-12);
  EXPECT_NEAR(reduce_scatter_seconds(1e9, 4, link), 3e-5 + 0.009375, 1e-12);
  EXPECT_DOUBLE_EQ(all_gather_seconds(1e9, 4, link), reduce_scatter_seconds(1e9, 4, link));
  EXPECT_EQ(all_reduce_seconds(1e9, 1, link), 0.0);
  EXPECT_NEAR(send_recv_seconds(8e6, link), 1e-5 + 1e-4, 1e-12);
}

TEST(PlanThroughput, BubbleIsPpMinusOneOverMicroBatchesTimesVp) {
  const PlanModel m = test::gpt_plan_model(48, 4096, 32, 2048);
  for (int64_t vp : {1, 2, 3}) {
    ParallelConfig p{2, 4, vp, 2, 1, 48, PlanRecompute::kNone, false, false};
    const model::GPTConfig c = config_for_tp(m, p.tp);
    validate_layout(c, p, 16);
    const Prediction r = predict(c, DType::kBF16, p, h100(2));
    const double busy = r.compute_s + r.tp_comm_s + r.pp_comm_s;
    // m = 48 / (1 * 2) = 24 micro-batches; bubble = (pp - 1) / (m * vp) of the busy time.
    EXPECT_NEAR(r.bubble_s / busy, 3.0 / (24.0 * static_cast<double>(vp)), 1e-12) << "vp " << vp;
  }
}

TEST(PlanThroughput, MoreDataParallelGpusNeverIncreaseReportTime) {
  const PlanModel m = test::gpt_plan_model(40, 5120, 32, 2048);  // the benchmark's 13B shape
  for (bool dist : {false, true}) {
    double previous = 1e30;
    for (int64_t nodes : {1, 2, 4, 8, 16, 32, 64}) {
      ParallelConfig p{8, 1, 1, nodes, 1, 1024, PlanRecompute::kNone, dist, true};
      const model::GPTConfig c = config_for_tp(m, p.tp);
      const Prediction r = predict(c, DType::kBF16, p, h100(nodes));
      EXPECT_LT(r.report_time_s, previous) << nodes << " nodes, distributed optimizer " << dist;
      previous = r.report_time_s;
    }
  }
}

TEST(PlanThroughput, CommunicationIsExposedOnlyWhereItShouldBe) {
  const PlanModel m = test::gpt_plan_model(40, 5120, 32, 2048);
  ParallelConfig p{1, 1, 1, 1, 1, 8, PlanRecompute::kNone, false, false};
  const Prediction one = predict(config_for_tp(m, 1), DType::kBF16, p, h100(1, 1));
  EXPECT_EQ(one.tp_comm_s, 0.0);
  EXPECT_EQ(one.pp_comm_s, 0.0);
  EXPECT_EQ(one.bubble_s, 0.0);
  EXPECT_EQ(one.dp_comm_s, 0.0);
  // A slower network can only slow a multi-node layout down.
  ParallelConfig q{8, 2, 1, 4, 1, 512, PlanRecompute::kNone, true, true};
  Cluster fast = h100(8), slow = h100(8);
  slow.inter_node_bytes_per_s = 12.5e9;
  const model::GPTConfig c = config_for_tp(m, 8);
  EXPECT_GT(predict(c, DType::kBF16, q, slow).seconds_per_iteration,
            predict(c, DType::kBF16, q, fast).seconds_per_iteration);
  // Full recompute costs time.
  ParallelConfig r = q;
  r.recompute = PlanRecompute::kFull;
  EXPECT_GT(predict(c, DType::kBF16, r, fast).compute_s, predict(c, DType::kBF16, q, fast).compute_s);
}

// Groups that do not divide a node cross it (Megatron's rank order tp-cp-dp-pp): the same TP 6
// x PP 12 layout of 72 GPUs keeps every TP group on NVLink on 6-GPU nodes, but on 8-GPU nodes
// half of its groups span two nodes, so its TP collectives run at the network's speed: the two
// NICs of the group's 2 GPUs on its emptiest node (the 175B benchmark's 9-node answer came from
// pricing those on NVLink). Likewise the DP groups of
// TP 2 x DP 3 (blocks of 6 ranks) on 8-GPU nodes, against 12-GPU nodes.
TEST(PlanThroughput, GroupsThatDoNotDivideANodeCrossIt) {
  const PlanModel m = test::gpt_plan_model(96, 12288, 96, 2048);
  const ParallelConfig tp6{6, 12, 1, 1, 1, 1536, PlanRecompute::kNone, false, false};
  const model::GPTConfig c6 = config_for_tp(m, 6);
  const Prediction in_node = predict(c6, DType::kBF16, tp6, h100(12, 6));
  const Prediction across = predict(c6, DType::kBF16, tp6, h100(9, 8));
  const Cluster eight = h100(9, 8);
  const double ratio = eight.gpu.nvlink_bytes_per_s / (2.0 * eight.gpu.ib_bytes_per_s);
  ASSERT_GT(ratio, 4.0);
  EXPECT_GT(across.tp_comm_s, 0.5 * ratio * in_node.tp_comm_s);
  EXPECT_EQ(across.compute_s, in_node.compute_s);
  // TP 8 on 8-GPU nodes stays inside them: the in-node price.
  const ParallelConfig tp8{8, 12, 1, 1, 1, 1536, PlanRecompute::kNone, false, false};
  const model::GPTConfig c8 = config_for_tp(m, 8);
  EXPECT_LT(predict(c8, DType::kBF16, tp8, h100(12, 8)).tp_comm_s, across.tp_comm_s / 2.0);
  // DP: blocks of tp * dp = 6 ranks, fewer than a node's 8 but not dividing it.
  const ParallelConfig dp3{2, 16, 1, 3, 1, 1536, PlanRecompute::kNone, true, true};
  const model::GPTConfig c2 = config_for_tp(m, 2);
  EXPECT_GT(predict(c2, DType::kBF16, dp3, h100(12, 8)).dp_comm_s,
            2.0 * predict(c2, DType::kBF16, dp3, h100(8, 12)).dp_comm_s);
}

// A TP group that fills whole nodes (TP 16 on 8-GPU nodes, TP 8 on 4-GPU nodes) crosses the
// network on every NIC of its nodes: on A100 (25 GB/s per GPU's NIC, 300 GB/s NVLink) 8 NICs give
// 200 GB/s, 4 give 100, so the exposed TP time is NVLink's x 300/200 and x 300/100, less the
// latency, not x 300/25 as if one GPU's NIC carried the ring.
TEST(PlanThroughput, TensorParallelGroupsAcrossNodesUseEveryNicOfTheirNodes) {
  const PlanModel m = test::gpt_plan_model(96, 12288, 96, 2048);
  auto a100 = [](int64_t nodes, int64_t per_node) {
    Cluster cl;
    cl.gpu = find_gpu("a100-80gb");
    cl.gpus_per_node = per_node;
    cl.nodes = nodes;
    cl.engine = find_engine("megatron-2021");  // every TP all-reduce exposed, at kLinkEfficiency
    return cl;
  };
  const ParallelConfig tp16{16, 8, 1, 1, 1, 512, PlanRecompute::kFull, false, false};
  const ParallelConfig tp8{8, 8, 1, 1, 1, 512, PlanRecompute::kFull, false, false};
  const model::GPTConfig c16 = config_for_tp(m, 16), c8 = config_for_tp(m, 8);
  // The same TP 16 layout on 16-GPU "nodes" (NVLink only) against 8-GPU nodes.
  const double on_nvlink = predict(c16, DType::kF16, tp16, a100(8, 16)).tp_comm_s;
  const double across8 = predict(c16, DType::kF16, tp16, a100(16, 8)).tp_comm_s;
  EXPECT_GT(across8, 1.3 * on_nvlink);
  EXPECT_LT(across8, 1.7 * on_nvlink);
  // TP 8: 8-GPU nodes against 4-GPU nodes (4 NICs per group: 100 GB/s, x 3 of NVLink's time).
  const double in8 = predict(c8, DType::kF16, tp8, a100(8, 8)).tp_comm_s;
  const double across4 = predict(c8, DType::kF16, tp8, a100(16, 4)).tp_comm_s;
  EXPECT_GT(across4, 2.7 * in8);
  EXPECT_LT(across4, 3.3 * in8);
  EXPECT_EQ(most_nodes_of_a_group(16, 1, 8), 2);
  EXPECT_EQ(most_nodes_of_a_group(8, 1, 4), 2);
  EXPECT_EQ(most_nodes_of_a_group(6, 1, 8), 2);    // [6, 12): nodes 0 and 1
  EXPECT_EQ(most_nodes_of_a_group(48, 8, 8), 48);  // TP 8 x DP 48: one rank per node
  EXPECT_EQ(most_nodes_of_a_group(4, 2, 8), 1);
}

// Without Megatron's scatter/gather optimisation every TP rank sends the whole [s, b, h]
// activation to the next stage: TP 8 x PP 4 on 8-GPU nodes (each stage one node, the sends on the
// network) moves 8x the bytes, so the pipeline time is, by hand, 8 x the send's bytes term.
TEST(PlanThroughput, PipelineSendsWithoutScatterGatherCarryTheWholeActivation) {
  const PlanModel m = test::gpt_plan_model(24, 2304, 24, 2048);
  Cluster cl;
  cl.gpu = find_gpu("v100-16gb");
  cl.nodes = 4;
  cl.inter_node_bytes_per_s = 1.5625e9;
  cl.engine = find_engine("megatron-2021");
  const ParallelConfig p{8, 4, 1, 1, 16, 512, PlanRecompute::kFull, false, false};
  const model::GPTConfig c = config_for_tp(m, 8);
  const double with_sg = predict(c, DType::kF16, p, cl).pp_comm_s;
  cl.engine.pipeline_scatter_gather = false;
  const double without = predict(c, DType::kF16, p, cl).pp_comm_s;
  // Per micro-batch 2 sends of [2048 x 16, 2304] fp16 (151 MB), over 1.5625 GB/s x 0.80 per GPU.
  const double bytes = 2048.0 * 16 * 2304 * 2, m_count = 512.0 / 16;
  const double beta = 1.0 / (1.5625e9 * 0.80);
  EXPECT_NEAR(without, m_count * 2.0 * (8e-6 + bytes * beta), 1e-6 * without);
  EXPECT_NEAR(with_sg, m_count * 2.0 * (8e-6 + bytes / 8.0 * beta), 1e-6 * with_sg);
}

// How many NICs a DP group's slowest node crossing uses: its fewest ranks on one node, counted
// by hand from the rank layout (groups r, r + tp, ... in blocks of tp * dp ranks).
TEST(PlanThroughput, FewestGroupMembersOnANode) {
  EXPECT_EQ(fewest_group_members_on_a_node(3, 4, 8), 1);  // {0, 4, 8}: 2 on node 0, 1 on node 1
  EXPECT_EQ(fewest_group_members_on_a_node(3, 2, 8), 1);  // {6, 8, 10}: 1 + 2
  EXPECT_EQ(fewest_group_members_on_a_node(4, 4, 8), 2);  // {0, 4 | 8, 12}
  EXPECT_EQ(fewest_group_members_on_a_node(2, 8, 8), 1);  // TP 8: one rank per node
  EXPECT_EQ(fewest_group_members_on_a_node(4, 2, 8), 4);  // the block of 8 fills one node
  EXPECT_EQ(fewest_group_members_on_a_node(16, 1, 8), 8);
  EXPECT_EQ(fewest_group_members_on_a_node(6, 1, 8), 2);  // TP 6 groups: [6, 12) is 2 + 4
  EXPECT_EQ(fewest_group_members_on_a_node(5, 1, 1), 1);
}

// The side-by-side runs of one H100 (`megatron bench` bf16, dropout 0, the reference shapes): those
// of bench/results/2026-11-23.md, "cross-entropy forward and backward in one kernel" (the fused
// cross-entropy whose bytes the model carries, throughput_model.h kLogitsBytes) and of
// bench/results/2026-11-24.md, "CUDA graphs for the step, LayerNorm row-group barriers" (the 2.7B
// run with head size 80 is where flash_kernel_head_size matters). The runs of the engine before
// them (bench/recorded/one_side_by_side_s3.json, tree 3651ee3) stay in recorded_runs_test.cpp. The
// GEMM curve was fitted on the same shapes, so this is close to a consistency check, held to 5%.
TEST(PlanThroughput, ReproducesOurMeasuredH100Runs) {
  struct Run {
    const char* name;
    int64_t layers, hidden, heads, seq, micro_batch;
    double ms_fourth, ms_sixth;  // measured s/iter
  };
  const Run runs[] = {{"gpt2-124m", 12, 768, 12, 1024, 16, 30.233, 29.821},
                      {"gpt2-350m", 24, 1024, 16, 1024, 16, 80.338, 80.014},
                      {"gpt3-1.3b", 24, 2048, 16, 2048, 4, 135.841, 136.163},
                      {"gpt3-2.7b", 32, 2560, 32, 2048, 4, 278.683, 277.402}};
  for (const Run& run : runs) {
    const PlanModel m = test::gpt_plan_model(run.layers, run.hidden, run.heads, run.seq);
    ParallelConfig p{1, 1, 1, 1, run.micro_batch, run.micro_batch, PlanRecompute::kNone, false, false};
    const Prediction r = predict(config_for_tp(m, 1), DType::kBF16, p, h100(1, 1));
    const double tokens = static_cast<double>(run.micro_batch * run.seq);
    for (const double ms : {run.ms_fourth, run.ms_sixth}) {
      const double measured = tokens / (ms * 1e-3);
      EXPECT_LT(std::fabs(r.tokens_per_s / measured - 1.0), 0.05)
          << run.name << " (" << ms << " ms): predicted " << r.tokens_per_s << " tokens/s, measured " << measured;
    }
  }
}

// Megatron's default dropouts (--attention-dropout 0.1 --hidden-dropout 0.1) on the same H100
// shapes (bench/results/2026-11-24.md, "attention dropout on cuDNN, the hidden dropout's backward
// in the LayerNorm backward"): the attention RNG term (kFlashDropout*Ops) and the bias-dropout-add
// and mask terms (Engine::hidden_dropout) on top of the runs above, to 5%.
TEST(PlanThroughput, ReproducesOurMeasuredH100RunsWithDropout) {
  struct Run {
    const char* name;
    int64_t layers, hidden, heads, seq, micro_batch;
    double ms;  // measured s/iter
  };
  const Run runs[] = {{"gpt2-124m", 12, 768, 12, 1024, 16, 33.80},
                      {"gpt2-350m", 24, 1024, 16, 1024, 16, 88.39},
                      {"gpt3-1.3b", 24, 2048, 16, 2048, 4, 145.09},
                      {"gpt3-2.7b", 32, 2560, 32, 2048, 4, 294.90}};
  for (const Run& run : runs) {
    const PlanModel m = test::gpt_plan_model(run.layers, run.hidden, run.heads, run.seq);
    ParallelConfig p{1, 1, 1, 1, run.micro_batch, run.micro_batch, PlanRecompute::kNone, false, false};
    Cluster dropout = h100(1, 1);
    dropout.engine.attention_dropout = 0.1;
    dropout.engine.hidden_dropout = 0.1;
    const Prediction r = predict(config_for_tp(m, 1), DType::kBF16, p, dropout);
    const Prediction plain = predict(config_for_tp(m, 1), DType::kBF16, p, h100(1, 1));
    const double measured = static_cast<double>(run.micro_batch * run.seq) / (run.ms * 1e-3);
    EXPECT_LT(std::fabs(r.tokens_per_s / measured - 1.0), 0.05)
        << run.name << " (" << run.ms << " ms): predicted " << r.tokens_per_s << " tokens/s, measured " << measured;
    EXPECT_LT(r.tokens_per_s, 0.95 * plain.tokens_per_s) << run.name << ": dropout costs at least 5% here";
  }
}

// Attention dropout on a tensor-parallel share of the heads runs our own kernels in our engine
// (kOwnDropoutAttentionFactor times cuDNN's time, RNG included); at TP 1, or in a profile
// without that fallback, it is cuDNN's: the FLOPs term plus the RNG term.
TEST(PlanThroughput, TensorParallelAttentionDropoutRunsOurKernels) {
  const PlanModel m = test::gpt_plan_model(4, 2048, 16, 2048);
  auto attention_s = [&](int64_t tp, bool own, double dropout) {
    ParallelConfig p{tp, 1, 1, 1, 4, 4, PlanRecompute::kNone, false, false};
    Cluster c = h100(1, tp);
    c.engine.attention_dropout = dropout;
    c.engine.own_attention_for_tp_dropout = own;
    return predict(config_for_tp(m, tp), DType::kBF16, p, c).attention_s;
  };
  EXPECT_NEAR(attention_s(2, true, 0.1) / attention_s(2, false, 0.1), kOwnDropoutAttentionFactor, 1e-9);
  EXPECT_EQ(attention_s(1, true, 0.1), attention_s(1, false, 0.1));
  EXPECT_EQ(attention_s(2, true, 0.0), attention_s(2, false, 0.0));
  // The RNG term: b * heads / tp * s (s + 1) / 2 scores per layer, 4 layers, at the H100's rate.
  const double drawn = 4.0 * 16.0 / 2.0 * 2048.0 * 2049.0 / 2.0 * 4.0;
  EXPECT_NEAR(attention_s(2, false, 0.1) - attention_s(2, false, 0.0),
              drawn * (kFlashDropoutForwardOps + kFlashDropoutBackwardOps) / 16.7e12, 1e-9);
}

// Documents (--reset-attention-mask) on cuDNN: one pass is a 2-byte read per causal score of every
// (batch, head) and layer; the measured mock-data training runs with documents
// (bench/results/2026-11-25.md, "documents packed into samples", calls 3-4, bf16, dropout 0) within
// 10% (350M, s 1024: ~6% pessimistic, see kDocumentBiasForwardPasses). A tensor-parallel share with
// dropout runs our kernels instead: no bias term.
TEST(PlanThroughput, DocumentBiasCostsItsReads) {
  const PlanModel m = test::gpt_plan_model(24, 2048, 16, 2048);
  ParallelConfig p{1, 1, 1, 1, 4, 4, PlanRecompute::kNone, false, false};
  Cluster docs = h100(1, 1);
  docs.engine.document_bias = true;
  const Prediction with = predict(config_for_tp(m, 1), DType::kBF16, p, docs);
  const Prediction without = predict(config_for_tp(m, 1), DType::kBF16, p, h100(1, 1));
  const double pass = 4.0 * 16.0 * 2048.0 * 2049.0 / 2.0 * 2.0 / h100(1, 1).gpu.hbm_bytes_per_s * 24.0;
  EXPECT_NEAR(with.attention_s - without.attention_s, (kDocumentBiasForwardPasses + kDocumentBiasBackwardPasses) * pass,
              1e-9);
  struct Run {
    const char* name;
    int64_t layers, hidden, heads, seq, micro_batch;
    double ms_low, ms_high;  // measured s/iter with documents
  };
  for (const Run& run :
       {Run{"gpt2-350m", 24, 1024, 16, 1024, 8, 46.6, 46.8}, Run{"gpt3-1.3b", 24, 2048, 16, 2048, 4, 147.0, 149.1},
        Run{"gpt3-2.7b", 32, 2560, 32, 2048, 2, 171.0, 172.2}}) {
    const PlanModel rm = test::gpt_plan_model(run.layers, run.hidden, run.heads, run.seq);
    ParallelConfig rp{1, 1, 1, 1, run.micro_batch, run.micro_batch, PlanRecompute::kNone, false, false};
    const Prediction r = predict(config_for_tp(rm, 1), DType::kBF16, rp, docs);
    for (const double ms : {run.ms_low, run.ms_high}) {
      const double measured = static_cast<double>(run.micro_batch * run.seq) / (ms * 1e-3);
      EXPECT_LT(std::fabs(r.tokens_per_s / measured - 1.0), 0.10)
          << run.name << " (" << ms << " ms): predicted " << r.tokens_per_s << " tokens/s, measured " << measured;
    }
  }
  ParallelConfig tp2{2, 1, 1, 1, 4, 4, PlanRecompute::kNone, false, false};
  Cluster own = h100(1, 2), own_docs = h100(1, 2);
  own.engine.attention_dropout = own_docs.engine.attention_dropout = 0.1;
  own_docs.engine.document_bias = true;
  EXPECT_EQ(predict(config_for_tp(m, 2), DType::kBF16, tp2, own_docs).attention_s,
            predict(config_for_tp(m, 2), DType::kBF16, tp2, own).attention_s);
}

// Head size 80 runs as 128 (flash_kernel_head_size): the attention term of 2.7B's 32 heads of 80
// is that of the same FLOPs in heads of 128, times 128 / 80; 64 and 128 run as they are.
TEST(PlanThroughput, FlashAttentionPadsTheHeadSizeToTheKernels) {
  EXPECT_EQ(flash_kernel_head_size(64.0), 64.0);
  EXPECT_EQ(flash_kernel_head_size(80.0), 128.0);
  EXPECT_EQ(flash_kernel_head_size(96.0), 128.0);
  EXPECT_EQ(flash_kernel_head_size(128.0), 128.0);
  EXPECT_EQ(flash_kernel_head_size(160.0), 256.0);
  EXPECT_EQ(flash_kernel_head_size(32.0), 32.0);
  auto attention_s = [](int64_t heads) {  // hidden 2560 either way: heads of 80 or of 128
    const PlanModel m = test::gpt_plan_model(4, 2560, heads, 2048);
    ParallelConfig p{1, 1, 1, 1, 4, 4, PlanRecompute::kNone, false, false};
    return predict(config_for_tp(m, 1), DType::kBF16, p, h100(1, 1)).attention_s;
  };
  EXPECT_NEAR(attention_s(32) / attention_s(20), 128.0 / 80.0, 1e-9);
}

// The engine knobs, each checked against its formula (throughput_model.h, engine_profile.h) on
// one A100 (no TP / PP / DP unless stated): the difference they make is exactly their term.
Cluster a100(int64_t nodes, int64_t gpus_per_node) {
  Cluster c;
  c.gpu = find_gpu("a100-80gb");
  c.nodes = nodes;
  c.gpus_per_node = gpus_per_node;
  return c;
}

TEST(PlanThroughput, LocalAttentionCostsItsScoreTraffic) {
  // h 1024, 16 heads of 64, s 2048, micro-batch 16: E = 16 * 16 * 2048^2 scores per layer. The
  // six score GEMMs (2*E*64 FLOPs, ~0.5 ms at 271 TFLOP/s) are memory-bound (E*2 bytes, ~1.3 ms).
  const PlanModel m = test::gpt_plan_model(4, 1024, 16, 2048);
  const model::GPTConfig c = config_for_tp(m, 1);
  ParallelConfig p{1, 1, 1, 1, 16, 32, PlanRecompute::kNone, false, false};
  Cluster flash = a100(1, 1), local = a100(1, 1), dropped = a100(1, 1);
  local.engine.attention = AttentionBackend::kLocal;
  dropped.engine.attention = AttentionBackend::kLocal;
  dropped.engine.attention_dropout = 0.1;
  const double E = 16.0 * 16.0 * 2048.0 * 2048.0, stream = 2.039e12 * kStreamEfficiency;
  const double flash_layer =
      6.0 * 16.0 * 2048.0 * 2048.0 * 1024.0 / (312e12 * kAttentionEfficiency * 0.5 * 2048.0 / 2560.0);
  // forward: 2 GEMMs + softmax (2 passes); backward: 4 GEMMs + softmax backward (3 passes);
  // the context's [b, a, s, d] -> [s, b, a*d] copy (read + write, forward and backward).
  const double C = 16.0 * 2048.0 * 1024.0;
  const double local_layer = 11.0 * E * 2.0 / stream + 2.0 * 2.0 * C * 2.0 / stream;
  const double dropout_layer = 2.0 * 5.0 * E / stream;  // (2e + 1) bytes per score, forward and backward
  const double micro = 2.0, layers = 4.0;
  const double base = predict(c, DType::kBF16, p, flash).compute_s;
  EXPECT_NEAR(predict(c, DType::kBF16, p, local).compute_s - base, micro * layers * (local_layer - flash_layer), 1e-9);
  EXPECT_NEAR(predict(c, DType::kBF16, p, dropped).compute_s - base,
              micro * layers * (local_layer + dropout_layer - flash_layer), 1e-9);
  // Full recompute runs the local forward (4 score passes + dropout's forward + the copy) once more.
  ParallelConfig r = p;
  r.recompute = PlanRecompute::kFull;
  const double extra = predict(c, DType::kBF16, r, dropped).compute_s - predict(c, DType::kBF16, p, dropped).compute_s;
  const double extra_flash = predict(c, DType::kBF16, r, flash).compute_s - base;
  EXPECT_NEAR(extra - extra_flash,
              micro * layers * (4.0 * E * 2.0 / stream + 5.0 * E / stream + 2.0 * C * 2.0 / stream - flash_layer / 3.5),
              1e-9);
}

TEST(PlanThroughput, UnfusedGeluAndCrossEntropyCostTheirBytes) {
  const PlanModel m = test::gpt_plan_model(4, 1024, 16, 2048);
  const model::GPTConfig c = config_for_tp(m, 1);
  ParallelConfig p{1, 1, 1, 1, 8, 8, PlanRecompute::kNone, false, false};
  const Cluster ours = a100(1, 1);
  Cluster gelu = ours, ce = ours;
  gelu.engine.gelu_in_gemm_epilogue = false;
  ce.engine.fused_cross_entropy = false;
  const double n = 8.0 * 2048.0, stream = 2.039e12 * kStreamEfficiency;
  const double base = predict(c, DType::kBF16, p, ours).compute_s;
  EXPECT_NEAR(predict(c, DType::kBF16, p, gelu).compute_s - base, 4.0 * 5.0 * 2.0 * n * 4096.0 / stream, 1e-9);
  const double V = static_cast<double>(c.padded_vocab_size);
  EXPECT_NEAR(predict(c, DType::kBF16, p, ce).compute_s - base,
              kUnfusedLogitsBytes * n * V / stream - kLogitsBytes * n * V / 2.039e12, 1e-9);
}

// --swiglu: FC1 is one [n, h] x [h, 2f/t] GEMM (f/t more output columns, forward, dgrad and
// wgrad), and its own elementwise kernels, (kSwigluForwardBytes + kSwigluBackwardBytes) * e
// per [n, f/t] output element at the streaming rate, in place of the GELU epilogue, or of the
// separate bias-GeLU where the engine has one. Full recompute runs the forward part again.
TEST(PlanThroughput, SwigluCostsItsGemmAndItsKernels) {
  const PlanModel m = test::gpt_plan_model(4, 1024, 16, 2048);
  model::GPTConfig gelu = config_for_tp(m, 2);
  gelu.ffn_hidden_size = 2688;
  model::GPTConfig swiglu = gelu;
  swiglu.swiglu = true;
  ParallelConfig p{2, 1, 1, 1, 8, 16, PlanRecompute::kNone, false, true};  // 2 micro-batches
  const Cluster ours = a100(1, 2);
  const double n = 8.0 * 2048.0, h = 1024.0, f_t = 2688.0 / 2.0, e = 2.0, layers = 4.0, micro = 2.0;
  const double gemm_rate = 312e12 * kGemmCeilingShare * ours.gpu.gemm_efficiency;
  const double stream = 2.039e12 * kStreamEfficiency;
  const Prediction g = predict(gelu, DType::kBF16, p, ours), w = predict(swiglu, DType::kBF16, p, ours);
  const double fc1 = micro * layers * 3.0 * 2.0 * n * f_t * h / gemm_rate;  // the extra f/t columns
  const double kernels = micro * layers * (kSwigluForwardBytes + kSwigluBackwardBytes) * e * n * f_t / stream;
  EXPECT_NEAR(w.gemm_s - g.gemm_s, fc1, 1e-12);
  EXPECT_NEAR(w.memory_bound_s - g.memory_bound_s, kernels, 1e-12);
  EXPECT_NEAR(w.compute_s - g.compute_s, fc1 + kernels, 1e-12);
  EXPECT_DOUBLE_EQ(w.attention_s, g.attention_s);
  EXPECT_DOUBLE_EQ(kSwigluForwardBytes + kSwigluBackwardBytes, 8.0);  // 2 + 1 forward, 1 + 2 + 2 backward
  // An engine with a separate bias-GeLU (5e per element) runs SwiGLU's kernels instead.
  Cluster unfused = ours;
  unfused.engine.gelu_in_gemm_epilogue = false;
  EXPECT_NEAR(predict(swiglu, DType::kBF16, p, unfused).compute_s - predict(gelu, DType::kBF16, p, unfused).compute_s,
              fc1 + kernels - micro * layers * 5.0 * e * n * f_t / stream, 1e-12);
  EXPECT_DOUBLE_EQ(predict(swiglu, DType::kBF16, p, unfused).compute_s, w.compute_s);
  // Full recompute: one more forward, a third of the extra GEMM and the forward kernel.
  ParallelConfig r = p;
  r.recompute = PlanRecompute::kFull;
  const double extra = (predict(swiglu, DType::kBF16, r, ours).compute_s - w.compute_s) -
                       (predict(gelu, DType::kBF16, r, ours).compute_s - g.compute_s);
  EXPECT_NEAR(extra, fc1 / 3.0 + micro * layers * kSwigluForwardBytes * e * n * f_t / stream, 1e-12);
}

// RMSNorm takes LayerNorm's term (throughput_model.h): the same compute; only the parameter
// count (no norm biases) moves the optimizer and gradient reduction.
TEST(PlanThroughput, RmsNormComputesLikeLayerNorm) {
  const PlanModel m = test::gpt_plan_model(8, 2048, 16, 2048);
  const model::GPTConfig layernorm = config_for_tp(m, 1);
  model::GPTConfig rmsnorm = layernorm;
  rmsnorm.normalization = model::Normalization::kRMSNorm;
  ParallelConfig p{1, 1, 1, 8, 1, 16, PlanRecompute::kNone, false, false};
  const Prediction a = predict(layernorm, DType::kBF16, p, h100(1));
  const Prediction b = predict(rmsnorm, DType::kBF16, p, h100(1));
  EXPECT_EQ(a.compute_s, b.compute_s);
  EXPECT_EQ(a.memory_bound_s, b.memory_bound_s);
  EXPECT_EQ(model_flops(layernorm, 16, true), model_flops(rmsnorm, 16, true));
  EXPECT_EQ(stage_num_parameters(layernorm, p, 0) - stage_num_parameters(rmsnorm, p, 0), (2 * 8 + 1) * 2048);
  EXPECT_LT(b.optimizer_s, a.optimizer_s);
}

// The Megatron-2021 engine settings each cost what engine_profile.h says they do.
TEST(PlanThroughput, Megatron2021SettingsCostTheirBytes) {
  const PlanModel m = test::gpt_plan_model(4, 1024, 16, 2048);
  const model::GPTConfig c = config_for_tp(m, 1);
  ParallelConfig p{1, 1, 1, 1, 8, 32, PlanRecompute::kNone, false, false};  // 4 micro-batches
  const Cluster ours = a100(1, 1);
  const double n = 8.0 * 2048.0, h = 1024.0, e = 2.0, stream = 2.039e12 * kStreamEfficiency, layers = 4.0, micro = 4.0;
  const Prediction base = predict(c, DType::kBF16, p, ours);

  // 1-byte mask forward, mask + grad in/out backward, two per layer; and with dropout the
  // residual add leaves the GEMM epilogue for the bias-dropout-add kernel.
  Cluster dropout = ours;
  dropout.engine.hidden_dropout = 0.1;
  EXPECT_NEAR(predict(c, DType::kBF16, p, dropout).compute_s - base.compute_s,
              micro * layers * (2.0 * (1.0 + 2.0 * e + 1.0) * n * h / stream + kBiasDropoutAddBytes * n * h / 2.039e12),
              1e-9);

  Cluster bias = ours;  // QKV `+= bias`: 2e bytes per QKV output element, forward only
  bias.engine.linear_bias_in_epilogue = false;
  EXPECT_NEAR(predict(c, DType::kBF16, p, bias).compute_s - base.compute_s,
              micro * layers * 2.0 * e * n * 3.0 * h / stream, 1e-9);

  Cluster accumulate = ours;  // m - 1 passes over the parameters
  accumulate.engine.wgrad_accumulation_bytes = 6.0;
  const double P = static_cast<double>(stage_num_parameters(c, p, 0));
  EXPECT_NEAR(predict(c, DType::kBF16, p, accumulate).compute_s - base.compute_s, 3.0 * 6.0 * P / stream, 1e-9);
  ParallelConfig one = p;
  one.global_batch = 8;  // a single micro-batch accumulates nothing
  EXPECT_DOUBLE_EQ(predict(c, DType::kBF16, one, accumulate).compute_s, predict(c, DType::kBF16, one, ours).compute_s);

  Cluster optimizer = ours;
  optimizer.engine.optimizer_bytes = kMegatron2021OptimizerBytes;
  EXPECT_NEAR(predict(c, DType::kBF16, p, optimizer).optimizer_s, 62.0 * P / stream, 1e-12);

  // A lower GEMM ceiling slows the GEMMs by the ratio of ceilings (lost work scales with it);
  // ours is kGemmCeilingShare of the A100's 0.869.
  Cluster slow = ours;
  slow.engine.gemm_efficiency = kGemmEfficiencyA100Era2022;
  EXPECT_NEAR(predict(c, DType::kBF16, p, slow).gemm_s / base.gemm_s, kGemmCeilingShare * 0.869 / (230.0 / 312.0),
              1e-9);
  EXPECT_DOUBLE_EQ(predict(c, DType::kBF16, p, slow).attention_s, base.attention_s);  // flash: own efficiency

  // The profile sets all of them.
  const Engine e2021 = find_engine("megatron-2021");
  EXPECT_DOUBLE_EQ(e2021.gemm_efficiency, kGemmEfficiencyA100Era2022);
  EXPECT_DOUBLE_EQ(e2021.hidden_dropout, 0.1);
  EXPECT_FALSE(e2021.linear_bias_in_epilogue);
  EXPECT_DOUBLE_EQ(e2021.wgrad_accumulation_bytes, 6.0);
  EXPECT_DOUBLE_EQ(e2021.optimizer_bytes, kMegatron2021OptimizerBytes);
  EXPECT_FALSE(e2021.residual_add_in_gemm_epilogue || e2021.residual_grad_add_in_layernorm);
}

// The residual adds (throughput_model.h "memory-bound"): ours adds the residual in the
// projection / FC2 GEMM epilogue without TP and dropout and the residual gradient in the
// LayerNorm backward; each unfused form costs its bytes per layer, token and hidden element.
TEST(PlanThroughput, ResidualAddsCostTheirBytes) {
  const PlanModel m = test::gpt_plan_model(4, 1024, 16, 2048);
  const model::GPTConfig c = config_for_tp(m, 1);
  ParallelConfig p{1, 1, 1, 1, 8, 16, PlanRecompute::kNone, false, false};  // 2 micro-batches
  const Cluster ours = a100(1, 1);
  Cluster bda = ours, grad = ours;
  bda.engine.residual_add_in_gemm_epilogue = false;
  grad.engine.residual_grad_add_in_layernorm = false;
  const double nh = 8.0 * 2048.0 * 1024.0, hbm = 2.039e12, layers = 4.0, micro = 2.0;
  const double base = predict(c, DType::kBF16, p, ours).compute_s;
  EXPECT_NEAR(predict(c, DType::kBF16, p, bda).compute_s - base, micro * layers * kBiasDropoutAddBytes * nh / hbm,
              1e-12);
  EXPECT_NEAR(predict(c, DType::kBF16, p, grad).compute_s - base, micro * layers * kResidualGradAddBytes * nh / hbm,
              1e-12);
  EXPECT_NEAR(predict(c, DType::kBF16, p, bda).memory_bound_s - predict(c, DType::kBF16, p, ours).memory_bound_s,
              predict(c, DType::kBF16, p, bda).compute_s - base, 1e-12);
  // Full recompute runs the bias-dropout-add again (a forward op), not the gradient add.
  ParallelConfig r = p;
  r.recompute = PlanRecompute::kFull;
  const double full = predict(c, DType::kBF16, r, ours).compute_s;
  EXPECT_NEAR(predict(c, DType::kBF16, r, bda).compute_s - full, 2.0 * micro * layers * kBiasDropoutAddBytes * nh / hbm,
              1e-12);
  EXPECT_NEAR(predict(c, DType::kBF16, r, grad).compute_s - full, micro * layers * kResidualGradAddBytes * nh / hbm,
              1e-12);
  // With TP our engine reduces the row-parallel GEMM's output before the bias-dropout-add, so
  // the epilogue setting makes no difference there.
  const model::GPTConfig c2 = config_for_tp(m, 2);
  ParallelConfig t{2, 1, 1, 1, 8, 16, PlanRecompute::kNone, false, true};
  Cluster ours2 = a100(1, 2), bda2 = a100(1, 2);
  bda2.engine.residual_add_in_gemm_epilogue = false;
  EXPECT_DOUBLE_EQ(predict(c2, DType::kBF16, t, ours2).compute_s, predict(c2, DType::kBF16, t, bda2).compute_s);
}

// Our TP collectives' share of NVLink: the two measured anchors, flat outside them, rising
// log-linearly between them (at the geometric mean of the two sizes, the mean of the shares).
TEST(PlanThroughput, OurTpCollectiveShareFollowsMessageSize) {
  EXPECT_EQ(our_tp_collective_share(1e6), kOurTpShareSmall);
  EXPECT_EQ(our_tp_collective_share(kOurTpShareSmallBytes), kOurTpShareSmall);
  EXPECT_DOUBLE_EQ(our_tp_collective_share(kOurTpShareLargeBytes), kOurTpShareLarge);
  EXPECT_EQ(our_tp_collective_share(4e9), kOurTpShareLarge);
  const double mid = std::sqrt(kOurTpShareSmallBytes * kOurTpShareLargeBytes);
  EXPECT_NEAR(our_tp_collective_share(mid), 0.5 * (kOurTpShareSmall + kOurTpShareLarge), 1e-12);
  // TP is slower with the measured share than at the large-message efficiency, and the other
  // engine profiles keep the latter.
  const PlanModel m = test::gpt_plan_model(24, 2048, 16, 2048);
  const model::GPTConfig c = config_for_tp(m, 4);
  const ParallelConfig p{4, 1, 1, 1, 4, 4, PlanRecompute::kNone, false, true};
  Cluster ours = h100(1), large = h100(1);
  large.engine.measured_tp_collectives = false;
  EXPECT_GT(predict(c, DType::kBF16, p, ours).tp_comm_s, 1.5 * predict(c, DType::kBF16, p, large).tp_comm_s);
  EXPECT_FALSE(find_engine("megatron-core-2024").measured_tp_collectives);
  EXPECT_FALSE(find_engine("megatron-2021").measured_tp_collectives);
  EXPECT_TRUE(find_engine("ours").measured_tp_collectives);
}

TEST(PlanThroughput, TensorParallelOverlapSettings) {
  const PlanModel m = test::gpt_plan_model(8, 4096, 32, 2048);
  const model::GPTConfig c = config_for_tp(m, 8);
  ParallelConfig p{8, 1, 1, 1, 1, 4, PlanRecompute::kNone, false, true};
  const Cluster ours = h100(1);
  Cluster sync = ours, overlapped = ours;
  sync.engine.async_tp_allreduce = false;
  // --tp-comm-overlap is Transformer Engine's userbuffers, not our NCCL collectives: the link at
  // kLinkEfficiency, as the megatron-core-2024 profile has it.
  overlapped.engine.tp_comm_overlap = true;
  overlapped.engine.measured_tp_collectives = false;
  // Without async all-reduce all five per layer are exposed (four, and under SP the backward's
  // all-gathers of dy for proj and FC2, a fifth): 5 * layers * micro-batches of them, each
  // [2048, 4096] bf16 (16.8 MB) at our measured share of NVLink for that size.
  const double share = our_tp_collective_share(2048.0 * 4096.0 * 2.0);
  EXPECT_EQ(share, kOurTpShareSmall);
  const double one =
      all_reduce_seconds(2048.0 * 4096.0 * 2.0, 8, Link{450e9 * share / kLinkEfficiency, kNvlinkLatency});
  EXPECT_NEAR(predict(c, DType::kBF16, p, sync).tp_comm_s, 5.0 * 8.0 * 4.0 * one, 1e-12);
  const double async = predict(c, DType::kBF16, p, ours).tp_comm_s;
  EXPECT_LT(async, 5.0 * 8.0 * 4.0 * one);
  EXPECT_GE(async, 3.0 * 8.0 * 4.0 * one);
  // Pipelined with the GEMMs: a layer's 5 all-reduce equivalents (~0.62 ms at the large-message
  // efficiency) about match its GEMMs (~0.62 ms): a few microseconds per layer stay exposed, under
  // 2% of what the blocking collectives at our share cost.
  const double pipelined = predict(c, DType::kBF16, p, overlapped).tp_comm_s;
  EXPECT_LT(pipelined, 0.02 * 5.0 * 8.0 * 4.0 * one);
  // Without SP there is nothing for --tp-comm-overlap to pipeline.
  ParallelConfig no_sp = p;
  no_sp.sequence_parallel = false;
  Cluster ours_at_large_share = ours;
  ours_at_large_share.engine.measured_tp_collectives = false;
  EXPECT_EQ(predict(c, DType::kBF16, no_sp, overlapped).tp_comm_s,
            predict(c, DType::kBF16, no_sp, ours_at_large_share).tp_comm_s);
}

TEST(PlanThroughput, GradientReductionMovesGradReduceBytes) {
  const PlanModel m = test::gpt_plan_model(8, 2048, 16, 2048);
  const model::GPTConfig c = config_for_tp(m, 1);
  ParallelConfig p{1, 1, 1, 8, 1, 8, PlanRecompute::kNone, false, false};
  Cluster fp32 = h100(1), half = h100(1);
  fp32.overlap_grad_reduce = half.overlap_grad_reduce = false;
  half.engine.grad_reduce_bytes = 2;
  const double P = static_cast<double>(stage_num_parameters(c, p, 0));
  const Link nvlink{450e9, kNvlinkLatency};
  EXPECT_NEAR(predict(c, DType::kBF16, p, fp32).dp_comm_s, all_reduce_seconds(P * 4.0, 8, nvlink), 1e-12);
  EXPECT_NEAR(predict(c, DType::kBF16, p, half).dp_comm_s, all_reduce_seconds(P * 2.0, 8, nvlink), 1e-12);
}

// Overlapped gradient reduction: the last bucket is exposed; over NVLink the rest costs the GEMMs
// beside it kOverlapContention of its time, across nodes nothing (while it fits the backward).
TEST(PlanThroughput, OverlappedReductionCostsContentionOnlyOnNvlink) {
  const PlanModel m = test::gpt_plan_model(24, 2048, 16, 2048);
  const model::GPTConfig c = config_for_tp(m, 1);
  const double P = static_cast<double>(
      stage_num_parameters(c, ParallelConfig{1, 1, 1, 8, 4, 32, PlanRecompute::kNone, false, false}, 0));
  const double buckets = std::ceil(P / static_cast<double>(parallel::overlap_bucket_elements(8)));
  // 8 GPUs of one node: DP over NVLink.
  ParallelConfig p{1, 1, 1, 8, 4, 32, PlanRecompute::kNone, false, false};
  Cluster node = h100(1), blocking = h100(1);
  blocking.overlap_grad_reduce = false;
  const double all = predict(c, DType::kBF16, p, blocking).dp_comm_s;
  EXPECT_NEAR(predict(c, DType::kBF16, p, node).dp_comm_s, all / buckets + kOverlapContention * (all - all / buckets),
              1e-12);
  // 8 nodes of one GPU: DP across the network (as fast as NVLink, so that the reduction fits the
  // backward), only the last bucket shows.
  Cluster nodes = h100(8, 1), nodes_blocking = h100(8, 1);
  nodes.inter_node_bytes_per_s = nodes_blocking.inter_node_bytes_per_s = 450e9;
  nodes_blocking.overlap_grad_reduce = false;
  const double across = predict(c, DType::kBF16, p, nodes_blocking).dp_comm_s;
  EXPECT_NEAR(predict(c, DType::kBF16, p, nodes).dp_comm_s, across / buckets, 1e-12);
}

// With the copy engines (ParallelConfig::dp_copy_engine) the part beside the compute costs
// kCopyEngineContention of its time instead; across nodes the layout cannot use them, and the
// search (evaluate_layout) turns them on only where the DP group is inside a node.
TEST(PlanThroughput, CopyEnginesContendLess) {
  const PlanModel m = test::gpt_plan_model(24, 2048, 16, 2048);
  const model::GPTConfig c = config_for_tp(m, 1);
  ParallelConfig p{1, 1, 1, 8, 4, 32, PlanRecompute::kNone, true, false};
  Cluster node = h100(1), blocking = h100(1);
  blocking.overlap_grad_reduce = blocking.overlap_param_gather = false;
  const double P = static_cast<double>(stage_num_parameters(c, p, 0));
  const double buckets = std::ceil(P / static_cast<double>(parallel::overlap_bucket_elements(8)));
  const double all = predict(c, DType::kBF16, p, blocking).dp_comm_s;
  const double sm = predict(c, DType::kBF16, p, node).dp_comm_s;
  p.dp_copy_engine = true;
  const double ce = predict(c, DType::kBF16, p, node).dp_comm_s;
  EXPECT_NEAR(sm, all / buckets + kOverlapContention * (all - all / buckets), 1e-12);
  EXPECT_NEAR(ce, all / buckets + kCopyEngineContention * (all - all / buckets), 1e-12);
  EXPECT_LT(kCopyEngineContention, kOverlapContention);
  p.dp_copy_engine = false;
  node.dp_copy_engine = true;
  EXPECT_TRUE(evaluate_layout(m, node, p).parallel.dp_copy_engine);
  Cluster nodes = h100(8, 1);
  nodes.dp_copy_engine = true;
  EXPECT_FALSE(evaluate_layout(m, nodes, p).parallel.dp_copy_engine) << "the DP group spans nodes";
  p.distributed_optimizer = false;
  EXPECT_FALSE(evaluate_layout(m, node, p).parallel.dp_copy_engine) << "an all-reduce needs the SMs";
}

TEST(PlanThroughput, EngineProfiles) {
  const Engine ours = find_engine("ours");
  EXPECT_EQ(ours.attention, AttentionBackend::kFlash);
  EXPECT_TRUE(ours.fused_cross_entropy && ours.gelu_in_gemm_epilogue && ours.async_tp_allreduce);
  EXPECT_FALSE(ours.tp_comm_overlap);
  EXPECT_EQ(ours.grad_reduce_bytes, 4);
  EXPECT_TRUE(ours.residual_add_in_gemm_epilogue && ours.residual_grad_add_in_layernorm);
  const Engine core = find_engine("megatron-core-2024");
  EXPECT_FALSE(core.residual_add_in_gemm_epilogue || core.residual_grad_add_in_layernorm);
  const Engine old = find_engine("megatron-2021");
  EXPECT_EQ(old.attention, AttentionBackend::kLocal);
  EXPECT_EQ(old.grad_reduce_bytes, 2);
  EXPECT_FALSE(old.async_tp_allreduce || old.gelu_in_gemm_epilogue || old.fused_cross_entropy);
  EXPECT_TRUE(find_engine("megatron-core-2024").tp_comm_overlap);
  try {
    find_engine("deepspeed");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[--engine] unknown engine 'deepspeed'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace megatron::plan

namespace megatron::plan {
namespace {

// Llama's terms: grouped-query attention narrows the QKV GEMM to (a + 2g) d and counts keys and
// values at g heads in the FLOPs (as train/flops.h); rotary embeddings add memory-bound passes
// over q and k (kRopeBytes).
TEST(PlanThroughput, LlamaTermsGroupedQueriesAndRotary) {
  PlanModel m = test::gpt_plan_model(32, 4096, 32, 4096, 128256);
  m.config.swiglu = true;
  m.config.ffn_hidden_size = 14336;
  m.config.untie_embeddings_and_output_weights = true;
  const ParallelConfig p{1, 1, 1, 1, 1, 8, PlanRecompute::kNone, false, false};
  Cluster cl;
  cl.gpu = find_gpu("h100-80gb");
  cl.gpus_per_node = 1;
  const model::GPTConfig mha = config_for_tp(m, 1);
  m.config.num_query_groups = 8;
  const model::GPTConfig gqa = config_for_tp(m, 1);
  // FLOPs per iteration: the K and V projections shrink from 2 h^2 to 2 h (g d) per token and layer.
  const double B = 8, s = 4096, L = 32, h = 4096;
  EXPECT_NEAR(model_flops(mha, 8, false) - model_flops(gqa, 8, false), 6.0 * B * s * L * h * 2.0 * (h - 8 * 128), 1e6);
  EXPECT_LT(predict(gqa, DType::kBF16, p, cl).gemm_s, predict(mha, DType::kBF16, p, cl).gemm_s);
  m.config.position_embedding = model::PositionEmbedding::kRope;
  const model::GPTConfig rope = config_for_tp(m, 1);
  const double extra =
      predict(rope, DType::kBF16, p, cl).memory_bound_s - predict(gqa, DType::kBF16, p, cl).memory_bound_s;
  // kRopeBytes x 2 bytes x (32 + 8) x 128 per token, twice (forward, backward), 32 layers, 8 x 4096 tokens.
  const double expect =
      2.0 * kRopeBytes * 2.0 * 40.0 * 128.0 * B * s * L / (cl.gpu.hbm_bytes_per_s * kStreamEfficiency);
  EXPECT_NEAR(extra, expect, 1e-3 * expect);
}

// --fp8-format: the four layer GEMMs at H100's FP8 peak, 1979 TFLOP/s (2x bf16's 989, NVIDIA's
// datasheet), at the same ceiling share and lost time per GEMM, so FP8 saves half of their work
// time; the LM head stays bf16. Beside them, worked out per linear [out, in] over n rows (e = 2)
// with the delayed recipe (one read per quantize; tensorwise reads twice): x forward and x^T
// backward (e + 1 bytes per element each), w in both layouts forward (e + 2; the backward
// reads the saved w^T), dy in both layouts (e + 2) and the bias gradient's e over dy:
// 6 n in + 4 out in + 6 n out (tensorwise: 10 n in + 6 out in + 8 n out); FC1's GELU outside the GEMM (5e per [n, f]
// element) and the residual's bias-dropout-add (kBiasDropoutAddBytes per [n, h] element at the HBM rate).
TEST(PlanThroughput, Fp8HalvesTheLinearGemmsAndAddsItsQuantizePasses) {
  const PlanModel m = test::gpt_plan_model(4, 1024, 16, 2048);
  const model::GPTConfig c = config_for_tp(m, 1);
  model::GPTConfig fp8 = c;
  fp8.fp8 = backend::Fp8Config{};
  ParallelConfig p{1, 1, 1, 1, 8, 16, PlanRecompute::kNone, false, false};  // 2 micro-batches
  Cluster cl = h100(1, 1);
  cl.engine.attention_dropout = cl.engine.hidden_dropout = 0.0;
  const Prediction b = predict(c, DType::kBF16, p, cl), f = predict(fp8, DType::kBF16, p, cl);
  const double n = 8.0 * 2048.0, h = 1024.0, ff = 4096.0, micro = 2.0, layers = 4.0;
  const double rate = 989e12 * kGemmCeilingShare * 0.803, stream = 3.35e12 * kStreamEfficiency;
  const double work = micro * layers * 3.0 * 2.0 * n * (3.0 * h * h + h * h + ff * h + h * ff);
  EXPECT_NEAR(b.gemm_s - f.gemm_s, work / rate * (1.0 - 989.0 / 1979.0), 1e-12);
  // Bytes per linear [out, in] over n rows, bf16 operands, delayed (one read per cast): x cast
  // 2 + 1 (forward) and again 2 + 1 for x^T (backward), w 2 + 2, dy 2 + 2 (bias gradient in the
  // cast). FC1's dy cast reads d(act) and the pre-activation (2 + 2 + 2); FC2's forward writes
  // x^T too (2 + 2) and its backward casts no x.
  struct Coeffs {
    double out, in, n_in, out_in, n_out;
  };
  const Coeffs shapes[4] = {{3.0 * h, h, 6, 4, 4}, {h, h, 6, 4, 4}, {ff, h, 6, 4, 6}, {h, ff, 4, 4, 4}};
  double bytes = 0;
  for (const Coeffs& w : shapes) bytes += w.n_in * n * w.in + w.out_in * w.out * w.in + w.n_out * n * w.out;
  EXPECT_NEAR(f.fp8_quantize_s, micro * layers * bytes / stream, 1e-12);
  EXPECT_EQ(b.fp8_quantize_s, 0.0);
  // The GELU runs inside the casts: only the bias-dropout-add is added outside them.
  const double others = micro * layers * kBiasDropoutAddBytes * n * h / 3.35e12;
  EXPECT_NEAR(f.memory_bound_s - b.memory_bound_s, f.fp8_quantize_s + others, 1e-12);
  EXPECT_DOUBLE_EQ(f.attention_s, b.attention_s);
  // Full recompute quantizes the forward's operands again: x (FC2: with x^T) and w of each.
  ParallelConfig r = p;
  r.recompute = PlanRecompute::kFull;
  double forward = 0;
  for (const Coeffs& w : shapes) forward += (w.n_in == 4 ? 4.0 : 3.0) * n * w.in + 4.0 * w.out * w.in;
  EXPECT_NEAR(predict(fp8, DType::kBF16, r, cl).fp8_quantize_s, f.fp8_quantize_s + micro * layers * forward / stream,
              1e-12);
  // Tensorwise reads each operand once more (its amax pass): x 4 + 1, w 4 + 2, dy 4 + 2 (FC1's
  // 8 + 2), x^T 4 + 1 (FC2's forward 4 + 2, none backward).
  model::GPTConfig tensorwise = fp8;
  tensorwise.fp8->recipe = backend::Fp8Recipe::kTensorwise;
  const Coeffs current[4] = {{3.0 * h, h, 10, 6, 6}, {h, h, 10, 6, 6}, {ff, h, 10, 6, 10}, {h, ff, 6, 6, 6}};
  double tensorwise_bytes = 0;
  for (const Coeffs& w : current) tensorwise_bytes += w.n_in * n * w.in + w.out_in * w.out * w.in + w.n_out * n * w.out;
  EXPECT_NEAR(predict(tensorwise, DType::kBF16, p, cl).fp8_quantize_s, micro * layers * tensorwise_bytes / stream,
              1e-12);
}

// At 2.7B on one H100 FP8 is faster, by less than the GEMMs' 2x (attention, the LM head, the
// quantize passes and the rest stay); H200 has the same FP8 peak; A100 has no FP8 tensor cores.
TEST(PlanThroughput, Fp8SpeedupIsBelowTheGemmRatioAndNeedsHopper) {
  const PlanModel m = test::gpt_plan_model(32, 2560, 32, 2048);
  const model::GPTConfig c = config_for_tp(m, 1);
  model::GPTConfig fp8 = c;
  fp8.fp8 = backend::Fp8Config{};
  ParallelConfig p{1, 1, 1, 1, 4, 8, PlanRecompute::kNone, false, false};
  for (const char* gpu : {"h100-80gb", "h200-141gb"}) {
    Cluster cl = h100(1, 1);
    cl.gpu = find_gpu(gpu);
    EXPECT_NEAR(cl.gpu.fp8_tflops / cl.gpu.peak_tflops, 2.0, 2e-3) << gpu;  // 1979 / 989
    const double speedup =
        predict(c, DType::kBF16, p, cl).seconds_per_iteration / predict(fp8, DType::kBF16, p, cl).seconds_per_iteration;
    EXPECT_GT(speedup, 1.05) << gpu;
    EXPECT_LT(speedup, 2.0) << gpu;
  }
  Cluster a100 = h100(1, 1);
  a100.gpu = find_gpu("a100-80gb");
  EXPECT_EQ(a100.gpu.fp8_tflops, 0.0);
  try {
    predict(fp8, DType::kBF16, p, a100);
    FAIL() << "FP8 priced on an A100";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[--fp8-format] a100-80gb has no FP8 tensor cores"), std::string::npos)
        << e.what();
  }
}

// Under TP the FP8 column-parallel backward sums dX after its one FP8 call: the two backward
// all-reduces no longer hide behind the QKV and FC1 weight gradients.
TEST(PlanThroughput, Fp8LosesTheAsyncTensorParallelAllReduce) {
  const PlanModel m = test::gpt_plan_model(4, 4096, 32, 2048);
  const model::GPTConfig c = config_for_tp(m, 2);
  model::GPTConfig fp8 = c;
  fp8.fp8 = backend::Fp8Config{};
  ParallelConfig p{2, 1, 1, 1, 4, 4, PlanRecompute::kNone, false, false};
  Cluster cl = h100(1, 2);
  cl.engine.attention_dropout = cl.engine.hidden_dropout = 0.0;
  const Prediction b = predict(c, DType::kBF16, p, cl), f = predict(fp8, DType::kBF16, p, cl);
  EXPECT_GT(f.tp_comm_s, b.tp_comm_s);
  cl.engine.async_tp_allreduce = false;  // without the overlap the two are priced the same
  EXPECT_DOUBLE_EQ(predict(fp8, DType::kBF16, p, cl).tp_comm_s, predict(c, DType::kBF16, p, cl).tp_comm_s);
}

}  // namespace
}  // namespace megatron::plan
