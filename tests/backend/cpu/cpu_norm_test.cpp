// CPU backend layernorm and embeddings.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_test_util.h"
#include "core/rng.h"

namespace megatron::backend {
namespace {

using namespace megatron::test;

// Naive double layernorm of rows of length h (biased variance).
void naive_layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, std::vector<double>& out,
                     std::vector<double>& mean, std::vector<double>& rstd) {
  const int64_t h = x.dim(-1), n = x.numel() / h;
  out.assign(x.numel(), 0.0);
  mean.assign(n, 0.0);
  rstd.assign(n, 0.0);
  for (int64_t r = 0; r < n; ++r) {
    double m = 0.0, v = 0.0;
    for (int64_t j = 0; j < h; ++j) m += get(x, r * h + j);
    m /= h;
    for (int64_t j = 0; j < h; ++j) v += (get(x, r * h + j) - m) * (get(x, r * h + j) - m);
    v /= h;
    mean[r] = m;
    rstd[r] = 1.0 / std::sqrt(v + eps);
    for (int64_t j = 0; j < h; ++j) out[r * h + j] = (get(x, r * h + j) - m) * rstd[r] * get(gamma, j) + get(beta, j);
  }
}

TEST(CpuNorm, LayernormForwardMatchesNaive) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 4, b = 3, h = 20;
  // A large common offset (mean ~ 3) checks the variance is not computed as E[x^2] - E[x]^2
  // in fp32... to the extent fp32 shows it; values keep their random spread.
  Tensor x = random_tensor({s, b, h}, rng);
  for (int64_t i = 0; i < x.numel(); ++i) set(x, i, get(x, i) + 3.0);
  Tensor gamma = random_tensor({h}, rng), beta = random_tensor({h}, rng);
  Tensor out = be->empty({s, b, h}, DType::kF32, MemoryKind::kOther);
  Tensor mean = be->empty({s * b}, DType::kF32, MemoryKind::kOther);
  Tensor rstd = be->empty({s * b}, DType::kF32, MemoryKind::kOther);
  const float eps = 1e-5f;
  be->layernorm_forward(x, gamma, beta, eps, out, mean, rstd);
  std::vector<double> eo, em, er;
  naive_layernorm(x, gamma, beta, eps, eo, em, er);
  // Outputs O(1) from fp32 arithmetic on O(1) values: 1e-5 covers a few ulps of |xhat| <= 5.
  expect_close(out, eo, 1e-5, 1e-5, "layernorm out");
  expect_close(mean, em, 1e-6, 1e-6, "layernorm mean");
  expect_close(rstd, er, 1e-6, 1e-5, "layernorm rstd");
}

TEST(CpuNorm, LayernormBackwardMatchesFiniteDifferencesAndAccumulates) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t n = 5, h = 9;
  Tensor x = random_tensor({n, h}, rng), gamma = random_tensor({h}, rng), beta = random_tensor({h}, rng);
  Tensor r = random_tensor({n, h}, rng);
  Tensor out = be->empty({n, h}, DType::kF32, MemoryKind::kOther);
  Tensor mean = be->empty({n}, DType::kF32, MemoryKind::kOther);
  Tensor rstd = be->empty({n}, DType::kF32, MemoryKind::kOther);
  const float eps = 1e-5f;
  auto objective = [&] {
    be->layernorm_forward(x, gamma, beta, eps, out, mean, rstd);
    return dot(out, r);
  };
  objective();
  Tensor dx = random_tensor({n, h}, rng);  // overwritten
  Tensor dgamma = random_tensor({h}, rng), dbeta = random_tensor({h}, rng);
  const std::vector<double> dg0 = values(dgamma), db0 = values(dbeta);
  be->layernorm_backward(r, x, gamma, mean, rstd, dx, dgamma, dbeta);
  // x: L is smooth with curvature ~ rstd^2 ~ 1 - 10 for these rows (std ~ 0.6); step 1e-3
  // gives truncation ~ h^2 * 10 = 1e-5, and fp32 noise of L (sum of 45 terms ~ 1, ~1e-6)
  // over 2e-3: ~5e-4. Tolerance 2e-3 absolute on gradients of size ~1-10.
  expect_close(dx, finite_difference(x, 1e-3, objective), 2e-3, 2e-3, "layernorm dx");
  // gamma, beta: L is linear in them (no truncation error); step 1e-2.
  expect_close(minus(values(dgamma), dg0), finite_difference(gamma, 1e-2, objective), 1e-3, 1e-3,
               "layernorm dgamma (+=)");
  expect_close(minus(values(dbeta), db0), finite_difference(beta, 1e-2, objective), 1e-3, 1e-3, "layernorm dbeta (+=)");

  // dx is overwritten: the same call again gives the same dx, dgamma grows by the same step.
  Tensor dx2 = clone(dx);
  const std::vector<double> dg1 = values(dgamma);
  be->layernorm_backward(r, x, gamma, mean, rstd, dx2, dgamma, dbeta);
  EXPECT_TRUE(bitwise_equal(dx, dx2));
  expect_close(minus(values(dgamma), dg1), minus(dg1, dg0), 1e-6, 1e-5, "second dgamma accumulation");
}

