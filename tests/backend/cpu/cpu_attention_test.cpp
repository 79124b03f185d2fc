// CPU backend causal attention over Megatron's fused QKV layout.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_test_util.h"
#include "backend/qkv_layout.h"
#include "core/rng.h"

namespace megatron::backend {
namespace {

using namespace megatron::test;

// Naive double attention: out[s, b, H*d] and lse[b, H, s], reading q, k, v of head hd at
// columns hd*3d + {0, d, 2d} of qkv[s, b, H*3d]; dropout index ((bi*H + hd)*s + i)*s + j.
void naive_attention(const Tensor& qkv, const AttentionParams& p, std::vector<double>& out, std::vector<double>& lse) {
  const int64_t s = qkv.dim(0), b = qkv.dim(1), H = p.heads, d = p.head_dim;
  out.assign(s * b * H * d, 0.0);
  lse.assign(b * H * s, 0.0);
  auto at = [&](int64_t i, int64_t bi, int64_t hd, int64_t part, int64_t c) {
    return get(qkv, (i * b + bi) * H * 3 * d + hd * 3 * d + part * d + c);
  };
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hd = 0; hd < H; ++hd)
      for (int64_t i = 0; i < s; ++i) {
        std::vector<double> sc(i + 1);
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0.0;
          for (int64_t c = 0; c < d; ++c) dot += at(i, bi, hd, 0, c) * at(j, bi, hd, 1, c);
          sc[j] = dot * p.softmax_scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(sc[j] - mx);
        const double l = mx + std::log(sum);
        lse[(bi * H + hd) * s + i] = l;
        for (int64_t j = 0; j <= i; ++j) {
          double prob = std::exp(sc[j] - l);
          if (p.dropout.p > 0.0f) {
            const uint64_t index = static_cast<uint64_t>(((bi * H + hd) * s + i) * s + j);
            prob *=
                dropout_keep(p.dropout.seed, p.dropout.stream, index, p.dropout.p) ? 1.0 / (1.0 - p.dropout.p) : 0.0;
          }
          for (int64_t c = 0; c < d; ++c) out[(i * b + bi) * H * d + hd * d + c] += prob * at(j, bi, hd, 2, c);
        }
      }
}

AttentionParams params(int64_t heads, int64_t d, float p) {
  AttentionParams a;
  a.heads = heads;
  a.head_dim = d;
  a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));
  a.dropout = DropoutParams{p, 2024, 11};
  return a;
}

class CpuAttention : public ::testing::TestWithParam<float> {};

TEST_P(CpuAttention, ForwardMatchesNaive) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 7, b = 2, H = 3, d = 4;
  const AttentionParams p = params(H, d, GetParam());
  // Inputs up to 2 in magnitude so the softmax is far from uniform.
  Tensor qkv = random_tensor({s, b, H * 3 * d}, rng, DType::kF32, 0.1f, 2.0f);
  Tensor out = random_tensor({s, b, H * d}, rng);  // overwritten
  Tensor lse = be->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
  be->attention_forward(qkv, out, lse, p);
  std::vector<double> eo, el;
  naive_attention(qkv, p, eo, el);
  // fp32 exp/log of O(1) arguments and sums of <= 7 terms: errors ~1e-6.
  expect_close(out, eo, 1e-5, 1e-5, "attention out");
  expect_close(lse, el, 1e-5, 1e-6, "attention lse");
}

// dL/dqkv of L = out . r against central differences, for p's dropout and documents.
void expect_backward_matches_finite_differences(const AttentionParams& p, int64_t s, int64_t b) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t H = p.heads, d = p.head_dim, w = p.qkv_width();
  Tensor qkv = random_tensor({s, b, w}, rng);
  Tensor r = random_tensor({s, b, H * d}, rng);
  Tensor out = be->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
  Tensor lse = be->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
  // The dropout mask is a function of (seed, stream, index) only, so L stays a smooth
  // function of qkv with dropout on and central differences apply.
  auto objective = [&] {
    be->attention_forward(qkv, out, lse, p);
    return dot(out, r);
  };
  objective();
  Tensor dqkv = random_tensor({s, b, w}, rng);  // overwritten
  be->attention_backward(r, qkv, out, lse, dqkv, p);
  // Step 1e-3: softmax curvature with |scores| <= ~2 keeps truncation ~ h^2 ~ 1e-6; fp32
  // noise of L (sum of 60 terms ~1, ~2e-6) over 2e-3: ~1e-3. Tolerance 3e-3 absolute,
  // against gradients of size ~0.1-2.
  expect_close(dqkv, finite_difference(qkv, 1e-3, objective), 3e-3, 3e-3, "attention dqkv");
}

