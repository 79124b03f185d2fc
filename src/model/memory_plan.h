// Memory planned, not discovered (docs/design.md, "Memory is planned"): the bytes one rank
// allocates, computed from the configuration alone by formula, before anything is allocated.
// --dry-run prints this table; tests/model/memory_plan_test.cpp checks it against what the engine
// really allocates (core/memory.h counters), kind by kind, to the byte.
#pragma once

#include <cstdint>
#include <string>

#include "core/checked_int.h"
#include "core/dtype.h"
#include "model/gpt_config.h"

namespace megatron::model {

struct MemoryPlan {
  int64_t num_parameters = 0;      // elements (tied output layer counted once)
  int64_t parameters = 0;          // bytes, model dtype
  int64_t main_parameters = 0;     // fp32 master copy (--fp16/--bf16), else 0
  int64_t gradients = 0;           // main grads, in grad_dtype
  DType grad_dtype = DType::kF32;  // fp32, or the 16-bit gradient buffer's dtype
  int64_t optimizer = 0;           // Adam exp_avg + exp_avg_sq, fp32
  int64_t activations = 0;         // saved for backward, one micro-batch (inputs and logits included)
  int64_t workspace = 0;           // gradient stream and temporaries reused by every layer
  // NCCL's communicator buffers: not allocated by us, so plan_memory leaves it 0; the planner
  // and --dry-run on several ranks fill it from plan/nccl_memory.h's model.
  int64_t nccl = 0;
  // Copy-engine data parallelism (MEGATRON_DP_COPY_ENGINE): the fp32 receive buffer of the
  // reduce-scatters' all-to-alls (parallel::copy_engine_receive_elements), which the comm layer
  // allocates; 0 without it. Its extra communicator counts in `nccl`.
  int64_t copy_engine = 0;
  // FP8 (GPTConfig::fp8; 0 without), fp8_memory_bytes: the four 1-byte operand buffers the
  // stage's linears share and its scaling state, both allocated as MemoryKind::kWorkspace
  // (so the tracker's workspace counter holds workspace + fp8).
  int64_t fp8 = 0;
  // Throws IntegerOverflow (a megatron::Error) when the sum does not fit in 64 bits.
  int64_t total() const {
    const CheckedInt sum = CheckedInt(parameters) + main_parameters + gradients + optimizer + activations + workspace +
                           nccl + copy_engine + fp8;
    return sum.value();
  }
};

// Parameter count of the GPT (docs/megatron-formats.md §10 shapes: embeddings, per-layer QKV/proj/
// LN/MLP with biases unless disabled, final LN, untied output layer if asked), or of one
// tensor-parallel rank's shards with tp > 1 (model/gpt_model.h: vocabulary, QKV, FC1 rows and
// proj, FC2 columns divided by tp; LayerNorms, position embedding, row-parallel biases whole).
int64_t gpt_num_parameters(const GPTConfig& config, int64_t tp = 1);
// The parameters pipeline stage `pipeline` holds (its layers; embeddings on the first stage;
// final LayerNorm and output layer on the last, whose copy of a tied word embedding counts).
int64_t stage_num_parameters(const GPTConfig& config, int64_t tp, const PipelineStageOptions& pipeline);

// One rank's plan; tp / sequence_parallel as GPTModel's TensorParallelOptions (per layer
// qkv, attention out, FC1/GELU out and the logits are split over tp; with sequence
// parallelism the residual stream, LayerNorm outputs and statistics too, plus one [n, h]
// gather workspace).
// `pipeline`: the stage's layers, its pool of activation sets (the residual stream and kept
// layers of one chunk per set, tokens per set on stage 0), the loss head's buffers on the
// last stage, and the [nl, h] received-gradient workspace when pp > 1.
// A shape whose parameter, element or byte counts do not fit in 64 bits is IntegerOverflow (a
// megatron::Error) naming the shape's flags (here and in the two counts above), never a wrapped
// number.
// `grad_dtype`: the gradient buffer's (GPTModel's grad_dtype; parallel/grad_buffer.h, "Gradient
// dtype"): 4 bytes per parameter in fp32, 2 in bf16/fp16.
MemoryPlan plan_memory(const GPTConfig& config, DType param_dtype, int64_t micro_batch_size, int64_t tp = 1,
                       bool sequence_parallel = false, const PipelineStageOptions& pipeline = {},
                       DType grad_dtype = DType::kF32);

// The FP8 bytes of one rank of a stage of `stage_layers` transformer layers (GPTModel::allocate_fp8;
// 0 without config.fp8), n = seq_length x micro_batch_size rows (the whole sequence also under
// sequence parallelism: the column-parallel linears quantize the gathered input), and per rank
// the linears [out, in] QKV [qkv/t, h], projection [h, q/t], FC1 [f1/t, h], FC2 [h, f/t]:
//   rows    n x max(in, out)    x forward, dy backward (non-transposed)
//   weight  max(out x in)       w forward, w^T backward
//   rows_t  n x max(out)        dy^T (the wgrad's k-major dy)
//   cols_t  n x max(in)         x^T (the wgrad's k-major x)
//   saved_wt  the sum of out x in  each linear's forward w^T codes, read by its backwards
// one byte per element each, and the scaling state (backend::Fp8ScalingState) of 4 linears x 3
// operands per layer: fp32 amax history [H, operands] (H = --fp8-amax-history-len with the
// delayed recipe, 1 with tensorwise), scale and scale_inv [operands].
int64_t fp8_memory_bytes(const GPTConfig& config, int64_t micro_batch_size, int64_t tp, int64_t stage_layers);

// Whether GPTModel keeps, per activation set, the (iteration, micro-batch) part of its dropout
// streams in backend memory (one int64), so that recorded work draws each replay's masks
// (DropoutParams::stream_add): with dropout, on one rank of one stage and chunk (where it
// records work).
bool dropout_stream_in_memory(const GPTConfig& config, int64_t tp, const PipelineStageOptions& pipeline);

// --use-distributed-optimizer (docs/megatron-formats.md §9): the fp32 main parameters and Adam
// moments are sharded over `dp` ranks. With one gradient bucket (the default) rank 0 holds the
// largest shard, ceil(P / dp) elements; this is its plan. (With --ddp-bucket-size each bucket is
// sharded on its own and a rank may hold up to one element more per bucket.)
MemoryPlan shard_optimizer_state(MemoryPlan plan, int64_t dp);

// The table --dry-run prints: one line per kind with bytes and GiB (the NCCL and copy-engine
// lines only when they are not 0), then the total.
std::string format_memory_plan(const MemoryPlan& plan);

}  // namespace megatron::model
