// The planner's memory per GPU is the engine's exact plan (model::plan_memory, checked against
// real allocations in memory_plan_test) of the layout's stage: at TP = PP = 1 for every DP size
// with and without the distributed optimizer, kind by kind (NCCL's buffers apart: they are not
// ours, tests/plan/nccl_memory_test.cpp); on every layout what --dry-run prints
// (train::train_memory_plan); at TP/PP > 1 values computed by hand from model/memory_plan.cpp's
// terms.
#include <gtest/gtest.h>

#include "backend/fp8_recipe.h"
#include "backend/ops.h"
#include "model/gpt_model.h"
#include "model/memory_plan.h"
#include "parallel/grad_buckets.h"
#include "parallel/grad_buffer.h"
#include "parallel/pipeline_schedule.h"
#include "plan/memory_model.h"
#include "support/plan_models.h"
#include "support/recording_communicator.h"
#include "train/config.h"

namespace megatron::plan {
namespace {

model::GPTConfig small_config() {
  model::GPTConfig c;
  c.num_layers = 4;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.kv_channels = 4;
  c.ffn_hidden_size = 32;
  c.seq_length = 4;
  c.max_position_embeddings = 4;
  c.vocab_size = 50;
  c.padded_vocab_size = 64;
  return c;
}

// The model variants: --normalization RMSNorm (no norm biases, no row means) and --swiglu
// (FC1 [2f, h], an extra [n, f/t] workspace).
struct Variant {
  bool rmsnorm, swiglu;
};
constexpr Variant kVariants[] = {{false, false}, {true, false}, {false, true}, {true, true}};

void apply(const Variant& v, model::GPTConfig& c) {
  c.normalization = v.rmsnorm ? model::Normalization::kRMSNorm : model::Normalization::kLayerNorm;
  c.swiglu = v.swiglu;
}

void expect_same(const model::MemoryPlan& a, const model::MemoryPlan& b) {
  EXPECT_EQ(a.num_parameters, b.num_parameters);
  EXPECT_EQ(a.parameters, b.parameters);
  EXPECT_EQ(a.main_parameters, b.main_parameters);
  EXPECT_EQ(a.gradients, b.gradients);
  EXPECT_EQ(a.optimizer, b.optimizer);
  EXPECT_EQ(a.activations, b.activations);
  EXPECT_EQ(a.workspace, b.workspace);
  EXPECT_EQ(a.fp8, b.fp8);
}

TEST(PlanMemory, EqualsTheEnginePlanAtTp1Pp1) {
  struct Shape {
    int64_t layers, hidden, heads, seq, vocab;
  };
  // 124M, 1.3B and 175B shapes plus the small one (vocab padded for TP 1).
  const Shape shapes[] = {{12, 768, 12, 1024, 50304}, {24, 2048, 16, 2048, 50304}, {96, 12288, 96, 2048, 50304}};
  for (const Shape& s : shapes) {
    for (const Variant& v : kVariants) {
      for (DType dtype : {DType::kBF16, DType::kF32, DType::kF16}) {
        for (bool untied : {false, true}) {
          for (PlanRecompute rc : {PlanRecompute::kNone, PlanRecompute::kFull}) {
            for (int64_t dp : {1, 2, 3, 8}) {
              for (bool dist : {false, true}) {
                // Documents: the key starts and position ids as the engine holds them, and cuDNN's
                // bias [b, s, s] (16-bit runs) on top of the engine's workspace.
                const bool documents = dp == 3;
                model::GPTConfig c = small_config();
                c.reset_position_ids = c.reset_attention_mask = documents;
                c.num_layers = s.layers;
                c.hidden_size = s.hidden;
                c.num_attention_heads = s.heads;
                c.kv_channels = s.hidden / s.heads;
                apply(v, c);
                // SwiGLU's default width (train_args: int(8h/3/64)*64): 2048, 5440, 32768.
                c.ffn_hidden_size = v.swiglu ? s.hidden / 24 * 64 : 4 * s.hidden;
                c.seq_length = s.seq;
                c.max_position_embeddings = s.seq;
                c.padded_vocab_size = s.vocab;
                c.untie_embeddings_and_output_weights = untied;
                ParallelConfig p;
                p.dp = dp;
                p.micro_batch = 2;
                p.global_batch = 2 * dp * 3;
                p.recompute = rc;
                p.distributed_optimizer = dist;
                model::GPTConfig engine = c;
                if (rc == PlanRecompute::kFull) {
                  engine.recompute = model::Recompute::kUniform;
                  engine.recompute_num_layers = 1;
                }
                model::MemoryPlan expected = model::plan_memory(engine, dtype, 2);
                if (dist) expected = model::shard_optimizer_state(expected, dp);
                SCOPED_TRACE(testing::Message()
                             << s.hidden << " " << dtype_name(dtype) << " untied " << untied << " rmsnorm " << v.rmsnorm
                             << " swiglu " << v.swiglu << " " << p.describe());
                if (documents && dtype != DType::kF32) expected.workspace += 2 * s.seq * s.seq * 2;
                const model::MemoryPlan planned = stage_memory(c, dtype, p, 0);
                expect_same(planned, expected);
                EXPECT_EQ(planned.nccl, nccl_memory(nccl_layout(c, p, 0), 0).total());
                EXPECT_EQ(planned.nccl == 0, dp == 1);
              }
            }
          }
        }
      }
    }
  }
}

// L=4, h=8, a=2 (q=8), f=32, s=4, V=64, positions 4, biases; tp 2, pp 2, mbs 1, gbs 4 (m=4), bf16.
TEST(PlanMemory, TensorAndPipelineShardsByHand) {
  const model::GPTConfig c = small_config();
  ParallelConfig p;
  p.tp = 2;
  p.pp = 2;
  p.micro_batch = 1;
  p.global_batch = 4;
  // Per layer: 4h = 32 LN + (3qh + hq + 2fh)/t = (192 + 64 + 512)/2 = 384 + biases 3q/t + f/t + 2h
  // = 12 + 16 + 16 = 44 -> 460; 2 layers per stage = 920.
  EXPECT_EQ(stage_num_parameters(c, p, 0), 920 + 32 * 8 + 4 * 8);  // + V/t*h word, positions
  EXPECT_EQ(stage_num_parameters(c, p, 1), 920 + 16 + 32 * 8);     // + final LN, tied copy
  const model::MemoryPlan s0 = stage_memory(c, DType::kBF16, p, 0);
  EXPECT_EQ(s0.parameters, 1208 * 2);
  EXPECT_EQ(s0.main_parameters, 1208 * 4);
  EXPECT_EQ(s0.gradients, 1208 * 4);
  EXPECT_EQ(s0.optimizer, 1208 * 8);
  // --grad-reduce-in-bf16 (an engine moving 2-byte gradients): the main gradients in bf16, the
  // rest unchanged.
  EXPECT_EQ(grad_dtype_of(DType::kBF16, 2), DType::kBF16);
  EXPECT_EQ(grad_dtype_of(DType::kBF16, 4), DType::kF32);
  EXPECT_EQ(grad_dtype_of(DType::kF32, 2), DType::kF32);
  const model::MemoryPlan s0_bf16_grads = stage_memory(c, DType::kBF16, p, 0, 0, true, DType::kBF16);
  EXPECT_EQ(s0_bf16_grads.gradients, 1208 * 2);
  EXPECT_EQ(s0_bf16_grads.total(), s0.total() - 1208 * 2);
  // n = 4 tokens. Layer: n*(3h + (4q + 2f)/t)*e + 16n + 4*b*a*s/t = 4*(24 + 48)*2 + 64 + 16 = 656;
  // a residual-stream tensor n*h*e = 64. Stage 0 holds min(pp - 0, m) = 2 activation sets, each
  // of its 2 layers, their 3 stream tensors (2 layer inputs and the stage's output) and the
  // tokens 4n.
  EXPECT_EQ(s0.activations, 2 * (2 * 656 + 3 * 64 + 16));
  // Workspace: (3nh + (4nq + n*f)/t)*e, plus the received output gradient n*h*e with pp > 1.
  EXPECT_EQ(s0.workspace, (3 * 4 * 8 + (4 * 4 * 8 + 4 * 32) / 2) * 2 + 64);
  const model::MemoryPlan s1 = stage_memory(c, DType::kBF16, p, 1);
  // Stage 1: 1 set of 2 layers and 3 stream tensors, + final LN out n*h*e = 64, its stats 32,
  // logits n*(V/t)*e = 256, losses/lse/labels/mask/scaled weights 5*4n = 80.
  EXPECT_EQ(s1.activations, 2 * 656 + 3 * 64 + 64 + 32 + 256 + 80);
  // NCCL (plan/nccl_memory.h): 4 ranks on one node; both stages connect world, tp,
  // model-parallel, embedding (tied) and one pipeline neighbour, 32 channels x 12 MiB each, and
  // create four communicators: the world, model-parallel (the world's ranks; the world is never
  // shared), tp (= tp-cp = tp-dp-cp) and pp (= the embedding group of the first and last stage).
  const int64_t nccl = 5 * 32 * 12 * 1024 * 1024 + 4 * kCommunicatorCreationBytes;
  EXPECT_EQ(s0.nccl, nccl);
  EXPECT_EQ(s1.nccl, nccl);
  const RankMemory r = rank_memory(c, DType::kBF16, p);
  EXPECT_EQ(r.worst_stage, 0);
  EXPECT_EQ(r.worst.total(), 2416 + 4832 + 4832 + 9664 + 3040 + 512 + nccl);
  ASSERT_EQ(r.stage_totals.size(), 2u);
  EXPECT_EQ(r.stage_totals[1], 1192 * 18 + 1936 + 512 + nccl);

  // Sequence parallelism shards the LayerNorm region (3h, LN stats, the residual stream) by t:
  // layer = 4*(12 + 48)*2 + 32 + 16 = 528, a stream tensor 32.
  p.sequence_parallel = true;
  EXPECT_EQ(stage_memory(c, DType::kBF16, p, 0).activations, 2 * (2 * 528 + 3 * 32 + 16));
  // Full recompute keeps only the stream tensors per set, plus one shared layer slot.
  p.sequence_parallel = false;
  p.recompute = PlanRecompute::kFull;
  EXPECT_EQ(stage_memory(c, DType::kBF16, p, 0).activations, 656 + 2 * (3 * 64 + 16));
  // The distributed optimizer over dp 3 keeps ceil(1208 / 3) = 403 main + Adam elements.
  p.recompute = PlanRecompute::kNone;
  p.dp = 3;
  p.global_batch = 12;
  p.distributed_optimizer = true;
  const model::MemoryPlan d = stage_memory(c, DType::kBF16, p, 0);
  EXPECT_EQ(d.main_parameters, 403 * 4);
  EXPECT_EQ(d.optimizer, 403 * 8);
}

// RMSNorm + SwiGLU on the same layout, by hand (f = 32 given, so f1 = 64; r = 1).
TEST(PlanMemory, RmsNormSwigluShardsByHand) {
  model::GPTConfig c = small_config();
  apply({true, true}, c);
  ParallelConfig p;
  p.tp = 2;
  p.pp = 2;
  p.micro_batch = 1;
  p.global_batch = 4;
  p.sequence_parallel = true;
  // Per layer: 2h = 16 norm weights + (3qh + hq + f1*h + f*h)/t = (192 + 64 + 512 + 256)/2 = 512
  // + biases 3q/t + f1/t + 2h = 12 + 32 + 16 = 60 -> 588; 2 layers per stage = 1176.
  EXPECT_EQ(stage_num_parameters(c, p, 0), 1176 + 32 * 8 + 4 * 8);  // + V/t*h word, positions
  EXPECT_EQ(stage_num_parameters(c, p, 1), 1176 + 8 + 32 * 8);      // + final RMSNorm weight, tied copy
  // n = 4, SP (u = 2). Layer: n*(3h/u + (4q + f1 + f)/t)*e + 2*1*4n/u + 4*b*a*s/t
  // = 4*(12 + 64)*2 + 16 + 16 = 640; a stream tensor n*h*e/u = 32. Two sets of 2 layers, 3
  // stream tensors and the tokens 4n.
  const model::MemoryPlan s0 = stage_memory(c, DType::kBF16, p, 0);
  EXPECT_EQ(s0.activations, 2 * (2 * 640 + 3 * 32 + 16));
  // Workspace: (3nh + (4nq + n*f1 + n*f)/t)*e = (96 + (128 + 256 + 128)/2)*2, plus with SP the
  // gathered input n*h*e = 64 and the gradient stream's shard instead of a whole [n, h] (-32),
  // with pp > 1 the received output gradient n*h*e/u = 32.
  EXPECT_EQ(s0.workspace, (96 + 256) * 2 + 64 - 32 + 32);
  // Stage 1: 1 set of 2 layers and 3 stream tensors, norm out n*h*e/u = 32, rstd 4n/u = 8,
  // logits n*(V/t)*e = 256, losses/lse/labels/mask/weights 80.
  EXPECT_EQ(stage_memory(c, DType::kBF16, p, 1).activations, 2 * 640 + 3 * 32 + 32 + 8 + 256 + 80);
  // Each variant alone, stage 0, against the LayerNorm/GELU numbers of
  // TensorAndPipelineShardsByHand with SP (920 parameters of layers, layer 528, workspace 512).
  // RMSNorm: 2 layers x 2 norms x 8 biases = 32 parameters fewer; the two means, 2*4n/u = 16
  // bytes per layer, fewer.
  apply({true, false}, c);
  EXPECT_EQ(stage_num_parameters(c, p, 0), 920 - 32 + 32 * 8 + 4 * 8);
  EXPECT_EQ(stage_memory(c, DType::kBF16, p, 0).activations, 2 * (2 * (528 - 16) + 3 * 32 + 16));
  EXPECT_EQ(stage_memory(c, DType::kBF16, p, 0).workspace, 512);
  // SwiGLU: FC1 has f1 - f = 32 more rows, (32*8 + 32)/2 = 144 parameters per layer; its output
  // n*(f1 - f)/t*e = 128 bytes more per layer; the workspace's fc1 gradient 128 bytes more and
  // the activation's output gradient n*f/t*e = 128.
  apply({false, true}, c);
  EXPECT_EQ(stage_num_parameters(c, p, 0), 920 + 2 * 144 + 32 * 8 + 4 * 8);
  EXPECT_EQ(stage_memory(c, DType::kBF16, p, 0).activations, 2 * (2 * (528 + 128) + 3 * 32 + 16));
  EXPECT_EQ(stage_memory(c, DType::kBF16, p, 0).workspace, 512 + 128 + 128);
}

// One formula: on every layout the planner's memory of each stage is the plan --dry-run prints
// for the same flags (train::train_memory_plan: the engine's own, model::plan_memory, with the
// stage's activation sets and the distributed optimizer's shards), kind by kind, through TP,
// SP, PP, interleaving, DP, recompute, the model variants (and with each the Llama attention:
// rotary embeddings and 2 key/value groups, 4 where TP 4 splits them) and documents; only what
// the engine does not allocate comes on top (cuDNN's document bias and, with documents, its packed Q and
// dQ for query groups here; NCCL and the copy engines are checked above and in nccl_memory_test).
TEST(PlanMemory, AgreesWithTheDryRunPlanOnEveryLayout) {
  struct Layout {
    int64_t tp, pp, vp, dp;
    bool sp, dist;
  };
  const Layout layouts[] = {{1, 1, 1, 1, false, false}, {1, 1, 1, 4, false, true},  {2, 1, 1, 2, true, false},
                            {2, 1, 1, 1, false, false}, {1, 2, 1, 1, false, false}, {2, 2, 1, 2, true, true},
                            {4, 2, 1, 1, true, false},  {1, 4, 1, 1, false, false}, {2, 2, 2, 1, true, false},
                            {1, 2, 4, 2, false, true}};
  int64_t compared = 0;
  for (const Layout& l : layouts) {
    for (PlanRecompute rc : {PlanRecompute::kNone, PlanRecompute::kSelective, PlanRecompute::kFull}) {
      for (const Variant& v : kVariants) {
        for (bool documents : {false, true}) {
          for (const bool llama : {false, true}) {
            for (DType dtype : {DType::kBF16, DType::kF32}) {
              model::GPTConfig c = small_config();
              c.num_layers = 8;
              c.num_attention_heads = 4;
              c.kv_channels = 2;
              c.seq_length = c.max_position_embeddings = 8;
              c.reset_position_ids = c.reset_attention_mask = documents;
              apply(v, c);
              if (llama) {
                c.position_embedding = model::PositionEmbedding::kRope;
                c.num_query_groups = l.tp <= 2 ? 2 : 4;
              }
              ParallelConfig p;
              p.tp = l.tp;
              p.pp = l.pp;
              p.vp = l.vp;
              p.dp = l.dp;
              p.sequence_parallel = l.sp;
              p.distributed_optimizer = l.dist;
              p.micro_batch = 2;
              p.global_batch = 2 * l.dp * 8;  // m = 8
              p.recompute = rc;
              train::TrainConfig t;
              t.model = c;
              if (rc == PlanRecompute::kFull) {
                t.model.recompute = model::Recompute::kUniform;
                t.model.recompute_num_layers = 1;
              }
              t.micro_batch_size = p.micro_batch;
              t.global_batch_size = p.global_batch;
              t.world_size = p.world();
              t.tensor_model_parallel_size = l.tp;
              t.pipeline_model_parallel_size = l.pp;
              t.data_parallel_size = l.dp;
              if (l.vp > 1) t.num_layers_per_virtual_pipeline_stage = c.num_layers / l.pp / l.vp;
              t.sequence_parallel = l.sp;
              t.use_distributed_optimizer = l.dist;
              t.overlap_p2p_communication = l.vp > 1;  // the flags' default (ParallelConfig::overlap_p2p)
              t.bf16 = dtype == DType::kBF16;
              // As parse_train_config sets it for --bf16 (without --grad-reduce-in-bf16): fp32
              // gradients, which the planner models.
              t.accumulate_allreduce_grads_in_fp32 = t.bf16;
              for (int64_t k = 0; k < l.pp; ++k) {
                SCOPED_TRACE(testing::Message()
                             << p.describe() << " stage " << k << " rmsnorm " << v.rmsnorm << " swiglu " << v.swiglu
                             << " documents " << documents << " " << dtype_name(dtype));
                model::MemoryPlan dry_run = train::train_memory_plan(t, k);
                if (documents && dtype != DType::kF32) dry_run.workspace += 2 * 8 * 8 * 2;  // cuDNN's bias [b, s, s]
                if (documents && c.query_groups() < c.num_attention_heads && dtype != DType::kF32) {
                  dry_run.workspace += 2 * 2 * 8 * (4 / l.tp) * 2 * 2;  // cuDNN's packed Q, dQ [s, b, H/T, d]
                }
                const model::MemoryPlan planned = stage_memory(c, dtype, p, k);
                expect_same(planned, dry_run);
                ++compared;
              }
            }
          }
        }
      }
    }
  }
  // Stages of the layouts x recompute x variants x documents x attention x dtypes.
  EXPECT_EQ(compared, 18 * 3 * 4 * 2 * 2 * 2);
}

// --fp8-format: the planner's FP8 bytes per stage are the dry run's (train_memory_plan, the
// engine's plan), model::fp8_memory_bytes of the stage's layers (the linears' shards under TP,
// the whole sequence's rows also under SP; the amax history with the delayed recipe), and FP8
// changes nothing else of the plan.
TEST(PlanMemory, Fp8BytesAreTheDryRunsOnEveryLayout) {
  struct Layout {
    int64_t tp, pp, vp, dp;
    bool sp, dist;
  };
  const Layout layouts[] = {{1, 1, 1, 1, false, false},
                            {2, 1, 1, 2, true, true},
                            {2, 2, 1, 1, false, false},
                            {1, 4, 1, 2, false, true},
                            {2, 2, 2, 1, true, false}};
  backend::Fp8Config delayed;
  delayed.amax_history_len = 4;
  backend::Fp8Config tensorwise;
  tensorwise.recipe = backend::Fp8Recipe::kTensorwise;
  tensorwise.amax_history_len = 4;  // no effect with tensorwise: one row
  for (const Layout& l : layouts) {
    for (const backend::Fp8Config& f : {delayed, tensorwise}) {
      for (const Variant& v : kVariants) {
        model::GPTConfig c = small_config();
        c.num_layers = 8;
        c.num_attention_heads = 4;
        c.kv_channels = 2;
        c.seq_length = c.max_position_embeddings = 8;
        apply(v, c);
        ParallelConfig p;
        p.tp = l.tp;
        p.pp = l.pp;
        p.vp = l.vp;
        p.dp = l.dp;
        p.sequence_parallel = l.sp;
        p.distributed_optimizer = l.dist;
        p.micro_batch = 2;
        p.global_batch = 2 * l.dp * 8;
        model::GPTConfig fp8 = c;
        fp8.fp8 = f;
        train::TrainConfig t;
        t.model = fp8;
        t.micro_batch_size = p.micro_batch;
        t.global_batch_size = p.global_batch;
        t.world_size = p.world();
        t.tensor_model_parallel_size = l.tp;
        t.pipeline_model_parallel_size = l.pp;
        t.data_parallel_size = l.dp;
        if (l.vp > 1) t.num_layers_per_virtual_pipeline_stage = c.num_layers / l.pp / l.vp;
        t.sequence_parallel = l.sp;
        t.use_distributed_optimizer = l.dist;
        t.overlap_p2p_communication = l.vp > 1;
        // fp32 (t.bf16 false): no cuDNN workspace terms, which only the planner adds.
        for (int64_t k = 0; k < l.pp; ++k) {
          SCOPED_TRACE(testing::Message() << p.describe() << " stage " << k << " " << backend::fp8_recipe_name(f.recipe)
                                          << " swiglu " << v.swiglu);
          const model::MemoryPlan planned = stage_memory(fp8, DType::kF32, p, k);
          expect_same(planned, train::train_memory_plan(t, k));
          EXPECT_EQ(planned.fp8, model::fp8_memory_bytes(fp8, p.micro_batch, l.tp, c.num_layers / l.pp));
          EXPECT_GT(planned.fp8, 0);
          const model::MemoryPlan without = stage_memory(c, DType::kF32, p, k);
          // FP8 adds its buffers; with GELU it also keeps FC2's input as 1-byte codes, not the
          // activation (MLP::fp8_act_bytes): the activations shrink, by nothing with SwiGLU.
          EXPECT_EQ(planned.total(), without.total() + planned.fp8 - (without.activations - planned.activations));
          if (v.swiglu) {
            EXPECT_EQ(planned.activations, without.activations);
          } else {
            EXPECT_LT(planned.activations, without.activations);
          }
          EXPECT_EQ(planned.workspace, without.workspace);
        }
      }
    }
  }
}

// What the variants add or remove is exactly what model::plan_memory adds or removes for the
// same stage (the parameter count is model::stage_num_parameters, which the planner calls): each
// kind's change from the LayerNorm/GELU model equals the engine plan's change, with TP 2 (SP
// on and off), 1F1B and interleaved pipelines, every stage, with and without full recompute.
// The engine's activation sets per chunk are the schedule's (train/config.cpp pipeline_stage).
TEST(PlanMemory, VariantsChangeWhatTheEnginePlanChanges) {
  struct Layout {
    int64_t tp, pp, vp;
    bool sp;
  };
  for (const Layout& l : {Layout{2, 1, 1, true}, Layout{2, 1, 1, false}, Layout{1, 2, 1, false}, Layout{2, 2, 1, true},
                          Layout{2, 4, 1, true}, Layout{2, 2, 2, true}}) {
    for (PlanRecompute rc : {PlanRecompute::kNone, PlanRecompute::kFull}) {
      for (const Variant& v : kVariants) {
        model::GPTConfig base = small_config();
        base.num_layers = 8;
        base.seq_length = base.max_position_embeddings = 8;
        model::GPTConfig c = base;
        apply(v, c);
        ParallelConfig p;
        p.tp = l.tp;
        p.pp = l.pp;
        p.vp = l.vp;
        p.sequence_parallel = l.sp;
        p.micro_batch = 2;
        p.global_batch = 16;  // m = 8
        p.recompute = rc;
        model::GPTConfig engine = c, engine_base = base;
        if (rc == PlanRecompute::kFull) {
          for (model::GPTConfig* e : {&engine, &engine_base}) {
            e->recompute = model::Recompute::kUniform;
            e->recompute_num_layers = 1;
          }
        }
        for (int64_t k = 0; k < l.pp; ++k) {
          SCOPED_TRACE(testing::Message()
                       << p.describe() << " stage " << k << " rmsnorm " << v.rmsnorm << " swiglu " << v.swiglu);
          model::PipelineStageOptions stage;
          stage.pp = l.pp;
          stage.stage = k;
          stage.virtual_chunks = l.vp;
          stage.activation_sets =
              parallel::activation_sets_needed({l.pp, k, p.num_micro_batches(), l.vp}, p.overlap_p2p && l.vp > 1);
          const model::MemoryPlan planned = stage_memory(c, DType::kBF16, p, k);
          const model::MemoryPlan planned_base = stage_memory(base, DType::kBF16, p, k);
          const model::MemoryPlan exact = model::plan_memory(engine, DType::kBF16, 2, l.tp, l.sp, stage);
          const model::MemoryPlan exact_base = model::plan_memory(engine_base, DType::kBF16, 2, l.tp, l.sp, stage);
          EXPECT_EQ(planned.parameters - planned_base.parameters, exact.parameters - exact_base.parameters);
          EXPECT_EQ(planned.activations - planned_base.activations, exact.activations - exact_base.activations);
          EXPECT_EQ(planned.workspace - planned_base.workspace, exact.workspace - exact_base.workspace);
          if (v.rmsnorm || v.swiglu) {
            EXPECT_NE(planned.activations, planned_base.activations);
          }
        }
      }
    }
  }
}

// Interleaving: the stage's chunks share one pool of activation sets, as many as the schedule
// holds at once (Megatron's count of chunks live at once, min(m*vp, 2(pp-1) + (vp-1)pp + 1)),
// each of L/(pp*vp) layers.
TEST(PlanMemory, InterleavedScheduleInFlightChunks) {
  model::GPTConfig c = small_config();
  c.num_layers = 8;
  ParallelConfig p;
  p.pp = 2;
  p.vp = 2;
  p.micro_batch = 1;
  p.global_batch = 8;
  // tp 1: layer = n*(3h + 4q + 2f)*e + 16n + 4*b*a*s = 4*(24 + 32 + 64)*2 + 64 + 32 = 1056; a
  // stream tensor 64. Stage 0 holds min(16, 2*1 + 1*2 + 1) = 5 sets of 4/2 = 2 layers -> 10
  // layer-micro-batches (vs 8 for 1F1B), each set with its 3 stream tensors and int32 tokens [n = 4].
  EXPECT_EQ(parallel::activation_sets_needed({2, 0, 8, 2}, false), 5);
  p.overlap_p2p = false;  // --no-overlap-p2p-communication
  EXPECT_EQ(stage_memory(c, DType::kBF16, p, 0).activations, 5 * (2 * 1056 + 3 * 64 + 16));
  // Overlapped (the default): the next forward's input arrives beside the backward, one set more.
  EXPECT_EQ(parallel::activation_sets_needed({2, 0, 8, 2}, true), 6);
  p.overlap_p2p = true;
  EXPECT_EQ(stage_memory(c, DType::kBF16, p, 0).activations, 6 * (2 * 1056 + 3 * 64 + 16));
  p.vp = 1;
  EXPECT_EQ(stage_memory(c, DType::kBF16, p, 0).activations, 2 * (4 * 1056 + 5 * 64 + 16));
}

// The planner builds the interleaved schedule for min(m, 2 pp) micro-batches: past 2 pp the
// pool does not grow (pp up to 16, vp up to 12, every stage), so the plan is that of the real m.
TEST(PlanMemory, InterleavedSetsStopGrowingAtTwicePpMicroBatches) {
  for (int64_t pp : {2, 3, 4, 8, 16}) {
    for (int64_t vp : {2, 3, 4, 6, 12}) {
      for (int64_t stage = 0; stage < pp; ++stage) {
        for (bool overlapped : {false, true}) {
          const int64_t at_cap = parallel::activation_sets_needed({pp, stage, 2 * pp, vp}, overlapped);
          for (int64_t k : {3, 5, 8}) {
            EXPECT_EQ(parallel::activation_sets_needed({pp, stage, k * pp, vp}, overlapped), at_cap)
                << "pp " << pp << " vp " << vp << " stage " << stage << " m " << k * pp << " overlapped " << overlapped;
          }
        }
      }
    }
  }
}

// Copy engines (ParallelConfig::dp_copy_engine): the receive buffer the plan counts is what the
// engine's gradient buffer asks the data-parallel group for: parallel::GradBuffer over a real
// model's parameters, with the layout parallel::data_parallel_options gives it (a bucket per
// chunk, the tied embedding's own), for pipeline stages with and without interleaving, tied and
// untied embeddings, several bucket sizes.
TEST(PlanMemory, CopyEngineReceiveBufferIsWhatTheGradBufferAsksFor) {
  model::GPTConfig c = small_config();
  c.num_layers = 8;
  auto backend = backend::make_cpu_backend();
  int64_t nonzero = 0;
  for (const auto& [pp, vp] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 1}, {2, 2}}) {
    for (bool untied : {false, true}) {
      c.untie_embeddings_and_output_weights = untied;
      for (int64_t stage = 0; stage < pp; ++stage) {
        for (int64_t bucket : {0, 300, 1000}) {
          SCOPED_TRACE(testing::Message() << "pp " << pp << " vp " << vp << " stage " << stage << " untied " << untied
                                          << " bucket " << bucket);
          const model::PipelineStageOptions pipe{pp, stage, vp, 1};
          model::GPTModel model(c, *backend, DType::kF32, 1, {}, pipe);
          model::ParameterSet& ps = model.parameters();
          parallel::BucketLayout layout{bucket, {}, -1};
          for (int64_t k = 1; k < model.num_chunks(); ++k) layout.starts.push_back(model.chunk_parameters(k).first);
          if (const model::Parameter* tied = model.tied_embedding()) layout.held = tied - ps.params().data();
          test::RecordingCommunicator dp({ps.grads(), ps.values()});  // 2 ranks
          parallel::GradBuffer gb(ps, dp, true, layout);
          const int64_t bytes = copy_engine_receive_bytes(c, 1, pipe, 2, bucket);
          EXPECT_EQ(bytes, gb.copy_engine_receive_elements() * 4);
          nonzero += bytes > 0;
        }
      }
    }
  }
  EXPECT_GT(nonzero, 10) << "buckets beyond the tail in most cases";
  // In the plan: the buffer, and one more communicator (the zero-CTA child) in the NCCL line.
  // gpt2-350m's shape: 40M-element buckets, several of them.
  c = config_for_tp(test::gpt_plan_model(24, 1024, 16, 1024), 1);
  ParallelConfig p;
  p.dp = 4;
  p.micro_batch = 1;
  p.global_batch = 4;
  p.distributed_optimizer = true;
  const model::MemoryPlan sm = stage_memory(c, DType::kBF16, p, 0, 4);
  p.dp_copy_engine = true;
  const model::MemoryPlan ce = stage_memory(c, DType::kBF16, p, 0, 4);
  EXPECT_EQ(sm.copy_engine, 0);
  EXPECT_GT(ce.copy_engine, 4 * 40'000'000);
  EXPECT_EQ(ce.copy_engine, copy_engine_receive_bytes(c, 1, {}, 4, parallel::overlap_bucket_elements(4)));
  EXPECT_EQ(ce.nccl - sm.nccl, kCommunicatorCreationBytes);
  EXPECT_EQ(ce.total() - sm.total(), ce.copy_engine + kCommunicatorCreationBytes);
  // Without --overlap-grad-reduce one bucket: it keeps the SMs' reduce-scatter, no receive buffer
  // (the gathers still use the copy engines and their communicator).
  p.overlap_grad_reduce = false;
  const model::MemoryPlan one_bucket = stage_memory(c, DType::kBF16, p, 0, 4);
  EXPECT_EQ(one_bucket.copy_engine, 0);
  EXPECT_EQ(one_bucket.nccl, ce.nccl);
}