TEST_P(CpuAttention, BackwardMatchesFiniteDifferences) {
  expect_backward_matches_finite_differences(params(2, 3, GetParam()), 5, 2);
}

INSTANTIATE_TEST_SUITE_P(Dropout, CpuAttention, ::testing::Values(0.0f, 0.3f));

TEST(CpuAttentionDetail, CausalMaskAndFirstRow) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 6, b = 1, H = 2, d = 4;
  const AttentionParams p = params(H, d, 0.0f);
  Tensor qkv = random_tensor({s, b, H * 3 * d}, rng);
  Tensor out = be->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
  Tensor lse = be->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
  be->attention_forward(qkv, out, lse, p);
  // Row 0 attends only to itself: out_0 = v_0, lse_0 = scale q_0 . k_0.
  for (int64_t hd = 0; hd < H; ++hd) {
    double qk = 0.0;
    for (int64_t c = 0; c < d; ++c) {
      EXPECT_NEAR(get(out, hd * d + c), get(qkv, hd * 3 * d + 2 * d + c), 1e-6);
      qk += get(qkv, hd * 3 * d + c) * get(qkv, hd * 3 * d + d + c);
    }
    EXPECT_NEAR(get(lse, hd * s), qk * p.softmax_scale, 1e-6);
  }
  // Changing the last position's k and v changes no earlier output.
  Tensor qkv2 = clone(qkv);
  for (int64_t c = H * 3 * d * (s - 1); c < qkv2.numel(); ++c) set(qkv2, c, get(qkv2, c) * -3.0);
  Tensor out2 = be->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
  be->attention_forward(qkv2, out2, lse, p);
  for (int64_t i = 0; i < (s - 1) * H * d; ++i) EXPECT_EQ(get(out, i), get(out2, i)) << i;
}

TEST(CpuAttentionDetail, DropoutChangesOutputAndIsReproducible) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 8, b = 2, H = 2, d = 4;
  Tensor qkv = random_tensor({s, b, H * 3 * d}, rng);
  Tensor lse = be->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
  Tensor lse2 = be->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
  Tensor o0 = be->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
  Tensor o1 = be->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
  Tensor o2 = be->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
  be->attention_forward(qkv, o0, lse, params(H, d, 0.0f));
  be->attention_forward(qkv, o1, lse2, params(H, d, 0.5f));
  EXPECT_FALSE(bitwise_equal(o0, o1));
  EXPECT_TRUE(bitwise_equal(lse, lse2)) << "lse is taken before dropout";
  be->attention_forward(qkv, o2, lse2, params(H, d, 0.5f));
  EXPECT_TRUE(bitwise_equal(o1, o2));
}

