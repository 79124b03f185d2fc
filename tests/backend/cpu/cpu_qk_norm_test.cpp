// The query/key norms of --qk-layernorm (backend/qk_norm.h) on the CPU: the forward against the
// norm written out in double per head vector, the saved input and statistics in their documented
// order, the value columns untouched, and the backward against finite differences of every input
// (qkv, both weights, both biases), with query groups, RMSNorm and --apply-layernorm-1p.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/qk_norm.h"
#include "backend/qkv_layout.h"

namespace megatron::backend {
namespace {

using namespace megatron::test;

struct Case {
  int64_t heads, groups, head_dim;
  bool rms, zero_centered;
};

QkNormParams params_of(const Case& c) {
  QkNormParams p;
  p.heads = c.heads;
  p.query_groups = c.groups;
  p.head_dim = c.head_dim;
  p.eps = 1e-5f;
  p.zero_centered = c.zero_centered;
  return p;
}

struct Inputs {
  Tensor qkv, qw, qb, kw, kb;
};

Inputs random_inputs(const Case& c, int64_t s, int64_t b, std::mt19937_64& rng) {
  const QkvLayout L(c.heads, c.groups, c.head_dim);
  Inputs in;
  in.qkv = random_tensor({s, b, L.width()}, rng, DType::kF32, -2.0f, 2.0f);
  in.qw = random_tensor({c.head_dim}, rng, DType::kF32, c.zero_centered ? -0.5f : 0.5f, c.zero_centered ? 0.5f : 1.5f);
  in.kw = random_tensor({c.head_dim}, rng, DType::kF32, c.zero_centered ? -0.5f : 0.5f, c.zero_centered ? 0.5f : 1.5f);
  if (!c.rms) {
    in.qb = random_tensor({c.head_dim}, rng, DType::kF32, -0.5f, 0.5f);
    in.kb = random_tensor({c.head_dim}, rng, DType::kF32, -0.5f, 0.5f);
  }
  return in;
}

struct Saved {
  Tensor x, mean, rstd;
};

Saved saved_for(const Case& c, const Tensor& qkv) {
  const QkvLayout L(c.heads, c.groups, c.head_dim);
  const int64_t n = qkv.numel() / L.width(), vectors = n * (c.heads + L.groups);
  Saved s;
  s.x = Tensor::cpu({vectors * c.head_dim}, qkv.dtype());
  if (!c.rms) s.mean = Tensor::cpu({vectors}, DType::kF32);
  s.rstd = Tensor::cpu({vectors}, DType::kF32);
  return s;
}

// The first column of every normalised vector of row r, in the saved order's within-row order,
// paired with whether it is a key.
struct Vec {
  int64_t col;
  bool key;
};
std::vector<Vec> row_vectors(const QkvLayout& L) {
  std::vector<Vec> v;
  for (int64_t j = 0; j < L.heads; ++j) v.push_back({L.q_col(j), false});
  for (int64_t g = 0; g < L.groups; ++g) v.push_back({L.k_col(g), true});
  return v;
}

class CpuQkNorm : public ::testing::TestWithParam<Case> {};

TEST_P(CpuQkNorm, ForwardMatchesTheNormWrittenOut) {
  const Case c = GetParam();
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 5, b = 2, d = c.head_dim;
  const QkvLayout L(c.heads, c.groups, d);
  Inputs in = random_inputs(c, s, b, rng);
  const std::vector<double> before = values(in.qkv);
  std::vector<double> expected = before;
  Saved sv = saved_for(c, in.qkv);
  qk_norm_forward(*be, in.qkv, in.qw, in.qb, in.kw, in.kb, sv.x, sv.mean, sv.rstd, params_of(c));

  const int64_t n = s * b, w = L.width();
  for (int64_t r = 0; r < n; ++r) {
    for (const Vec& v : row_vectors(L)) {
      const int64_t at = r * w + v.col;
      double mean = 0.0, sq = 0.0;
      for (int64_t i = 0; i < d; ++i) mean += before[static_cast<size_t>(at + i)];
      mean = c.rms ? 0.0 : mean / static_cast<double>(d);
      for (int64_t i = 0; i < d; ++i) sq += std::pow(before[static_cast<size_t>(at + i)] - mean, 2);
      const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(d) + 1e-5);
      const Tensor& wt = v.key ? in.kw : in.qw;
      const Tensor& bt = v.key ? in.kb : in.qb;
      for (int64_t i = 0; i < d; ++i) {
        const double scale = get(wt, i) + (c.zero_centered ? 1.0 : 0.0);
        expected[static_cast<size_t>(at + i)] =
            (before[static_cast<size_t>(at + i)] - mean) * rstd * scale + (c.rms ? 0.0 : get(bt, i));
      }
      // The saved input and statistics at their documented places.
      const int64_t idx =
          v.key ? n * c.heads + r * L.groups + (v.col - L.k_col(0)) / L.group_width()
                : r * c.heads + ((v.col / L.group_width()) * L.per_group() + (v.col % L.group_width()) / d);
      for (int64_t i = 0; i < d; ++i) {
        EXPECT_EQ(get(sv.x, idx * d + i), before[static_cast<size_t>(at + i)]) << "saved x of vector " << idx;
      }
      EXPECT_NEAR(get(sv.rstd, idx), rstd, 1e-5 * rstd) << "rstd of vector " << idx;
      if (!c.rms) {
        EXPECT_NEAR(get(sv.mean, idx), mean, 1e-6) << "mean of vector " << idx;
      }
    }
  }
  // Values (and everything else not normalised) keep their bits: expected holds `before` there.
  expect_close(in.qkv, expected, 1e-5, 1e-5, "qk-normalised qkv");
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t g = 0; g < L.groups; ++g) {
      for (int64_t i = 0; i < d; ++i) {
        const int64_t at = r * w + L.v_col(g) + i;
        EXPECT_EQ(get(in.qkv, at), before[static_cast<size_t>(at)]) << "value column " << at;
      }
    }
  }
}

