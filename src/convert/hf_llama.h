// Hugging Face Llama interop (`megatron convert --save-hf` / `--load-hf` for checkpoints with
// rotary embeddings): our checkpoint's model weights <-> a transformers LlamaForCausalLM
// directory (config.json, model.safetensors or its shards with model.safetensors.index.json,
// and the tokenizer's files). MistralForCausalLM imports too (a Llama with an optional sliding
// window, accepted only when the window covers every position); it is exported as Llama.
//
// What maps (everything else is refused with a one-line Error naming the flag or the field):
//   ours                                   HF config.json
//   --normalization RMSNorm                (always: LlamaRMSNorm, x * rsqrt(mean(x^2) + eps) * w)
//   --layernorm-epsilon                    rms_norm_eps
//   --swiglu                               hidden_act "silu" (silu(gate) * up)
//   --position-embedding-type rope         (always), --rotary-percent 1 (partial_rotary_factor 1)
//   --rotary-base                          rope_theta
//   --use-rope-scaling --rope-scaling-factor F
//                                          rope_scaling {"rope_type": "llama3", "factor": F,
//                                          "low_freq_factor": 1, "high_freq_factor": 4,
//                                          "original_max_position_embeddings": 8192}: the
//                                          constants Megatron's --use-rope-scaling fixes
//                                          (backend/rotary_frequencies.h); other values refused
//   --rotary-seq-len-interpolation-factor F  rope_scaling {"rope_type": "linear", "factor": F}
//                                          (HF divides inv_freq by F, we multiply positions by
//                                          1/F: the same angles up to fp32 rounding)
//   --num-query-groups G (0: G = heads)    num_key_value_heads
//   --kv-channels                          head_dim
//   --hidden-size, --ffn-hidden-size, --num-layers, --num-attention-heads, --max-position-embeddings
//                                          hidden_size, intermediate_size, num_hidden_layers,
//                                          num_attention_heads, max_position_embeddings
//   --disable-bias-linear (or not)         attention_bias = mlp_bias = false (or both true)
//   --untie-embeddings-and-output-weights  tie_word_embeddings false
//   --init-method-std, --attention-dropout initializer_range, attention_dropout
//   vocab_size                             vocab_size (dummy rows dropped / zero-added)
// transformers 5 configs (rope_parameters with rope_theta inside) import too; the export writes
// the rope_theta + rope_scaling spelling, which transformers 4 and 5 both read.
//
// Tensors, per layer N (h hidden, f FFN, H heads, G groups of n = H / G, d head_dim):
//   embedding.word_embeddings.weight [V_pad, h]     model.embed_tokens.weight [V, h]
//   decoder.layers.N.input_layernorm.weight         model.layers.N.input_layernorm.weight
//   ....self_attention.linear_qkv.weight [(H + 2G) d, h]
//                                                  ....self_attn.{q,k,v}_proj.weight [H d | G d | G d, h]
//   ....self_attention.linear_qkv.bias             ....self_attn.{q,k,v}_proj.bias
//   ....self_attention.linear_proj.weight [h, H d] ....self_attn.o_proj.weight (and .bias)
//   ....pre_mlp_layernorm.weight                   ....post_attention_layernorm.weight
//   ....mlp.linear_fc1.weight [2f, h] = [gate; up] ....mlp.gate_proj.weight [f, h] (rows 0..f),
//                                                  ....mlp.up_proj.weight [f, h] (rows f..2f) (and .bias)
//   ....mlp.linear_fc2.weight [h, f]               ....mlp.down_proj.weight (and .bias)
//   decoder.final_layernorm.weight                 model.norm.weight
//   output_layer.weight [V_pad, h] (untied)        lm_head.weight [V, h]; tied: absent (or equal
//                                                  to embed_tokens on import)
// Fused QKV (backend/qkv_layout.h): group g's rows are its n queries, its key, its value, d rows
// each: query head j (group j / n, slot j % n) row e is our row g (n + 2) d + (j % n) d + e and
// q_proj row j d + e; key g row e is our g (n + 2) d + n d + e and k_proj row g d + e; value
// likewise at slot n + 1. HF's repeat_kv gives query head j the key/value head j / n, as our
// groups do. Example H = 4, G = 2, d = 1: our rows are q0 q1 k0 v0 q2 q3 k1 v1.
//
// No q/k row permutation. Megatron-Core's rotary embedding (rotary_interleaved False, its
// default and what we implement, backend/ops.h RotaryParams) and transformers' Llama both
// rotate halves: for a head vector x with halves x1 = x[:d/2], x2 = x[d/2:], and angles
// a_i = p inv_freq[i], out = (x1 cos a - x2 sin a, x2 cos a + x1 sin a) (HF: q * cos +
// rotate_half(q) * sin, cos = cat(cos a, cos a)). So HF's q_proj/k_proj rows are already in
// Megatron-Core's order. The permutation in transformers' convert_llama_weights_to_hf.py (and
// in Megatron-LM's tools/checkpoint/loader_llama_mistral.py convert_to_hf, which reuses it)
// converts Meta's original consolidated.pth, whose complex-number rotary rotates interleaved
// pairs (x[2i], x[2i+1]), into HF's layout; Megatron-LM's own HF loader (loader_llama_mistral.py
// set_attn_state: cat of q_proj, k_proj, v_proj per query group) and its HF saver
// (saver_hf_llava.py recover_lm_qkv_weight: the inverse split) move rows without permuting.
// bench/hf_llama_check.py checks it against transformers' logits on the GPU machine; the CPU
// test (tests/convert/hf_llama_test.cpp) against a numpy statement of HF's forward.
//
// Export writes the tensors in the checkpoint's model dtype; import keeps the HF files' dtype
// (all tensors must share one) and records it as the precision. An imported checkpoint is a
// Megatron "release" checkpoint (model only, iteration 0).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "convert/hf_common.h"

