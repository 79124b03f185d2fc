// CUDA backend causal attention, our own kernels (src/backend/cuda/cuda_attention.cu, selected
// with AttentionImpl::kOwn), against the CPU reference backend: forward out and lse, backward
// dqkv, with and without dropout (the masks must be bit-identical for the results to agree),
// query groups (GQA, MQA), determinism, and the KV-cache path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/cuda/attention_impl.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "backend/qkv_layout.h"

namespace megatron::backend {
namespace {

using namespace megatron::test;

bool have_gpu() { return built_with_cuda() && cuda_device_count() > 0; }

// A CUDA backend that runs our own attention kernels (cuda_attention.cu), whatever
// MEGATRON_ATTENTION_IMPL says; the cuDNN path is tested in cudnn_attention_test.cpp.
std::unique_ptr<Backend> make_own_gpu() {
  auto gpu = make_cuda_backend();
  set_attention_impl(*gpu, AttentionImpl::kOwn);
  return gpu;
}

AttentionParams make_params(int64_t heads, int64_t d, float p) {
  AttentionParams a;
  a.heads = heads;
  a.head_dim = d;
  a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));
  a.dropout = DropoutParams{p, 1234567, 42};
  return a;
}

// Element-wise |got - ref| <= atol_rel * max|ref| + rtol * |ref|. On failure: how many
// elements miss, the worst one (by fraction of its tolerance) with its decoded position, and
// the largest reference magnitude; always records the fraction of tolerance used.
void expect_close_scaled(const std::vector<double>& got, const std::vector<double>& ref, double atol_rel, double rtol,
                         const std::string& what, const std::function<std::string(int64_t)>& where) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double max_ref = 0.0;
  for (double r : ref) max_ref = std::max(max_ref, std::abs(r));
  ASSERT_GT(max_ref, 0.0) << what << ": reference is all zero (the test would check nothing)";
  const double atol = atol_rel * max_ref;
  int64_t misses = 0, worst = -1;
  double worst_ratio = -1.0, max_err = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - ref[i]);
    const double tol = atol + rtol * std::abs(ref[i]);
    const double ratio = std::isfinite(err) ? err / tol : INFINITY;
    if (!(err <= tol)) ++misses;
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = static_cast<int64_t>(i);
    }
    if (!(err <= max_err)) max_err = err;
  }
  std::ostringstream msg;
  msg << what << ": max error " << max_err << ", max |ref| " << max_ref << ", worst element " << worst << " "
      << where(worst) << " got " << got[static_cast<size_t>(worst)] << " expected " << ref[static_cast<size_t>(worst)]
      << " (" << 100.0 * worst_ratio << "% of its tolerance " << atol << " + " << rtol << "|ref|)";
  EXPECT_EQ(misses, 0) << misses << " of " << got.size() << " elements out of tolerance; " << msg.str();
  if (misses == 0) std::cout << "  " << msg.str() << "\n";
}

struct Case {
  int64_t s, b, heads, d;
  DType dtype;
  float p;
  bool documents = false;  // AttentionParams::key_start from document_key_starts
  int64_t groups = 0;      // AttentionParams::query_groups (0: heads)
  int64_t width() const { return QkvLayout(heads, groups, d).width(); }
};

std::string case_name(const Case& c) {
  std::ostringstream n;
  n << "s" << c.s << "_b" << c.b << "_h" << c.heads << "_d" << c.d << "_" << dtype_name(c.dtype) << "_p"
    << static_cast<int>(std::lround(c.p * 100)) << (c.documents ? "_documents" : "");
  if (c.groups > 0) n << "_g" << c.groups;
  return n.str();
}

