// CPU backend: rotary position embeddings in place on the q and k columns of the fused qkv
// buffer (ops.h RotaryParams; the layout of qkv_layout.h). Per token (position p, fp32
// p_scaled = p * position_scale) the angles a_i = p_scaled * inv_freq[i] and their cos / sin
// (fp32 cosf / sinf) are computed once and applied to the heads / G + 1 rotated vectors of each
// group (its queries and its key): forward (x1, x2) -> (x1 c - x2 s, x2 c + x1 s), backward the
// transpose (y1 c + y2 s, y2 c - y1 s). Each output is one fp32 expression of the fp32 inputs,
// rounded once to the tensor's dtype.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"
#include "backend/qkv_layout.h"

namespace megatron::backend {

using namespace cpu_detail;

namespace {

// sign = +1: forward rotation; -1: its inverse (the backward).
void rotate(Tensor& x, const RotaryParams& p, float sign, const char* what) {
  const QkvLayout L(p.heads, p.groups(), p.head_dim);
  const int64_t r = p.rot_dim, half = r / 2;
  MT_CHECK(r > 0 && r % 2 == 0 && r <= p.head_dim) << what << " rot_dim " << r << " of head_dim " << p.head_dim;
  MT_CHECK(x.ndim() == 3 && x.dim(2) == L.width())
      << what << " " << x.describe() << " for " << p.heads << " heads in " << L.groups << " groups of " << p.head_dim;
  check_f32(p.inv_freq, "rotary inv_freq");
  MT_CHECK(p.inv_freq.numel() == half) << "rotary inv_freq " << p.inv_freq.describe() << " for rot_dim " << r;
  const int64_t s = x.dim(0), b = x.dim(1);
  const int32_t* pos = nullptr;
  if (p.positions.defined()) {
    check_i32(p.positions, "rotary positions");
    MT_CHECK(p.positions.ndim() == 2 && p.positions.dim(0) == b && p.positions.dim(1) == s)
        << "rotary positions " << p.positions.describe() << ", expected [" << b << ", " << s << "]";
    pos = p.positions.data_as<const int32_t>();
  }
  const float* inv = p.inv_freq.data_as<const float>();
  Out xv(x, what, /*load=*/true);
  const int64_t n = L.per_group(), width = L.width(), d = p.head_dim;

#pragma omp parallel for schedule(static) if (s * b * width >= kParallelWork)
  for (int64_t row = 0; row < s * b; ++row) {
    const int64_t si = row / b, bi = row % b;
    const int64_t position = pos != nullptr ? pos[bi * s + si] : si + p.position_offset;
    const float scaled = static_cast<float>(position) * p.position_scale;
    std::vector<float> c(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      const float a = scaled * inv[i];
      c[static_cast<size_t>(i)] = std::cos(a);
      sn[static_cast<size_t>(i)] = sign * std::sin(a);
    }
    float* base = xv.data() + row * width;
    for (int64_t g = 0; g < L.groups; ++g) {
      for (int64_t slot = 0; slot <= n; ++slot) {  // n queries, then the key
        float* v = base + g * L.group_width() + slot * d;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = v[i], x2 = v[half + i];
          const float ci = c[static_cast<size_t>(i)], si_ = sn[static_cast<size_t>(i)];
          v[i] = x1 * ci - x2 * si_;
          v[half + i] = x2 * ci + x1 * si_;
        }
      }
    }
  }
  xv.commit();
}

}  // namespace

void CpuBackend::rotary_forward(Tensor& qkv, const RotaryParams& params) { rotate(qkv, params, 1.0f, "rotary qkv"); }

void CpuBackend::rotary_backward(Tensor& dqkv, const RotaryParams& params) {
  rotate(dqkv, params, -1.0f, "rotary dqkv");
}

}  // namespace megatron::backend
