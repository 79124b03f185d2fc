// The backend's AdamW and zero count against optim/adamw.h (the hand-checked host reference),
// bit for bit over several steps and weight decays.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/ops.h"
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
    be->adamw_update(p, g, m, v, s);
    optim::AdamWHyper h;
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
  g.data_as<float>()[3] = 0.0f;
  g.data_as<float>()[7] = 0.0f;
  EXPECT_EQ(be->count_zeros(g), 2);
}

}  // namespace
}  // namespace megatron::backend
