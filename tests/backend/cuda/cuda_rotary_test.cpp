// CUDA rotary position embeddings (src/backend/cuda/cuda_rotary.cu) against the CPU reference:
// forward and backward in place on the fused qkv layout with query groups, every float dtype,
// the vector and the element-wise paths, positions from a tensor or from the offset.
#include <gtest/gtest.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "backend/qkv_layout.h"
#include "backend/rotary_frequencies.h"

namespace megatron::backend {
namespace {

bool have_gpu() { return built_with_cuda() && cuda_device_count() > 0; }

struct Case {
  int64_t s, b, heads, groups, head_dim, rot_dim;
  bool positions;  // explicit ids (documents restarting at 0) instead of s_index + offset
};

std::string case_name(const Case& c) {
  std::ostringstream n;
  n << "s" << c.s << "_b" << c.b << "_h" << c.heads << "_g" << c.groups << "_d" << c.head_dim << "_r" << c.rot_dim
    << (c.positions ? "_positions" : "");
  return n.str();
}

class CudaRotary : public ::testing::TestWithParam<Case> {};

TEST_P(CudaRotary, ForwardAndBackwardMatchCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case c = GetParam();
  SCOPED_TRACE(case_name(c));
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  const std::vector<float> inv = rotary_inv_freq(c.rot_dim, 500000.0);
  RotaryParams p;
  p.heads = c.heads;
  p.query_groups = c.groups;
  p.head_dim = c.head_dim;
  p.rot_dim = c.rot_dim;
  p.position_scale = rotary_position_scale(2.0);
  p.position_offset = 100;
  p.inv_freq = Tensor::cpu({c.rot_dim / 2}, DType::kF32);
  std::copy(inv.begin(), inv.end(), p.inv_freq.data_as<float>());
  if (c.positions) {
    p.positions = Tensor::cpu({c.b, c.s}, DType::kI32);
    for (int64_t i = 0; i < c.b * c.s; ++i) p.positions.data_as<int32_t>()[i] = static_cast<int32_t>((i % c.s) % 37);
  }
  RotaryParams pd = p;
  pd.inv_freq = to_device(*gpu, p.inv_freq);
  if (c.positions) pd.positions = to_device(*gpu, p.positions);
  const int64_t w = QkvLayout(c.heads, c.groups, c.head_dim).width();
  for (const DType dt : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = host_random({c.s, c.b, w}, dt, 5 + static_cast<uint64_t>(c.s), 0.1f, 2.0f);
    Tensor xd = to_device(*gpu, x);
    cpu->rotary_forward(x, p);
    gpu->rotary_forward(xd, pd);
    // fp32: cosf/sinf (glibc) vs sincosf (CUDA) within ~1 ulp of the angle's cos and sin, and
    // fused vs separate multiply-adds: ~3e-7 relative of |x| <= 2. 16-bit: the same fp32 value
    // rounded, one ulp where it straddles a rounding boundary.
    EXPECT_TRUE(close(to_host(*gpu, xd), x, 4e-6, 4e-6, 1, "rotary forward"));
    // The backward from the same input on both (the forwards' results may differ by that ulp,
    // which a second rounding would double).
    xd = to_device(*gpu, x);
    cpu->rotary_backward(x, p);
    gpu->rotary_backward(xd, pd);
    EXPECT_TRUE(close(to_host(*gpu, xd), x, 4e-6, 4e-6, 1, "rotary backward"));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaRotary,
    ::testing::Values(
        // Llama-like heads (128, whole head or half rotated; 64), MHA / GQA / MQA: the vector path.
        Case{256, 2, 8, 8, 128, 128, false}, Case{256, 2, 8, 2, 128, 128, false}, Case{129, 3, 8, 1, 128, 64, false},
        Case{300, 2, 6, 3, 64, 64, true}, Case{64, 1, 32, 8, 128, 128, true},
        // Element-wise path: rot_dim / 2 or head_dim not a multiple of the vector width.
        Case{33, 2, 4, 2, 80, 20, false}, Case{17, 1, 3, 3, 6, 6, true}, Case{50, 2, 4, 4, 72, 36, false},
        // A single pair, a single row.
        Case{1, 1, 2, 1, 8, 2, false}),
    [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// v and the dims past rot_dim keep their bits on the GPU too.
TEST(CudaRotaryDetail, LeavesValuesAndPassThroughDimsUntouched) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto gpu = make_cuda_backend();
  const int64_t s = 40, b = 2, H = 4, G = 2, d = 64, r = 32;
  const QkvLayout L(H, G, d);
  RotaryParams p;
  p.heads = H;
  p.query_groups = G;
  p.head_dim = d;
  p.rot_dim = r;
  const std::vector<float> inv = rotary_inv_freq(r, 10000.0);
  Tensor inv_h = Tensor::cpu({r / 2}, DType::kF32);
  std::copy(inv.begin(), inv.end(), inv_h.data_as<float>());
  p.inv_freq = to_device(*gpu, inv_h);
  const Tensor x = host_random({s, b, L.width()}, DType::kBF16, 3);
  Tensor xd = to_device(*gpu, x);
  gpu->rotary_forward(xd, p);
  const Tensor y = to_host(*gpu, xd);
  int64_t changed = 0;
  for (int64_t row = 0; row < s * b; ++row)
    for (int64_t col = 0; col < L.width(); ++col) {
      const int64_t slot = (col % L.group_width()) / d, dim = col % d, i = row * L.width() + col;
      const bool bits_equal = y.data_as<const uint16_t>()[i] == x.data_as<const uint16_t>()[i];
      if (slot > L.per_group() || dim >= r) {
        ASSERT_TRUE(bits_equal) << "row " << row << " col " << col;
      } else if (!bits_equal) {
        ++changed;
      }
    }
  EXPECT_GT(changed, 0);
}

}  // namespace
}  // namespace megatron::backend