// Position of flat index i in out/dout [s, b, heads*d], dqkv [s, b, heads*3d], lse [b, heads, s].
std::function<std::string(int64_t)> out_where(const Case& c) {
  return [c](int64_t i) {
    const int64_t col = i % (c.heads * c.d), bi = (i / (c.heads * c.d)) % c.b, row = i / (c.heads * c.d * c.b);
    std::ostringstream w;
    w << "(row " << row << ", batch " << bi << ", head " << col / c.d << ", col " << col % c.d << ")";
    return w.str();
  };
}
std::function<std::string(int64_t)> qkv_where(const Case& c) {
  return [c](int64_t i) {
    const QkvLayout L(c.heads, c.groups, c.d);
    const int64_t width = L.width();
    const int64_t col = i % width, bi = (i / width) % c.b, row = i / (width * c.b);
    const int64_t group = col / L.group_width(), slot = (col % L.group_width()) / c.d, e = col % c.d;
    std::ostringstream w;
    w << "(row " << row << ", batch " << bi << ", group " << group << ", ";
    if (slot < L.per_group()) {
      w << "q" << slot;
    } else {
      w << (slot == L.per_group() ? "k" : "v");
    }
    w << " col " << e << ")";
    return w.str();
  };
}
std::function<std::string(int64_t)> lse_where(const Case& c) {
  return [c](int64_t i) {
    std::ostringstream w;
    w << "(batch " << i / (c.heads * c.s) << ", head " << (i / c.s) % c.heads << ", row " << i % c.s << ")";
    return w.str();
  };
}

class CudaAttention : public ::testing::TestWithParam<Case> {};

TEST_P(CudaAttention, ForwardAndBackwardMatchCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case c = GetParam();
  const int64_t s = c.s, b = c.b, H = c.heads, d = c.d;
  const DType dtype = c.dtype;
  const float p = c.p;
  SCOPED_TRACE(case_name(c));
  auto rng = test_rng();
  auto cpu = make_cpu_backend();
  auto gpu = make_own_gpu();
  AttentionParams params = make_params(H, d, p);
  params.query_groups = c.groups;
  AttentionParams gpu_params = params;
  if (c.documents) {
    params.key_start = document_key_starts(b, s);
    gpu_params.key_start = to_device(*gpu, params.key_start);
  }

  // |q|, |k|, |v| in [0.1, 2]: scores with a standard deviation ~1.5, so the softmax is far
  // from uniform and the online max matters.
  Tensor qkv = random_tensor({s, b, c.width()}, rng, dtype, 0.1f, 2.0f);
  Tensor dout = random_tensor({s, b, H * d}, rng, dtype);

  // CPU reference (double dot products and sums, fp32 results).
  Tensor out_ref = Tensor::cpu({s, b, H * d}, dtype);
  Tensor lse_ref = Tensor::cpu({b, H, s}, DType::kF32);
  cpu->attention_forward(qkv, out_ref, lse_ref, params);
  Tensor dqkv_ref = Tensor::cpu({s, b, c.width()}, dtype);
  cpu->attention_backward(dout, qkv, out_ref, lse_ref, dqkv_ref, params);

  Tensor qkv_d = to_device(*gpu, qkv), dout_d = to_device(*gpu, dout);
  Tensor out_d = gpu->empty({s, b, H * d}, dtype, MemoryKind::kOther);
  Tensor lse_d = gpu->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
  gpu->fill(out_d, 7.0f);  // overwritten
  gpu->attention_forward(qkv_d, out_d, lse_d, gpu_params);
  Tensor dqkv_d = gpu->empty({s, b, c.width()}, dtype, MemoryKind::kOther);
  gpu->fill(dqkv_d, 7.0f);  // overwritten
  gpu->attention_backward(dout_d, qkv_d, out_d, lse_d, dqkv_d, gpu_params);
  const Tensor out = to_host(*gpu, out_d), lse = to_host(*gpu, lse_d), dqkv = to_host(*gpu, dqkv_d);

  if (dtype == DType::kF32) {
    // Both sides compute in fp32 but sum in different orders (the CPU accumulates dot products
    // and sums in double): scores differ by ~1e-6, the outputs (P-weighted means of v) by a few
    // 1e-7 of max|v|. 1e-5 of the tensor's scale plus 1e-4 relative leaves a 10x margin.
    expect_close_scaled(values(out), values(out_ref), 1e-5, 1e-4, "out", out_where(c));
    // lse = max + log(sum) in fp32 vs double: ~1e-6 absolute for |lse| <= ~10.
    expect_close_scaled(values(lse), values(lse_ref), 1e-5, 1e-5, "lse", lse_where(c));
    // Gradients are sums of up to s terms P (dP - D) k of random sign in fp32 running order;
    // D_i = dO_i . out_i here vs sum_j P_ij dP_ij on the CPU (equal up to fp32 rounding).
    // ~1e-6 relative per term, sqrt(s) growth: 5e-5 of the tensor's scale.
    expect_close_scaled(values(dqkv), values(dqkv_ref), 5e-5, 1e-4, "dqkv", qkv_where(c));
  } else if (d == 64 || d == 80 || d == 128) {
    // The tensor-core path (bf16/fp16 mma.sync, fp32 accumulation). Scores q.k are exact
    // products of the 16-bit inputs summed in fp32 (~1e-6 relative), so lse agrees as in fp32.
    // P (after the dropout mask m <= 1/(1-p): 1.11, or 2 at p = 0.5) is rounded to bf16 for the
    // P V product: each term P_j m_j v_j carries a relative error <= 2^-9, so
    // out_i = sum_j (P_j m_j / l) v_j is off by at most 2^-9 * max(m) * max|v| (2.2e-3, or 3.9e-3
    // at p = 0.5, of max|v| ~ max|out|: row 0 is v_0 m), a worst case of same-sign errors, plus
    // one output ulp (2^-7 relative, rounding-boundary straddles): 5e-3 of the scale + 2^-7.
    expect_close_scaled(values(out), values(out_ref), 5e-3, 1.0 / 128 + 1e-4, "out (tensor cores)", out_where(c));
    expect_close_scaled(values(lse), values(lse_ref), 1e-5, 1e-5, "lse", lse_where(c));
    // Backward: dS = P (dP m - D) and P m are rounded to bf16 as mma operands (2^-9 relative
    // per term, random sign: ~2^-9 of a gradient's magnitude after summing), D_i = dO_i . out_i
    // uses the rounded `out` of this forward (~2e-3 relative, above), shifting dS by P dD;
    // together a few 1e-3 of the gradients' scale: 1e-2 of the scale + one output ulp.
    expect_close_scaled(values(dqkv), values(dqkv_ref), 1e-2, 1.0 / 128 + 1e-4, "dqkv (tensor cores)", qkv_where(c));
  } else {
    // The same bf16 inputs and fp32 math on both sides, outputs rounded to bf16 (RNE): values
    // straddling a rounding boundary differ by one bf16 ulp, at most 2^-7 relative.
    expect_close_scaled(values(out), values(out_ref), 1e-5, 1.0 / 128 + 1e-4, "out (bf16)", out_where(c));
    expect_close_scaled(values(lse), values(lse_ref), 1e-5, 1e-5, "lse", lse_where(c));
    // Backward: one bf16 ulp of output rounding, plus D_i = dO_i . out_i read from the bf16
    // `out` (2^-9 relative per element; the CPU uses the exact P . dP), which shifts dS by
    // P * dD: ~1e-3 of the gradients' scale. 1e-2 of the scale + one ulp relative.
    expect_close_scaled(values(dqkv), values(dqkv_ref), 1e-2, 1.0 / 128 + 1e-4, "dqkv (bf16)", qkv_where(c));
  }
}

