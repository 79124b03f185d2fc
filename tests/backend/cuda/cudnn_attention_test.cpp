// cuDNN's fused flash attention in the CUDA backend (src/backend/cuda/cudnn_attention.cpp,
// selected with AttentionImpl::kCudnn) against the CPU reference backend: forward out and lse,
// backward dqkv, on GPT training shapes and awkward ones, bf16 and fp16; the lse handed between
// cuDNN and our kernels in both directions; attention dropout with cuDNN's own masks (against a
// double-precision masked attention of the mask read back); the fallbacks to our kernels
// (dropout over a tensor-parallel share of the heads, fp32); query groups (GQA, MQA: K/V heads
// broadcast, dK/dV summed per group); the deterministic backward; the workspace accounting;
// MEGATRON_ATTENTION_IMPL.
// Every test but CudnnAttentionGraphs skips without a GPU. Awkward shapes that the cuDNN found
// at run time refuses skip with its reason; the GPT training shapes must run on cuDNN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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
#include "core/error.h"
#include "core/memory.h"
#include "support/scoped_env.h"

namespace megatron::backend {
namespace {

bool have_gpu() { return built_with_cuda() && cuda_device_count() > 0; }

AttentionParams make_params(int64_t heads, int64_t d, float p = 0.0f) {
  AttentionParams a;
  a.heads = heads;
  a.head_dim = d;
  a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));
  a.dropout = DropoutParams{p, 1234567, 42};
  return a;
}

struct Case {
  int64_t s, b, heads, d;
  DType dtype;
  bool must_run;  // a GPT training shape: cuDNN has to take it
};

std::string case_name(const Case& c) {
  std::ostringstream n;
  n << "s" << c.s << "_b" << c.b << "_h" << c.heads << "_d" << c.d << "_" << dtype_name(c.dtype);
  return n.str();
}
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

std::unique_ptr<Backend> make_gpu(AttentionImpl impl) {
  auto gpu = make_cuda_backend();
  set_attention_impl(*gpu, impl);
  return gpu;
}

// The heads checked against the CPU: all of a few, else the first and the last. Attention is
// independent per (batch, head), so the CPU reference runs on those heads' columns alone, which
// keeps s = 2048 with 32 heads affordable.
std::vector<int64_t> ref_heads(int64_t heads) {
  if (heads <= 3) {
    std::vector<int64_t> all;
    for (int64_t h = 0; h < heads; ++h) all.push_back(h);
    return all;
  }
  return {0, heads - 1};
}

// Heads `sel` of x [s, b, H * w] (head j in columns [j*w, (j+1)*w)) as [s, b, |sel| * w].
Tensor gather_heads(const Tensor& x, int64_t H, int64_t w, const std::vector<int64_t>& sel) {
  const int64_t s = x.dim(0), b = x.dim(1), n = static_cast<int64_t>(sel.size());
  Tensor y = Tensor::cpu({s, b, n * w}, x.dtype());
  const int64_t es = dtype_size(x.dtype());
  const auto* src = static_cast<const char*>(x.data());
  auto* dst = static_cast<char*>(y.data());
  for (int64_t r = 0; r < s * b; ++r) {
    for (int64_t k = 0; k < n; ++k) {
      std::memcpy(dst + (r * n * w + k * w) * es, src + (r * H * w + sel[static_cast<size_t>(k)] * w) * es,
                  static_cast<size_t>(w * es));
    }
  }
  return y;
}

// Heads `sel` of lse [b, H, s] as [b, |sel|, s].
Tensor gather_lse(const Tensor& lse, int64_t H, const std::vector<int64_t>& sel) {
  const int64_t b = lse.dim(0), s = lse.dim(2), n = static_cast<int64_t>(sel.size());
  Tensor y = Tensor::cpu({b, n, s}, DType::kF32);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t k = 0; k < n; ++k) {
      std::memcpy(y.data_as<float>() + (bi * n + k) * s, lse.data_as<const float>() + (bi * H + sel[k]) * s,
                  static_cast<size_t>(s) * sizeof(float));
    }
  }
  return y;
}

struct Result {
  Tensor out, lse, dqkv;  // host tensors
};

// The CPU reference (double dot products and sums, outputs rounded to their dtype).
Result cpu_attention(const Tensor& qkv, const Tensor& dout, const AttentionParams& p) {
  auto cpu = make_cpu_backend();
  const int64_t s = qkv.dim(0), b = qkv.dim(1);
  Result r{Tensor::cpu({s, b, p.heads * p.head_dim}, qkv.dtype()), Tensor::cpu({b, p.heads, s}, DType::kF32),
           Tensor::cpu(qkv.shape(), qkv.dtype())};
  cpu->attention_forward(qkv, r.out, r.lse, p);
  cpu->attention_backward(dout, qkv, r.out, r.lse, r.dqkv, p);
  return r;
}

// Forward under `fwd`, backward under `bwd` (so that lse crosses implementations when they
// differ). Outputs are pre-filled with 7 to catch elements left unwritten.
Result gpu_attention(Backend& gpu, const Tensor& qkv_h, const Tensor& dout_h, const AttentionParams& p,
                     AttentionImpl fwd, AttentionImpl bwd) {
  const int64_t s = qkv_h.dim(0), b = qkv_h.dim(1);
  const DType dt = qkv_h.dtype();
  Tensor qkv = to_device(gpu, qkv_h), dout = to_device(gpu, dout_h);
  Tensor out = gpu.empty({s, b, p.heads * p.head_dim}, dt, MemoryKind::kOther);
  Tensor lse = gpu.empty({b, p.heads, s}, DType::kF32, MemoryKind::kOther);
  Tensor dqkv = gpu.empty(qkv_h.shape(), dt, MemoryKind::kOther);
  gpu.fill(out, 7.0f);
  gpu.fill(lse, 7.0f);
  gpu.fill(dqkv, 7.0f);
  set_attention_impl(gpu, fwd);
  gpu.attention_forward(qkv, out, lse, p);
  set_attention_impl(gpu, bwd);
  gpu.attention_backward(dout, qkv, out, lse, dqkv, p);
  return {to_host(gpu, out), to_host(gpu, lse), to_host(gpu, dqkv)};
}

double max_abs(const Tensor& t) {
  double m = 0.0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::abs(test::get(t, i)));
  return m;
}

// got vs want elementwise: |got - want| <= atol_rel * max|want| + rtol |want|, or (16-bit) one
// representable value apart (a result straddling a rounding boundary).
::testing::AssertionResult close_scaled(const Tensor& got, const Tensor& want, double atol_rel, double rtol,
                                        const std::string& what) {
  const double scale = max_abs(want);
  if (scale == 0.0) return ::testing::AssertionFailure() << what << ": the reference is all zero";
  auto r = close(got, want, atol_rel * scale, rtol, /*max_ulps=*/1, what);
  if (r) std::cout << "  " << what << ": within " << atol_rel << " of max|ref| " << scale << "\n";
  return r;
}

