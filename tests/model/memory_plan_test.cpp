// --dry-run's plan (model/memory_plan.h) against the bytes the CPU engine really allocates,
// kind by kind, for several precisions and shapes; and a training step allocates nothing
// beyond the plan.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <optional>
#include <string>

#include "backend/fp8_recipe.h"
#include "backend/ops.h"
#include "comm/mpi_communicator.h"
#include "core/error.h"
#include "core/memory.h"
#include "model/gpt_model.h"
#include "model/memory_plan.h"
#include "optim/loss_scaler.h"
#include "parallel/grad_buffer.h"
#include "parallel/optimizer.h"
#include "support/mpi.h"

namespace megatron::model {
namespace {

int64_t delta(const MemorySnapshot& after, const MemorySnapshot& before, MemoryKind kind) {
  const int k = static_cast<int>(kind);
  return after.current[k] - before.current[k];
}

// The memory kinds a model and its optimizer allocate, and what the plan says of each (the FP8
// buffers are workspace to the tracker).
constexpr MemoryKind kModelKinds[] = {MemoryKind::kParams,    MemoryKind::kMainParams,  MemoryKind::kGrads,
                                      MemoryKind::kOptimizer, MemoryKind::kActivations, MemoryKind::kWorkspace};
int64_t planned_bytes(const MemoryPlan& plan, MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kParams:
      return plan.parameters;
    case MemoryKind::kMainParams:
      return plan.main_parameters;
    case MemoryKind::kGrads:
      return plan.gradients;
    case MemoryKind::kOptimizer:
      return plan.optimizer;
    case MemoryKind::kActivations:
      return plan.activations;
    default:
      return plan.workspace + plan.fp8;
  }
}

struct Case {
  const char* name;
  DType dtype;
  bool untied;
  bool bias;
  int64_t micro_batch;
  int64_t kv_channels;
  Recompute recompute = Recompute::kNone;
  int64_t recompute_num_layers = 1;
  bool documents = false;  // --reset-position-ids and --reset-attention-mask
  bool rmsnorm = false;    // --normalization RMSNorm
  bool swiglu = false;     // --swiglu
  bool qk = false;         // --qk-layernorm (with rotary embeddings, 3 heads in 1 group)
  // --fp8-format: 0 none; 1 hybrid, delayed with --fp8-amax-history-len 3; 2 e4m3, tensorwise.
  int fp8 = 0;
};

// The FP8 configuration of Case::fp8.
std::optional<backend::Fp8Config> fp8_config(int kind) {
  if (kind == 0) return std::nullopt;
  backend::Fp8Config f;
  f.format = kind == 1 ? backend::Fp8Mix::kHybrid : backend::Fp8Mix::kE4M3;
  f.recipe = kind == 1 ? backend::Fp8Recipe::kDelayed : backend::Fp8Recipe::kTensorwise;
  f.amax_history_len = 3;
  return f;
}

class MemoryPlanTest : public ::testing::TestWithParam<Case> {};

TEST_P(MemoryPlanTest, PlanEqualsAllocatedBytes) {
  const Case& k = GetParam();
  GPTConfig c;
  c.num_layers = 3;
  c.hidden_size = 24;
  c.num_attention_heads = 3;
  c.kv_channels = k.kv_channels;
  c.ffn_hidden_size = 40;
  c.seq_length = 7;
  c.max_position_embeddings = 9;
  c.vocab_size = 50;
  c.padded_vocab_size = 64;
  c.untie_embeddings_and_output_weights = k.untied;
  c.add_bias_linear = k.bias;
  c.recompute = k.recompute;
  c.recompute_num_layers = k.recompute_num_layers;
  c.reset_position_ids = c.reset_attention_mask = k.documents;
  c.normalization = k.rmsnorm ? Normalization::kRMSNorm : Normalization::kLayerNorm;
  c.swiglu = k.swiglu;
  if (k.qk) {
    c.qk_layernorm = true;
    c.position_embedding = PositionEmbedding::kRope;
    c.num_query_groups = 1;
  }
  c.fp8 = fp8_config(k.fp8);
  const MemoryPlan plan = plan_memory(c, k.dtype, k.micro_batch);
  EXPECT_EQ(plan.fp8 != 0, k.fp8 != 0);

  auto backend = backend::make_cpu_backend();
  MemoryTracker& tracker = memory_tracker(Device::kCPU);
  const MemorySnapshot before = tracker.snapshot();
  GPTModel model(c, *backend, k.dtype, k.micro_batch);
  parallel::MixedPrecisionOptimizer opt(model.parameters(), *backend, parallel::OptimizerConfig{},
                                        optim::GradScaler::constant(1.0f));
  const MemorySnapshot built = tracker.snapshot();

  EXPECT_EQ(plan.num_parameters, model.parameters().total_numel());
  EXPECT_EQ(plan.parameters, delta(built, before, MemoryKind::kParams));
  EXPECT_EQ(plan.main_parameters, delta(built, before, MemoryKind::kMainParams));
  EXPECT_EQ(plan.gradients, delta(built, before, MemoryKind::kGrads));
  EXPECT_EQ(plan.optimizer, delta(built, before, MemoryKind::kOptimizer));
  EXPECT_EQ(plan.activations, delta(built, before, MemoryKind::kActivations));
  // The FP8 buffers and scaling state are allocated as workspace.
  EXPECT_EQ(plan.workspace + plan.fp8, delta(built, before, MemoryKind::kWorkspace));

  // A whole step (forward, backward, optimizer) allocates nothing of the planned kinds.
  tracker.reset_peak();
  MicroBatch mb;
  mb.batch = k.micro_batch;
  mb.seq = c.seq_length;
  for (int64_t i = 0; i < mb.batch * mb.seq; ++i) {
    mb.tokens.push_back(static_cast<int32_t>(i % c.vocab_size));
    mb.labels.push_back(static_cast<int32_t>((i * 7 + 3) % c.vocab_size));
    mb.loss_mask.push_back(1.0f);
    if (k.documents) {  // two documents per row: positions 0-2, then 0-3
      const int32_t t = static_cast<int32_t>(i % c.seq_length), start = t < 3 ? 0 : 3;
      mb.position_ids.push_back(t - start);
      mb.key_start.push_back(start);
    }
  }
  opt.zero_grads();
  model.forward(mb, {});
  model.backward(1.0f, 1.0f);
  model.fp8_update(nullptr);
  opt.step(1e-3f, 0.01f);
  const MemorySnapshot after = tracker.snapshot();
  for (MemoryKind kind : {MemoryKind::kParams, MemoryKind::kMainParams, MemoryKind::kGrads, MemoryKind::kOptimizer,
                          MemoryKind::kActivations, MemoryKind::kWorkspace}) {
    const int i = static_cast<int>(kind);
    EXPECT_EQ(after.peak[i], built.current[i]) << memory_kind_name(kind) << " grew during a step";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MemoryPlanTest,
    ::testing::Values(
        Case{"fp32", DType::kF32, false, true, 2, 8}, Case{"bf16", DType::kBF16, false, true, 3, 8},
        Case{"fp16_untied", DType::kF16, true, true, 1, 8}, Case{"bf16_nobias_kv5", DType::kBF16, false, false, 2, 5},
        Case{"bf16_recompute_uniform2", DType::kBF16, false, true, 2, 8, Recompute::kUniform, 2},
        Case{"fp32_recompute_block1", DType::kF32, false, true, 2, 8, Recompute::kBlock, 1},
        Case{"bf16_documents_recompute_uniform1", DType::kBF16, false, true, 2, 8, Recompute::kUniform, 1, true},
        Case{"bf16_rmsnorm_swiglu", DType::kBF16, false, true, 2, 8, Recompute::kNone, 1, false, true, true},
        Case{"fp32_rmsnorm_swiglu_nobias_untied_recompute_block1", DType::kF32, true, false, 2, 8, Recompute::kBlock, 1,
             false, true, true},
        Case{"fp16_swiglu", DType::kF16, false, true, 1, 8, Recompute::kNone, 1, false, false, true},
        Case{"bf16_rmsnorm", DType::kBF16, false, true, 3, 8, Recompute::kNone, 1, false, true, false},
        Case{"fp32_qk_layernorm", DType::kF32, false, true, 2, 8, Recompute::kNone, 1, false, false, false, true},
        Case{"bf16_qk_rmsnorm_swiglu_recompute_block1", DType::kBF16, true, false, 2, 6, Recompute::kBlock, 1, false,
             true, true, true},
        // FP8: the weight buffer from FC1 [40, 24] (GELU) or [80, 24] (SwiGLU), the row buffers
        // from n x 40 or n x 80; kv 5 makes the projection's input (15) the smallest.
        Case{"bf16_fp8_hybrid_delayed", DType::kBF16, false, true, 2, 8, Recompute::kNone, 1, false, false, false,
             false, 1},
        Case{"fp32_fp8_e4m3_tensorwise_kv5", DType::kF32, false, true, 3, 5, Recompute::kNone, 1, false, false, false,
             false, 2},
        Case{"bf16_fp8_llama_recompute_uniform1", DType::kBF16, true, false, 2, 8, Recompute::kUniform, 1, false, true,
             true, true, 1},
        Case{"fp16_fp8_tensorwise_documents", DType::kF16, false, true, 1, 8, Recompute::kNone, 1, true, false, false,
             false, 2}),
    [](const auto& info) { return std::string(info.param.name); });

// --use-distributed-optimizer under mpirun -np 3: each rank allocates its shard of the fp32 main
// parameters and Adam moments; rank 0 holds the largest (ceil(P / 3)) and is what the plan
// shows. The model's own buffers stay whole.
TEST(MemoryPlan, DistributedOptimizerPlanIsRankZerosShard) {
  if (test::relaunch_under_mpirun(3)) return;
  comm::MpiRuntime mpi;
  auto world = mpi.world();
  GPTConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.kv_channels = 8;
  c.ffn_hidden_size = 24;
  c.seq_length = 5;
  c.max_position_embeddings = 5;
  c.vocab_size = 30;
  c.padded_vocab_size = 31;  // odd on purpose: P is not divisible by 3
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const MemoryPlan whole = plan_memory(c, dtype, 1);
    const MemoryPlan plan = shard_optimizer_state(whole, 3);
    ASSERT_NE(whole.num_parameters % 3, 0);
    auto backend = backend::make_cpu_backend();
    MemoryTracker& tracker = memory_tracker(Device::kCPU);
    const MemorySnapshot before = tracker.snapshot();
    GPTModel model(c, *backend, dtype, 1);
    parallel::MixedPrecisionOptimizer opt(model.parameters(), *backend, parallel::OptimizerConfig{},
                                          optim::GradScaler::constant(1.0f), {world.get(), true, 0});
    const MemorySnapshot built = tracker.snapshot();
    const int64_t shard = parallel::shard_counts(whole.num_parameters, 3)[static_cast<size_t>(world->rank())];
    EXPECT_EQ(delta(built, before, MemoryKind::kOptimizer), 2 * shard * 4);
    EXPECT_EQ(delta(built, before, MemoryKind::kMainParams), dtype == DType::kF32 ? 0 : shard * 4);
    EXPECT_EQ(delta(built, before, MemoryKind::kGrads), whole.gradients);
    EXPECT_EQ(delta(built, before, MemoryKind::kParams), whole.parameters);
    if (world->rank() == 0) {
      EXPECT_EQ(plan.optimizer, delta(built, before, MemoryKind::kOptimizer));
      EXPECT_EQ(plan.main_parameters, delta(built, before, MemoryKind::kMainParams));
    }
    EXPECT_EQ(plan.optimizer, 2 * ((whole.num_parameters + 2) / 3) * 4);
  }
}

// Tensor parallelism under mpirun -np 2 (TP 2): each rank allocates exactly its plan, kind by
// kind, with and without sequence parallelism (fp32: the MPI ranks reduce fp32), and a step
// allocates nothing more.
TEST(MemoryPlan, TensorParallelPlanEqualsEachRanksBytes) {
  if (test::relaunch_under_mpirun(2)) return;
  comm::MpiRuntime mpi;
  auto tp = mpi.world();
  GPTConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.kv_channels = 4;
  c.ffn_hidden_size = 24;
  c.seq_length = 6;
  c.max_position_embeddings = 8;
  c.vocab_size = 30;
  c.padded_vocab_size = 32;
  // sp, and RMSNorm + SwiGLU, each on or off; then --qk-layernorm with 2 key/value groups (RMSNorm
  // with sp, LayerNorm without).
  // Variants 6 and 7: FP8 (hybrid, delayed), without and with sp: the linears' shards and the
  // whole sequence's rows in its buffers.
  for (int variant = 0; variant < 8; ++variant) {
    const bool sp = variant % 2 == 1;
    c.fp8 = fp8_config(variant >= 6 ? 1 : 0);
    c.normalization =
        variant == 2 || variant == 3 || variant == 5 ? Normalization::kRMSNorm : Normalization::kLayerNorm;
    c.swiglu = variant == 2 || variant == 3;
    c.qk_layernorm = variant >= 4;
    c.num_query_groups = variant >= 4 ? 2 : 0;
    const MemoryPlan plan = plan_memory(c, DType::kF32, 2, 2, sp);
    EXPECT_LT(plan.num_parameters, gpt_num_parameters(c));
    auto backend = backend::make_cpu_backend();
    MemoryTracker& tracker = memory_tracker(Device::kCPU);
    const MemorySnapshot before = tracker.snapshot();
    GPTModel model(c, *backend, DType::kF32, 2, {tp.get(), sp});
    parallel::MixedPrecisionOptimizer opt(model.parameters(), *backend, parallel::OptimizerConfig{},
                                          optim::GradScaler::constant(1.0f), {nullptr, false, 0, tp.get()});
    const MemorySnapshot built = tracker.snapshot();
    EXPECT_EQ(plan.num_parameters, model.parameters().total_numel()) << "variant " << variant;
    for (MemoryKind kind : kModelKinds) {
      EXPECT_EQ(planned_bytes(plan, kind), delta(built, before, kind))
          << memory_kind_name(kind) << " variant " << variant;
    }
    tracker.reset_peak();
    MicroBatch mb;
    mb.batch = 2;
    mb.seq = c.seq_length;
    for (int64_t i = 0; i < mb.batch * mb.seq; ++i) {
      mb.tokens.push_back(static_cast<int32_t>(i * 5 % c.vocab_size));
      mb.labels.push_back(static_cast<int32_t>((i * 7 + 3) % c.vocab_size));
      mb.loss_mask.push_back(1.0f);
    }
    opt.zero_grads();
    model.forward(mb, {});
    model.backward(1.0f, 1.0f);
    model.reduce_layernorm_grads();
    model.fp8_update(tp.get());
    opt.step(1e-3f, 0.01f);
    const MemorySnapshot after = tracker.snapshot();
    for (MemoryKind kind :
         {MemoryKind::kParams, MemoryKind::kGrads, MemoryKind::kActivations, MemoryKind::kWorkspace}) {
      const int i = static_cast<int>(kind);
      EXPECT_EQ(after.peak[i], built.current[i]) << memory_kind_name(kind) << " grew during a step";
    }
  }
}

// Pipeline stages: each stage of PP2 (and of PP2 with 2 chunks per stage), with several
// activation sets per chunk and with recomputation, allocates what its plan says; the stages'
// parameters add up to the model plus the last stage's copy of the tied embedding.
TEST(MemoryPlan, PipelineStagePlanEqualsAllocatedBytes) {
  GPTConfig c;
  c.num_layers = 4;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.kv_channels = 8;
  c.ffn_hidden_size = 24;
  c.seq_length = 6;
  c.max_position_embeddings = 8;
  c.vocab_size = 30;
  c.padded_vocab_size = 32;
  for (Recompute r : {Recompute::kNone, Recompute::kUniform, Recompute::kBlock}) {
    for (int64_t vp : {1, 2}) {
      for (bool untied : {false, true}) {
        c.recompute = r;
        c.untie_embeddings_and_output_weights = untied;
        // Documents: key starts in every activation set, position ids in stage 0's.
        c.reset_position_ids = c.reset_attention_mask = untied;
        // RMSNorm and SwiGLU: no final LayerNorm bias on the last stage, fc1 [2f, h].
        c.normalization = vp == 2 ? Normalization::kRMSNorm : Normalization::kLayerNorm;
        c.swiglu = vp == 2;
        // FP8 (tensorwise) on the untied runs: each stage's own layers' scaling state.
        c.fp8 = fp8_config(untied ? 2 : 0);
        int64_t total = 0;
        for (int64_t stage = 0; stage < 2; ++stage) {
          PipelineStageOptions pipe;
          pipe.pp = 2;
          pipe.stage = stage;
          pipe.virtual_chunks = vp;
          pipe.activation_sets = vp == 1 ? 2 - stage : 3;
          const MemoryPlan plan = plan_memory(c, DType::kBF16, 2, 1, false, pipe);
          auto backend = backend::make_cpu_backend();
          MemoryTracker& tracker = memory_tracker(Device::kCPU);
          const MemorySnapshot before = tracker.snapshot();
          GPTModel model(c, *backend, DType::kBF16, 2, {}, pipe);
          const MemorySnapshot built = tracker.snapshot();
          const std::string what = "stage " + std::to_string(stage) + " vp " + std::to_string(vp) + " recompute " +
                                   std::to_string(static_cast<int>(r)) + (untied ? " untied, documents" : "");
          EXPECT_EQ(plan.num_parameters, model.parameters().total_numel()) << what;
          EXPECT_EQ(plan.parameters, delta(built, before, MemoryKind::kParams)) << what;
          EXPECT_EQ(plan.gradients, delta(built, before, MemoryKind::kGrads)) << what;
          EXPECT_EQ(plan.activations, delta(built, before, MemoryKind::kActivations)) << what;
          EXPECT_EQ(plan.workspace + plan.fp8, delta(built, before, MemoryKind::kWorkspace)) << what;
          EXPECT_EQ(plan.fp8 != 0, untied) << what;
          total += plan.num_parameters;
        }
        EXPECT_EQ(total, gpt_num_parameters(c) + (untied ? 0 : c.padded_vocab_size * c.hidden_size));
      }
    }
  }
}

// The FP8 bytes worked by hand for the bf16_fp8_hybrid_delayed case's shape (h 24, 3 heads of
// 8, ffn 40, s 7, micro-batch 2: n 14; QKV [72, 24], projection [24, 24], FC1 [40, 24], FC2
// [24, 40]): buffers rows 14 x 72, weight 72 x 24, rows_t 14 x 72, cols_t 14 x 40 = 4304 bytes;
// each layer's saved w^T codes, 24 x (72 + 24 + 40 + 40) = 4224 bytes (3 layers: 12672);
// scaling state of 3 layers x 12 operands, history 3, scale, and scale_inv in 16-byte slots:
// (3 + 1 + 4) x 36 x 4 = 1152 bytes. TP 2 halves
// QKV (36), the projection's input (12) and FC1/FC2 (20): 14 x 36, 36 x 24, 14 x 36, 14 x 24,
// and the saved codes 24 x (36 + 12 + 20 + 20) = 2112 per layer; a pipeline stage of 1 layer
// holds 12 operands; tensorwise keeps one history row.
TEST(MemoryPlan, Fp8BytesByHand) {
  GPTConfig c;
  c.num_layers = 3;
  c.hidden_size = 24;
  c.num_attention_heads = 3;
  c.kv_channels = 8;
  c.ffn_hidden_size = 40;
  c.seq_length = 7;
  c.max_position_embeddings = 9;
  c.vocab_size = 50;
  c.padded_vocab_size = 64;
  EXPECT_EQ(fp8_memory_bytes(c, 2, 1, 3), 0);
  EXPECT_EQ(plan_memory(c, DType::kBF16, 2).fp8, 0);
  const int64_t bf16_total = plan_memory(c, DType::kBF16, 2).total();
  c.fp8 = fp8_config(1);
  EXPECT_EQ(fp8_memory_bytes(c, 2, 1, 3), 14 * 72 + 72 * 24 + 14 * 72 + 14 * 40 + 3 * 4224 + 8 * 36 * 4);
  EXPECT_EQ(plan_memory(c, DType::kBF16, 2).fp8, 18128);
  // The activation's out of each of the 3 layers becomes FC2's codes: n f bytes + 16, not n f e.
  EXPECT_EQ(plan_memory(c, DType::kBF16, 2).total(), bf16_total + 18128 - 3 * (14 * 40 * 2 - (14 * 40 + 16)));
  EXPECT_EQ(fp8_memory_bytes(c, 2, 2, 3), 14 * 36 + 36 * 24 + 14 * 36 + 14 * 24 + 3 * 2112 + 8 * 36 * 4);
  EXPECT_EQ(fp8_memory_bytes(c, 2, 1, 1), 4304 + 4224 + 8 * 12 * 4);
  c.fp8 = fp8_config(2);
  EXPECT_EQ(fp8_memory_bytes(c, 2, 1, 3), 4304 + 3 * 4224 + 6 * 36 * 4);
  // The table shows the line only with FP8.
  EXPECT_NE(format_memory_plan(plan_memory(c, DType::kBF16, 2)).find("FP8 buffers and scaling state"),
            std::string::npos);
  c.fp8.reset();
  EXPECT_EQ(format_memory_plan(plan_memory(c, DType::kBF16, 2)).find("FP8"), std::string::npos);
}

TEST(MemoryPlan, Gpt3_175BNumbers) {
  // The benchmark's shape: 96 layers, h 12288, 96 heads, seq 2048, vocab 50257 -> 50304.
  GPTConfig c;
  c.num_layers = 96;
  c.hidden_size = 12288;
  c.num_attention_heads = 96;
  c.kv_channels = 128;
  c.ffn_hidden_size = 4 * 12288;
  c.seq_length = 2048;
  c.max_position_embeddings = 2048;
  c.vocab_size = 50257;
  c.padded_vocab_size = 50304;
  // 12 L h^2 + 13 L h + (V + P) h + 2h: 174.6B parameters (the "175B" of GPT-3).
  const int64_t expected = 12LL * 96 * 12288 * 12288 + 13LL * 96 * 12288 + (50304LL + 2048) * 12288 + 2 * 12288;
  EXPECT_EQ(gpt_num_parameters(c), expected);
  const MemoryPlan p = plan_memory(c, DType::kBF16, 1);
  EXPECT_EQ(p.parameters, 2 * expected);
  EXPECT_EQ(p.main_parameters + p.gradients + p.optimizer, 16 * expected);  // Megatron's 18 bytes/param minus bf16
}

// NCCL's buffers are not ours: plan_memory leaves them 0 and the table shows their line only
// when the planner or --dry-run filled them; the total includes them.
// A 16-bit gradient buffer (--fp16, --bf16 --grad-reduce-in-bf16): 2 bytes a parameter, what
// the model then allocates, everything else as with fp32 gradients; the table names the dtype.
TEST(MemoryPlan, SixteenBitGradientsHalveTheGradientBytes) {
  GPTConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.kv_channels = 8;
  c.ffn_hidden_size = 32;
  c.seq_length = 5;
  c.max_position_embeddings = 8;
  c.vocab_size = 40;
  c.padded_vocab_size = 64;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const MemoryPlan fp32 = plan_memory(c, dtype, 2);
    const MemoryPlan half = plan_memory(c, dtype, 2, 1, false, {}, dtype);
    EXPECT_EQ(fp32.gradients, 4 * fp32.num_parameters);
    EXPECT_EQ(half.gradients, 2 * half.num_parameters);
    EXPECT_EQ(half.total(), fp32.total() - fp32.gradients / 2);
    EXPECT_NE(format_memory_plan(half).find("gradients (" + std::string(dtype_name(dtype)) + ")"), std::string::npos)
        << format_memory_plan(half);
    EXPECT_NE(format_memory_plan(fp32).find("gradients (fp32)"), std::string::npos);

    auto backend = backend::make_cpu_backend();
    MemoryTracker& tracker = memory_tracker(Device::kCPU);
    const MemorySnapshot before = tracker.snapshot();
    GPTModel model(c, *backend, dtype, 2, {}, {}, dtype);
    parallel::DataParallelOptions dp;
    dp.grad_dtype = dtype;
    parallel::MixedPrecisionOptimizer opt(model.parameters(), *backend, parallel::OptimizerConfig{},
                                          optim::GradScaler::constant(1.0f), dp);
    const MemorySnapshot built = tracker.snapshot();
    EXPECT_EQ(model.parameters().grads().dtype(), dtype);
    for (MemoryKind kind : kModelKinds) {
      EXPECT_EQ(delta(built, before, kind), planned_bytes(half, kind))
          << dtype_name(dtype) << " kind " << static_cast<int>(kind);
    }
  }
}