TEST(CpuNorm, LayernormBf16IsFp32OfRoundedInputsThenRounded) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  Tensor x = random_tensor({6, 32}, rng, DType::kBF16);
  Tensor gamma = random_tensor({32}, rng, DType::kBF16), beta = random_tensor({32}, rng, DType::kBF16);
  Tensor out = be->empty({6, 32}, DType::kBF16, MemoryKind::kOther);
  Tensor out32 = be->empty({6, 32}, DType::kF32, MemoryKind::kOther);
  Tensor mean = be->empty({6}, DType::kF32, MemoryKind::kOther), rstd = be->empty({6}, DType::kF32, MemoryKind::kOther);
  Tensor mean32 = be->empty({6}, DType::kF32, MemoryKind::kOther);
  Tensor rstd32 = be->empty({6}, DType::kF32, MemoryKind::kOther);
  be->layernorm_forward(x, gamma, beta, 1e-5f, out, mean, rstd);
  be->layernorm_forward(to_f32(x), to_f32(gamma), to_f32(beta), 1e-5f, out32, mean32, rstd32);
  EXPECT_TRUE(bitwise_equal(mean, mean32));
  EXPECT_TRUE(bitwise_equal(rstd, rstd32));
  for (int64_t i = 0; i < out.numel(); ++i)
    ASSERT_EQ(get(out, i), round_to(DType::kBF16, static_cast<float>(get(out32, i)))) << i;
  // Backward with bf16 dy/x/gamma and a bf16 dx, fp32 dgamma/dbeta.
  Tensor dy = random_tensor({6, 32}, rng, DType::kBF16);
  Tensor dx = be->empty({6, 32}, DType::kBF16, MemoryKind::kOther);
  Tensor dx32 = be->empty({6, 32}, DType::kF32, MemoryKind::kOther);
  Tensor dg = be->empty({32}, DType::kF32, MemoryKind::kOther), db = be->empty({32}, DType::kF32, MemoryKind::kOther);
  Tensor dg32 = be->empty({32}, DType::kF32, MemoryKind::kOther);
  Tensor db32 = be->empty({32}, DType::kF32, MemoryKind::kOther);
  be->layernorm_backward(dy, x, gamma, mean, rstd, dx, dg, db);
  be->layernorm_backward(to_f32(dy), to_f32(x), to_f32(gamma), mean32, rstd32, dx32, dg32, db32);
  EXPECT_TRUE(bitwise_equal(dg, dg32));
  EXPECT_TRUE(bitwise_equal(db, db32));
  for (int64_t i = 0; i < dx.numel(); ++i)
    ASSERT_EQ(get(dx, i), round_to(DType::kBF16, static_cast<float>(get(dx32, i)))) << i;
}