// Tolerances of cuDNN's bf16/fp16 attention against the CPU's fp32/double reference.
//  out: cuDNN rounds P to the I/O dtype for the P V matmul (fp32 accumulation). Each term
//       P_j v_j then carries a relative error <= 2^-9 (bf16) or 2^-12 (fp16), so
//       |out_i - ref_i| <= 2^-9 max|v| (~2e-3) or 2^-12 max|v| (~2.4e-4) in the worst case of
//       same-sign errors, and max|out| ~ max|v| (row 0 is v_0): 5e-3 (bf16) and 1e-3 (fp16) of
//       the tensor's scale, plus one output ulp for rounding-boundary straddles.
//  lse: fp32 max, exp/log (hardware approximations, ~2 ulp) and an fp32 sum of <= s terms:
//       ~1e-6 relative; 1e-5 of max|lse| + 1e-5 relative leaves a 10x margin.
//  dqkv: dS = P (dP - D) and P enter the dK/dV/dQ matmuls rounded to the I/O dtype (2^-9 or
//       2^-12 relative per term, random signs), and D = dO . out uses the rounded forward out
//       (the CPU uses the exact P . dP): a few 1e-3 (bf16) of the gradients' scale; 1e-2 (bf16)
//       and 4e-3 (fp16) of the scale plus one ulp. The fp32 atomic dQ accumulation only
//       reorders fp32 sums (~1e-7).
struct Tolerance {
  double out, lse, dqkv;
};
Tolerance tolerance(DType dt) { return dt == DType::kBF16 ? Tolerance{5e-3, 1e-5, 1e-2} : Tolerance{1e-3, 1e-5, 4e-3}; }

// GPU results on heads `sel` against the CPU reference computed on those heads.
void expect_matches_cpu(const Result& gpu, const Result& ref, const Case& c, const std::vector<int64_t>& sel,
                        const std::string& label) {
  const Tolerance tol = tolerance(c.dtype);
  EXPECT_TRUE(close_scaled(gather_heads(gpu.out, c.heads, c.d, sel), ref.out, tol.out, 0.0, label + " out"));
  EXPECT_TRUE(close_scaled(gather_lse(gpu.lse, c.heads, sel), ref.lse, tol.lse, 1e-5, label + " lse"));
  EXPECT_TRUE(close_scaled(gather_heads(gpu.dqkv, c.heads, 3 * c.d, sel), ref.dqkv, tol.dqkv, 0.0, label + " dqkv"));
}

// Random inputs: |q|, |k|, |v| in [0.1, 2] (scores with a standard deviation ~1.5, so the
// softmax is far from uniform) and |dout| in [0.1, 1], random signs.
struct Inputs {
  Tensor qkv, dout;
};
Inputs make_inputs(const Case& c, uint64_t seed) {
  return {host_random({c.s, c.b, c.heads * 3 * c.d}, c.dtype, seed, 0.1f, 2.0f),
          host_random({c.s, c.b, c.heads * c.d}, c.dtype, seed + 1, 0.1f, 1.0f)};
}

// ---- cuDNN vs the CPU ----------------------------------------------------------------------

class CudnnAttention : public ::testing::TestWithParam<Case> {};

TEST_P(CudnnAttention, ForwardAndBackwardMatchCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case c = GetParam();
  SCOPED_TRACE(case_name(c));
  auto gpu = make_gpu(AttentionImpl::kCudnn);
  const AttentionParams p = make_params(c.heads, c.d);
  const std::string why = cudnn_attention_unavailable(*gpu, c.dtype, c.s, c.b, p);
  if (c.must_run) {
    ASSERT_EQ(why, "") << "cuDNN must run this GPT training shape";
  } else if (!why.empty()) {
    GTEST_SKIP() << "cuDNN does not run this case: " << why;
  }
  std::cout << "  " << describe_cudnn_attention(*gpu, c.dtype, c.s, c.b, p) << "\n";

  const Inputs in = make_inputs(c, 1000 + static_cast<uint64_t>(c.s * 31 + c.heads * 7 + c.d));
  const Result got = gpu_attention(*gpu, in.qkv, in.dout, p, AttentionImpl::kCudnn, AttentionImpl::kCudnn);
  const std::vector<int64_t> sel = ref_heads(c.heads);
  const AttentionParams p_sel = make_params(static_cast<int64_t>(sel.size()), c.d);
  const Result ref =
      cpu_attention(gather_heads(in.qkv, c.heads, 3 * c.d, sel), gather_heads(in.dout, c.heads, c.d, sel), p_sel);
  expect_matches_cpu(got, ref, c, sel, "cuDNN");
}

const Case kCases[] = {
    // GPT training shapes (s a multiple of 128): GPT-2 small and medium, GPT-3 2.7B (head_dim
    // 80 = 2560 / 32), head_dim 128 (GPT-3 6.7B and up, 13B-like with 32 heads).
    {1024, 2, 12, 64, DType::kBF16, true},
    {1024, 4, 16, 64, DType::kF16, true},
    {2048, 2, 32, 80, DType::kBF16, true},
    {2048, 2, 16, 128, DType::kBF16, true},
    {2048, 4, 32, 128, DType::kF16, true},
    {1024, 3, 12, 64, DType::kF16, true},
    {2048, 2, 32, 80, DType::kF16, true},
    // head_dim 160: GPT-3 13B of the NLP benchmark (5120 / 32; a quarter of its heads), which only
    // cuDNN runs; 256, cuDNN's largest.
    {2048, 1, 8, 160, DType::kBF16, true},
    {1024, 1, 2, 256, DType::kF16, false},
    // Awkward: single rows, s one below and above the 64/128-row tiles, b = 1, head_dim 32 and 96.
    {1, 1, 1, 64, DType::kBF16, false},
    {1, 2, 3, 128, DType::kF16, false},
    {63, 1, 2, 64, DType::kBF16, false},
    {65, 1, 3, 128, DType::kF16, false},
    {127, 1, 2, 80, DType::kBF16, false},
    {129, 1, 4, 64, DType::kF16, false},
    {129, 2, 2, 128, DType::kBF16, false},
    {200, 1, 2, 32, DType::kBF16, false},
    {384, 1, 2, 96, DType::kF16, false},
};

