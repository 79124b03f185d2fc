// Rotary frequencies in fp32, operation by operation as Megatron-Core computes them
// (rotary_frequencies.h). Built with -ffp-contract=off (src/CMakeLists.txt): every product and
// sum is rounded on its own, as PyTorch's elementwise kernels do.
#include "backend/rotary_frequencies.h"

#include <cmath>

#include "core/error.h"

namespace megatron::backend {

int64_t rotary_dim(int64_t head_dim, double rotary_percent) {
  MT_CHECK(head_dim > 0 && rotary_percent > 0.0 && rotary_percent <= 1.0)
      << "rotary_dim of head_dim " << head_dim << " with rotary_percent " << rotary_percent;
  const int64_t r =
      rotary_percent < 1.0 ? static_cast<int64_t>(static_cast<double>(head_dim) * rotary_percent) : head_dim;
  MT_CHECK(r > 0 && r % 2 == 0) << "[--rotary-percent] " << rotary_percent << " of head_dim " << head_dim << " rotates "
                                << r << " dims; an even number > 0 is needed";
  return r;
}

std::vector<float> rotary_inv_freq(int64_t rot_dim, double rotary_base) {
  MT_CHECK(rot_dim > 0 && rot_dim % 2 == 0) << "rotary_inv_freq of rot_dim " << rot_dim;
  MT_CHECK(rotary_base > 0.0) << "rotary_inv_freq of base " << rotary_base;
  const float base = static_cast<float>(rotary_base);
  const float dim = static_cast<float>(rot_dim);
  std::vector<float> inv(static_cast<size_t>(rot_dim / 2));
  for (int64_t i = 0; i < rot_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / dim;
    inv[static_cast<size_t>(i)] = 1.0f / std::pow(base, exponent);  // powf: float overload
  }
  return inv;
}

void apply_rope_scaling(std::vector<float>& inv_freq, const RopeScaling& sc) {
  MT_CHECK(sc.factor > 0.0f && sc.high_freq_factor > sc.low_freq_factor && sc.low_freq_factor > 0.0f)
      << "rope scaling factor " << sc.factor << ", low " << sc.low_freq_factor << ", high " << sc.high_freq_factor;
  const float two_pi = static_cast<float>(2.0 * M_PI);
  const float context = sc.original_max_positions;
  const float low_wavelen = context / sc.low_freq_factor;
  const float high_wavelen = context / sc.high_freq_factor;
  const float span = sc.high_freq_factor - sc.low_freq_factor;
  for (float& f : inv_freq) {
    const float wavelen = (1.0f / f) * two_pi;
    float scaled = wavelen > low_wavelen ? f / sc.factor : f;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    if (medium) {
      const float m = ((1.0f / wavelen) * context - sc.low_freq_factor) / span;
      scaled = (1.0f - m) * scaled / sc.factor + m * scaled;
    }
    f = scaled;
  }
}

float rotary_position_scale(double seq_len_interpolation_factor) {
  if (seq_len_interpolation_factor == 0.0) return 1.0f;
  MT_CHECK(seq_len_interpolation_factor > 0.0)
      << "[--rotary-seq-len-interpolation-factor] " << seq_len_interpolation_factor << " must be positive";
  return static_cast<float>(1.0 / seq_len_interpolation_factor);
}

}  // namespace megatron::backend