// A bf16 LayerNorm backward adding into a residual gradient: x, gamma, dy and the residual
// (random values times resid_scale) of n rows of h, and mean / rstd from the forward.
struct ResidualBackward {
  Tensor x, gamma, dy, resid, mean, rstd;
};
ResidualBackward residual_backward_inputs(Backend& be, std::mt19937_64& rng, int64_t n, int64_t h, double resid_scale) {
  ResidualBackward r;
  r.x = random_tensor({n, h}, rng, DType::kBF16);
  r.gamma = random_tensor({h}, rng, DType::kBF16);
  const Tensor beta = random_tensor({h}, rng, DType::kBF16);
  r.dy = random_tensor({n, h}, rng, DType::kBF16);
  r.resid = random_tensor({n, h}, rng, DType::kBF16);
  for (int64_t i = 0; i < r.resid.numel(); ++i) set(r.resid, i, resid_scale * get(r.resid, i));
  Tensor out = be.empty({n, h}, DType::kBF16, MemoryKind::kOther);
  r.mean = be.empty({n}, DType::kF32, MemoryKind::kOther);
  r.rstd = be.empty({n}, DType::kF32, MemoryKind::kOther);
  be.layernorm_forward(r.x, r.gamma, beta, 1e-5f, out, r.mean, r.rstd);
  return r;
}

// The outputs of one backward call adding into the residual gradient: dx starting as a copy of
// the residual, dgamma and dbeta unset (every call here overwrites them).
struct LnGrads {
  Tensor dx, dgamma, dbeta;
};
LnGrads residual_outputs(Backend& be, const ResidualBackward& in) {
  const int64_t h = in.gamma.numel();
  return {clone(in.resid), be.empty({h}, DType::kF32, MemoryKind::kOther),
          be.empty({h}, DType::kF32, MemoryKind::kOther)};
}
// layernorm_backward adding into the residual gradient: the bits the fused variants must leave.
LnGrads plain_residual_backward(Backend& be, const ResidualBackward& in) {
  LnGrads g = residual_outputs(be, in);
  be.layernorm_backward(in.dy, in.x, in.gamma, in.mean, in.rstd, g.dx, g.dgamma, g.dbeta, GradWrite::kOverwrite,
                        GradWrite::kAccumulate);
  return g;
}
void expect_same_bits(const LnGrads& got, const LnGrads& want) {
  EXPECT_TRUE(bitwise_equal(got.dx, want.dx));
  EXPECT_TRUE(bitwise_equal(got.dgamma, want.dgamma));
  EXPECT_TRUE(bitwise_equal(got.dbeta, want.dbeta));
}

// dx_write = kAccumulate: dx = round(residual + round(LayerNorm dx)) element by element, the
// bits of the unfused backward-then-add (in bf16 both roundings show); dgamma / dbeta as the
// plain backward; dx aliasing dy is a programming error (MT_CHECK aborts).
TEST(CpuNorm, LayernormBackwardAddingIntoDxRoundsTwiceAsTheUnfusedPair) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t n = 6, h = 32;
  auto [x, gamma, dy, resid, mean, rstd] = residual_backward_inputs(*be, rng, n, h, 8.0);
  Tensor ln_dx = be->empty({n, h}, DType::kBF16, MemoryKind::kOther);
  Tensor dg1 = be->empty({h}, DType::kF32, MemoryKind::kOther), db1 = be->empty({h}, DType::kF32, MemoryKind::kOther);
  be->layernorm_backward(dy, x, gamma, mean, rstd, ln_dx, dg1, db1, GradWrite::kOverwrite);
  Tensor dx = be->empty({n, h}, DType::kBF16, MemoryKind::kOther);
  std::memcpy(dx.data(), resid.data(), static_cast<size_t>(resid.nbytes()));
  Tensor dg2 = be->empty({h}, DType::kF32, MemoryKind::kOther), db2 = be->empty({h}, DType::kF32, MemoryKind::kOther);
  be->layernorm_backward(dy, x, gamma, mean, rstd, dx, dg2, db2, GradWrite::kOverwrite, GradWrite::kAccumulate);
  int64_t moved = 0;
  for (int64_t i = 0; i < dx.numel(); ++i) {
    ASSERT_EQ(get(dx, i), round_to(DType::kBF16, static_cast<float>(get(resid, i)) + static_cast<float>(get(ln_dx, i))))
        << i;
    moved += get(dx, i) != get(resid, i);
  }
  EXPECT_GT(moved, n * h / 2) << "the LayerNorm gradient was not added";
  EXPECT_TRUE(bitwise_equal(dg1, dg2));
  EXPECT_TRUE(bitwise_equal(db1, db2));
  EXPECT_DEATH(
      be->layernorm_backward(dy, x, gamma, mean, rstd, dy, dg2, db2, GradWrite::kOverwrite, GradWrite::kAccumulate),
      "must not alias dy");
  // A partial overlap too: dx one row into dy's buffer.
  Tensor both = be->empty({n + 1, h}, DType::kBF16, MemoryKind::kOther);
  Tensor dy_view = both.flat_view(0, {n, h}), dx_view = both.flat_view(h, {n, h});
  EXPECT_DEATH(be->layernorm_backward(dy_view, x, gamma, mean, rstd, dx_view, dg2, db2, GradWrite::kOverwrite,
                                      GradWrite::kAccumulate),
               "must not alias dy");
}