const Case kCases[] = {
    {1, 1, 1, 64, DType::kF32, 0.0f},
    {1, 1, 1, 64, DType::kF32, 0.1f},
    {7, 2, 3, 64, DType::kF32, 0.0f},
    {7, 2, 3, 64, DType::kF32, 0.1f},
    {7, 2, 3, 64, DType::kBF16, 0.0f},
    {7, 2, 3, 64, DType::kBF16, 0.1f},
    {129, 2, 4, 64, DType::kF32, 0.0f},
    {129, 2, 4, 64, DType::kF32, 0.1f},
    {129, 2, 4, 64, DType::kBF16, 0.0f},
    {129, 2, 4, 64, DType::kBF16, 0.1f},
    {1024, 2, 12, 64, DType::kF32, 0.0f},
    {1024, 2, 12, 64, DType::kF32, 0.1f},
    {1024, 2, 12, 64, DType::kBF16, 0.0f},
    {1024, 2, 12, 64, DType::kBF16, 0.1f},
    {2048, 1, 16, 128, DType::kF32, 0.0f},
    {2048, 1, 16, 128, DType::kF32, 0.1f},
    {2048, 1, 16, 128, DType::kBF16, 0.0f},
    {2048, 1, 16, 128, DType::kBF16, 0.1f},
    // Head dims that are zero-padded inside the tiles (32 -> 64, 80 -> 128), odd s.
    {65, 2, 2, 32, DType::kF32, 0.1f},
    {97, 1, 3, 80, DType::kF32, 0.1f},
    {33, 1, 2, 128, DType::kF32, 0.1f},
    {33, 1, 2, 128, DType::kBF16, 0.0f},
    // Tensor-core path (bf16/fp16, d = 64 or 128): single rows, s not a multiple of the 64-row
    // tiles (and of the 32-row backward tiles at d = 128), dropout on, both 16-bit dtypes.
    {1, 1, 1, 64, DType::kBF16, 0.1f},
    {1, 1, 1, 128, DType::kF16, 0.1f},
    {7, 2, 3, 128, DType::kF16, 0.1f},
    {129, 2, 4, 64, DType::kF16, 0.0f},
    {129, 2, 4, 64, DType::kF16, 0.1f},
    {97, 1, 3, 128, DType::kBF16, 0.1f},
    {200, 2, 2, 128, DType::kF16, 0.1f},
    {333, 1, 2, 64, DType::kBF16, 0.5f},
    {1024, 2, 12, 64, DType::kF16, 0.1f},
    {2048, 1, 16, 128, DType::kF16, 0.1f},
    // bf16 at other head dims keeps the SIMT fp32 kernels.
    {65, 2, 2, 32, DType::kBF16, 0.1f},
    {97, 1, 3, 80, DType::kF16, 0.1f},
    // GPT-3 2.7B's head_dim (2560 / 32) on the tensor-core path.
    {257, 2, 2, 80, DType::kBF16, 0.1f},
    {130, 1, 3, 80, DType::kBF16, 0.0f},
    // Documents (--reset-attention-mask): the SIMT kernels (fp32; bf16 at head_dim 32) and the
    // tensor-core ones (bf16/fp16 at 64, 80, 128), s not a multiple of the tiles, dropout.
    {300, 2, 2, 64, DType::kF32, 0.1f, true},
    {97, 1, 2, 128, DType::kF32, 0.0f, true},
    {129, 2, 2, 32, DType::kBF16, 0.1f, true},
    {300, 2, 3, 64, DType::kBF16, 0.0f, true},
    {300, 2, 3, 64, DType::kBF16, 0.1f, true},
    {1024, 2, 4, 64, DType::kF16, 0.1f, true},
    {257, 2, 2, 80, DType::kBF16, 0.1f, true},
    {333, 2, 2, 128, DType::kBF16, 0.1f, true},
    {2048, 1, 4, 128, DType::kF16, 0.0f, true},
    // Query groups: MQA (G = 1), GQA (G = 2, 3) and G = heads given explicitly, on the SIMT
    // kernels (fp32; bf16 at head_dim 32) and the tensor-core ones (bf16/fp16 at 64, 80, 128),
    // with dropout and documents. The key/value gradients sum over a group's heads (the CPU's
    // double sum; the kernels' fp32 one, head after head: the tolerances above cover a sum of
    // heads / G times as many terms).
    {129, 2, 4, 64, DType::kF32, 0.1f, false, 1},
    {129, 2, 4, 64, DType::kF32, 0.0f, false, 2},
    {97, 1, 6, 128, DType::kF32, 0.1f, false, 3},
    {65, 2, 4, 32, DType::kBF16, 0.1f, false, 2},
    {7, 2, 3, 64, DType::kF32, 0.1f, false, 3},
    {300, 2, 4, 64, DType::kBF16, 0.1f, false, 1},
    {300, 2, 4, 64, DType::kBF16, 0.0f, false, 2},
    {257, 1, 6, 128, DType::kF16, 0.1f, false, 3},
    {130, 2, 4, 80, DType::kBF16, 0.1f, false, 2},
    {1024, 2, 8, 128, DType::kBF16, 0.1f, false, 2},
    {1024, 1, 8, 64, DType::kF16, 0.0f, false, 4},
    {300, 2, 4, 64, DType::kBF16, 0.1f, true, 2},
    {300, 2, 4, 64, DType::kF32, 0.1f, true, 1},
};

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// Same inputs twice: out, lse and dqkv bit for bit (no atomics, fixed summation order).
TEST(CudaAttentionDeterminism, TwoRunsAreBitwiseEqual) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto rng = test_rng();
  auto gpu = make_own_gpu();
  for (const Case& c :
       {Case{300, 2, 4, 64, DType::kBF16, 0.1f}, Case{200, 1, 2, 128, DType::kF32, 0.1f},
        Case{300, 2, 4, 64, DType::kF16, 0.1f}, Case{231, 1, 3, 128, DType::kBF16, 0.1f},
        Case{300, 2, 4, 64, DType::kBF16, 0.1f, true}, Case{300, 2, 4, 64, DType::kBF16, 0.1f, false, 2},
        Case{200, 1, 4, 128, DType::kF32, 0.1f, false, 1}}) {
    SCOPED_TRACE(case_name(c));
    AttentionParams params = make_params(c.heads, c.d, c.p);
    params.query_groups = c.groups;
    if (c.documents) params.key_start = to_device(*gpu, document_key_starts(c.b, c.s));
    Tensor qkv = to_device(*gpu, random_tensor({c.s, c.b, c.width()}, rng, c.dtype, 0.1f, 2.0f));
    Tensor dout = to_device(*gpu, random_tensor({c.s, c.b, c.heads * c.d}, rng, c.dtype));
    Tensor results[2][3];
    for (auto& r : results) {
      Tensor out = gpu->empty({c.s, c.b, c.heads * c.d}, c.dtype, MemoryKind::kOther);
      Tensor lse = gpu->empty({c.b, c.heads, c.s}, DType::kF32, MemoryKind::kOther);
      Tensor dqkv = gpu->empty({c.s, c.b, c.width()}, c.dtype, MemoryKind::kOther);
      gpu->attention_forward(qkv, out, lse, params);
      gpu->attention_backward(dout, qkv, out, lse, dqkv, params);
      r[0] = to_host(*gpu, out);
      r[1] = to_host(*gpu, lse);
      r[2] = to_host(*gpu, dqkv);
    }
    EXPECT_TRUE(bitwise_equal(results[0][0], results[1][0])) << "out differs between runs";
    EXPECT_TRUE(bitwise_equal(results[0][1], results[1][1])) << "lse differs between runs";
    EXPECT_TRUE(bitwise_equal(results[0][2], results[1][2])) << "dqkv differs between runs";
  }
}

