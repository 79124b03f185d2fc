// ProfilingBackend over the CPU backend: results bitwise those of the unwrapped backend, calls
// counted per op and per GEMM shape (with FLOPs), positive times, enable/reset, the reports.
#include "backend/profiling_backend.h"

#include <gtest/gtest.h>

#include <string>

#include "backend/cpu/cpu_test_util.h"
#include "core/memory.h"

namespace megatron::backend {
namespace {

using namespace megatron::test;

const OpProfileRow* find_op(const OpProfile& p, const std::string& op) {
  for (const OpProfileRow& r : p.ops) {
    if (r.op == op) return &r;
  }
  return nullptr;
}

TEST(ProfilingBackend, ForwardsDeviceAndAllocation) {
  ProfilingBackend prof(make_cpu_backend());
  EXPECT_EQ(prof.device(), Device::kCPU);
  EXPECT_EQ(prof.inner().device(), Device::kCPU);
  Tensor t = prof.empty({3, 4}, DType::kBF16, MemoryKind::kActivations);
  EXPECT_EQ(t.shape(), (Shape{3, 4}));
  EXPECT_EQ(t.dtype(), DType::kBF16);
  EXPECT_EQ(t.device(), Device::kCPU);
  EXPECT_EQ(t.storage()->kind(), MemoryKind::kActivations);
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.data_as<uint16_t>()[i], 0);
}

TEST(ProfilingBackend, ResultsAreBitwiseThoseOfTheWrappedBackend) {
  auto rng = test_rng();
  auto plain = make_cpu_backend();
  ProfilingBackend prof(make_cpu_backend());
  const int64_t n = 24, in = 40, out = 56;

  // matmul, both transposes, with beta accumulation.
  const Tensor a = random_tensor({in, n}, rng, DType::kBF16);
  const Tensor b = random_tensor({out, in}, rng, DType::kBF16);
  const Tensor c0 = random_tensor({n, out}, rng);
  Tensor c_plain = clone(c0), c_prof = clone(c0);
  plain->matmul(a, true, b, true, c_plain, 0.5f, 1.0f);
  prof.matmul(a, true, b, true, c_prof, 0.5f, 1.0f);
  EXPECT_TRUE(bitwise_equal(c_plain, c_prof));

  // linear forward (with bias) and backward (dx, dw (+=), dbias (+=)).
  const Tensor x = random_tensor({n, in}, rng, DType::kBF16);
  const Tensor w = random_tensor({out, in}, rng, DType::kBF16);
  const Tensor bias = random_tensor({out}, rng, DType::kBF16);
  Tensor y_plain = Tensor::cpu({n, out}, DType::kBF16), y_prof = Tensor::cpu({n, out}, DType::kBF16);
  plain->linear_forward(x, w, bias, y_plain);
  prof.linear_forward(x, w, bias, y_prof);
  EXPECT_TRUE(bitwise_equal(y_plain, y_prof));

  const Tensor dy = random_tensor({n, out}, rng, DType::kBF16);
  const Tensor dw0 = random_tensor({out, in}, rng), db0 = random_tensor({out}, rng);
  Tensor dx_plain = Tensor::cpu({n, in}, DType::kBF16), dx_prof = Tensor::cpu({n, in}, DType::kBF16);
  Tensor dw_plain = clone(dw0), dw_prof = clone(dw0), db_plain = clone(db0), db_prof = clone(db0);
  plain->linear_backward(dy, x, w, dx_plain, dw_plain, db_plain);
  prof.linear_backward(dy, x, w, dx_prof, dw_prof, db_prof);
  EXPECT_TRUE(bitwise_equal(dx_plain, dx_prof));
  EXPECT_TRUE(bitwise_equal(dw_plain, dw_prof));
  EXPECT_TRUE(bitwise_equal(db_plain, db_prof));

  // layernorm forward (out, mean, rstd) and bias-GELU.
  const Tensor gamma = random_tensor({in}, rng), beta = random_tensor({in}, rng);
  Tensor ln_plain = Tensor::cpu({n, in}, DType::kBF16), ln_prof = Tensor::cpu({n, in}, DType::kBF16);
  Tensor mean_plain = Tensor::cpu({n}), mean_prof = Tensor::cpu({n}), rstd_plain = Tensor::cpu({n}),
         rstd_prof = Tensor::cpu({n});
  plain->layernorm_forward(x, gamma, beta, 1e-5f, ln_plain, mean_plain, rstd_plain);
  prof.layernorm_forward(x, gamma, beta, 1e-5f, ln_prof, mean_prof, rstd_prof);
  EXPECT_TRUE(bitwise_equal(ln_plain, ln_prof));
  EXPECT_TRUE(bitwise_equal(mean_plain, mean_prof));
  EXPECT_TRUE(bitwise_equal(rstd_plain, rstd_prof));

  Tensor g_plain = Tensor::cpu({n, out}, DType::kBF16), g_prof = Tensor::cpu({n, out}, DType::kBF16);
  plain->bias_gelu_forward(y_plain, bias, g_plain, Gelu::kTanh);
  prof.bias_gelu_forward(y_prof, bias, g_prof, Gelu::kTanh);
  EXPECT_TRUE(bitwise_equal(g_plain, g_prof));

  // Ops that return values.
  EXPECT_EQ(plain->sum_squares(c_plain), prof.sum_squares(c_prof));
  EXPECT_EQ(plain->all_finite(c_plain), prof.all_finite(c_prof));
  EXPECT_EQ(plain->count_zeros(dx_plain), prof.count_zeros(dx_prof));
}

TEST(ProfilingBackend, CountsCallsPerOpAndPerGemmShape) {
  auto rng = test_rng();
  ProfilingBackend prof(make_cpu_backend());
  const Tensor a = random_tensor({64, 32}, rng), b = random_tensor({32, 48}, rng);
  const Tensor b2 = random_tensor({32, 16}, rng);
  Tensor c = Tensor::cpu({64, 48}), c2 = Tensor::cpu({64, 16});
  for (int i = 0; i < 3; ++i) prof.matmul(a, false, b, false, c, 1.0f, 0.0f);
  for (int i = 0; i < 2; ++i) prof.matmul(a, false, b2, false, c2, 1.0f, 0.0f);
  const Tensor x = random_tensor({8, 32}, rng), w = random_tensor({24, 32}, rng);
  Tensor y = Tensor::cpu({8, 24});
  prof.linear_forward(x, w, Tensor(), y);
  prof.fill(c, 1.0f);
  prof.fill(c2, 2.0f);
  (void)prof.sum_squares(c);
  prof.synchronize();  // untimed

  const OpProfile p = prof.report();
  EXPECT_EQ(p.clock, "host steady_clock");
  ASSERT_EQ(p.ops.size(), 4u);  // matmul, linear_forward, fill, sum_squares
  const OpProfileRow* mm = find_op(p, "matmul");
  const OpProfileRow* lf = find_op(p, "linear_forward");
  const OpProfileRow* fill = find_op(p, "fill");
  const OpProfileRow* ss = find_op(p, "sum_squares");
  ASSERT_TRUE(mm && lf && fill && ss);
  EXPECT_EQ(mm->calls, 5);
  EXPECT_EQ(lf->calls, 1);
  EXPECT_EQ(fill->calls, 2);
  EXPECT_EQ(ss->calls, 1);
  EXPECT_EQ(mm->flops, 3 * 2.0 * 64 * 48 * 32 + 2 * 2.0 * 64 * 16 * 32);
  EXPECT_EQ(lf->flops, 2.0 * 8 * 24 * 32);
  EXPECT_EQ(fill->flops, 0.0);

  double sum = 0.0;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    EXPECT_GE(p.ops[i].total_ms, 0.0);
    if (i > 0) {
      EXPECT_GE(p.ops[i - 1].total_ms, p.ops[i].total_ms);  // sorted, largest first
    }
    sum += p.ops[i].total_ms;
  }
  EXPECT_GT(mm->total_ms, 0.0);
  EXPECT_GT(p.total_ms, 0.0);
  EXPECT_DOUBLE_EQ(p.total_ms, sum);

