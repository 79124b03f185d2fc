// The backend's AdamW and zero count against optim/adamw.h (the hand-checked host reference),
// bit for bit over several steps and weight decays.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <span>
#include <vector>

#include "backend/ops.h"
#include "core/dtype.h"
#include "optim/adamw.h"

namespace megatron::backend {
namespace {

TEST(CpuOptimizer, AdamwMatchesTheHostReferenceBitForBit) {
  auto be = make_cpu_backend();
  const int64_t n = 50000;
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  Tensor p = be->empty({n}, DType::kF32, MemoryKind::kOther), g = be->empty({n}, DType::kF32, MemoryKind::kOther);
  Tensor m = be->empty({n}, DType::kF32, MemoryKind::kOther), v = be->empty({n}, DType::kF32, MemoryKind::kOther);
  std::vector<float> rp(n), rm(n, 0.0f), rv(n, 0.0f);
  for (int64_t i = 0; i < n; ++i) rp[i] = p.data_as<float>()[i] = normal(rng);
  for (int64_t step = 1; step <= 4; ++step) {
    for (int64_t i = 0; i < n; ++i) g.data_as<float>()[i] = normal(rng) * 0.1f;
    AdamWStep s;
    s.lr = 1e-3f * static_cast<float>(step);
    s.weight_decay = step % 2 ? 0.1f : 0.0f;
    s.step = step;
    s.grad_scale = step == 3 ? 0.37f : 1.0f;  // a clipping step
    be->adamw_update(p, g, m, v, s);
    optim::AdamWHyper h;
    h.grad_scale = s.grad_scale;
    h.lr = s.lr;
    h.weight_decay = s.weight_decay;
    h.step = step;
    optim::adamw_update(rp, std::span<const float>(g.data_as<float>(), n), rm, rv, h);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(p.data_as<float>()[i], rp[i]) << "step " << step << " element " << i;
      ASSERT_EQ(m.data_as<float>()[i], rm[i]);
      ASSERT_EQ(v.data_as<float>()[i], rv[i]);
    }
  }
  // grad_scale is exactly "scale the gradients, then step": the same fp32 product.
  {
    Tensor p2 = be->empty({n}, DType::kF32, MemoryKind::kOther), m2 = be->empty({n}, DType::kF32, MemoryKind::kOther);
    Tensor v2 = be->empty({n}, DType::kF32, MemoryKind::kOther), g2 = be->empty({n}, DType::kF32, MemoryKind::kOther);
    be->copy(p, p2);
    be->copy(m, m2);
    be->copy(v, v2);
    be->copy(g, g2);
    AdamWStep s;
    s.lr = 1e-3f;
    s.step = 5;
    s.grad_scale = 0.123f;
    be->adamw_update(p, g, m, v, s);
    be->scale(g2, 0.123f);
    s.grad_scale = 1.0f;
    be->adamw_update(p2, g2, m2, v2, s);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(p.data_as<float>()[i], p2.data_as<float>()[i]) << "element " << i;
  }
  g.data_as<float>()[3] = 0.0f;
  g.data_as<float>()[7] = 0.0f;
  EXPECT_EQ(be->count_zeros(g), 2);
}

// Segments (offset, numel, decay) with gaps between them: each segment steps exactly as the host
// reference with its own weight decay, the bf16 copy is param rounded, and the gaps (and the
// copy's gaps) are left alone.
TEST(CpuOptimizer, AdamwSegmentsStepEachSegmentAndWriteTheModelCopy) {
  auto be = make_cpu_backend();
  const int64_t n = 1000;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  Tensor p = be->empty({n}, DType::kF32, MemoryKind::kOther), g = be->empty({n}, DType::kF32, MemoryKind::kOther);
  Tensor m = be->empty({n}, DType::kF32, MemoryKind::kOther), v = be->empty({n}, DType::kF32, MemoryKind::kOther);
  Tensor copy = be->empty({n}, DType::kBF16, MemoryKind::kOther);
  be->fill(copy, 7.0f);
  const std::vector<int64_t> rows = {0, 300, 1, 300, 5, 0, 310, 400, 1, 900, 100, 0};  // gaps [305, 310), [710, 900)
  Tensor seg = Tensor::cpu({4, 3}, DType::kI64);
  std::copy(rows.begin(), rows.end(), seg.data_as<int64_t>());
  std::vector<float> rp(n), rm(n, 0.0f), rv(n, 0.0f);
  for (int64_t i = 0; i < n; ++i) rp[i] = p.data_as<float>()[i] = normal(rng);
  const std::vector<float> p0 = rp;
  for (int64_t step = 1; step <= 3; ++step) {
    for (int64_t i = 0; i < n; ++i) g.data_as<float>()[i] = normal(rng) * 0.1f;
    AdamWStep s;
    s.lr = 1e-3f;
    s.weight_decay = 0.1f;
    s.step = step;
    be->adamw_update_segments(p, g, m, v, seg, s, copy);
    for (size_t k = 0; k < rows.size(); k += 3) {
      optim::AdamWHyper h;
      h.lr = s.lr;
      h.weight_decay = rows[k + 2] ? 0.1f : 0.0f;
      h.step = step;
      const auto off = static_cast<size_t>(rows[k]), len = static_cast<size_t>(rows[k + 1]);
      optim::adamw_update(std::span<float>(rp).subspan(off, len), std::span<const float>(g.data_as<float>() + off, len),
                          std::span<float>(rm).subspan(off, len), std::span<float>(rv).subspan(off, len), h);
    }
  }
  auto in_gap = [](int64_t i) { return (i >= 305 && i < 310) || (i >= 710 && i < 900); };
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(p.data_as<float>()[i], rp[i]) << "element " << i;
    ASSERT_EQ(m.data_as<float>()[i], rm[i]) << "element " << i;
    if (in_gap(i)) {
      ASSERT_EQ(rp[i], p0[i]) << "gap element " << i << " changed";
      ASSERT_EQ(bf16_to_float(copy.data_as<uint16_t>()[i]), 7.0f) << "gap element " << i << " of the copy";
    } else {
      ASSERT_EQ(copy.data_as<uint16_t>()[i], float_to_bf16(rp[i])) << "copy element " << i;
    }
  }
  // An overlapping table is a caller bug: MT_CHECK stops the process. ("threadsafe": the
  // backend has started OpenMP threads, which a plain fork() would not carry over.)
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  seg.data_as<int64_t>()[3] = 200;
  AdamWStep s;
  s.step = 4;
  Tensor none;
  EXPECT_DEATH(be->adamw_update_segments(p, g, m, v, seg, s, none), "overlapping");
}

}  // namespace
}  // namespace megatron::backend