// Documents change the result: a row's one-token first document is v_0 either way, the next
// document no longer sees row 0.
TEST(CudaAttentionDocuments, MasksChangeTheOutput) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto rng = test_rng();
  auto gpu = make_own_gpu();
  const int64_t s = 256, b = 2, H = 2, d = 64;
  AttentionParams params = make_params(H, d, 0.0f);
  params.key_start = to_device(*gpu, document_key_starts(b, s));
  Tensor qkv = to_device(*gpu, random_tensor({s, b, H * 3 * d}, rng, DType::kBF16, 0.1f, 2.0f));
  Tensor docs = gpu->empty({s, b, H * d}, DType::kBF16, MemoryKind::kOther);
  Tensor causal = gpu->empty({s, b, H * d}, DType::kBF16, MemoryKind::kOther);
  Tensor lse = gpu->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
  gpu->attention_forward(qkv, docs, lse, params);
  gpu->attention_forward(qkv, causal, lse, make_params(H, d, 0.0f));
  const Tensor a = to_host(*gpu, docs), c = to_host(*gpu, causal);
  double first = 0.0, second = 0.0;
  for (int64_t col = 0; col < H * d; ++col) {
    first = std::max(first, std::abs(get(a, col) - get(c, col)));
    second = std::max(second, std::abs(get(a, (2 * b) * H * d + col) - get(c, (2 * b) * H * d + col)));
  }
  EXPECT_EQ(first, 0.0);
  EXPECT_GT(second, 1e-2);
}