// layernorm_backward_colsum: the same dx, dgamma and dbeta as layernorm_backward, and the
// column sums of the dx it leaves (here after adding a residual gradient, in bf16: the sums
// of the stored, twice-rounded values), against double sums of that dx; accumulated onto a
// base when asked. Sums of 6 values of |v| < ~10: fp32 errors below 1e-5.
TEST(CpuNorm, LayernormBackwardColsumSumsTheDxItLeaves) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t n = 6, h = 32;
  const ResidualBackward in = residual_backward_inputs(*be, rng, n, h, 1.0);
  const LnGrads plain = plain_residual_backward(*be, in);
  for (GradWrite colsum_write : {GradWrite::kOverwrite, GradWrite::kAccumulate}) {
    const Tensor base = random_tensor({h}, rng);
    LnGrads got = residual_outputs(*be, in);
    Tensor cs = clone(base);
    be->layernorm_backward_colsum(in.dy, in.x, in.gamma, in.mean, in.rstd, got.dx, got.dgamma, got.dbeta, cs,
                                  GradWrite::kOverwrite, GradWrite::kAccumulate, colsum_write);
    expect_same_bits(got, plain);
    std::vector<double> want(static_cast<size_t>(h));
    for (int64_t j = 0; j < h; ++j) {
      double sum = colsum_write == GradWrite::kAccumulate ? get(base, j) : 0.0;
      for (int64_t r = 0; r < n; ++r) sum += get(got.dx, r * h + j);
      want[static_cast<size_t>(j)] = sum;
    }
    expect_close(cs, want, 1e-5, 1e-5, colsum_write == GradWrite::kAccumulate ? "colsum (+=)" : "colsum");
  }
}

// layernorm_backward_dropout_colsum: the same dx, dgamma and dbeta; dz is dx through the mask
// (element i: 0, or dx_i / (1-p) rounded, kept iff dropout_keep(seed, stream, offset + i, p),
// core/rng.h, checked here element by element) and the column sums are dz's, against double
// sums.
TEST(CpuNorm, LayernormBackwardDropoutColsumMasksTheDxItLeavesAndSumsThat) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t n = 6, h = 32;
  const ResidualBackward in = residual_backward_inputs(*be, rng, n, h, 1.0);
  const LnGrads plain = plain_residual_backward(*be, in);
  const DropoutParams dp{0.25f, 91, 7, 5};
  LnGrads got = residual_outputs(*be, in);
  Tensor cs = be->empty({h}, DType::kF32, MemoryKind::kOther);
  Tensor dz = Tensor::cpu({n, h}, in.resid.dtype());
  be->layernorm_backward_dropout_colsum(in.dy, in.x, in.gamma, in.mean, in.rstd, got.dx, got.dgamma, got.dbeta, dz, cs,
                                        dp, GradWrite::kOverwrite, GradWrite::kAccumulate, GradWrite::kOverwrite);
  expect_same_bits(got, plain);
  int64_t dropped = 0;
  std::vector<double> want(static_cast<size_t>(h), 0.0);
  for (int64_t i = 0; i < n * h; ++i) {
    const bool keep = dropout_keep(dp.seed, dp.stream, dp.offset + static_cast<uint64_t>(i), dp.p);
    const float kept = static_cast<float>(get(got.dx, i)) * (1.0f / (1.0f - dp.p));  // fp32, as ops.h
    const Tensor one = tensor_from({keep ? static_cast<double>(kept) : 0.0}, {1}, dz.dtype());
    ASSERT_EQ(get(dz, i), get(one, 0)) << "element " << i;
    dropped += keep ? 0 : 1;
    want[static_cast<size_t>(i % h)] += get(dz, i);
  }
  EXPECT_GT(dropped, 0);
  expect_close(cs, want, 1e-5, 1e-5, "dropout colsum");
}

