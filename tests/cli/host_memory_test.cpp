// The host-memory check of CPU runs (cli/host_memory.h): MemAvailable parsed from /proc/meminfo
// text, the one-line error when the plan does not fit, and `megatron bench` stopping with it
// (instead of being killed by the OOM killer) for a model far larger than any CI machine.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "ckpt/checkpoint.h"
#include "cli/host_memory.h"
#include "core/error.h"
#include "support/paths.h"
#include "support/plan_models.h"
#include "train/sub_configs.h"

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
      test::megatron_binary() +
          " bench --model gpt3-175b --micro-batch-size 1 --device cpu --bench-iters 1 --warmup-iters 0",
      true);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("error: bench: the memory plan needs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("GiB is available"), std::string::npos) << r.output;
}

// --save's check before the first step: rank 0's device must hold training plus its largest
// tensor gathered whole, and its host two copies of it; 0 / nullopt mean unknown. The 175B
// checkpoint streams through in 2.2 TiB while a save holds ~4.6 GiB of host memory.
TEST(HostMemory, SaveThatCannotBeWrittenIsOneLineBeforeTraining) {
  train::TrainConfig c;
  c.model = test::gpt_plan_model(96, 12288, 96, 2048).config;  // GPT-3 175B
  c.model.padded_vocab_size = 50304;
  c.bf16 = true;
  c.micro_batch_size = 1;
  c.global_batch_size = 1536;
  c.save = "ckpt";
  const ckpt::CheckpointSaveMemory m = ckpt::checkpoint_save_memory(train::checkpoint_run(c), !c.no_save_optim);
  EXPECT_NEAR(static_cast<double>(m.checkpoint_bytes) / 14.0 / 1e9, 174.6, 0.1) << "175B x (2 + 4 + 8) bytes";
  EXPECT_EQ(m.device_bytes, int64_t{50304} * 12288 * 4) << "the fp32 word embedding state";
  EXPECT_EQ(m.host_bytes, 2 * m.device_bytes);
  const int64_t gib = int64_t{1} << 30;
  EXPECT_NO_THROW(cli::check_save_memory(c, 60 * gib, 80 * gib, std::optional<int64_t>(100 * gib)));
  EXPECT_NO_THROW(cli::check_save_memory(c, 60 * gib, 0, std::nullopt)) << "nothing known: nothing checked";
  EXPECT_NO_THROW(cli::check_save_memory(c, 90 * gib, 80 * gib, std::optional<int64_t>(gib)))
      << "training that does not fit by itself is not --save's error";
  auto message_of = [&](int64_t planned, int64_t total, std::optional<int64_t> host) {
    try {
      cli::check_save_memory(c, planned, total, host);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string device = message_of(78 * gib, 80 * gib, std::nullopt);
  EXPECT_EQ(device.rfind("[--save] saving a checkpoint needs 2.3 GiB of rank 0's device memory", 0), 0u) << device;
  const std::string host = message_of(60 * gib, 80 * gib, std::optional<int64_t>(gib));
  EXPECT_EQ(host.rfind("[--save] saving a checkpoint needs 4.6 GiB of rank 0's host memory", 0), 0u) << host;
  EXPECT_EQ(host.find('\n'), std::string::npos);
  EXPECT_EQ(cli::save_memory_line(c),
            " > checkpoint save (--save): every rank writes what it holds of 2276.6 GiB, "
            "with 64.0 MiB of host memory; where not every rank sees the directory, rank 0 "
            "writes 2276.6 GiB one tensor at a time, holding at most 4.6 GiB of host and "
            "2.3 GiB of device memory beyond training while it saves\n");
  c.async_save = true;  // at TP 1 x PP 1 x DP 1 the one rank holds it all
  EXPECT_EQ(m.rank_share_bytes, m.checkpoint_bytes);
  EXPECT_EQ(cli::save_memory_line(c).rfind(" > checkpoint save (--save --async-save): every rank copies what it holds "
                                           "of 2276.6 GiB to host memory (about 2276.6 GiB on the busiest rank)",
                                           0),
            0u)
      << cli::save_memory_line(c);
  c.tensor_model_parallel_size = 8;  // the benchmark's TP 8 x PP 16: 1/128 each, the first and last stages more
  c.pipeline_model_parallel_size = 16;
  const int64_t share = ckpt::checkpoint_save_memory(train::checkpoint_run(c), !c.no_save_optim).rank_share_bytes;
  EXPECT_GT(share, m.checkpoint_bytes / 128);
  EXPECT_LT(share, m.checkpoint_bytes / 128 + int64_t{50304} * 12288 * 14 / 8 + 1) << "+ the embedding's 1/8";
  c.tensor_model_parallel_size = c.pipeline_model_parallel_size = 1;
  c.async_save = false;
  c.ckpt_fully_parallel_save = false;  // --no-ckpt-fully-parallel-save
  EXPECT_EQ(cli::save_memory_line(c),
            " > checkpoint save (--save): rank 0 writes 2276.6 GiB one tensor at a time, "
            "holding at most 4.6 GiB of host and 2.3 GiB of device memory beyond training "
            "while it saves\n");
}

}  // namespace
}  // namespace megatron::cli