  // Two matmul shapes and one linear_forward shape; their times add up to the op's.
  ASSERT_EQ(p.gemms.size(), 3u);
  int64_t mm_calls = 0;
  double mm_ms = 0.0;
  for (const OpProfileRow& g : p.gemms) {
    if (g.op != "matmul") continue;
    mm_calls += g.calls;
    mm_ms += g.total_ms;
    if (g.calls == 3) {
      EXPECT_NE(g.shape.find("m=64 n=48 k=32"), std::string::npos) << g.shape;
    } else {
      EXPECT_EQ(g.calls, 2);
      EXPECT_NE(g.shape.find("m=64 n=16 k=32"), std::string::npos) << g.shape;
    }
  }
  EXPECT_EQ(mm_calls, 5);
  EXPECT_DOUBLE_EQ(mm_ms, mm->total_ms);

  // Reports: both tables and the JSON arrays name the ops.
  const std::string table = format_op_profile(p, 1, p.total_ms * 2);
  EXPECT_NE(table.find("matmul"), std::string::npos);
  EXPECT_NE(table.find("GEMM shapes"), std::string::npos);
  EXPECT_NE(table.find("m=8 n=24 k=32"), std::string::npos);
  const std::string ops_json = op_profile_json_ops(p, 1, 0.0);
  EXPECT_EQ(ops_json.front(), '[');
  EXPECT_EQ(ops_json.back(), ']');
  EXPECT_NE(ops_json.find("\"op\": \"matmul\", \"calls\": 5"), std::string::npos) << ops_json;
  const std::string gemm_json = op_profile_json_gemms(p, 1, 0.0);
  EXPECT_NE(gemm_json.find("\"shape\": "), std::string::npos);
}

