// Hugging Face GPT-2 interop (`megatron convert --save-hf` / `--load-hf`): our checkpoint's
// model weights <-> a transformers GPT2LMHeadModel directory (model.safetensors + config.json).
//
// Only what maps exactly is converted: learned absolute positions, LayerNorm, biases, tied
// embeddings, the tanh GELU ("gelu_new"; the exact erf GELU as "gelu"), attention scaled by
// 1/sqrt(head_dim) with head_dim = hidden / heads. Anything else is refused with a one-line
// Error (untied output layer, --disable-bias-linear, --kv-channels != hidden/heads, HF's
// scale_attn_by_inverse_layer_idx, cross-attention, ...).
//
// Names and layouts, per layer N (h = hidden, f = FFN size, H heads of d = h/H):
//   ours (Megatron-core, weight [out, in])         HF ("transformer." prefix; Conv1D weight [in, out])
//   embedding.word_embeddings.weight [V_pad, h]    wte.weight [V, h]  (dummy rows dropped / zero-added)
//   embedding.position_embeddings.weight [P, h]    wpe.weight [P, h]
//   decoder.layers.N.input_layernorm.{weight,bias}     h.N.ln_1.{weight,bias}
//   ....self_attention.linear_qkv.weight [3h, h]   h.N.attn.c_attn.weight [h, 3h]  (see below)
//   ....self_attention.linear_qkv.bias [3h]        h.N.attn.c_attn.bias [3h]
//   ....self_attention.linear_proj.weight [h, h]   h.N.attn.c_proj.weight [h, h]  (transposed)
//   ....self_attention.linear_proj.bias [h]        h.N.attn.c_proj.bias
//   ....pre_mlp_layernorm.{weight,bias}            h.N.ln_2.{weight,bias}
//   ....mlp.linear_fc1.weight [f, h] / bias [f]    h.N.mlp.c_fc.weight [h, f] (transposed) / bias
//   ....mlp.linear_fc2.weight [h, f] / bias [h]    h.N.mlp.c_proj.weight [f, h] (transposed) / bias
//   decoder.final_layernorm.{weight,bias}          ln_f.{weight,bias}
//   (the output layer is the word embedding)       lm_head.weight: absent, or equal to wte
//
// Fused QKV. Megatron interleaves per head (query group; here groups = heads): output row
//   r = head * 3d + t * d + e   (t = 0 q, 1 k, 2 v; e < d)
// HF splits c_attn's output columns into [q | k | v] blocks of h, heads inside each:
//   c = t * h + head * d + e.
// Example h = 4, H = 2, d = 2: our rows 0..11 are q0 q0 k0 k0 v0 v0 q1 q1 k1 k1 v1 v1, i.e.
// HF columns 0 1 4 5 8 9 2 3 6 7 10 11. (This matches Megatron's own HF converters and our
// attention kernels, ops.h AttentionParams.)
//
// Export writes the tensors in the checkpoint's model dtype (fp32, bf16 or fp16); import
// keeps the HF file's dtype (all tensors must share one) and records it as the precision.
// An imported checkpoint is a Megatron "release" checkpoint (model only, iteration 0; train
// --load starts from it at iteration 0 with a fresh optimizer).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace megatron::convert {

struct HfExportResult {
  int64_t iteration = 0;
  int64_t tensors = 0;
  int64_t vocab_size = 0, padded_vocab_size = 0;
};

// Reads the checkpoint in load_dir (latest iteration, or `iteration`) and writes the new
// directory hf_dir (convert/convert_output.h) with model.safetensors and config.json.
HfExportResult export_hf_gpt2(const std::string& load_dir, std::optional<int64_t> iteration, const std::string& hf_dir);

struct HfImportOptions {
  int64_t tensor_model_parallel_size = 1;    // the padded vocabulary is for this TP size
  int64_t pipeline_model_parallel_size = 1;  // recorded (layers must divide)
  int64_t make_vocab_size_divisible_by = 128;
  std::optional<int64_t> seq_length;  // recorded --seq-length; default n_positions
};

struct HfImportResult {
  int64_t tensors = 0;
  int64_t vocab_size = 0, padded_vocab_size = 0;
  int64_t num_layers = 0, hidden_size = 0, num_attention_heads = 0;
};

// Reads hf_dir/config.json and hf_dir/model.safetensors (or the shards model.safetensors.index.json
// names, convert/hf_common.h) and writes our checkpoint as the new
// directory save_dir (release/ + tracker "release").
HfImportResult import_hf_gpt2(const std::string& hf_dir, const std::string& save_dir, const HfImportOptions& options);

// Row r of our fused QKV ([3h, h] weight, [3h] bias) is HF c_attn output column
// hf_qkv_column(r) (see above); h = heads * head_dim.
int64_t hf_qkv_column(int64_t row, int64_t heads, int64_t head_dim);

}  // namespace megatron::convert