// The worst stage accounts for NCCL too: with pp 4 and untied embeddings the middle stages
// have two pipeline neighbours (768 MiB of send/recv buffers against the ends' 384), the ends
// one communicator more (the embedding group's, 252 MiB).
TEST(PlanMemory, StageTotalsIncludeNcclBuffers) {
  model::GPTConfig c = small_config();
  c.untie_embeddings_and_output_weights = true;
  ParallelConfig p;
  p.pp = 4;
  p.micro_batch = 1;
  p.global_batch = 4;
  const RankMemory r = rank_memory(c, DType::kBF16, p, 8);
  for (int64_t k = 0; k < 4; ++k) {
    const model::MemoryPlan m = stage_memory(c, DType::kBF16, p, k, 8);
    EXPECT_EQ(m.nccl, nccl_memory(nccl_layout(c, p, 8), k).total());
    EXPECT_EQ(r.stage_totals[static_cast<size_t>(k)], m.total());
  }
  // A second neighbour's buffers, less the embedding communicator the first stage creates
  // (always made, used only with tied embeddings).
  EXPECT_EQ(stage_memory(c, DType::kBF16, p, 1, 8).nccl - stage_memory(c, DType::kBF16, p, 0, 8).nccl,
            32 * 12 * 1024 * 1024 - kCommunicatorCreationBytes);
}

}  // namespace
}  // namespace megatron::plan