TEST_P(CpuQkNorm, BackwardMatchesFiniteDifferences) {
  const Case c = GetParam();
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 3, b = 2;
  Inputs in = random_inputs(c, s, b, rng);
  const Tensor r = random_tensor(in.qkv.shape(), rng, DType::kF32, -1.0f, 1.0f);
  const QkNormParams p = params_of(c);
  auto objective = [&] {
    Tensor y = clone(in.qkv);
    Saved sv = saved_for(c, y);
    qk_norm_forward(*be, y, in.qw, in.qb, in.kw, in.kb, sv.x, sv.mean, sv.rstd, p);
    return dot(y, r);
  };
  Tensor y = clone(in.qkv);
  Saved sv = saved_for(c, y);
  qk_norm_forward(*be, y, in.qw, in.qb, in.kw, in.kb, sv.x, sv.mean, sv.rstd, p);
  Tensor g = clone(r);  // d(y), becomes d(qkv) in place (the value columns pass through)
  // The weight gradients start from garbage that kOverwrite must ignore.
  Tensor dqw = random_tensor({c.head_dim}, rng), dkw = random_tensor({c.head_dim}, rng);
  Tensor dqb = c.rms ? Tensor() : random_tensor({c.head_dim}, rng);
  Tensor dkb = c.rms ? Tensor() : random_tensor({c.head_dim}, rng);
  qk_norm_backward(*be, g, sv.x, in.qw, in.kw, sv.mean, sv.rstd, dqw, dqb, dkw, dkb, p, GradWrite::kOverwrite);

  const double h = 1e-3, atol = 2e-3, rtol = 2e-3;
  expect_close(g, finite_difference(in.qkv, h, objective), atol, rtol, "d qkv");
  expect_close(dqw, finite_difference(in.qw, h, objective), atol, rtol, "d q_layernorm.weight");
  expect_close(dkw, finite_difference(in.kw, h, objective), atol, rtol, "d k_layernorm.weight");
  if (!c.rms) {
    expect_close(dqb, finite_difference(in.qb, h, objective), atol, rtol, "d q_layernorm.bias");
    expect_close(dkb, finite_difference(in.kb, h, objective), atol, rtol, "d k_layernorm.bias");
  }

  // kAccumulate adds the same gradient to what the tensors hold.
  const std::vector<double> once = values(dqw), once_k = values(dkw);
  Tensor g2 = clone(r);
  qk_norm_backward(*be, g2, sv.x, in.qw, in.kw, sv.mean, sv.rstd, dqw, dqb, dkw, dkb, p, GradWrite::kAccumulate);
  std::vector<double> twice(once.size()), twice_k(once.size());
  for (size_t i = 0; i < once.size(); ++i) {
    twice[i] = 2 * once[i];
    twice_k[i] = 2 * once_k[i];
  }
  expect_close(dqw, twice, 1e-6, 1e-6, "accumulated d q_layernorm.weight");
  expect_close(dkw, twice_k, 1e-6, 1e-6, "accumulated d k_layernorm.weight");
  EXPECT_TRUE(bitwise_equal(g, g2)) << "d qkv does not depend on the weight gradients' write";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuQkNorm,
                         ::testing::Values(Case{4, 2, 8, false, false},  // GQA, LayerNorm
                                           Case{4, 2, 8, true, false},   // GQA, RMSNorm
                                           Case{3, 3, 6, false, true},   // MHA, LayerNorm 1p
                                           Case{4, 1, 8, true, true},    // MQA, RMSNorm 1p
                                           Case{2, 2, 40, false, false}  // d past one warp
                                           ));

TEST(CpuQkNorm, Bf16RoundsTheNormalisedValuesOnce) {
  const Case c{4, 2, 8, true, false};
  auto rng = test_rng();
  auto be = make_cpu_backend();
  Inputs f32 = random_inputs(c, 3, 2, rng);
  Tensor qkv16 = tensor_from(values(f32.qkv), f32.qkv.shape(), DType::kBF16);
  Tensor qkv32 = to_f32(qkv16);  // the same inputs in fp32
  Saved s16 = saved_for(c, qkv16), s32 = saved_for(c, qkv32);
  qk_norm_forward(*be, qkv16, f32.qw, f32.qb, f32.kw, f32.kb, s16.x, s16.mean, s16.rstd, params_of(c));
  qk_norm_forward(*be, qkv32, f32.qw, f32.qb, f32.kw, f32.kb, s32.x, s32.mean, s32.rstd, params_of(c));
  EXPECT_TRUE(bitwise_equal(qkv16, tensor_from(values(qkv32), qkv32.shape(), DType::kBF16)));
  EXPECT_TRUE(bitwise_equal(s16.rstd, s32.rstd));
}

}  // namespace
}  // namespace megatron::backend
