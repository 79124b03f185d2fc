// FLOPs per iteration for the TFLOP/s/GPU figure, as Megatron-LM computes it
// (megatron/training/training.py num_floating_point_operations; docs/megatron-formats.md §5).
//
// Symbols: B global batch (samples), s seq length, L layers, h hidden, n heads, g query groups
// (= n: no GQA yet), d = kv_channels, q = n*d, k = g*d, f = ffn hidden, V = PADDED vocab.
// Every GEMM costs 6 = 3 (forward, dgrad, wgrad) x 2 (multiply-add) FLOPs per MAC:
//   attention QKV + projection   6*B*s*L*(h*(q + 2k) + q*h)
//   core attention (QK^T, AV)    6*B*s^2*L*q    (2025 convention: causal mask counts half)
//                               12*B*s^2*L*q    (2024 convention: full square)
//   MLP (FC1 + FC2, GELU)        12*B*s*L*h*f   = 6*c*B*s*L*h*f with Megatron's c = 2
//   MLP with --swiglu            18*B*s*L*h*f   c = 3: FC1 is [2f, h] (gate and up), FC2 [h, f]
//                                               (HEAD transformer_flops; the 2024 formulas'
//                                               (f/h)*1.5 is the same number)
//   logits                        6*B*s*h*V
// For GPT-2 shapes (q = k = h, f = 4h) the 2025 sum is 72*B*s*L*h^2*(1 + s/(12h) + V/(12Lh)):
// L=12, h=768, s=1024, V=50304 gives 8.171846e11 per sample (2024: 8.751667e11).
// Activation recomputation is never counted (as upstream), nor are the norms (RMSNorm or
// LayerNorm) or the SwiGLU / GELU elementwise work. Throughput divides by all GPUs.
#pragma once

#include <cstdint>
#include <string>

#include "model/gpt_config.h"
#include "train/config.h"

namespace megatron::train {

// The four terms, in FLOPs, for `batch` samples.
struct FlopsTerms {
  double attention_linear = 0;  // QKV and output projection
  double core_attention = 0;    // QK^T and softmax(.)V
  double mlp = 0;               // FC1 and FC2 (FC1's gate and up halves with SwiGLU)
  double logits = 0;            // LM head
  double total() const { return attention_linear + core_attention + mlp + logits; }
};

// Needs num_layers, hidden_size, num_attention_heads, kv_channels, ffn_hidden_size, seq_length
// and padded_vocab_size set (MT_CHECK otherwise).
FlopsTerms flops_terms(const model::GPTConfig& m, int64_t batch, FlopsConvention convention);
// The total for one iteration of `global_batch` samples.
double flops_per_iteration(const model::GPTConfig& m, int64_t global_batch, FlopsConvention convention);
// Megatron's throughput field: flops / (seconds * 1e12 * world_size).
double tflops_per_gpu(double flops_per_iteration, double seconds_per_iteration, int64_t world_size);

// The start-up explanation: the formula term by term with this configuration's numbers, per
// sample and per iteration of `global_batch` samples. Several lines, each ending in '\n'.
std::string flops_formula_text(const model::GPTConfig& m, int64_t global_batch, FlopsConvention convention);

}  // namespace megatron::train