// Dropout really drops: the same inputs with p = 0.1 and p = 0 give different outputs (so the
// dropout cases above cannot pass by ignoring the mask on both sides).
TEST(CudaAttentionDropout, MaskChangesTheOutput) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto rng = test_rng();
  auto gpu = make_own_gpu();
  const int64_t s = 64, b = 1, H = 2, d = 64;
  Tensor qkv = to_device(*gpu, random_tensor({s, b, H * 3 * d}, rng, DType::kF32, 0.1f, 2.0f));
  Tensor out0 = gpu->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
  Tensor out1 = gpu->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
  Tensor lse = gpu->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
  gpu->attention_forward(qkv, out0, lse, make_params(H, d, 0.0f));
  gpu->attention_forward(qkv, out1, lse, make_params(H, d, 0.1f));
  EXPECT_FALSE(bitwise_equal(to_host(*gpu, out0), to_host(*gpu, out1)));
}

// Tensor parallelism: heads [2, 4) of 4 computed alone with dropout_heads = 4 and
// dropout_head0 = 2 draw the CPU's masks of those global heads (SIMT fp32 and tensor-core bf16
// paths), and differ from the call that numbers them 0 and 1.
TEST(CudaAttentionDropout, GlobalHeadIndexMatchesTheCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto rng = test_rng();
  auto cpu = make_cpu_backend();
  auto gpu = make_own_gpu();
  const int64_t s = 64, b = 2, H = 2, d = 64;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const Tensor qkv = random_tensor({s, b, H * 3 * d}, rng, dt, 0.1f, 2.0f);
    AttentionParams params = make_params(H, d, 0.2f);
    params.dropout_heads = 4;
    params.dropout_head0 = 2;
    Tensor want = cpu->empty({s, b, H * d}, dt, MemoryKind::kOther);
    Tensor lse = cpu->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
    cpu->attention_forward(qkv, want, lse, params);
    Tensor out = gpu->empty({s, b, H * d}, dt, MemoryKind::kOther);
    Tensor glse = gpu->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
    gpu->attention_forward(to_device(*gpu, qkv), out, glse, params);
    const Tensor got = to_host(*gpu, out);
    // Same masks: the outputs agree to the path's rounding (bf16: a few bf16 ulps of values < 4).
    double worst = 0.0;
    for (int64_t i = 0; i < got.numel(); ++i) worst = std::max(worst, std::abs(get(got, i) - get(want, i)));
    EXPECT_LT(worst, dt == DType::kF32 ? 1e-4 : 6e-2) << dtype_name(dt);
    params.dropout_heads = 0;
    params.dropout_head0 = 0;
    gpu->attention_forward(to_device(*gpu, qkv), out, glse, params);
    const Tensor other = to_host(*gpu, out);
    double moved = 0.0;
    for (int64_t i = 0; i < other.numel(); ++i) moved = std::max(moved, std::abs(get(other, i) - get(want, i)));
    EXPECT_GT(moved, 0.1) << dtype_name(dt);
  }
}

