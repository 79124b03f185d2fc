// host_name against the kernel's own record of it (/proc/sys/kernel/hostname).
#include "core/host_name.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace megatron {
namespace {

TEST(HostName, IsTheKernelsHostName) {
  std::ifstream in("/proc/sys/kernel/hostname");
  std::string expected;
  if (!std::getline(in, expected) || expected.empty()) GTEST_SKIP() << "no /proc/sys/kernel/hostname";
  EXPECT_EQ(host_name("fallback"), expected);
}

}  // namespace
}  // namespace megatron
