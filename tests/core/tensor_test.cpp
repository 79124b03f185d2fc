// Tensor views, host storage and the memory accounting behind them.
#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace megatron {
namespace {

int64_t current(MemoryKind kind) { return memory_tracker(Device::kCPU).snapshot().current[static_cast<int>(kind)]; }

TEST(Tensor, ShapeHelpers) {
  EXPECT_EQ(shape_numel({2, 3, 4}), 24);
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({5, 0}), 0);
  EXPECT_EQ(shape_string({2, 3, 4}), "[2, 3, 4]");
}

TEST(Tensor, CpuTensorIsZeroFilledAndCounted) {
  const int64_t before = current(MemoryKind::kGrads);
  {
    Tensor t = Tensor::cpu({3, 5}, DType::kF32, MemoryKind::kGrads);
    EXPECT_TRUE(t.defined());
    EXPECT_EQ(t.numel(), 15);
    EXPECT_EQ(t.nbytes(), 60);
    EXPECT_EQ(t.dim(-1), 5);
    EXPECT_EQ(t.dim(0), 3);
    EXPECT_EQ(t.describe(), "fp32[3, 5]");
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
    for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(t.data_as<float>()[i], 0.0f);
    EXPECT_EQ(current(MemoryKind::kGrads), before + 60);
    Tensor shared = t.view({15});  // views share the storage: no new bytes
    EXPECT_EQ(current(MemoryKind::kGrads), before + 60);
  }
  EXPECT_EQ(current(MemoryKind::kGrads), before);
  EXPECT_FALSE(Tensor().defined());
}

// The live allocation count (Megatron's mem-allocated-count): one per storage, none per view.
TEST(Tensor, LiveAllocationsCountStoragesNotViews) {
  const auto live = [] { return memory_tracker(Device::kCPU).snapshot().live_allocations; };
  const int64_t before = live();
  {
    Tensor a = Tensor::cpu({4});
    Tensor b = Tensor::cpu({2, 2});
    Tensor v = a.view({2, 2});
    EXPECT_EQ(live(), before + 2);
  }
  EXPECT_EQ(live(), before);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::cpu({4, 3}, DType::kI32);
  for (int32_t i = 0; i < 12; ++i) t.data_as<int32_t>()[i] = i;
  Tensor v = t.view({2, 6});
  EXPECT_EQ(v.data_as<int32_t>()[7], 7);
  Tensor s = t.slice(1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_EQ(s.data_as<int32_t>()[0], 3);
  EXPECT_EQ(s.data_as<int32_t>()[5], 8);
  Tensor f = t.flat_view(5, {2, 2});
  EXPECT_EQ(f.data_as<int32_t>()[0], 5);
  EXPECT_EQ(f.data_as<int32_t>()[3], 8);
  f.data_as<int32_t>()[0] = 100;
  EXPECT_EQ(t.data_as<int32_t>()[5], 100);
  // A slice of a flat view keeps both offsets.
  Tensor ff = t.flat_view(3, {3, 3}).slice(1, 2);
  EXPECT_EQ(ff.data_as<int32_t>()[0], 6);
}

TEST(Tensor, SixteenBitDataAs) {
  Tensor b = Tensor::cpu({4}, DType::kBF16);
  Tensor h = Tensor::cpu({4}, DType::kF16);
  EXPECT_EQ(b.nbytes(), 8);
  EXPECT_NE(b.data_as<uint16_t>(), nullptr);
  EXPECT_NE(h.data_as<uint16_t>(), nullptr);
}

TEST(TensorDeathTest, MisuseIsCaught) {
  Tensor t = Tensor::cpu({2, 3});
  EXPECT_DEATH(t.view({4}), "view");
  EXPECT_DEATH(t.slice(1, 3), "slice");
  EXPECT_DEATH(t.flat_view(4, {3}), "flat_view");
  EXPECT_DEATH(t.data_as<int32_t>(), "data_as");
  EXPECT_DEATH(t.dim(2), "dim");
}

TEST(Tensor, OverlapsComparesByteRanges) {
  Tensor buf = Tensor::cpu({16}, DType::kBF16);
  const Tensor a = buf.flat_view(0, {8}), b = buf.flat_view(8, {8}), c = buf.flat_view(7, {2});
  EXPECT_FALSE(overlaps(a, b));  // adjacent: no shared byte
  EXPECT_TRUE(overlaps(a, c));   // c's first element is a's last
  EXPECT_TRUE(overlaps(c, b));
  EXPECT_TRUE(overlaps(buf, a));
  EXPECT_FALSE(overlaps(buf.flat_view(3, {0}), buf));  // empty
  EXPECT_FALSE(overlaps(Tensor(), buf));               // undefined
  EXPECT_FALSE(overlaps(Tensor::cpu({4}), Tensor::cpu({4})));
}

}  // namespace
}  // namespace megatron