// Tensor parallelism: a call on heads [h0, h0 + H/2) of H with dropout_heads = H and
// dropout_head0 = h0 gives exactly those heads' outputs, lse and gradients of the call on all
// H heads, dropout on (each head is computed on its own, so bit for bit).
TEST(CpuAttentionDetail, HeadSliceWithGlobalDropoutIndexEqualsTheWholeCall) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 6, b = 2, H = 4, d = 4, Hl = 2;
  Tensor qkv = random_tensor({s, b, H * 3 * d}, rng);
  Tensor dout = random_tensor({s, b, H * d}, rng);
  Tensor out = be->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
  Tensor lse = be->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
  Tensor dqkv = be->empty({s, b, H * 3 * d}, DType::kF32, MemoryKind::kOther);
  const AttentionParams whole = params(H, d, 0.4f);
  be->attention_forward(qkv, out, lse, whole);
  be->attention_backward(dout, qkv, out, lse, dqkv, whole);
  for (int64_t r = 0; r < 2; ++r) {
    // Columns of heads [r Hl, (r+1) Hl) of [s, b, H * w] as [s, b, Hl * w].
    auto cols = [&](const Tensor& t, int64_t w) {
      Tensor o = be->empty({s, b, Hl * w}, DType::kF32, MemoryKind::kOther);
      for (int64_t row = 0; row < s * b; ++row)
        for (int64_t c = 0; c < Hl * w; ++c) set(o, row * Hl * w + c, get(t, row * H * w + r * Hl * w + c));
      return o;
    };
    AttentionParams part = params(Hl, d, 0.4f);
    part.dropout_heads = H;
    part.dropout_head0 = r * Hl;
    const Tensor lqkv = cols(qkv, 3 * d), ldout = cols(dout, d);
    Tensor lout = be->empty({s, b, Hl * d}, DType::kF32, MemoryKind::kOther);
    Tensor llse = be->empty({b, Hl, s}, DType::kF32, MemoryKind::kOther);
    Tensor ldqkv = be->empty({s, b, Hl * 3 * d}, DType::kF32, MemoryKind::kOther);
    be->attention_forward(lqkv, lout, llse, part);
    be->attention_backward(ldout, lqkv, lout, llse, ldqkv, part);
    EXPECT_TRUE(bitwise_equal(lout, cols(out, d))) << "rank " << r;
    EXPECT_TRUE(bitwise_equal(ldqkv, cols(dqkv, 3 * d))) << "rank " << r;
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t k = 0; k < Hl * s; ++k) EXPECT_EQ(get(llse, bi * Hl * s + k), get(lse, (bi * H + r * Hl) * s + k));
    // Without the global index the masks are another head's: the outputs differ.
    part.dropout_heads = 0;
    part.dropout_head0 = 0;
    be->attention_forward(lqkv, lout, llse, part);
    if (r == 1) {
      EXPECT_FALSE(bitwise_equal(lout, cols(out, d)));
    }
  }
}

TEST(CpuAttentionDetail, Bf16IsFp32OfRoundedInputsThenRounded) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 6, b = 2, H = 2, d = 8;
  const AttentionParams p = params(H, d, 0.1f);
  Tensor qkv = random_tensor({s, b, H * 3 * d}, rng, DType::kBF16);
  Tensor out = be->empty({s, b, H * d}, DType::kBF16, MemoryKind::kOther);
  Tensor out32 = be->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
  Tensor lse = be->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
  Tensor lse32 = be->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
  be->attention_forward(qkv, out, lse, p);
  be->attention_forward(to_f32(qkv), out32, lse32, p);
  EXPECT_TRUE(bitwise_equal(lse, lse32));
  for (int64_t i = 0; i < out.numel(); ++i)
    ASSERT_EQ(get(out, i), round_to(DType::kBF16, static_cast<float>(get(out32, i)))) << i;
  Tensor dout = random_tensor({s, b, H * d}, rng, DType::kBF16);
  Tensor dqkv = be->empty({s, b, H * 3 * d}, DType::kBF16, MemoryKind::kOther);
  Tensor dqkv32 = be->empty({s, b, H * 3 * d}, DType::kF32, MemoryKind::kOther);
  be->attention_backward(dout, qkv, out, lse, dqkv, p);
  be->attention_backward(to_f32(dout), to_f32(qkv), out32, lse32, dqkv32, p);
  for (int64_t i = 0; i < dqkv.numel(); ++i)
    ASSERT_EQ(get(dqkv, i), round_to(DType::kBF16, static_cast<float>(get(dqkv32, i)))) << i;
}

TEST(CpuAttentionDetail, ResultsIndependentOfThreadCount) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  // b H s^2 d = 49152 multiply-adds: above the backend's parallel threshold.
  const int64_t s = 32, b = 2, H = 3, d = 8;
  const AttentionParams p = params(H, d, 0.2f);
  Tensor qkv = random_tensor({s, b, H * 3 * d}, rng), dout = random_tensor({s, b, H * d}, rng);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    Tensor out = be->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
    Tensor lse = be->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
    be->attention_forward(qkv, out, lse, p);
    Tensor dqkv = be->empty({s, b, H * 3 * d}, DType::kF32, MemoryKind::kOther);
    be->attention_backward(dout, qkv, out, lse, dqkv, p);
    return std::vector<Tensor>{out, lse, dqkv};
  };
  const int saved = omp_get_max_threads();
  const auto one = run(1), two = run(2);
  omp_set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(bitwise_equal(one[i], two[i])) << "output " << i;
}

