// The shape and numerics of a Megatron GPT (what model/ needs; flags live in train/config.h).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "backend/fp8_recipe.h"
#include "backend/ops.h"

namespace megatron::model {

using Gelu = backend::Gelu;  // kTanh: Megatron's fused bias-GELU; kExact: erf

// Full activation recomputation (Megatron's --recompute-granularity full): kUniform
// recomputes every layer, in chunks of recompute_num_layers layers whose forward is re-run
// together before their backward; kBlock recomputes only the first recompute_num_layers
// layers, one at a time; the other layers keep their activations. Every layer's input (the
// residual stream) is kept in both. Selective recomputation needs nothing here: flash
// attention keeps no [s, s] probabilities to recompute.
enum class Recompute { kNone, kUniform, kBlock };

// --normalization: LayerNorm (weight and bias) or RMSNorm (weight only, no centring).
enum class Normalization { kLayerNorm, kRMSNorm };

// --position-embedding-type: learned absolute positions added to the word embedding (GPT), rotary
// embeddings applied to each attention layer's queries and keys (Llama), or none.
enum class PositionEmbedding { kLearnedAbsolute, kRope, kNone };

// Rotary position embeddings (Megatron-Core's RotaryEmbedding, rotate-half convention): the first
// rot_dim = kv_channels * percent dims of each query and key head turn by position p times
// inv_freq[i] = base^(-2i / rot_dim), with Llama 3.1's frequency scaling where on and positions
// divided by the interpolation factor where given.
struct RotaryConfig {
  float base = 10000.0f;                      // --rotary-base
  float percent = 1.0f;                       // --rotary-percent
  float seq_len_interpolation_factor = 0.0f;  // --rotary-seq-len-interpolation-factor (0: none)
  bool use_rope_scaling = false;              // --use-rope-scaling
  float rope_scaling_factor = 8.0f;           // --rope-scaling-factor
};

struct GPTConfig {
  int64_t num_layers = 0;                            // --num-layers
  int64_t hidden_size = 0;                           // --hidden-size
  int64_t num_attention_heads = 0;                   // --num-attention-heads
  int64_t ffn_hidden_size = 0;                       // --ffn-hidden-size (default 4 * hidden)
  int64_t kv_channels = 0;                           // --kv-channels (default hidden / heads)
  int64_t seq_length = 0;                            // --seq-length
  int64_t max_position_embeddings = 0;               // --max-position-embeddings
  int64_t vocab_size = 0;                            // tokenizer vocabulary (50257 for GPT-2)
  int64_t padded_vocab_size = 0;                     // vocab_size padded to --make-vocab-size-divisible-by * TP
  float init_method_std = 0.02f;                     // --init-method-std
  float attention_dropout = 0.1f;                    // --attention-dropout
  float hidden_dropout = 0.1f;                       // --hidden-dropout
  float layernorm_epsilon = 1e-5f;                   // --layernorm-epsilon
  bool untie_embeddings_and_output_weights = false;  // --untie-embeddings-and-output-weights
  Gelu gelu = Gelu::kTanh;
  bool add_bias_linear = true;                              // --disable-bias-linear turns it off
  Normalization normalization = Normalization::kLayerNorm;  // --normalization
  // --apply-layernorm-1p: every norm scales by (1 + weight), the weight initialised to zeros
  // (Transformer Engine's zero-centred gamma).
  bool apply_layernorm_1p = false;
  // --qk-layernorm: every query and key head is normalised over its kv_channels (the model's
  // --normalization, eps and 1p) after the QKV projection, before rotary embeddings; one weight
  // (and bias) [kv_channels] for all query heads, one for all key heads (Megatron-Core's
  // q_layernorm, k_layernorm).
  bool qk_layernorm = false;
  PositionEmbedding position_embedding = PositionEmbedding::kLearnedAbsolute;  // --position-embedding-type
  RotaryConfig rotary;
  // --group-query-attention --num-query-groups G: G key/value heads, each shared by heads / G
  // query heads (1: multi-query attention). 0: one per head (multi-head attention).
  int64_t num_query_groups = 0;
  // --swiglu: linear_fc1 is [2f, h] = [gate; up] (each half column-parallel: rank r holds rows
  // r f/T.. of both), and the MLP's activation silu(gate) * up replaces GELU.
  bool swiglu = false;
  Recompute recompute = Recompute::kNone;  // --recompute-method with --recompute-granularity full
  int64_t recompute_num_layers = 1;        // --recompute-num-layers
  // Documents packed into a sample (data flags that change the model's inputs; MicroBatch):
  // positions restart after each end-of-document token (--reset-position-ids), and queries
  // attend only to keys of their own document (--reset-attention-mask).
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
  // --fp8-format (with --fp8-recipe and its options): the GEMMs of the transformer layers'
  // linears (QKV, projection, FC1, FC2; forward, dgrad and wgrad) run in FP8 with per-tensor
  // scaling (backend/fp8_linear.h); embeddings, the output layer, attention, norms and the
  // optimizer stay in the model dtype. None: no FP8.
  std::optional<backend::Fp8Config> fp8;

  bool layernorm_bias() const { return normalization == Normalization::kLayerNorm; }
  bool learned_positions() const { return position_embedding == PositionEmbedding::kLearnedAbsolute; }
  bool rope() const { return position_embedding == PositionEmbedding::kRope; }
  // Key/value heads G (= heads without grouped-query attention).
  int64_t query_groups() const { return num_query_groups > 0 ? num_query_groups : num_attention_heads; }
  // linear_qkv's output width (whole model): per group its heads / G queries, its key and value.
  int64_t qkv_out_size() const { return (num_attention_heads + 2 * query_groups()) * kv_channels; }
  // linear_fc1's output width (whole model): f, or 2f with SwiGLU's gate and up halves.
  int64_t fc1_out_size() const { return swiglu ? 2 * ffn_hidden_size : ffn_hidden_size; }

  bool recomputed(int64_t layer) const {
    return recompute == Recompute::kUniform || (recompute == Recompute::kBlock && layer < recompute_num_layers);
  }
  // Layers whose activations are kept, and the activation slots recomputed layers share.
  int64_t kept_layers() const {
    if (recompute == Recompute::kUniform) return 0;
    if (recompute == Recompute::kBlock)
      return num_layers - (recompute_num_layers < num_layers ? recompute_num_layers : num_layers);
    return num_layers;
  }
  int64_t recompute_slots() const {
    if (recompute == Recompute::kUniform) return recompute_num_layers < num_layers ? recompute_num_layers : num_layers;
    return recompute == Recompute::kBlock && recompute_num_layers > 0 ? 1 : 0;
  }
};

// Which part of the model a rank holds under pipeline parallelism (parallel/
// pipeline_schedule.h has the layout): pp stages of vp chunks; chunk c of `stage` is virtual
// stage v = c * pp + stage with the L / (pp * vp) layers from v * L / (pp * vp). Virtual stage 0
// has the embeddings, the last one the final LayerNorm, output layer and loss; with tied
// embeddings the last stage (pp > 1) keeps its own copy of the word embedding.
// activation_sets: the micro-batches the stage holds in flight, over all its chunks (one pool of
// sets, parallel::activation_slots).
struct PipelineStageOptions {
  int64_t pp = 1;
  int64_t stage = 0;
  int64_t virtual_chunks = 1;
  int64_t activation_sets = 1;
};

}  // namespace megatron::model