TEST(CpuNorm, EmbeddingForwardMatchesNaive) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t b = 3, s = 5, vocab = 11, h = 6, positions = 8;
  Tensor tokens = be->empty({b, s}, DType::kI32, MemoryKind::kOther);
  for (int64_t i = 0; i < b * s; ++i) tokens.data_as<int32_t>()[i] = static_cast<int32_t>(rng() % vocab);
  Tensor wte = random_tensor({vocab, h}, rng), wpe = random_tensor({positions, h}, rng);
  Tensor out = be->empty({s, b, h}, DType::kF32, MemoryKind::kOther);
  be->embedding_forward(tokens, Tensor(), wte, wpe, out);
  std::vector<double> expect(s * b * h);
  for (int64_t si = 0; si < s; ++si)
    for (int64_t bi = 0; bi < b; ++bi) {
      const int32_t t = tokens.data_as<int32_t>()[bi * s + si];
      for (int64_t j = 0; j < h; ++j) expect[(si * b + bi) * h + j] = get(wte, t * h + j) + get(wpe, si * h + j);
    }
  // One fp32 addition: exact to half an ulp.
  expect_close(out, expect, 0.0, 1e-7, "embedding out");
}

TEST(CpuNorm, EmbeddingBackwardMatchesFiniteDifferencesAndAccumulates) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t b = 2, s = 6, vocab = 5, h = 4, positions = 7;
  Tensor tokens = be->empty({b, s}, DType::kI32, MemoryKind::kOther);
  // Repeated tokens (vocab 5 < 12 positions) so the scatter has to add.
  for (int64_t i = 0; i < b * s; ++i) tokens.data_as<int32_t>()[i] = static_cast<int32_t>(rng() % vocab);
  tokens.data_as<int32_t>()[0] = tokens.data_as<int32_t>()[1] = 2;
  Tensor wte = random_tensor({vocab, h}, rng), wpe = random_tensor({positions, h}, rng);
  Tensor r = random_tensor({s, b, h}, rng);
  Tensor out = be->empty({s, b, h}, DType::kF32, MemoryKind::kOther);
  auto objective = [&] {
    be->embedding_forward(tokens, Tensor(), wte, wpe, out);
    return dot(out, r);
  };
  Tensor dwte = random_tensor({vocab, h}, rng), dwpe = random_tensor({positions, h}, rng);
  const std::vector<double> dwte0 = values(dwte), dwpe0 = values(dwpe);
  be->embedding_backward(tokens, Tensor(), r, dwte, dwpe);
  // Linear in both tables: central differences exact up to fp32 noise (~1e-4, see linear).
  expect_close(minus(values(dwte), dwte0), finite_difference(wte, 1e-2, objective), 1e-3, 1e-3, "dwte (+=)");
  expect_close(minus(values(dwpe), dwpe0), finite_difference(wpe, 1e-2, objective), 1e-3, 1e-3, "dwpe (+=)");
  // Positions beyond s get no gradient: their (+=) leaves them untouched.
  for (int64_t p = s; p < positions; ++p)
    for (int64_t j = 0; j < h; ++j) EXPECT_EQ(get(dwpe, p * h + j), dwpe0[p * h + j]);
}