// Documents packed into the sequence (AttentionParams::key_start): key_start [b, s] (int32,
// host) from each batch row's document lengths (summing to s).
Tensor document_key_starts(const std::vector<std::vector<int64_t>>& docs, int64_t s) {
  Tensor t = Tensor::cpu({static_cast<int64_t>(docs.size()), s}, DType::kI32);
  for (size_t bi = 0; bi < docs.size(); ++bi) {
    int32_t* row = t.data_as<int32_t>() + static_cast<int64_t>(bi) * s;
    int64_t start = 0;
    for (const int64_t len : docs[bi]) {
      std::fill(row + start, row + start + len, static_cast<int32_t>(start));
      start += len;
    }
    EXPECT_EQ(start, s);
  }
  return t;
}

// Rows [first, first + len) of batch row bi of x [s, b, cols], as [len, 1, cols].
Tensor rows_of(const Tensor& x, int64_t bi, int64_t first, int64_t len) {
  const int64_t b = x.dim(1), cols = x.dim(2);
  Tensor out = Tensor::cpu({len, 1, cols}, DType::kF32);
  for (int64_t i = 0; i < len; ++i)
    for (int64_t c = 0; c < cols; ++c) out.data_as<float>()[i * cols + c] = get(x, ((first + i) * b + bi) * cols + c);
  return out;
}

// Each document of a packed sequence gets exactly what attention over that document alone
// gives: the same out, lse and dqkv bits (the same operations in the same order), and nothing
// from the other documents of its row.
TEST(CpuAttentionDocuments, EachDocumentEqualsItselfAlone) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 12, b = 2, H = 2, d = 4;
  const std::vector<std::vector<int64_t>> docs = {{5, 4, 3}, {3, 9}};
  AttentionParams p = params(H, d, 0.0f);
  p.key_start = document_key_starts(docs, s);
  Tensor qkv = random_tensor({s, b, H * 3 * d}, rng, DType::kF32, 0.1f, 2.0f);
  Tensor dout = random_tensor({s, b, H * d}, rng);
  Tensor out = be->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
  Tensor lse = be->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
  Tensor dqkv = be->empty({s, b, H * 3 * d}, DType::kF32, MemoryKind::kOther);
  be->attention_forward(qkv, out, lse, p);
  be->attention_backward(dout, qkv, out, lse, dqkv, p);
  for (int64_t bi = 0; bi < b; ++bi) {
    int64_t first = 0;
    for (const int64_t len : docs[static_cast<size_t>(bi)]) {
      const AttentionParams alone = params(H, d, 0.0f);
      const Tensor q1 = rows_of(qkv, bi, first, len), do1 = rows_of(dout, bi, first, len);
      Tensor o1 = be->empty({len, 1, H * d}, DType::kF32, MemoryKind::kOther);
      Tensor l1 = be->empty({1, H, len}, DType::kF32, MemoryKind::kOther);
      Tensor g1 = be->empty({len, 1, H * 3 * d}, DType::kF32, MemoryKind::kOther);
      be->attention_forward(q1, o1, l1, alone);
      be->attention_backward(do1, q1, o1, l1, g1, alone);
      EXPECT_TRUE(bitwise_equal(rows_of(out, bi, first, len), o1)) << "out, row " << bi << " document at " << first;
      EXPECT_TRUE(bitwise_equal(rows_of(dqkv, bi, first, len), g1)) << "dqkv, row " << bi << " document at " << first;
      for (int64_t hd = 0; hd < H; ++hd)
        for (int64_t i = 0; i < len; ++i)
          EXPECT_EQ(get(lse, (bi * H + hd) * s + first + i), get(l1, hd * len + i)) << "lse " << bi << ", " << i;
      first += len;
    }
  }
  // Without key_start the later documents see the earlier ones: out differs.
  Tensor causal = be->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
  be->attention_forward(qkv, causal, lse, params(H, d, 0.0f));
  EXPECT_TRUE(bitwise_equal(rows_of(causal, 0, 0, 5), rows_of(out, 0, 0, 5)));
  EXPECT_FALSE(bitwise_equal(rows_of(causal, 0, 5, 7), rows_of(out, 0, 5, 7)));
}

// With dropout, the masks keep the whole sequence's element index (so a packed document draws
// other masks than alone); the backward is still the forward's derivative.
TEST(CpuAttentionDocuments, BackwardWithDropoutMatchesFiniteDifferences) {
  AttentionParams p = params(2, 3, 0.3f);
  p.key_start = document_key_starts({{2, 4}, {4, 1, 1}}, 6);
  expect_backward_matches_finite_differences(p, 6, 2);
}