TEST(MemoryPlan, NcclLineOnlyWhenFilled) {
  MemoryPlan p;
  p.parameters = 100;
  p.workspace = 20;
  EXPECT_EQ(format_memory_plan(p).find("NCCL"), std::string::npos);
  p.nccl = 3;
  EXPECT_EQ(p.total(), 123);
  const std::string table = format_memory_plan(p);
  EXPECT_NE(table.find("NCCL buffers (model)"), std::string::npos) << table;
  EXPECT_NE(table.find("123 bytes"), std::string::npos) << table;
}

// The copy engines' receive buffer likewise: its line only when a plan counts it.
TEST(MemoryPlan, CopyEngineLineOnlyWhenCounted) {
  MemoryPlan p;
  p.parameters = 100;
  EXPECT_EQ(format_memory_plan(p).find("copy-engine"), std::string::npos);
  p.copy_engine = 7;
  EXPECT_EQ(p.total(), 107);
  const std::string table = format_memory_plan(p);
  EXPECT_NE(table.find("copy-engine receive buffer                        7 bytes"), std::string::npos) << table;
  EXPECT_NE(table.find("107 bytes"), std::string::npos) << table;
}

// A shape whose counts do not fit in 64 bits is an error naming the shape's flags, never a
// wrapped plan (2^62 layers once planned 0.07 GiB, passed the memory check and was killed by
// the kernel at 24 GB).
TEST(MemoryPlan, ShapesBeyond64BitsAreErrors) {
  GPTConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.kv_channels = 16;
  c.ffn_hidden_size = 256;
  c.seq_length = 32;
  c.max_position_embeddings = 32;
  c.vocab_size = 50257;
  c.padded_vocab_size = 50304;
  auto error = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  GPTConfig layers = c;
  layers.num_layers = int64_t{1} << 62;
  const std::string msg = error([&] { plan_memory(layers, DType::kF32, 2); });
  EXPECT_EQ(msg.rfind("[model shape] the memory of one rank does not fit in 64 bits with --num-layers "
                      "4611686018427387904 --hidden-size 64 ",
                      0),
            0u)
      << msg;
  EXPECT_NE(msg.find("--micro-batch-size 2"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(error([&] { gpt_num_parameters(layers); }).find("the parameter count does not fit"), std::string::npos);
  GPTConfig hidden = c;
  hidden.hidden_size = hidden.kv_channels = int64_t{1} << 31;
  hidden.num_attention_heads = 1;
  EXPECT_NE(error([&] { plan_memory(hidden, DType::kBF16, 1); }).find("does not fit in 64 bits"), std::string::npos);
  // Tokens per micro-batch times the vocabulary (the logits) past 2^63 bytes.
  EXPECT_NE(error([&] { plan_memory(c, DType::kF32, int64_t{1} << 50); }).find("--micro-batch-size 1125899906842624"),
            std::string::npos);
  // Sums past 2^63 too.
  MemoryPlan big;
  big.parameters = big.gradients = std::numeric_limits<int64_t>::max() / 2 + 1;
  EXPECT_THROW(big.total(), IntegerOverflow);
  EXPECT_EQ(error([&] { plan_memory(c, DType::kF32, 2); }), "(no error)");
}

}  // namespace
}  // namespace megatron::model