INSTANTIATE_TEST_SUITE_P(Shapes, CudnnAttention, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// Without a GPU (any CUDA build): the forward and backward graphs of every case above, in both
// backward variants, are built on the build machine's cuDNN descriptor by descriptor (attribute
// types, the shapes of every matmul and broadcast, the operation graphs). Engines are not asked.
TEST(CudnnAttentionGraphs, BuildWithoutAGpu) {
  if (!built_with_cuda()) GTEST_SKIP() << "built without CUDA";
  for (const Case& c : kCases) {
    for (bool deterministic : {false, true}) {
      for (float dropout : {0.0f, 0.1f}) {
        SCOPED_TRACE(case_name(c) + (deterministic ? " deterministic" : "") + (dropout > 0 ? " dropout" : ""));
        EXPECT_EQ(check_cudnn_attention_graphs(c.dtype, c.s, c.b, make_params(c.heads, c.d, dropout), deterministic),
                  "");
        AttentionParams documents = make_params(c.heads, c.d, dropout);
        documents.key_start = document_key_starts(c.b, c.s);
        EXPECT_EQ(check_cudnn_attention_graphs(c.dtype, c.s, c.b, documents, deterministic), "") << "documents";
      }
    }
  }
}

// ---- query groups (GQA, MQA) -------------------------------------------------------------------

struct GroupCase {
  int64_t s, b, heads, groups, d;
  DType dtype;
  bool deterministic = false;
};

std::string group_case_name(const GroupCase& c) {
  std::ostringstream n;
  n << "s" << c.s << "_b" << c.b << "_h" << c.heads << "_g" << c.groups << "_d" << c.d << "_" << dtype_name(c.dtype)
    << (c.deterministic ? "_deterministic" : "");
  return n.str();
}

AttentionParams grouped_params(const GroupCase& c, float p = 0.0f) {
  AttentionParams a = make_params(c.heads, c.d, p);
  a.query_groups = c.groups;
  return a;
}

const GroupCase kGroupCases[] = {
    // Llama-like shapes (s a multiple of 128): MQA, GQA 4:1 and 2:1, and G = heads given
    // explicitly (the multi-head graphs), both 16-bit dtypes, the deterministic backward.
    {512, 2, 8, 1, 128, DType::kBF16}, {512, 2, 8, 2, 128, DType::kBF16},         {512, 2, 8, 4, 64, DType::kF16},
    {256, 2, 4, 4, 64, DType::kBF16},  {1024, 1, 16, 4, 128, DType::kBF16, true}, {384, 2, 6, 3, 80, DType::kBF16},
};

// The CPU computes the whole case (all heads): the dK/dV sums over the heads of each group are
// what is checked here. cuDNN's per-query-head dK, dV are rounded to the I/O dtype before the
// group sum (its frontend's graph): one more 2^-9 (bf16) relative error per head, inside the
// dqkv tolerance of tolerance() (a few 1e-3 of the gradients' scale).
class CudnnGroupedAttention : public ::testing::TestWithParam<GroupCase> {};

TEST_P(CudnnGroupedAttention, ForwardAndBackwardMatchCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const GroupCase c = GetParam();
  SCOPED_TRACE(group_case_name(c));
  auto gpu = make_gpu(AttentionImpl::kCudnn);
  set_attention_deterministic(*gpu, c.deterministic);
  const AttentionParams p = grouped_params(c);
  ASSERT_EQ(cudnn_attention_unavailable(*gpu, c.dtype, c.s, c.b, p), "") << "cuDNN must run grouped attention";
  std::cout << "  " << describe_cudnn_attention(*gpu, c.dtype, c.s, c.b, p) << "\n";
  const int64_t width = p.qkv_width();
  const Tensor qkv = host_random({c.s, c.b, width}, c.dtype, 77 + c.groups, 0.1f, 2.0f);
  const Tensor dout = host_random({c.s, c.b, c.heads * c.d}, c.dtype, 78 + c.groups, 0.1f, 1.0f);
  const Result ref = cpu_attention(qkv, dout, p);
  const Tolerance tol = tolerance(c.dtype);
  auto check = [&](const Result& got, const std::string& label) {
    EXPECT_TRUE(close_scaled(got.out, ref.out, tol.out, 0.0, label + " out"));
    EXPECT_TRUE(close_scaled(got.lse, ref.lse, tol.lse, 1e-5, label + " lse"));
    EXPECT_TRUE(close_scaled(got.dqkv, ref.dqkv, tol.dqkv, 0.0, label + " dqkv"));
  };
  check(gpu_attention(*gpu, qkv, dout, p, AttentionImpl::kCudnn, AttentionImpl::kCudnn), "cuDNN");
  // lse crosses implementations in both directions with groups too.
  check(gpu_attention(*gpu, qkv, dout, p, AttentionImpl::kCudnn, AttentionImpl::kOwn), "cuDNN forward, own backward");
  check(gpu_attention(*gpu, qkv, dout, p, AttentionImpl::kOwn, AttentionImpl::kCudnn), "own forward, cuDNN backward");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudnnGroupedAttention, ::testing::ValuesIn(kGroupCases),
                         [](const ::testing::TestParamInfo<GroupCase>& info) { return group_case_name(info.param); });

// With documents the groups cannot fold into the batch (cudnn_attention.h): Q is gathered into a
// packed buffer and dQ scattered back. The same CPU reference, over the whole case.
TEST(CudnnGroupedAttention, DocumentsGatherTheQueriesAndMatchCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (const GroupCase& c : {GroupCase{512, 2, 8, 2, 128, DType::kBF16}, GroupCase{384, 2, 6, 3, 80, DType::kF16}}) {
    SCOPED_TRACE(group_case_name(c));
    auto gpu = make_gpu(AttentionImpl::kCudnn);
    AttentionParams p = grouped_params(c);
    const Tensor starts = document_key_starts(c.b, c.s);
    p.key_start = to_device(*gpu, starts);
    ASSERT_EQ(cudnn_attention_unavailable(*gpu, c.dtype, c.s, c.b, p), "") << "cuDNN must run grouped documents";
    std::cout << "  " << describe_cudnn_attention(*gpu, c.dtype, c.s, c.b, p) << "\n";
    const Tensor qkv = host_random({c.s, c.b, p.qkv_width()}, c.dtype, 177 + c.groups, 0.1f, 2.0f);
    const Tensor dout = host_random({c.s, c.b, c.heads * c.d}, c.dtype, 178 + c.groups, 0.1f, 1.0f);
    AttentionParams p_cpu = grouped_params(c);
    p_cpu.key_start = starts;
    const Result ref = cpu_attention(qkv, dout, p_cpu);
    const Result got = gpu_attention(*gpu, qkv, dout, p, AttentionImpl::kCudnn, AttentionImpl::kCudnn);
    const Tolerance tol = tolerance(c.dtype);
    EXPECT_TRUE(close_scaled(got.out, ref.out, tol.out, 0.0, "out"));
    EXPECT_TRUE(close_scaled(got.lse, ref.lse, tol.lse, 1e-5, "lse"));
    EXPECT_TRUE(close_scaled(got.dqkv, ref.dqkv, tol.dqkv, 0.0, "dqkv"));
  }
}

// Grouped attention is multi-head attention with each group's K and V repeated for its query
// heads: the same out on cuDNN (the same engine arithmetic per query head up to its tiling).
TEST(CudnnGroupedAttention, EqualsMultiHeadWithRepeatedKeysAndValues) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const GroupCase c{512, 2, 8, 2, 128, DType::kBF16};
  auto gpu = make_gpu(AttentionImpl::kCudnn);
  const AttentionParams gp = grouped_params(c), mp = make_params(c.heads, c.d);
  const QkvLayout L(c.heads, c.groups, c.d);
  const Tensor qkv = host_random({c.s, c.b, L.width()}, c.dtype, 91, 0.1f, 2.0f);
  Tensor mha = Tensor::cpu({c.s, c.b, c.heads * 3 * c.d}, c.dtype);
  const int64_t es = dtype_size(c.dtype);
  for (int64_t row = 0; row < c.s * c.b; ++row)
    for (int64_t h = 0; h < c.heads; ++h) {
      const char* src = static_cast<const char*>(qkv.data()) + row * L.width() * es;
      char* dst = static_cast<char*>(mha.data()) + (row * c.heads * 3 * c.d + h * 3 * c.d) * es;
      std::memcpy(dst, src + L.q_col(h) * es, static_cast<size_t>(c.d * es));
      std::memcpy(dst + c.d * es, src + L.k_col(L.group_of(h)) * es, static_cast<size_t>(c.d * es));
      std::memcpy(dst + 2 * c.d * es, src + L.v_col(L.group_of(h)) * es, static_cast<size_t>(c.d * es));
    }
  const Tensor dout = host_random({c.s, c.b, c.heads * c.d}, c.dtype, 92, 0.1f, 1.0f);
  const Result g = gpu_attention(*gpu, qkv, dout, gp, AttentionImpl::kCudnn, AttentionImpl::kCudnn);
  const Result m = gpu_attention(*gpu, mha, dout, mp, AttentionImpl::kCudnn, AttentionImpl::kCudnn);
  EXPECT_TRUE(close_scaled(g.out, m.out, 1e-3, 0.0, "grouped vs repeated out"));
  EXPECT_TRUE(close_scaled(g.lse, m.lse, 1e-6, 1e-6, "grouped vs repeated lse"));
}