// Position ids (--reset-position-ids): row (si, bi) adds wpe[positions[bi, si]], and the
// gradient of each position row sums every token that used it.
TEST(CpuNorm, EmbeddingWithPositionIdsMatchesNaiveAndFiniteDifferences) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t b = 2, s = 6, vocab = 5, h = 4, positions = 7;
  Tensor tokens = be->empty({b, s}, DType::kI32, MemoryKind::kOther);
  for (int64_t i = 0; i < b * s; ++i) tokens.data_as<int32_t>()[i] = static_cast<int32_t>(rng() % vocab);
  // Documents restart the positions: row 0 = {0, 1, 0, 1, 2, 0}, row 1 = {0, 1, 2, 3, 4, 5}.
  Tensor pos = Tensor::cpu({b, s}, DType::kI32);
  const int32_t ids[] = {0, 1, 0, 1, 2, 0, 0, 1, 2, 3, 4, 5};
  std::copy(std::begin(ids), std::end(ids), pos.data_as<int32_t>());
  Tensor wte = random_tensor({vocab, h}, rng), wpe = random_tensor({positions, h}, rng);
  Tensor out = be->empty({s, b, h}, DType::kF32, MemoryKind::kOther);
  be->embedding_forward(tokens, pos, wte, wpe, out);
  std::vector<double> expect(s * b * h);
  for (int64_t si = 0; si < s; ++si)
    for (int64_t bi = 0; bi < b; ++bi) {
      const int32_t t = tokens.data_as<int32_t>()[bi * s + si], p = ids[bi * s + si];
      for (int64_t j = 0; j < h; ++j) expect[(si * b + bi) * h + j] = get(wte, t * h + j) + get(wpe, p * h + j);
    }
  expect_close(out, expect, 0.0, 1e-7, "embedding out with position ids");

  Tensor r = random_tensor({s, b, h}, rng);
  auto objective = [&] {
    be->embedding_forward(tokens, pos, wte, wpe, out);
    return dot(out, r);
  };
  Tensor dwte = random_tensor({vocab, h}, rng), dwpe = random_tensor({positions, h}, rng);
  const std::vector<double> dwte0 = values(dwte), dwpe0 = values(dwpe);
  be->embedding_backward(tokens, pos, r, dwte, dwpe);
  expect_close(minus(values(dwte), dwte0), finite_difference(wte, 1e-2, objective), 1e-3, 1e-3, "dwte (+=)");
  expect_close(minus(values(dwpe), dwpe0), finite_difference(wpe, 1e-2, objective), 1e-3, 1e-3, "dwpe (+=)");
  // Position 6 is never used: its row is untouched.
  for (int64_t j = 0; j < h; ++j) EXPECT_EQ(get(dwpe, 6 * h + j), dwpe0[6 * h + j]);

  // An id outside the table, or ids of another shape, are the caller's bugs.
  pos.data_as<int32_t>()[3] = static_cast<int32_t>(positions);
  EXPECT_DEATH(be->embedding_forward(tokens, pos, wte, wpe, out), "position id 7 at \\[0, 3\\]");
  EXPECT_DEATH(be->embedding_backward(tokens, pos, r, dwte, dwpe), "position id 7");
  EXPECT_DEATH(be->embedding_forward(tokens, Tensor::cpu({b, s - 1}, DType::kI32), wte, wpe, out),
               "embedding positions");
}

TEST(CpuNorm, ResultsIndependentOfThreadCount) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t b = 4, s = 64, vocab = 50, h = 200;
  Tensor tokens = be->empty({b, s}, DType::kI32, MemoryKind::kOther);
  for (int64_t i = 0; i < b * s; ++i) tokens.data_as<int32_t>()[i] = static_cast<int32_t>(rng() % vocab);
  Tensor dout = random_tensor({s, b, h}, rng), x = random_tensor({s, b, h}, rng);
  Tensor gamma = random_tensor({h}, rng), beta = random_tensor({h}, rng);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    Tensor dwte = be->empty({vocab, h}, DType::kF32, MemoryKind::kOther);
    Tensor dwpe = be->empty({s, h}, DType::kF32, MemoryKind::kOther);
    be->embedding_backward(tokens, Tensor(), dout, dwte, dwpe);
    Tensor out = be->empty({s, b, h}, DType::kF32, MemoryKind::kOther);
    Tensor mean = be->empty({s * b}, DType::kF32, MemoryKind::kOther);
    Tensor rstd = be->empty({s * b}, DType::kF32, MemoryKind::kOther);
    be->layernorm_forward(x, gamma, beta, 1e-5f, out, mean, rstd);
    Tensor dx = be->empty({s, b, h}, DType::kF32, MemoryKind::kOther);
    Tensor dg = be->empty({h}, DType::kF32, MemoryKind::kOther), db = be->empty({h}, DType::kF32, MemoryKind::kOther);
    be->layernorm_backward(dout, x, gamma, mean, rstd, dx, dg, db);
    return std::vector<Tensor>{dwte, dwpe, out, dx, dg, db};
  };
  const int saved = omp_get_max_threads();
  const auto one = run(1), two = run(2);
  omp_set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(bitwise_equal(one[i], two[i])) << "output " << i;
}

}  // namespace
}  // namespace megatron::backend
