// CPU backend softmax cross-entropy.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_test_util.h"

namespace megatron::backend {
namespace {

using namespace megatron::test;

Tensor random_labels(int64_t n, int64_t vocab, std::mt19937_64& rng) {
  Tensor labels = Tensor::cpu({n}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) labels.data_as<int32_t>()[i] = static_cast<int32_t>(rng() % vocab);
  return labels;
}

TEST(CpuLoss, ForwardMatchesNaiveAndIsStable) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t n = 6, vocab = 13;
  Tensor logits = random_tensor({3, 2, vocab}, rng, DType::kF32, 0.1f, 5.0f);
  // Row 1 is shifted by +1000: exp would overflow without max subtraction; the loss is
  // shift-invariant, so its reference is that of the unshifted row.
  std::vector<double> base = values(logits);
  for (int64_t v = 0; v < vocab; ++v) set(logits, vocab + v, get(logits, vocab + v) + 1000.0);
  Tensor labels = random_labels(n, vocab, rng);
  Tensor losses = be->empty({n}, DType::kF32, MemoryKind::kOther),
         lse = be->empty({n}, DType::kF32, MemoryKind::kOther);
  be->cross_entropy_forward(logits, labels, losses, lse);
  std::vector<double> el(n), else_ref(n);
  for (int64_t r = 0; r < n; ++r) {
    double sum = 0.0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(base[r * vocab + v]);
    const double l = std::log(sum);
    el[r] = l - base[r * vocab + labels.data_as<int32_t>()[r]];
    else_ref[r] = l + (r == 1 ? 1000.0 : 0.0);
  }
  // Row 1's logits near 1000 carry fp32 rounding of 1000 * 6e-8 = 6e-5 each.
  expect_close(losses, el, 2e-4, 1e-5, "losses");
  expect_close(lse, else_ref, 2e-4, 1e-6, "lse");
  for (int64_t r = 0; r < n; ++r) EXPECT_TRUE(std::isfinite(get(losses, r)));
}

TEST(CpuLoss, BackwardMatchesFiniteDifferences) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t n = 5, vocab = 7;
  Tensor logits = random_tensor({n, vocab}, rng, DType::kF32, 0.1f, 3.0f);
  Tensor labels = random_labels(n, vocab, rng);
  Tensor r = random_tensor({n}, rng);  // dlosses
  Tensor losses = be->empty({n}, DType::kF32, MemoryKind::kOther),
         lse = be->empty({n}, DType::kF32, MemoryKind::kOther);
  auto objective = [&] {
    be->cross_entropy_forward(logits, labels, losses, lse);
    return dot(losses, r);
  };
  objective();
  Tensor dlogits = random_tensor({n, vocab}, rng);  // overwritten
  be->cross_entropy_backward(logits, labels, lse, r, dlogits);
  // Step 1e-3: lse has curvature <= 1/4 and third derivative <= ~0.1, truncation ~1e-7;
  // fp32 noise of L (5 losses ~ 3, ~1e-6) over 2e-3: ~5e-4. Tolerance 2e-3 absolute.
  expect_close(dlogits, finite_difference(logits, 1e-3, objective), 2e-3, 1e-3, "dlogits");
  // Each row of dlogits sums to zero (softmax minus one-hot).
  for (int64_t row = 0; row < n; ++row) {
    double s = 0.0;
    for (int64_t v = 0; v < vocab; ++v) s += get(dlogits, row * vocab + v);
    EXPECT_NEAR(s, 0.0, 1e-6);
  }
}

TEST(CpuLoss, BackwardInPlaceAndBf16) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t n = 4, vocab = 50;
  for (DType d : {DType::kF32, DType::kBF16}) {
    Tensor logits = random_tensor({n, vocab}, rng, d, 0.1f, 4.0f);
    Tensor labels = random_labels(n, vocab, rng);
    Tensor dl = random_tensor({n}, rng);
    Tensor losses = be->empty({n}, DType::kF32, MemoryKind::kOther),
           lse = be->empty({n}, DType::kF32, MemoryKind::kOther);
    be->cross_entropy_forward(logits, labels, losses, lse);
    // fp32 op on the rounded logits gives the same losses.
    Tensor losses32 = be->empty({n}, DType::kF32, MemoryKind::kOther);
    Tensor lse32 = be->empty({n}, DType::kF32, MemoryKind::kOther);
    be->cross_entropy_forward(to_f32(logits), labels, losses32, lse32);
    EXPECT_TRUE(bitwise_equal(losses, losses32));
    Tensor separate = be->empty({n, vocab}, d, MemoryKind::kOther);
    be->cross_entropy_backward(logits, labels, lse, dl, separate);
    Tensor separate32 = be->empty({n, vocab}, DType::kF32, MemoryKind::kOther);
    be->cross_entropy_backward(to_f32(logits), labels, lse32, dl, separate32);
    for (int64_t i = 0; i < separate.numel(); ++i)
      ASSERT_EQ(get(separate, i), round_to(d, static_cast<float>(get(separate32, i)))) << i;
    // dlogits aliasing logits gives the same result.
    be->cross_entropy_backward(logits, labels, lse, dl, logits);
    EXPECT_TRUE(bitwise_equal(logits, separate)) << dtype_name(d);
  }
}