// The grouped graphs (K/V of G heads broadcast in Q K^T and dO V^T, dK/dV reduced over the
// group), likewise without a GPU.
TEST(CudnnAttentionGraphs, GroupedBuildWithoutAGpu) {
  if (!built_with_cuda()) GTEST_SKIP() << "built without CUDA";
  for (const GroupCase& c : kGroupCases) {
    for (bool deterministic : {false, true}) {
      for (float dropout : {0.0f, 0.1f}) {
        SCOPED_TRACE(group_case_name(c) + (deterministic ? " deterministic" : "") + (dropout > 0 ? " dropout" : ""));
        EXPECT_EQ(check_cudnn_attention_graphs(c.dtype, c.s, c.b, grouped_params(c, dropout), deterministic), "");
        AttentionParams documents = grouped_params(c, dropout);
        documents.key_start = document_key_starts(c.b, c.s);
        EXPECT_EQ(check_cudnn_attention_graphs(c.dtype, c.s, c.b, documents, deterministic), "") << "documents";
      }
    }
  }
}

// ---- documents (--reset-attention-mask) ---------------------------------------------------------

// The documents enter cuDNN's graphs as a bias [b, 1, s, s] added to the scores
// (write_document_bias): on GPT training shapes cuDNN takes it, and the results are the CPU's
// masked attention.
TEST(CudnnAttentionDocuments, TrainingShapesMatchCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (const Case& c : {Case{1024, 2, 12, 64, DType::kBF16, true}, Case{2048, 2, 32, 80, DType::kBF16, true},
                        Case{2048, 2, 16, 128, DType::kF16, true}}) {
    SCOPED_TRACE(case_name(c));
    auto gpu = make_gpu(AttentionImpl::kCudnn);
    AttentionParams p = make_params(c.heads, c.d);
    const Tensor starts = document_key_starts(c.b, c.s);
    p.key_start = to_device(*gpu, starts);
    const std::string why = cudnn_attention_unavailable(*gpu, c.dtype, c.s, c.b, p);
    ASSERT_EQ(why, "") << "cuDNN must run documents on a GPT training shape";
    std::cout << "  " << describe_cudnn_attention(*gpu, c.dtype, c.s, c.b, p) << "\n";
    const Inputs in = make_inputs(c, 4000 + static_cast<uint64_t>(c.s + c.d));
    const Result got = gpu_attention(*gpu, in.qkv, in.dout, p, AttentionImpl::kCudnn, AttentionImpl::kCudnn);
    const std::vector<int64_t> sel = ref_heads(c.heads);
    AttentionParams p_sel = make_params(static_cast<int64_t>(sel.size()), c.d);
    p_sel.key_start = starts;
    const Result ref =
        cpu_attention(gather_heads(in.qkv, c.heads, 3 * c.d, sel), gather_heads(in.dout, c.heads, c.d, sel), p_sel);
    expect_matches_cpu(got, ref, c, sel, "cuDNN with documents");
    // Without the key starts the same inputs give another output (the masks are not ignored).
    const Result causal =
        gpu_attention(*gpu, in.qkv, in.dout, make_params(c.heads, c.d), AttentionImpl::kCudnn, AttentionImpl::kCudnn);
    EXPECT_FALSE(close_scaled(causal.out, got.out, 1e-2, 0.0, "causal vs documents"));
    // Megatron's default attention dropout with documents stays on cuDNN too.
    AttentionParams dropped = p;
    dropped.dropout.p = 0.1f;
    EXPECT_EQ(cudnn_attention_unavailable(*gpu, c.dtype, c.s, c.b, dropped), "");
  }
}

// ---- dropout on cuDNN --------------------------------------------------------------------------

// cuDNN draws attention dropout masks with its own Philox (cudnn_attention.h), so they are not
// the CPU's bits. What must hold instead: the forward is consistent with one keep mask M
// (every probability either dropped to 0 or kept and scaled by 1/(1-p)), about 1 - p of the
// causal entries are kept, the same (seed, stream) draws the same M and another stream another
// one, and forward and backward are the masked attention of that M, which the double reference
// below recomputes independently of both backends.