// ops.h's contract (the model checks the ids it passes); a violation stops the process.
TEST(CpuAttentionDocuments, KeyStartsOutsideTheContractAreCallersBugs) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 4, b = 1, H = 1, d = 2;
  Tensor qkv = random_tensor({s, b, H * 3 * d}, rng);
  Tensor out = be->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
  Tensor lse = be->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{0, 2, 2, 2}, {0, 1, 0, 3}, {-1, 0, 0, 0}}) {
    AttentionParams p = params(H, d, 0.0f);
    p.key_start = Tensor::cpu({b, s}, DType::kI32);
    std::copy(bad.begin(), bad.end(), p.key_start.data_as<int32_t>());
    EXPECT_DEATH(be->attention_forward(qkv, out, lse, p), "must lie in \\[0, i\\] and not decrease");
  }
  AttentionParams p = params(H, d, 0.0f);
  p.key_start = Tensor::cpu({b, s + 1}, DType::kI32);
  EXPECT_DEATH(be->attention_forward(qkv, out, lse, p), "attention key_start");
}

// ---- query groups (GQA / MQA) ----------------------------------------------------------------

AttentionParams grouped_params(int64_t heads, int64_t groups, int64_t d, float p) {
  AttentionParams a = params(heads, d, p);
  a.query_groups = groups;
  return a;
}

// The multi-head qkv [s, b, H*3d] that repeats each group's key and value for its query heads.
Tensor repeat_kv(const Tensor& qkv, const QkvLayout& L) {
  const int64_t rows = qkv.dim(0) * qkv.dim(1), d = L.head_dim, H = L.heads;
  Tensor out = Tensor::cpu({qkv.dim(0), qkv.dim(1), H * 3 * d}, DType::kF32);
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t c = 0; c < d; ++c) {
        const int64_t src = row * L.width(), dst = row * H * 3 * d + h * 3 * d;
        set(out, dst + c, get(qkv, src + L.q_col(h) + c));
        set(out, dst + d + c, get(qkv, src + L.k_col(L.group_of(h)) + c));
        set(out, dst + 2 * d + c, get(qkv, src + L.v_col(L.group_of(h)) + c));
      }
  return out;
}

// The grouped gradient from the multi-head one: dq per head, dk and dv summed over each group.
std::vector<double> fold_kv_grads(const Tensor& dmha, const QkvLayout& L, int64_t rows) {
  const int64_t d = L.head_dim, H = L.heads;
  std::vector<double> g(static_cast<size_t>(rows * L.width()), 0.0);
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t c = 0; c < d; ++c) {
        const int64_t src = row * H * 3 * d + h * 3 * d, dst = row * L.width();
        g[static_cast<size_t>(dst + L.q_col(h) + c)] = get(dmha, src + c);
        g[static_cast<size_t>(dst + L.k_col(L.group_of(h)) + c)] += get(dmha, src + d + c);
        g[static_cast<size_t>(dst + L.v_col(L.group_of(h)) + c)] += get(dmha, src + 2 * d + c);
      }
  return g;
}

struct GroupCase {
  int64_t heads, groups;
  float dropout;
};

class CpuGroupedAttention : public ::testing::TestWithParam<GroupCase> {};

// GQA is multi-head attention with each group's k and v repeated for its query heads: the same
// out, lse and dq bits (the same operations per query head, the same dropout index), and dk, dv
// the sums of the repeated heads' gradients.
TEST_P(CpuGroupedAttention, EqualsMultiHeadWithRepeatedKeysAndValues) {
  const GroupCase gc = GetParam();
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 7, b = 2, d = 4, H = gc.heads;
  const QkvLayout L(H, gc.groups, d);
  const AttentionParams gp = grouped_params(H, gc.groups, d, gc.dropout);
  const AttentionParams mp = params(H, d, gc.dropout);
  Tensor qkv = random_tensor({s, b, L.width()}, rng, DType::kF32, 0.1f, 2.0f);
  const Tensor mqkv = repeat_kv(qkv, L);
  Tensor dout = random_tensor({s, b, H * d}, rng);
  Tensor out = be->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther), mout = clone(out);
  Tensor lse = be->empty({b, H, s}, DType::kF32, MemoryKind::kOther), mlse = clone(lse);
  Tensor dqkv = random_tensor({s, b, L.width()}, rng);  // overwritten
  Tensor mdqkv = be->empty({s, b, H * 3 * d}, DType::kF32, MemoryKind::kOther);
  be->attention_forward(qkv, out, lse, gp);
  be->attention_forward(mqkv, mout, mlse, mp);
  EXPECT_TRUE(bitwise_equal(out, mout));
  EXPECT_TRUE(bitwise_equal(lse, mlse));
  be->attention_backward(dout, qkv, out, lse, dqkv, gp);
  be->attention_backward(dout, mqkv, mout, mlse, mdqkv, mp);
  const std::vector<double> want = fold_kv_grads(mdqkv, L, s * b);
  for (int64_t row = 0; row < s * b; ++row)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t c = 0; c < d; ++c) {
        const int64_t i = row * L.width() + L.q_col(h) + c;
        ASSERT_EQ(get(dqkv, i), want[static_cast<size_t>(i)]) << "dq row " << row << " head " << h;
      }
  // dk, dv: one double sum over the group's heads here, fp32 per head then summed above.
  expect_close(dqkv, want, 1e-6, 1e-6, "grouped dqkv vs folded multi-head dqkv");
}

