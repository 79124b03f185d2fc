// The host-memory check of CPU runs (cli/host_memory.h): MemAvailable parsed from /proc/meminfo
// text, the one-line error when the plan does not fit, and `megatron bench` stopping with it
// (instead of being killed by the OOM killer) for a model far larger than any CI machine.
#include <gtest/gtest.h>

#include <string>

#include "cli/host_memory.h"
#include "core/error.h"
#include "support/paths.h"

namespace megatron::cli {
namespace {

TEST(HostMemory, ParsesMemAvailable) {
  const std::string meminfo =
      "MemTotal:       24576000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\nBuffers: 1 kB\n";
  EXPECT_EQ(parse_mem_available(meminfo), std::optional<int64_t>(20000000LL * 1024));
  EXPECT_EQ(parse_mem_available("MemTotal: 1 kB\n"), std::nullopt);
  EXPECT_EQ(parse_mem_available("MemAvailable: lots\n"), std::nullopt);
  EXPECT_EQ(parse_mem_available("MemAvailable: 5 MB\n"), std::nullopt);
  // This machine's file has the line (Linux >= 3.14).
  ASSERT_TRUE(host_available_bytes().has_value());
  EXPECT_GT(*host_available_bytes(), 0);
}

TEST(HostMemory, StopsOnlyWhenThePlanExceedsWhatIsAvailable) {
  const int64_t gib = int64_t{1} << 30;
  EXPECT_NO_THROW(check_host_memory("bench", 10 * gib, 1, 10 * gib));
  EXPECT_NO_THROW(check_host_memory("bench", 100 * gib, 1, std::nullopt));  // unknown: no check
  try {
    check_host_memory("train", 6 * gib, 2, 11 * gib);  // 12 GiB for two ranks
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("train: the memory plan needs 6.00 GiB per rank x 2 rank(s) on this node = 12.00 GiB"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("11.00 GiB is available"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(HostMemory, BenchOfA175BModelOnTheCpuIsOneLineError) {
  const test::CommandResult r = test::run_command(
      test::megatron_binary() + " bench --model gpt3-175b --micro-batch-size 1 --device cpu --bench-iters 1 --warmup-iters 0", true);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("error: bench: the memory plan needs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("GiB is available"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace megatron::cli