// q and k of |.| in [0.05, 0.5]: scaled scores within +-1, so every P is >= e^-2 / s and no
// kept probability rounds to 0 (a kept entry is then unambiguous).
Tensor small_qk_one_hot_v(const Case& c, uint64_t seed, int64_t key0) {
  Tensor qkv = host_random({c.s, c.b, c.heads * 3 * c.d}, c.dtype, seed, 0.05f, 0.5f);
  for (int64_t i = 0; i < c.s; ++i) {
    for (int64_t bi = 0; bi < c.b; ++bi) {
      for (int64_t h = 0; h < c.heads; ++h) {
        for (int64_t t = 0; t < c.d; ++t) {
          const int64_t at = (i * c.b + bi) * c.heads * 3 * c.d + h * 3 * c.d + 2 * c.d + t;
          test::set(qkv, at, i == key0 + t ? 1.0 : 0.0);
        }
      }
    }
  }
  return qkv;
}

// The first key query i of batch row bi sees: key_start[bi, i] (host int32 [b, s]), or 0.
int64_t first_key(const Tensor* key_start, const Case& c, int64_t bi, int64_t i) {
  return key_start != nullptr ? key_start->data_as<int32_t>()[bi * c.s + i] : 0;
}

// Softmax probabilities P[bi][h][i][j] (causal, double) of qkv's q and k; with key_start
// (documents) only over keys first_key .. i, the others 0.
std::vector<double> probabilities(const Tensor& qkv, const Case& c, float scale, const Tensor* key_start = nullptr) {
  const int64_t s = c.s, H = c.heads, d = c.d, w = H * 3 * d;
  std::vector<double> P(static_cast<size_t>(c.b * H * s * s), 0.0);
  std::vector<double> row(static_cast<size_t>(s));
  for (int64_t bi = 0; bi < c.b; ++bi) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < s; ++i) {
        const int64_t lo = first_key(key_start, c, bi, i);
        double m = -INFINITY;
        for (int64_t j = lo; j <= i; ++j) {
          double dot = 0.0;
          for (int64_t t = 0; t < d; ++t) {
            dot += test::get(qkv, (i * c.b + bi) * w + h * 3 * d + t) *
                   test::get(qkv, (j * c.b + bi) * w + h * 3 * d + d + t);
          }
          row[static_cast<size_t>(j)] = dot * scale;
          m = std::max(m, row[static_cast<size_t>(j)]);
        }
        double sum = 0.0;
        for (int64_t j = lo; j <= i; ++j) sum += std::exp(row[static_cast<size_t>(j)] - m);
        for (int64_t j = lo; j <= i; ++j) {
          P[static_cast<size_t>(((bi * H + h) * s + i) * s + j)] = std::exp(row[static_cast<size_t>(j)] - m) / sum;
        }
      }
    }
  }
  return P;
}

// The factor cuDNN scales kept probabilities by: 1/(1-p) rounded to the I/O dtype (measured on
// cuDNN 9.14: bf16 out[i][j] = 0.636719 for P = 0.475175 at p = 0.25 is P * 1.3359375 rounded,
// where P * 1.3333 would round to 0.632812; for p = 0.1 the factor is 1.109375, 0.16% low).
double cudnn_dropout_scale(float p, DType dtype) {
  return test::get(test::tensor_from({1.0 / (1.0 - static_cast<double>(p))}, {1}, dtype), 0);
}

