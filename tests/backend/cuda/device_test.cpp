#include "backend/device.h"

#include <gtest/gtest.h>

namespace megatron::backend {
namespace {

TEST(CudaDevice, DescribesEveryVisibleDevice) {
  if (!built_with_cuda() || cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::string text = describe_cuda_devices();
  EXPECT_NE(text.find("cuda:0 "), std::string::npos);
  EXPECT_NE(text.find("sm_"), std::string::npos);
}

}  // namespace
}  // namespace megatron::backend