TEST_P(CpuGroupedAttention, BackwardMatchesFiniteDifferences) {
  const GroupCase gc = GetParam();
  expect_backward_matches_finite_differences(grouped_params(gc.heads, gc.groups, 3, gc.dropout), 5, 2);
}

INSTANTIATE_TEST_SUITE_P(Groups, CpuGroupedAttention,
                         ::testing::Values(GroupCase{4, 1, 0.0f}, GroupCase{4, 2, 0.0f}, GroupCase{4, 2, 0.3f},
                                           GroupCase{3, 1, 0.3f}, GroupCase{2, 2, 0.0f}),
                         [](const auto& info) {
                           const GroupCase& c = info.param;
                           std::ostringstream n;
                           n << "h" << c.heads << "g" << c.groups << (c.dropout > 0.0f ? "_dropout" : "");
                           return n.str();
                         });

// Generation: feeding the positions in pieces through the grouped KV cache ([b, G, max_seq, d])
// gives the rows of the full forward, and the caches hold each group's keys and values.
TEST(CpuGroupedAttention, KvCacheMatchesTheFullForward) {
  auto rng = test_rng();
  auto be = make_cpu_backend();
  const int64_t s = 9, b = 2, H = 6, G = 2, d = 4, max_seq = 12;
  const QkvLayout L(H, G, d);
  const AttentionParams p = grouped_params(H, G, d, 0.0f);
  Tensor qkv = random_tensor({s, b, L.width()}, rng, DType::kF32, 0.1f, 2.0f);
  Tensor out = be->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
  Tensor lse = be->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
  be->attention_forward(qkv, out, lse, p);
  Tensor kc = be->empty({b, G, max_seq, d}, DType::kF32, MemoryKind::kOther), vc = clone(kc);
  int64_t past = 0;
  for (const int64_t t : {int64_t{4}, int64_t{1}, int64_t{4}}) {
    Tensor piece = be->empty({t, b, H * d}, DType::kF32, MemoryKind::kOther);
    be->attention_kv_cache(qkv.slice(past, past + t), kc, vc, past, piece, p);
    for (int64_t i = 0; i < t * b * H * d; ++i)
      ASSERT_NEAR(get(piece, i), get(out, past * b * H * d + i), 1e-6) << "rows from " << past << ", " << i;
    past += t;
  }
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t j = 0; j < s; ++j)
        for (int64_t c = 0; c < d; ++c) {
          const int64_t cache = ((bi * G + g) * max_seq + j) * d + c, row = (j * b + bi) * L.width();
          ASSERT_EQ(get(kc, cache), get(qkv, row + L.k_col(g) + c));
          ASSERT_EQ(get(vc, cache), get(qkv, row + L.v_col(g) + c));
        }
}

TEST(CpuGroupedAttention, HeadsNotAMultipleOfTheGroupsAreCallersBugs) {
  auto be = make_cpu_backend();
  Tensor qkv = Tensor::cpu({2, 1, 40}, DType::kF32);
  Tensor out = Tensor::cpu({2, 1, 12}, DType::kF32);
  Tensor lse = Tensor::cpu({1, 3, 2}, DType::kF32);
  EXPECT_DEATH(be->attention_forward(qkv, out, lse, grouped_params(3, 2, 4, 0.0f)), "query groups");
}

}  // namespace
}  // namespace megatron::backend