// The keep mask cuDNN draws for `p` ([b, heads, s, s], 1 = kept; 0 above the diagonal), read
// through forwards with one-hot values: v_j = e_{j - key0} for keys [key0, key0 + d), so
// out[i][t] = Pd[i][key0 + t] exactly (one nonzero product, fp32 accumulation); ceil(s / d)
// forwards cover every key. Each entry must be 0 (dropped) or P times cudnn_dropout_scale
// within `rel` (the roundings to the I/O dtype on the way); anything else fails the test.
// With documents (host key_start), keys before a query's document are masked like those after it.
std::vector<uint8_t> read_keep_mask(Backend& gpu, const Case& c, const AttentionParams& p, double rel,
                                    const Tensor* key_start = nullptr) {
  const int64_t s = c.s, H = c.heads, d = c.d;
  std::vector<uint8_t> keep(static_cast<size_t>(c.b * H * s * s), 0);
  const double r = cudnn_dropout_scale(p.dropout.p, c.dtype);
  int64_t bad = 0;
  double worst = 0.0;
  std::string first_bad;
  for (int64_t key0 = 0; key0 < s; key0 += d) {
    const Tensor qkv_h = small_qk_one_hot_v(c, 4242, key0);
    const std::vector<double> P = probabilities(qkv_h, c, p.softmax_scale, key_start);
    Tensor qkv = to_device(gpu, qkv_h);
    Tensor out = gpu.empty({s, c.b, H * d}, c.dtype, MemoryKind::kOther);
    Tensor lse = gpu.empty({c.b, H, s}, DType::kF32, MemoryKind::kOther);
    gpu.attention_forward(qkv, out, lse, p);
    const Tensor o = to_host(gpu, out);
    for (int64_t i = 0; i < s; ++i) {
      for (int64_t bi = 0; bi < c.b; ++bi) {
        for (int64_t h = 0; h < H; ++h) {
          for (int64_t t = 0; t < d && key0 + t < s; ++t) {
            const int64_t j = key0 + t;
            const double got = test::get(o, (i * c.b + bi) * H * d + h * d + t);
            const size_t at = static_cast<size_t>(((bi * H + h) * s + i) * s + j);
            const double kept = P[at] * r;
            if (j > i || j < first_key(key_start, c, bi, i) || got == 0.0) {
              if (got != 0.0 && bad++ == 0) first_bad = str_cat("masked (", i, ", ", j, ") = ", got);
              continue;
            }
            worst = std::max(worst, std::abs(got - kept) / kept);
            if (std::abs(got - kept) > rel * kept && bad++ == 0) {
              first_bad =
                  str_cat("(b ", bi, ", head ", h, ", ", i, ", ", j, ") = ", got, ", neither 0 nor P r = ", kept);
            }
            keep[at] = 1;
          }
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << "entries of the dropped probabilities that no keep mask explains; first " << first_bad;
  std::cout << "  kept probabilities within " << worst << " (relative) of P * " << r << "\n";
  return keep;
}

// Attention with an explicit keep mask, in double: per (batch, head) S = scale q k^T (causal),
// P = softmax(S), Pd = P keep r, out = Pd v; backward: dPd = dout v^T, dv = Pd^T dout,
// dP = dPd keep r, dS = P (dP - rowsum(P dP)), dq = scale dS k, dk = scale dS^T q; r is
// cudnn_dropout_scale, the factor the forward applied.
// Results rounded to qkv's dtype in Megatron's layouts.
// With documents (host key_start) P is 0 before each query's document, so those keys drop out.
Result masked_attention(const Tensor& qkv, const Tensor& dout, const std::vector<uint8_t>& keep, const Case& c,
                        const AttentionParams& p, const Tensor* key_start = nullptr) {
  const int64_t s = c.s, H = c.heads, d = c.d, w = H * 3 * d;
  const double r = cudnn_dropout_scale(p.dropout.p, c.dtype);
  const std::vector<double> P = probabilities(qkv, c, p.softmax_scale, key_start);
  std::vector<double> out(static_cast<size_t>(s * c.b * H * d), 0.0), dqkv(static_cast<size_t>(s * c.b * w), 0.0);
  auto x = [&](int64_t pos, int64_t bi, int64_t h, int64_t part, int64_t t) {
    return test::get(qkv, (pos * c.b + bi) * w + h * 3 * d + part * d + t);
  };
  std::vector<double> dP(static_cast<size_t>(s));
  for (int64_t bi = 0; bi < c.b; ++bi) {
    for (int64_t h = 0; h < H; ++h) {
      const size_t base = static_cast<size_t>((bi * H + h) * s * s);
      for (int64_t i = 0; i < s; ++i) {
        const double* Pi = P.data() + base + static_cast<size_t>(i * s);
        const uint8_t* Ki = keep.data() + base + static_cast<size_t>(i * s);
        for (int64_t t = 0; t < d; ++t) {
          double acc = 0.0;
          for (int64_t j = 0; j <= i; ++j) acc += Pi[j] * Ki[j] * r * x(j, bi, h, 2, t);
          out[static_cast<size_t>((i * c.b + bi) * H * d + h * d + t)] = acc;
        }
        double rowsum = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          double dpd = 0.0;
          for (int64_t t = 0; t < d; ++t)
            dpd += test::get(dout, (i * c.b + bi) * H * d + h * d + t) * x(j, bi, h, 2, t);
          dP[static_cast<size_t>(j)] = dpd * Ki[j] * r;
          rowsum += Pi[j] * dP[static_cast<size_t>(j)];
          for (int64_t t = 0; t < d; ++t) {  // dv_j += Pd_ij dout_i
            dqkv[static_cast<size_t>((j * c.b + bi) * w + h * 3 * d + 2 * d + t)] +=
                Pi[j] * Ki[j] * r * test::get(dout, (i * c.b + bi) * H * d + h * d + t);
          }
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = Pi[j] * (dP[static_cast<size_t>(j)] - rowsum) * p.softmax_scale;
          for (int64_t t = 0; t < d; ++t) {
            dqkv[static_cast<size_t>((i * c.b + bi) * w + h * 3 * d + t)] += ds * x(j, bi, h, 1, t);
            dqkv[static_cast<size_t>((j * c.b + bi) * w + h * 3 * d + d + t)] += ds * x(i, bi, h, 0, t);
          }
        }
      }
    }
  }
  return {test::tensor_from(out, {s, c.b, H * d}, c.dtype), Tensor(), test::tensor_from(dqkv, qkv.shape(), c.dtype)};
}

class CudnnAttentionDropout : public ::testing::TestWithParam<Case> {};

TEST_P(CudnnAttentionDropout, OneMaskExplainsForwardAndBackward) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case c = GetParam();
  SCOPED_TRACE(case_name(c));
  auto gpu = make_gpu(AttentionImpl::kCudnn);
  const float drop = 0.25f;
  const AttentionParams p = make_params(c.heads, c.d, drop);
  ASSERT_EQ(cudnn_attention_unavailable(*gpu, c.dtype, c.s, c.b, p), "") << "cuDNN must run attention dropout";
  std::cout << "  " << describe_cudnn_attention(*gpu, c.dtype, c.s, c.b, p) << "\n";

  // Up to three roundings to the I/O dtype (exp(S - max) for the P V product, its product with
  // r, out), each <= 2^-8 (bf16) or 2^-11 (fp16) relative: <= 1.17% / 0.15%; measured on an
  // H100 with cuDNN 9.14: 0.94% / 0.12%. 2^-6 / 2^-9 keep a margin and still tell P r from P
  // (25% apart at p = 0.25).
  const double rel = c.dtype == DType::kBF16 ? 1.0 / 64 : 1.0 / 512;
  const std::vector<uint8_t> keep = read_keep_mask(*gpu, c, p, rel);
  int64_t causal = 0, kept = 0;
  for (int64_t bh = 0; bh < c.b * c.heads; ++bh) {
    for (int64_t i = 0; i < c.s; ++i) {
      for (int64_t j = 0; j <= i; ++j) {
        ++causal;
        kept += keep[static_cast<size_t>((bh * c.s + i) * c.s + j)];
      }
    }
  }
  // Kept fraction: binomial with n = causal entries; 6 standard deviations.
  const double frac = static_cast<double>(kept) / static_cast<double>(causal);
  const double sd = std::sqrt(drop * (1.0 - drop) / static_cast<double>(causal));
  EXPECT_NEAR(frac, 1.0 - drop, 6 * sd) << kept << " of " << causal << " causal entries kept";

  // The same call again: the same mask. Another stream: another mask (about 2 p (1-p) of the
  // entries differ).
  EXPECT_EQ(read_keep_mask(*gpu, c, p, rel), keep) << "the same (seed, stream) drew another mask";
  AttentionParams other = p;
  other.dropout.stream += 1;
  const std::vector<uint8_t> keep2 = read_keep_mask(*gpu, c, other, rel);
  int64_t differ = 0;
  for (size_t i = 0; i < keep.size(); ++i) differ += keep[i] != keep2[i];
  EXPECT_GT(static_cast<double>(differ), 0.5 * 2 * drop * (1 - drop) * static_cast<double>(causal))
      << "stream + 1 drew nearly the same mask";

  // Random inputs through forward and backward: the masked attention of that mask.
  const Inputs in = make_inputs(c, 99);
  const Result got = gpu_attention(*gpu, in.qkv, in.dout, p, AttentionImpl::kCudnn, AttentionImpl::kCudnn);
  const Result ref = masked_attention(in.qkv, in.dout, keep, c, p);
  // As tolerance() without dropout, times 1.5: kept probabilities are scaled by r before their
  // rounding, one more multiply per term.
  const Tolerance tol = tolerance(c.dtype);
  EXPECT_TRUE(close_scaled(got.out, ref.out, 1.5 * tol.out, 0.0, "dropout out"));
  EXPECT_TRUE(close_scaled(got.dqkv, ref.dqkv, 1.5 * tol.dqkv, 0.0, "dropout dqkv"));
  // The lse is the softmax's, before dropout: the CPU's without dropout.
  const Result plain = cpu_attention(in.qkv, in.dout, make_params(c.heads, c.d));
  EXPECT_TRUE(close_scaled(got.lse, plain.lse, tol.lse, 1e-5, "dropout lse"));
}

// Documents with dropout (Megatron's default attention dropout at TP 1 runs here): the forward
// is one keep mask inside the documents and 0 outside, and forward and backward are the masked
// attention of that mask over the documents.
TEST_P(CudnnAttentionDropout, DocumentsOneMaskExplainsForwardAndBackward) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case c = GetParam();
  SCOPED_TRACE(case_name(c));
  auto gpu = make_gpu(AttentionImpl::kCudnn);
  AttentionParams p = make_params(c.heads, c.d, 0.25f);
  const Tensor starts = document_key_starts(c.b, c.s);
  p.key_start = to_device(*gpu, starts);
  ASSERT_EQ(cudnn_attention_unavailable(*gpu, c.dtype, c.s, c.b, p), "") << "cuDNN must run documents with dropout";
  const double rel = c.dtype == DType::kBF16 ? 1.0 / 64 : 1.0 / 512;  // as above
  const std::vector<uint8_t> keep = read_keep_mask(*gpu, c, p, rel, &starts);
  const Inputs in = make_inputs(c, 77);
  const Result got = gpu_attention(*gpu, in.qkv, in.dout, p, AttentionImpl::kCudnn, AttentionImpl::kCudnn);
  const Result ref = masked_attention(in.qkv, in.dout, keep, c, p, &starts);
  const Tolerance tol = tolerance(c.dtype);
  EXPECT_TRUE(close_scaled(got.out, ref.out, 1.5 * tol.out, 0.0, "documents + dropout out"));
  EXPECT_TRUE(close_scaled(got.dqkv, ref.dqkv, 1.5 * tol.dqkv, 0.0, "documents + dropout dqkv"));
  AttentionParams plain = make_params(c.heads, c.d);
  plain.key_start = starts;
  EXPECT_TRUE(close_scaled(got.lse, cpu_attention(in.qkv, in.dout, plain).lse, tol.lse, 1e-5, "documents lse"));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudnnAttentionDropout,
                         ::testing::Values(Case{128, 2, 2, 64, DType::kBF16, true},
                                           Case{256, 1, 2, 128, DType::kF16, true},
                                           Case{256, 1, 3, 80, DType::kBF16, true}),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// ---- lse between implementations -----------------------------------------------------------

// cuDNN's Stats and our lse are the same quantity (natural-log LSE of the scaled, masked
// scores), so each backward accepts the other's forward: cuDNN forward + our backward, and our
// forward + cuDNN backward, both match the CPU; and the two forwards' lse agree with each other.
class CudnnAttentionInterop : public ::testing::TestWithParam<Case> {};

TEST_P(CudnnAttentionInterop, LseCrossesImplementations) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case c = GetParam();
  SCOPED_TRACE(case_name(c));
  auto gpu = make_gpu(AttentionImpl::kCudnn);
  const AttentionParams p = make_params(c.heads, c.d);
  const std::string why = cudnn_attention_unavailable(*gpu, c.dtype, c.s, c.b, p);
  ASSERT_EQ(why, "");
  const Inputs in = make_inputs(c, 77);
  const std::vector<int64_t> sel = ref_heads(c.heads);
  const Result ref =
      cpu_attention(gather_heads(in.qkv, c.heads, 3 * c.d, sel), gather_heads(in.dout, c.heads, c.d, sel),
                    make_params(static_cast<int64_t>(sel.size()), c.d));
  const Result cudnn_own = gpu_attention(*gpu, in.qkv, in.dout, p, AttentionImpl::kCudnn, AttentionImpl::kOwn);
  expect_matches_cpu(cudnn_own, ref, c, sel, "cuDNN forward, own backward");
  const Result own_cudnn = gpu_attention(*gpu, in.qkv, in.dout, p, AttentionImpl::kOwn, AttentionImpl::kCudnn);
  expect_matches_cpu(own_cudnn, ref, c, sel, "own forward, cuDNN backward");
  // Both are fp32 LSEs of the same fp32 scores (up to summation order and exp/log accuracy).
  EXPECT_TRUE(close_scaled(cudnn_own.lse, own_cudnn.lse, 1e-5, 1e-5, "cuDNN lse vs own lse"));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudnnAttentionInterop,
                         ::testing::Values(Case{256, 2, 4, 64, DType::kBF16, true},
                                           Case{384, 1, 3, 128, DType::kF16, true},
                                           Case{256, 2, 2, 80, DType::kBF16, true}),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// ---- fallbacks -----------------------------------------------------------------------------

// Cases cuDNN must not take run our kernels under kAuto: bit for bit what AttentionImpl::kOwn
// gives (our kernels are deterministic); under kCudnn they are errors.
void expect_falls_back(const Case& c, const AttentionParams& p, const std::string& reason_part) {
  auto gpu = make_gpu(AttentionImpl::kAuto);
  const std::string why = cudnn_attention_unavailable(*gpu, c.dtype, c.s, c.b, p);
  EXPECT_NE(why.find(reason_part), std::string::npos) << "reason: '" << why << "'";
  const Inputs in = make_inputs(c, 5);
  const Result automatic = gpu_attention(*gpu, in.qkv, in.dout, p, AttentionImpl::kAuto, AttentionImpl::kAuto);
  auto own_gpu = make_gpu(AttentionImpl::kOwn);
  const Result own = gpu_attention(*own_gpu, in.qkv, in.dout, p, AttentionImpl::kOwn, AttentionImpl::kOwn);
  EXPECT_TRUE(bitwise(automatic.out, own.out, "out (auto vs own)"));
  EXPECT_TRUE(bitwise(automatic.lse, own.lse, "lse (auto vs own)"));
  EXPECT_TRUE(bitwise(automatic.dqkv, own.dqkv, "dqkv (auto vs own)"));
  EXPECT_THROW(gpu_attention(*gpu, in.qkv, in.dout, p, AttentionImpl::kCudnn, AttentionImpl::kCudnn), Error);
}

// Heads [2, 4) of 4 (a tensor-parallel rank): the dropout index needs the global head, which
// cuDNN's generator cannot take, so our kernels keep the single-process masks.
AttentionParams tensor_parallel_dropout(int64_t heads, int64_t d) {
  AttentionParams p = make_params(heads, d, 0.1f);
  p.dropout_heads = 2 * heads;
  p.dropout_head0 = heads;
  return p;
}

TEST(CudnnAttentionFallback, TensorParallelDropoutRunsOurKernels) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  expect_falls_back(Case{128, 2, 2, 64, DType::kBF16, false}, tensor_parallel_dropout(2, 64), "tensor-parallel");
}

TEST(CudnnAttentionFallback, Fp32RunsOurKernels) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  expect_falls_back(Case{128, 2, 2, 64, DType::kF32, false}, make_params(2, 64), "fp32");
}

