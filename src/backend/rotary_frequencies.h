// Host-side frequencies of rotary position embeddings (ops.h RotaryParams), computed in fp32
// with the operations of Megatron-Core's RotaryEmbedding (models/common/embeddings/
// rotary_pos_embedding.py), so that the same flags give the same inv_freq bits:
//   rot_dim     = head_dim if rotary_percent >= 1, else int(head_dim * rotary_percent)
//   inv_freq[i] = 1 / base^((2i) / rot_dim)   (i < rot_dim / 2; fp32 division, powf, reciprocal)
// and, with --use-rope-scaling, Llama 3.1's rescaling of each frequency f (factor F, low and
// high frequency factors 1 and 4, original context C = 8192), again in fp32 in PyTorch's order
// (`a / t` on a tensor t is reciprocal(t) * a):
//   wavelen = (1 / f) * 2pi
//   wavelen < C / 4        : f                 (high frequencies kept)
//   wavelen > C / 1        : f / F             (low frequencies divided)
//   otherwise              : (1 - m) * f / F + m * f,  m = ((1 / wavelen) * C - 1) / (4 - 1)
// Megatron computes these on the GPU by default; CUDA's and glibc's powf agree to within one
// ulp, so a frequency may differ from Megatron's run by that much.
#pragma once

#include <cstdint>
#include <vector>

namespace megatron::backend {

// Llama 3.1's frequency rescaling (Megatron's RotaryEmbedding._apply_scaling).
struct RopeScaling {
  float factor = 8.0f;  // --rope-scaling-factor
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  float original_max_positions = 8192.0f;
};

// The rotated width r of a head of head_dim for --rotary-percent (0 < percent <= 1); even.
int64_t rotary_dim(int64_t head_dim, double rotary_percent);

// inv_freq [rot_dim / 2] (fp32) for --rotary-base; rot_dim even and positive.
std::vector<float> rotary_inv_freq(int64_t rot_dim, double rotary_base);

// freqs rescaled in place as Llama 3.1 does (--use-rope-scaling).
void apply_rope_scaling(std::vector<float>& inv_freq, const RopeScaling& scaling);

// RotaryParams::position_scale for --rotary-seq-len-interpolation-factor (0: none, scale 1):
// the fp32 value of 1 / factor that Megatron multiplies the positions by.
float rotary_position_scale(double seq_len_interpolation_factor);

}  // namespace megatron::backend