// cross_entropy_fused is the pair in turn: the same losses, lse and dlogits bits, also in place
// and for a label outside [0, V) (another vocab-parallel rank's id: NaN loss, no one-hot term).
TEST(CpuLoss, FusedEqualsForwardThenBackward) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t n = 5, vocab = 37;
  for (DType d : {DType::kF32, DType::kBF16}) {
    const Tensor logits = random_tensor({n, vocab}, rng, d, 0.1f, 4.0f);
    Tensor labels = random_labels(n, vocab, rng);
    labels.data_as<int32_t>()[2] = static_cast<int32_t>(vocab);  // outside the shard
    const Tensor dl = random_tensor({n}, rng);
    Tensor losses = be->empty({n}, DType::kF32, MemoryKind::kOther),
           lse = be->empty({n}, DType::kF32, MemoryKind::kOther);
    be->cross_entropy_forward(logits, labels, losses, lse);
    Tensor dlogits = be->empty({n, vocab}, d, MemoryKind::kOther);
    be->cross_entropy_backward(logits, labels, lse, dl, dlogits);

    Tensor fl = be->empty({n}, DType::kF32, MemoryKind::kOther), flse = be->empty({n}, DType::kF32, MemoryKind::kOther);
    Tensor fd = be->empty({n, vocab}, d, MemoryKind::kOther);
    be->cross_entropy_fused(logits, labels, dl, fl, flse, fd);
    EXPECT_TRUE(bitwise_equal(fl, losses)) << dtype_name(d);
    EXPECT_TRUE(std::isnan(get(fl, 2)));
    EXPECT_TRUE(bitwise_equal(flse, lse)) << dtype_name(d);
    EXPECT_TRUE(bitwise_equal(fd, dlogits)) << dtype_name(d);
    Tensor inplace = be->empty({n, vocab}, d, MemoryKind::kOther);
    std::memcpy(inplace.data(), logits.data(), static_cast<size_t>(logits.nbytes()));
    be->cross_entropy_fused(inplace, labels, dl, fl, flse, inplace);
    EXPECT_TRUE(bitwise_equal(inplace, dlogits)) << "in place " << dtype_name(d);
    EXPECT_TRUE(bitwise_equal(flse, lse)) << "in place " << dtype_name(d);
  }
}

TEST(CpuLoss, ResultsIndependentOfThreadCount) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t n = 64, vocab = 1000;  // 64000 elements: above the parallel threshold
  Tensor logits = random_tensor({n, vocab}, rng);
  Tensor labels = random_labels(n, vocab, rng);
  Tensor dl = random_tensor({n}, rng);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    Tensor losses = be->empty({n}, DType::kF32, MemoryKind::kOther),
           lse = be->empty({n}, DType::kF32, MemoryKind::kOther);
    be->cross_entropy_forward(logits, labels, losses, lse);
    Tensor d = be->empty({n, vocab}, DType::kF32, MemoryKind::kOther);
    be->cross_entropy_backward(logits, labels, lse, dl, d);
    return std::vector<Tensor>{losses, lse, d};
  };
  const int saved = omp_get_max_threads();
  const auto one = run(1), two = run(2);
  omp_set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(bitwise_equal(one[i], two[i])) << "output " << i;
}