// Past our kernels' head_dim a case cuDNN refuses (fp32) is an error naming the flags, not a
// fallback (nor an abort).
TEST(CudnnAttentionFallback, LargeHeadDimWithoutCudnnIsAnError) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto gpu = make_gpu(AttentionImpl::kAuto);
  const Case c{128, 1, 2, 160, DType::kF32, false};
  const Inputs in = make_inputs(c, 7);
  try {
    gpu_attention(*gpu, in.qkv, in.dout, make_params(2, 160), AttentionImpl::kAuto, AttentionImpl::kAuto);
    ADD_FAILURE() << "fp32 attention with head_dim 160 ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--num-attention-heads"), std::string::npos) << e.what();
  }
}

TEST(CudnnAttentionFallback, ReasonsAreReported) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto gpu = make_gpu(AttentionImpl::kAuto);
  EXPECT_NE(cudnn_attention_unavailable(*gpu, DType::kBF16, 128, 1, make_params(2, 36)), "");  // head_dim % 8
  EXPECT_NE(cudnn_attention_unavailable(*gpu, DType::kF16, 128, 1, tensor_parallel_dropout(2, 64)), "");
  EXPECT_EQ(cudnn_attention_unavailable(*gpu, DType::kF16, 128, 1, make_params(2, 64, 0.5f)), "");
  EXPECT_NE(cudnn_attention_unavailable(*gpu, DType::kF32, 128, 1, make_params(2, 64)), "");
  EXPECT_EQ(cudnn_attention_unavailable(*gpu, DType::kBF16, 1024, 2, make_params(12, 64)), "");
  set_attention_impl(*gpu, AttentionImpl::kOwn);
  EXPECT_NE(cudnn_attention_unavailable(*gpu, DType::kBF16, 1024, 2, make_params(12, 64)), "");
}

