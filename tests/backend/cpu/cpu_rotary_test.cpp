// CPU backend rotary position embeddings (ops.h RotaryParams) on the fused qkv layout with
// query groups: against the rotation written out independently in double, the inverse pair,
// finite differences, and what is left untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_test_util.h"
#include "backend/qkv_layout.h"
#include "backend/rotary_frequencies.h"

namespace megatron::backend {
namespace {

using namespace megatron::test;

struct Case {
  int64_t heads, groups, head_dim, rot_dim;
};

RotaryParams rotary_params(const Case& c, const std::vector<float>& inv) {
  RotaryParams p;
  p.heads = c.heads;
  p.query_groups = c.groups;
  p.head_dim = c.head_dim;
  p.rot_dim = c.rot_dim;
  p.inv_freq = Tensor::cpu({static_cast<int64_t>(inv.size())}, DType::kF32);
  std::copy(inv.begin(), inv.end(), p.inv_freq.data_as<float>());
  return p;
}

// The expected forward of x [s, b, width], element by element in double from the fp32 angle:
// every query head's and every group key's first rot_dim dims rotated by position
// pos(si, bi), the rest of the row copied.
std::vector<double> expected_rotation(const Tensor& x, const RotaryParams& p, const std::vector<int64_t>& pos) {
  const int64_t s = x.dim(0), b = x.dim(1), w = x.dim(2), half = p.rot_dim / 2;
  const QkvLayout L(p.heads, p.groups(), p.head_dim);
  std::vector<double> out = values(x);
  std::vector<int64_t> starts;  // first columns of the rotated vectors of a row
  for (int64_t h = 0; h < p.heads; ++h) starts.push_back(L.q_col(h));
  for (int64_t g = 0; g < L.groups; ++g) starts.push_back(L.k_col(g));
  for (int64_t si = 0; si < s; ++si)
    for (int64_t bi = 0; bi < b; ++bi)
      for (const int64_t c0 : starts)
        for (int64_t i = 0; i < half; ++i) {
          const float angle = static_cast<float>(pos[static_cast<size_t>(bi * s + si)]) * p.position_scale *
                              p.inv_freq.data_as<const float>()[i];
          const double co = std::cos(static_cast<double>(angle)), sn = std::sin(static_cast<double>(angle));
          const int64_t at = (si * b + bi) * w + c0;
          const double x1 = get(x, at + i), x2 = get(x, at + half + i);
          out[static_cast<size_t>(at + i)] = x1 * co - x2 * sn;
          out[static_cast<size_t>(at + half + i)] = x2 * co + x1 * sn;
        }
  return out;
}

std::vector<int64_t> default_positions(int64_t s, int64_t b, int64_t offset) {
  std::vector<int64_t> pos(static_cast<size_t>(s * b));
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t si = 0; si < s; ++si) pos[static_cast<size_t>(bi * s + si)] = si + offset;
  return pos;
}

class CpuRotary : public ::testing::TestWithParam<Case> {};

TEST_P(CpuRotary, ForwardMatchesTheRotationWrittenOut) {
  const Case c = GetParam();
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 9, b = 2;
  RotaryParams p = rotary_params(c, rotary_inv_freq(c.rot_dim, 10000.0));
  const int64_t w = QkvLayout(c.heads, c.groups, c.head_dim).width();
  // Positions 0 .. s-1 plus an offset (generation); then explicit ids, restarting per document.
  for (const int64_t offset : {int64_t{0}, int64_t{37}}) {
    Tensor x = random_tensor({s, b, w}, rng, DType::kF32, -2.0f, 2.0f);
    p.position_offset = offset;
    const std::vector<double> want = expected_rotation(x, p, default_positions(s, b, offset));
    be->rotary_forward(x, p);
    // fp32 products and sums of O(1) terms, cosf/sinf within an ulp: ~1e-6.
    expect_close(x, want, 2e-6, 2e-6, "rotary forward");
  }
  p.position_offset = 5;  // ignored with explicit positions
  p.position_scale = 0.25f;
  p.positions = Tensor::cpu({b, s}, DType::kI32);
  std::vector<int64_t> pos(static_cast<size_t>(b * s));
  for (int64_t i = 0; i < b * s; ++i) {
    pos[static_cast<size_t>(i)] = (i % s) < 4 ? i % s : i % s - 4;  // documents of 4 and 5 tokens
    p.positions.data_as<int32_t>()[i] = static_cast<int32_t>(pos[static_cast<size_t>(i)]);
  }
  Tensor x = random_tensor({s, b, w}, rng, DType::kF32, -2.0f, 2.0f);
  const std::vector<double> want = expected_rotation(x, p, pos);
  be->rotary_forward(x, p);
  expect_close(x, want, 2e-6, 2e-6, "rotary forward with positions");
}

// Values, the dims past rot_dim and position 0 (angle 0) stay the same bits.
TEST_P(CpuRotary, LeavesValuesAndUnrotatedDimsUntouched) {
  const Case c = GetParam();
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 4, b = 3;
  const RotaryParams p = rotary_params(c, rotary_inv_freq(c.rot_dim, 500000.0));
  const QkvLayout L(c.heads, c.groups, c.head_dim);
  Tensor x = random_tensor({s, b, L.width()}, rng, DType::kF32, -1.0f, 1.0f);
  const Tensor before = clone(x);
  be->rotary_forward(x, p);
  int64_t changed = 0;
  for (int64_t row = 0; row < s * b; ++row)
    for (int64_t col = 0; col < L.width(); ++col) {
      const int64_t g = col / L.group_width(), slot = (col % L.group_width()) / c.head_dim;
      const int64_t dim = col % c.head_dim;
      const bool rotated = slot <= L.per_group() && dim < c.rot_dim && row >= b;  // row < b: position 0
      const int64_t i = row * L.width() + col;
      if (!rotated) {
        ASSERT_EQ(get(x, i), get(before, i)) << "row " << row << " group " << g << " slot " << slot << " dim " << dim;
      } else if (get(x, i) != get(before, i)) {
        ++changed;
      }
    }
  EXPECT_GT(changed, 0);
}

// backward(forward(x)) = x: the rotation is orthogonal; backward is its transpose.
TEST_P(CpuRotary, BackwardInvertsForward) {
  const Case c = GetParam();
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 7, b = 2;
  RotaryParams p = rotary_params(c, rotary_inv_freq(c.rot_dim, 10000.0));
  p.position_offset = 1000;  // large angles
  Tensor x = random_tensor({s, b, QkvLayout(c.heads, c.groups, c.head_dim).width()}, rng, DType::kF32, -2.0f, 2.0f);
  const std::vector<double> orig = values(x);
  be->rotary_forward(x, p);
  be->rotary_backward(x, p);
  // Two fp32 rotations of |x| <= 2: ~4 roundings of ~2.4e-7 relative.
  expect_close(x, orig, 2e-6, 2e-6, "rotary backward(forward(x))");
}

// rotary_backward(r) is the gradient of L(x) = r . rotary_forward(x) (central differences).
TEST_P(CpuRotary, BackwardMatchesFiniteDifferences) {
  const Case c = GetParam();
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 3, b = 2;
  RotaryParams p = rotary_params(c, rotary_inv_freq(c.rot_dim, 10000.0));
  p.position_offset = 3;
  const int64_t w = QkvLayout(c.heads, c.groups, c.head_dim).width();
  Tensor x = random_tensor({s, b, w}, rng, DType::kF32, -1.0f, 1.0f);
  const Tensor r = random_tensor({s, b, w}, rng, DType::kF32, -1.0f, 1.0f);
  Tensor y = be->empty({s, b, w}, DType::kF32, MemoryKind::kOther);
  auto objective = [&] {
    be->copy(x, y);
    be->rotary_forward(y, p);
    return dot(y, r);
  };
  Tensor grad = clone(r);
  be->rotary_backward(grad, p);
  // L is linear in x: central differences are exact up to fp32 noise of L (~30 terms of ~1:
  // ~4e-6) over 2h = 2e-2, ~2e-4.
  expect_close(grad, finite_difference(x, 1e-2, objective), 1e-3, 1e-3, "rotary dL/dx");
}

// 16-bit tensors: the fp32 result of the rounded inputs, rounded once.
TEST_P(CpuRotary, Bf16IsFp32ThenRounded) {
  const Case c = GetParam();
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 5, b = 2;
  const RotaryParams p = rotary_params(c, rotary_inv_freq(c.rot_dim, 10000.0));
  for (const DType dt : {DType::kBF16, DType::kF16}) {
    Tensor x = random_tensor({s, b, QkvLayout(c.heads, c.groups, c.head_dim).width()}, rng, dt, -2.0f, 2.0f);
    Tensor x32 = to_f32(x);
    be->rotary_forward(x, p);
    be->rotary_forward(x32, p);
    for (int64_t i = 0; i < x.numel(); ++i)
      ASSERT_EQ(get(x, i), round_to(dt, static_cast<float>(get(x32, i)))) << dtype_name(dt) << " " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, CpuRotary,
                         ::testing::Values(Case{4, 4, 8, 8},    // multi-head, whole head rotated
                                           Case{4, 2, 8, 4},    // GQA, rotary_percent 0.5
                                           Case{4, 1, 6, 6},    // MQA
                                           Case{3, 3, 10, 2}),  // one pair
                         [](const auto& info) {
                           const Case& c = info.param;
                           std::ostringstream n;
                           n << "h" << c.heads << "g" << c.groups << "d" << c.head_dim << "r" << c.rot_dim;
                           return n.str();
                         });

// RoPE makes q_i . k_j a function of i - j: grouped attention over rotated q and k is the same
// (to fp32 rounding) whatever constant offset the positions start at, and differs from attention
// without the rotation. This checks that queries and their group's key are rotated alike.
TEST(CpuRotaryDetail, AttentionSeesOnlyRelativePositions) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 12, b = 2, H = 4, G = 2, d = 8;
  const Case c{H, G, d, d};
  RotaryParams p = rotary_params(c, rotary_inv_freq(d, 100.0));  // short wavelengths: large angles
  AttentionParams a;
  a.heads = H;
  a.query_groups = G;
  a.head_dim = d;
  a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));
  const Tensor qkv = random_tensor({s, b, QkvLayout(H, G, d).width()}, rng, DType::kF32, 0.1f, 2.0f);
  auto attend = [&](int64_t offset, bool rotate) {
    Tensor x = clone(qkv);
    p.position_offset = offset;
    if (rotate) be->rotary_forward(x, p);
    Tensor out = be->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
    Tensor lse = be->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
    be->attention_forward(x, out, lse, a);
    return out;
  };
  const Tensor base = attend(0, true);
  // Scores of |q||k| <= 2 * 8 * 4 summed in double from fp32 rotations (~3e-7 relative each):
  // ~1e-5 absolute on scores of O(10), moving outputs by less than 1e-4 of max|v| = 2.
  expect_close(attend(50, true), values(base), 2e-4, 2e-4, "attention with positions shifted by 50");
  expect_close(attend(1000, true), values(base), 2e-3, 2e-3, "attention with positions shifted by 1000");
  const Tensor plain = attend(0, false);
  double moved = 0.0;
  for (int64_t i = 0; i < plain.numel(); ++i) moved = std::max(moved, std::abs(get(plain, i) - get(base, i)));
  EXPECT_GT(moved, 0.1) << "the rotation changes attention";
}

TEST(CpuRotaryDetail, ShapesOutsideTheContractAreCallersBugs) {
  auto be = make_cpu_backend();
  const std::vector<float> inv = rotary_inv_freq(4, 10000.0);
  RotaryParams p = rotary_params(Case{2, 1, 4, 4}, inv);
  Tensor x = Tensor::cpu({2, 1, 2 * 1 * 4 + 2 * 4}, DType::kF32);  // [q0 q1 k v] = 16 columns
  be->rotary_forward(x, p);                                        // fine
  Tensor wrong = Tensor::cpu({2, 1, 3 * 2 * 4}, DType::kF32);      // the MHA width
  EXPECT_DEATH(be->rotary_forward(wrong, p), "rotary qkv");
  p.rot_dim = 3;
  EXPECT_DEATH(be->rotary_forward(x, p), "rot_dim");
}

}  // namespace
}  // namespace megatron::backend