// The tensor-core path's dropout mask is the CPU's, element for element: with one-hot values
// (v_j = e_j, s <= d) out[i][j] = P_ij * mask_ij / l_i for j <= i, so an output element is zero
// exactly where the probability was dropped (P_ij > 0 otherwise: no underflow at these scores).
// The zero patterns of the GPU's and the CPU's outputs must be identical, at p = 0.5.
class CudaAttentionTcMask : public ::testing::TestWithParam<Case> {};

TEST_P(CudaAttentionTcMask, DroppedProbabilitiesMatchCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case c = GetParam();
  const int64_t s = c.s, b = c.b, H = c.heads, d = c.d;
  const DType dtype = c.dtype;
  const float p = c.p;
  SCOPED_TRACE(case_name(c));
  ASSERT_LE(s, d);
  auto rng = test_rng();
  auto cpu = make_cpu_backend();
  auto gpu = make_own_gpu();
  const AttentionParams params = make_params(H, d, p);
  Tensor qkv = random_tensor({s, b, H * 3 * d}, rng, dtype, 0.1f, 2.0f);
  for (int64_t i = 0; i < s; ++i)
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t e = 0; e < d; ++e) set(qkv, (i * b + bi) * H * 3 * d + h * 3 * d + 2 * d + e, e == i ? 1.0 : 0.0);
  Tensor out_ref = Tensor::cpu({s, b, H * d}, dtype);
  Tensor lse_ref = Tensor::cpu({b, H, s}, DType::kF32);
  cpu->attention_forward(qkv, out_ref, lse_ref, params);
  Tensor qkv_d = to_device(*gpu, qkv);
  Tensor out_d = gpu->empty({s, b, H * d}, dtype, MemoryKind::kOther);
  Tensor lse_d = gpu->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
  gpu->fill(out_d, 7.0f);
  gpu->attention_forward(qkv_d, out_d, lse_d, params);
  const std::vector<double> got = values(to_host(*gpu, out_d)), ref = values(out_ref);
  int64_t kept = 0, dropped = 0, mismatches = 0, first = -1;
  for (int64_t i = 0; i < s; ++i)
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t e = 0; e < d; ++e) {
          const int64_t idx = (i * b + bi) * H * d + h * d + e;
          const bool ref_zero = ref[idx] == 0.0, got_zero = got[idx] == 0.0;
          if (e > i) {
            EXPECT_TRUE(ref_zero && got_zero) << "masked key contributes at " << out_where(c)(idx);
            continue;
          }
          (ref_zero ? dropped : kept) += 1;
          if (ref_zero != got_zero && mismatches++ == 0) first = idx;
        }
  EXPECT_EQ(mismatches, 0) << "dropout masks differ, first at " << (first >= 0 ? out_where(c)(first) : "") << " got "
                           << (first >= 0 ? got[first] : 0.0) << " expected " << (first >= 0 ? ref[first] : 0.0);
  // p = 0.5 of ~s^2/2 * b * H draws: both outcomes must be plentiful.
  EXPECT_GT(dropped, (kept + dropped) / 4);
  EXPECT_GT(kept, (kept + dropped) / 4);
  expect_close_scaled(got, ref, 5e-3, 1.0 / 128 + 1e-4, "one-hot out", out_where(c));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionTcMask,
                         ::testing::Values(Case{64, 2, 3, 64, DType::kBF16, 0.5f},
                                           Case{100, 1, 2, 128, DType::kF16, 0.5f},
                                           Case{128, 1, 2, 128, DType::kBF16, 0.5f}),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// KV cache: a prompt chunk, then one token at a time. Every chunk's output equals the rows of