// The vocab-parallel steps (ops.h) put together as tensor_parallel/vocab_parallel.cpp does, with
// the all-reduces done here in rank order: three slices of each row's logits combine into the
// whole row's lse and loss, against long double over the whole row. The error is that of the
// slices' fp32 lse (each within a few ulps) plus the fp32 exp terms: 4 ulps of lse, absolute.
TEST(CpuLoss, VocabParallelStepsCombineSlicesIntoTheWholeRow) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t n = 9, slice = 11, ranks = 3, vocab = slice * ranks;
  Tensor logits = random_tensor({n, vocab}, rng, DType::kF32, -6.0f, 6.0f);
  for (int64_t v = 0; v < vocab; ++v) set(logits, 4 * vocab + v, get(logits, 4 * vocab + v) + 1000.0);  // stability
  // Row 5: one slice far below the others (its exp term underflows to ~0).
  for (int64_t v = 0; v < slice; ++v) set(logits, 5 * vocab + v, get(logits, 5 * vocab + v) - 200.0);
  Tensor labels = random_labels(n, vocab, rng);
  auto f32 = [&] { return be->empty({n}, DType::kF32, MemoryKind::kOther); };
  std::vector<Tensor> lse, losses, local_labels;
  Tensor max_lse = f32();
  for (int64_t r = 0; r < ranks; ++r) {
    Tensor part = be->empty({n, slice}, DType::kF32, MemoryKind::kOther);
    Tensor lab = Tensor::cpu({n}, DType::kI32);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t v = 0; v < slice; ++v) set(part, i * slice + v, get(logits, i * vocab + r * slice + v));
      const int32_t t = labels.data_as<int32_t>()[i];
      lab.data_as<int32_t>()[i] = t >= r * slice && t < (r + 1) * slice ? static_cast<int32_t>(t - r * slice) : -1;
    }
    lse.push_back(f32());
    losses.push_back(f32());
    local_labels.push_back(lab);
    be->cross_entropy_forward(part, lab, losses.back(), lse.back());
    for (int64_t i = 0; i < n; ++i) {
      const float l = lse.back().data_as<float>()[i];
      max_lse.data_as<float>()[i] = r == 0 ? l : std::max(max_lse.data_as<float>()[i], l);
    }
  }
  for (int64_t r = 0; r < ranks; ++r) be->vocab_parallel_ce_terms(max_lse, local_labels[r], lse[r], losses[r]);
  for (int64_t r = 1; r < ranks; ++r) {  // the SUM all-reduces, into rank 0's tensors
    for (int64_t i = 0; i < n; ++i) {
      lse[0].data_as<float>()[i] += lse[r].data_as<float>()[i];
      losses[0].data_as<float>()[i] += losses[r].data_as<float>()[i];
    }
  }
  be->vocab_parallel_ce_finish(max_lse, lse[0], losses[0]);
  for (int64_t i = 0; i < n; ++i) {
    long double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < vocab; ++v) mx = std::max(mx, static_cast<long double>(get(logits, i * vocab + v)));
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<long double>(get(logits, i * vocab + v)) - mx);
    const long double want_lse = mx + std::log(sum);
    const long double want_loss = want_lse - get(logits, i * vocab + labels.data_as<int32_t>()[i]);
    const double tol = 4 * std::nextafter(std::fabs(static_cast<float>(want_lse)), INFINITY) -
                       4 * std::fabs(static_cast<float>(want_lse));
    EXPECT_NEAR(lse[0].data_as<float>()[i], static_cast<double>(want_lse), tol) << "row " << i;
    EXPECT_NEAR(losses[0].data_as<float>()[i], static_cast<double>(want_loss), tol) << "row " << i;
  }
}

// The edges of the terms step: a slice of -inf logits only contributes exp(-inf) = 0 beside a
// finite maximum, and 1 where the maximum is -inf too (then the row's lse stays -inf); a label
// of another rank contributes a zero target. Such a slice's lse from the forward is -inf.
TEST(CpuLoss, VocabParallelTermsAtInfinities) {
  auto be = make_cpu_backend();
  const float inf = std::numeric_limits<float>::infinity();
  {
    Tensor slice = be->empty({1, 3}, DType::kF32, MemoryKind::kOther);
    for (int64_t v = 0; v < 3; ++v) set(slice, v, -inf);
    Tensor other = Tensor::cpu({1}, DType::kI32);
    other.data_as<int32_t>()[0] = -1;
    Tensor l = be->empty({1}, DType::kF32, MemoryKind::kOther), s = be->empty({1}, DType::kF32, MemoryKind::kOther);
    be->cross_entropy_forward(slice, other, l, s);
    EXPECT_EQ(s.data_as<float>()[0], -inf);
  }
  auto make = [&](std::vector<float> v) {
    Tensor t = be->empty({static_cast<int64_t>(v.size())}, DType::kF32, MemoryKind::kOther);
    std::memcpy(t.data(), v.data(), v.size() * 4);
    return t;
  };
  Tensor max_lse = make({2.0f, -inf, 3.0f}), lse = make({-inf, -inf, 1.0f}), losses = make({0.5f, 0.25f, 0.75f});
  Tensor labels = Tensor::cpu({3}, DType::kI32);
  labels.data_as<int32_t>()[0] = -1;
  labels.data_as<int32_t>()[1] = -1;
  labels.data_as<int32_t>()[2] = 4;
  be->vocab_parallel_ce_terms(max_lse, labels, lse, losses);
  EXPECT_EQ(lse.data_as<float>()[0], 0.0f);
  EXPECT_EQ(lse.data_as<float>()[1], 1.0f);
  EXPECT_EQ(lse.data_as<float>()[2], static_cast<float>(std::exp(-2.0)));
  EXPECT_EQ(losses.data_as<float>()[0], 0.0f);
  EXPECT_EQ(losses.data_as<float>()[1], 0.0f);
  EXPECT_EQ(losses.data_as<float>()[2], 0.25f);  // the target logit 1 - 0.75
  be->vocab_parallel_ce_finish(max_lse, lse, losses);
  EXPECT_EQ(lse.data_as<float>()[1], -inf);
  EXPECT_EQ(lse.data_as<float>()[2],
            static_cast<float>(3.0 + std::log(static_cast<double>(static_cast<float>(std::exp(-2.0))))));
}

}  // namespace
}  // namespace megatron::backend