namespace megatron::convert {

struct HfLlamaExportOptions {
  int64_t max_shard_bytes = kDefaultMaxShardBytes;  // --max-shard-size
  // config.json's bos_token_id / eos_token_id: what the checkpoint recorded on import (HF's own
  // values, an eos list included), else these (JSON text: the tokenizer's ids), else left out.
  std::optional<std::string> bos_token_id, eos_token_id;
  std::vector<HfExtraFile> tokenizer_files;  // written beside the weights
};

struct HfLlamaExportResult {
  int64_t iteration = 0;
  int64_t tensors = 0;  // HF tensors written
  int64_t shards = 1;   // weight files
  int64_t vocab_size = 0, padded_vocab_size = 0;
};

// Reads the checkpoint in load_dir (latest iteration, or `iteration`) and writes the new
// directory hf_dir (convert/convert_output.h).
HfLlamaExportResult export_hf_llama(const std::string& load_dir, std::optional<int64_t> iteration,
                                    const std::string& hf_dir, const HfLlamaExportOptions& options = {});

struct HfLlamaImportOptions {
  int64_t tensor_model_parallel_size = 1;    // the padded vocabulary is for this TP size
  int64_t pipeline_model_parallel_size = 1;  // recorded (layers must divide)
  int64_t make_vocab_size_divisible_by = 128;
  std::optional<int64_t> seq_length;  // recorded --seq-length; default max_position_embeddings
  // Recorded as args --tokenizer-type / --tokenizer-model (empty: not recorded); the files are
  // copied into the checkpoint's directory (release/).
  std::string tokenizer_type, tokenizer_model;
  std::vector<HfExtraFile> tokenizer_files;
};

struct HfLlamaImportResult {
  std::string architecture;  // LlamaForCausalLM, MistralForCausalLM
  int64_t tensors = 0;       // our tensors written
  int64_t vocab_size = 0, padded_vocab_size = 0;
  int64_t num_layers = 0, hidden_size = 0, num_attention_heads = 0, num_query_groups = 0;
  std::string rope;  // "rope_theta 500000, llama3 scaling factor 8", for the command's line
};

// Reads hf_dir (config.json and the weights) and writes our checkpoint as the new directory
// save_dir (release/ + tracker "release").
HfLlamaImportResult import_hf_llama(const std::string& hf_dir, const std::string& save_dir,
                                    const HfLlamaImportOptions& options);

// Row r of our fused QKV for H heads in G groups of head_dim d: which HF projection holds it
// (0 q_proj, 1 k_proj, 2 v_proj) and its row there (see above).
struct HfQkvRow {
  int which = 0;
  int64_t row = 0;
};
HfQkvRow hf_llama_qkv_row(int64_t row, int64_t heads, int64_t groups, int64_t head_dim);

}  // namespace megatron::convert