// ---- determinism ---------------------------------------------------------------------------

// With set_attention_deterministic the backward has no fp32 atomics: two runs agree bit for bit
// (the forward always does), and the results still match the CPU.
TEST(CudnnAttentionDeterminism, DeterministicBackwardRepeatsBitForBit) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case c{512, 2, 4, 64, DType::kBF16, true};
  auto gpu = make_gpu(AttentionImpl::kCudnn);
  set_attention_deterministic(*gpu, true);
  const AttentionParams p = make_params(c.heads, c.d);
  const std::string why = cudnn_attention_unavailable(*gpu, c.dtype, c.s, c.b, p);
  if (!why.empty()) GTEST_SKIP() << "no deterministic cuDNN backward here: " << why;
  std::cout << "  " << describe_cudnn_attention(*gpu, c.dtype, c.s, c.b, p) << "\n";
  const Inputs in = make_inputs(c, 11);
  const Result a = gpu_attention(*gpu, in.qkv, in.dout, p, AttentionImpl::kCudnn, AttentionImpl::kCudnn);
  const Result b = gpu_attention(*gpu, in.qkv, in.dout, p, AttentionImpl::kCudnn, AttentionImpl::kCudnn);
  EXPECT_TRUE(bitwise(a.out, b.out, "out run 1 vs 2"));
  EXPECT_TRUE(bitwise(a.lse, b.lse, "lse run 1 vs 2"));
  EXPECT_TRUE(bitwise(a.dqkv, b.dqkv, "dqkv run 1 vs 2"));
  const std::vector<int64_t> sel = ref_heads(c.heads);
  const Result ref =
      cpu_attention(gather_heads(in.qkv, c.heads, 3 * c.d, sel), gather_heads(in.dout, c.heads, c.d, sel),
                    make_params(static_cast<int64_t>(sel.size()), c.d));
  expect_matches_cpu(a, ref, c, sel, "deterministic cuDNN");
}

// ---- workspace accounting --------------------------------------------------------------------

// cuDNN's workspace (and the fp32 D and dQ accumulator of the backward) is one device buffer
// counted under MemoryKind::kWorkspace, allocated when a case's plans are built, freed with the
// backend.
TEST(CudnnAttentionMemory, WorkspaceIsCountedUnderWorkspace) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  MemoryTracker& tracker = memory_tracker(Device::kCUDA);
  const int k = static_cast<int>(MemoryKind::kWorkspace);
  const MemorySnapshot before = tracker.snapshot();
  {
    auto gpu = make_gpu(AttentionImpl::kCudnn);
    // b * heads * s * d * 4 bytes of dQ accumulator alone: 2 * 12 * 1024 * 64 * 4 = 6 MiB.
    ASSERT_EQ(cudnn_attention_unavailable(*gpu, DType::kBF16, 1024, 2, make_params(12, 64)), "");
    const int64_t grown = tracker.snapshot().current[k] - before.current[k];
    EXPECT_GE(grown, int64_t{6} << 20);
    EXPECT_EQ(grown % (int64_t{1} << 20), 0) << "the workspace grows in whole MiB";
  }
  EXPECT_EQ(tracker.snapshot().current[k], before.current[k]) << "the workspace outlived its backend";
}

// ---- MEGATRON_ATTENTION_IMPL ---------------------------------------------------------------

using test::ScopedEnv;

TEST(CudnnAttentionSwitch, EnvironmentVariableIsReadAtConstruction) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case c{256, 1, 2, 64, DType::kBF16, true};
  const AttentionParams p = make_params(c.heads, c.d);
  {
    ScopedEnv env("MEGATRON_ATTENTION_IMPL", "flash");
    EXPECT_THROW(make_cuda_backend(), Error);
  }
  {
    ScopedEnv env("MEGATRON_ATTENTION_IMPL", "own");
    auto gpu = make_cuda_backend();
    EXPECT_NE(cudnn_attention_unavailable(*gpu, c.dtype, c.s, c.b, p), "") << "'own' must not use cuDNN";
  }
  {
    ScopedEnv env("MEGATRON_ATTENTION_IMPL", "cudnn");
    auto gpu = make_cuda_backend();
    const Inputs in = make_inputs(c, 3);
    const AttentionParams dropout = tensor_parallel_dropout(c.heads, c.d);
    Tensor qkv = to_device(*gpu, in.qkv);
    Tensor out = gpu->empty({c.s, c.b, c.heads * c.d}, c.dtype, MemoryKind::kOther);
    Tensor lse = gpu->empty({c.b, c.heads, c.s}, DType::kF32, MemoryKind::kOther);
    EXPECT_THROW(gpu->attention_forward(qkv, out, lse, dropout), Error) << "'cudnn' cannot fall back";
  }
  {
    ScopedEnv env("MEGATRON_ATTENTION_IMPL", "auto");
    auto gpu = make_cuda_backend();
    EXPECT_EQ(cudnn_attention_unavailable(*gpu, c.dtype, c.s, c.b, p), "");
  }
}

}  // namespace
}  // namespace megatron::backend