// attention_forward over the whole sequence (same key tiling and fp32 order: expected bit for
// bit; checked at 1e-6), and the CPU's attention_kv_cache; the caches equal the CPU's exactly.
class CudaAttentionKvCache : public ::testing::TestWithParam<int64_t> {};

TEST_P(CudaAttentionKvCache, TokenByTokenMatchesForward) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto rng = test_rng();
  auto cpu = make_cpu_backend();
  auto gpu = make_own_gpu();
  const int64_t d = GetParam(), s = 77, b = 2, H = 3, max_seq = 80, prompt = 5;
  const Case c{s, b, H, d, DType::kF32, 0.0f};
  const AttentionParams params = make_params(H, d, 0.0f);
  Tensor qkv = random_tensor({s, b, H * 3 * d}, rng, DType::kF32, 0.1f, 2.0f);
  Tensor qkv_d = to_device(*gpu, qkv);

  Tensor full_d = gpu->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
  Tensor lse_d = gpu->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
  gpu->attention_forward(qkv_d, full_d, lse_d, params);
  const std::vector<double> full = values(to_host(*gpu, full_d));

  Tensor kc = Tensor::cpu({b, H, max_seq, d}), vc = Tensor::cpu({b, H, max_seq, d});
  Tensor kc_d = gpu->empty({b, H, max_seq, d}, DType::kF32, MemoryKind::kOther);
  Tensor vc_d = gpu->empty({b, H, max_seq, d}, DType::kF32, MemoryKind::kOther);
  std::vector<double> got, cpu_rows;
  for (int64_t past = 0; past < s;) {
    const int64_t t = past == 0 ? prompt : 1;
    Tensor out_d = gpu->empty({t, b, H * d}, DType::kF32, MemoryKind::kOther);
    gpu->attention_kv_cache(qkv_d.slice(past, past + t), kc_d, vc_d, past, out_d, params);
    Tensor out_c = Tensor::cpu({t, b, H * d});
    cpu->attention_kv_cache(qkv.slice(past, past + t), kc, vc, past, out_c, params);
    for (double v : values(to_host(*gpu, out_d))) got.push_back(v);
    for (double v : values(out_c)) cpu_rows.push_back(v);
    past += t;
  }
  expect_close_scaled(got, full, 1e-6, 1e-6, "kv-cache rows vs attention_forward", out_where(c));
  // vs the CPU: fp32 vs double sums, as in the forward test.
  expect_close_scaled(got, cpu_rows, 1e-5, 1e-4, "kv-cache rows vs CPU attention_kv_cache", out_where(c));
  EXPECT_TRUE(bitwise_equal(to_host(*gpu, kc_d), kc)) << "k cache differs from the CPU's";
  EXPECT_TRUE(bitwise_equal(to_host(*gpu, vc_d), vc)) << "v cache differs from the CPU's";
}