// The rotary ops reach the wrapped backend (the same bits) and are counted under their names.
TEST(ProfilingBackend, RotaryOpsAreForwardedAndCounted) {
  auto rng = test_rng();
  auto plain = make_cpu_backend();
  ProfilingBackend prof(make_cpu_backend());
  RotaryParams p;
  p.heads = 2;
  p.query_groups = 1;
  p.head_dim = 4;
  p.rot_dim = 4;
  p.inv_freq = random_tensor({2}, rng);
  p.position_offset = 3;
  Tensor x = random_tensor({5, 2, 16}, rng, DType::kBF16), y = clone(x);
  plain->rotary_forward(x, p);
  prof.rotary_forward(y, p);
  EXPECT_TRUE(bitwise_equal(x, y));
  plain->rotary_backward(x, p);
  prof.rotary_backward(y, p);
  prof.rotary_backward(y, p);
  plain->rotary_backward(x, p);
  EXPECT_TRUE(bitwise_equal(x, y));
  const OpProfile r = prof.report();
  const OpProfileRow* fwd = find_op(r, "rotary_forward");
  const OpProfileRow* bwd = find_op(r, "rotary_backward");
  ASSERT_TRUE(fwd && bwd);
  EXPECT_EQ(fwd->calls, 1);
  EXPECT_EQ(bwd->calls, 2);
}

// The FP8 casts that sum a bias gradient (dy's) get their own row beside the others, with the
// wrapped backend's codes and bias gradient.
TEST(ProfilingBackend, Fp8CastsWithABiasGradientHaveTheirOwnRow) {
  auto rng = test_rng();
  ProfilingBackend prof(make_cpu_backend());
  auto plain = make_cpu_backend();
  const Tensor x = random_tensor({16, 8}, rng);
  auto scalar = [](float v) {
    Tensor t = Tensor::cpu({1});
    t.data_as<float>()[0] = v;
    return t;
  };
  auto quantization = [&] {
    Fp8Quantization s;
    s.format = Fp8Format::kE5M2;
    s.scale = scalar(4.0f);
    s.scale_inv = scalar(0.25f);
    s.amax = scalar(0.0f);
    return s;
  };
  const Fp8Quantization sp = quantization(), sq = quantization();
  Tensor q_prof = Tensor::cpu({16, 8}, DType::kF8E5M2), q_plain = Tensor::cpu({16, 8}, DType::kF8E5M2);
  Tensor none, db_prof = Tensor::cpu({8}), db_plain = Tensor::cpu({8});
  prof.fp8_cast(Fp8Source(x), q_prof, none, sp, none);
  prof.fp8_cast(Fp8Source(x), q_prof, none, sp, db_prof, GradWrite::kOverwrite);
  plain->fp8_cast(Fp8Source(x), q_plain, none, sq, db_plain, GradWrite::kOverwrite);
  EXPECT_TRUE(bitwise_equal(q_prof, q_plain));
  EXPECT_TRUE(bitwise_equal(db_prof, db_plain));
  const OpProfile p = prof.report();
  const OpProfileRow* cast = find_op(p, "fp8_quantize");
  const OpProfileRow* dbias = find_op(p, "fp8_quantize_dbias");
  ASSERT_TRUE(cast && dbias);
  EXPECT_EQ(cast->calls, 1);
  EXPECT_EQ(dbias->calls, 1);
}

TEST(ProfilingBackend, DisabledOpsAreNotCountedAndResetClears) {
  auto rng = test_rng();
  ProfilingBackend prof(make_cpu_backend());
  Tensor t = random_tensor({16, 16}, rng);
  prof.set_enabled(false);
  EXPECT_FALSE(prof.enabled());
  prof.scale(t, 2.0f);
  Tensor tt = Tensor::cpu({16, 16});
  prof.matmul(t, false, t, true, tt, 1.0f, 0.0f);
  EXPECT_TRUE(prof.report().ops.empty());
  EXPECT_TRUE(prof.report().gemms.empty());

  prof.set_enabled(true);
  prof.scale(t, 0.5f);
  prof.scale(t, 0.5f);
  OpProfile p = prof.report();
  ASSERT_EQ(p.ops.size(), 1u);
  EXPECT_EQ(p.ops[0].op, "scale");
  EXPECT_EQ(p.ops[0].calls, 2);

  prof.reset();
  p = prof.report();
  EXPECT_TRUE(p.ops.empty());
  EXPECT_EQ(p.total_ms, 0.0);
}

}  // namespace
}  // namespace megatron::backend
