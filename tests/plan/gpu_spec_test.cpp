// plan/gpu_spec: the driver's device names map to the planner's GPU kinds, and only those it has
// figures for (an H100 PCIe runs at other clocks and power than the SXM part: none).
#include "plan/gpu_spec.h"

#include <gtest/gtest.h>

namespace megatron::plan {
namespace {

TEST(GpuSpec, DeviceNamesMapToPlannerKinds) {
  EXPECT_EQ(gpu_for_device_name("NVIDIA H100 80GB HBM3"), std::optional<std::string>("h100-80gb"));
  EXPECT_EQ(gpu_for_device_name("NVIDIA H100 SXM5 80GB"), std::optional<std::string>("h100-80gb"));
  EXPECT_EQ(gpu_for_device_name("NVIDIA H200"), std::optional<std::string>("h200-141gb"));
  EXPECT_EQ(gpu_for_device_name("NVIDIA A100-SXM4-40GB"), std::optional<std::string>("a100-40gb"));
  EXPECT_EQ(gpu_for_device_name("NVIDIA A100-SXM4-80GB"), std::optional<std::string>("a100-80gb"));
  EXPECT_EQ(gpu_for_device_name("Tesla V100-SXM2-32GB"), std::optional<std::string>("v100-32gb"));
  EXPECT_EQ(gpu_for_device_name("Tesla V100-SXM2-16GB"), std::optional<std::string>("v100-16gb"));
  EXPECT_FALSE(gpu_for_device_name("NVIDIA H100 PCIe").has_value());
  EXPECT_FALSE(gpu_for_device_name("NVIDIA GH200 480GB").has_value());
  EXPECT_FALSE(gpu_for_device_name("NVIDIA H200 NVL").has_value());
  EXPECT_FALSE(gpu_for_device_name("NVIDIA H100 NVL").has_value());
  EXPECT_FALSE(gpu_for_device_name("NVIDIA A100 80GB PCIe").has_value());
  EXPECT_FALSE(gpu_for_device_name("NVIDIA A100-PCIE-40GB").has_value());
  EXPECT_FALSE(gpu_for_device_name("NVIDIA H100 80GB HBM3 MIG 1g.10gb").has_value());
  EXPECT_FALSE(gpu_for_device_name("NVIDIA GeForce RTX 4090").has_value());
  for (const GpuSpec& g : gpu_specs()) EXPECT_EQ(find_gpu(g.name).name, g.name);
}

}  // namespace
}  // namespace megatron::plan