INSTANTIATE_TEST_SUITE_P(HeadDims, CudaAttentionKvCache, ::testing::Values<int64_t>(64, 128),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return "d" + std::to_string(info.param);
                         });

// The KV cache with query groups ([b, G, max_seq, d]): chunks of rows equal the rows of the
// full grouped forward, and the caches equal the CPU's bit for bit.
class CudaAttentionGroupedKvCache : public ::testing::TestWithParam<int64_t> {};

TEST_P(CudaAttentionGroupedKvCache, ChunksMatchForwardAndCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto rng = test_rng();
  auto cpu = make_cpu_backend();
  auto gpu = make_own_gpu();
  const int64_t G = GetParam(), d = 64, s = 70, b = 2, H = 4, max_seq = 72;
  const Case c{s, b, H, d, DType::kF32, 0.0f, false, G};
  AttentionParams params = make_params(H, d, 0.0f);
  params.query_groups = G;
  Tensor qkv = random_tensor({s, b, c.width()}, rng, DType::kF32, 0.1f, 2.0f);
  Tensor qkv_d = to_device(*gpu, qkv);
  Tensor full_d = gpu->empty({s, b, H * d}, DType::kF32, MemoryKind::kOther);
  Tensor lse_d = gpu->empty({b, H, s}, DType::kF32, MemoryKind::kOther);
  gpu->attention_forward(qkv_d, full_d, lse_d, params);
  const std::vector<double> full = values(to_host(*gpu, full_d));
  Tensor kc = Tensor::cpu({b, G, max_seq, d}), vc = Tensor::cpu({b, G, max_seq, d});
  Tensor kc_d = gpu->empty({b, G, max_seq, d}, DType::kF32, MemoryKind::kOther);
  Tensor vc_d = gpu->empty({b, G, max_seq, d}, DType::kF32, MemoryKind::kOther);
  std::vector<double> got, cpu_rows;
  for (int64_t past = 0; past < s;) {
    const int64_t t = past == 0 ? 9 : 1;
    Tensor out_d = gpu->empty({t, b, H * d}, DType::kF32, MemoryKind::kOther);
    gpu->attention_kv_cache(qkv_d.slice(past, past + t), kc_d, vc_d, past, out_d, params);
    Tensor out_c = Tensor::cpu({t, b, H * d});
    cpu->attention_kv_cache(qkv.slice(past, past + t), kc, vc, past, out_c, params);
    for (double v : values(to_host(*gpu, out_d))) got.push_back(v);
    for (double v : values(out_c)) cpu_rows.push_back(v);
    past += t;
  }
  expect_close_scaled(got, full, 1e-6, 1e-6, "grouped kv-cache rows vs attention_forward", out_where(c));
  expect_close_scaled(got, cpu_rows, 1e-5, 1e-4, "grouped kv-cache rows vs CPU", out_where(c));
  EXPECT_TRUE(bitwise_equal(to_host(*gpu, kc_d), kc)) << "k cache differs from the CPU's";
  EXPECT_TRUE(bitwise_equal(to_host(*gpu, vc_d), vc)) << "v cache differs from the CPU's";
}

INSTANTIATE_TEST_SUITE_P(Groups, CudaAttentionGroupedKvCache, ::testing::Values<int64_t>(1, 2),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           std::ostringstream n;
                           n << "g" << info.param;
                           return n.str();
                         });

}  // namespace
}  // namespace megatron::backend
