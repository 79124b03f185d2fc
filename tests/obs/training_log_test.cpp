#include "obs/training_log.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <regex>

namespace megatron::obs {
namespace {

// Written from the field table of docs/megatron-formats.md, "The iteration line", not from the
// formatter: every field is " name: value |", integers right-aligned, E-format numbers
// d.ddddddE+XX.
const std::regex kLineRegex(R"(^( \[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{6}\])?)"
                            R"( iteration +(\d+)/ +(\d+) \|)"
                            R"( consumed samples: +(\d+) \|)"
                            R"( elapsed time per iteration \(ms\): (\d+\.\d) \|)"
                            R"(( throughput per GPU \(TFLOP/s/GPU\): (\d+\.\d) \|)?)"
                            R"( learning rate: (\d\.\d+E[+-]\d{2,3}) \|)"
                            R"( global batch size: +(\d+) \|)"
                            R"(( lm loss: (\d\.\d{6}E[+-]\d{2,3}) \|)?)"
                            R"( loss scale: (\d+\.\d) \|)"
                            R"(( grad norm: (\d+\.\d{3}) \|)?)"
                            R"(( num zeros: (\d+\.\d) \|)?)"
                            R"(( params norm: (\d+\.\d{3}) \|)?)"
                            R"( number of skipped iterations: +(\d+) \|)"
                            R"( number of nan iterations: +(\d+) \|)"
                            R"(( tokens per second: (\d+) \|)?)"
                            R"(( ETA: (\d+):(\d\d):(\d\d) \|)?$)");

obs::IterationLog full_log() {
  obs::IterationLog l;
  l.timestamp = "2026-01-02 03:04:05.123456";
  l.iteration = 10;
  l.train_iters = 3125000;
  l.consumed_samples = 640;
  l.elapsed_ms = 1234.5;
  l.tflops_per_gpu = 123.4;
  l.learning_rate = 1.5e-4;
  l.global_batch_size = 64;
  l.losses = {{"lm loss", 10.54321}};
  l.loss_scale = 4294967296.0;
  l.grad_norm = 12.345;
  l.num_zeros = 7;
  l.params_norm = 250.125;
  l.skipped_iterations = 1;
  l.nan_iterations = 0;
  l.tokens_per_second = 53084.4;
  l.eta_seconds = 1111.2;
  return l;
}

TEST(TrainingLog, C23LineMatchesMegatronExampleExactly) {
  obs::IterationLog l = full_log();
  l.num_zeros.reset();
  l.params_norm.reset();
  l.skipped_iterations = 0;
  l.tokens_per_second.reset();
  l.eta_seconds.reset();
  // The example line of docs/megatron-formats.md, "The iteration line" (classic + --log-throughput).
  EXPECT_EQ(obs::format_iteration_line(l, obs::LogStyle::kC23),
            " iteration       10/ 3125000 | consumed samples:          640 | elapsed time per iteration (ms): "
            "1234.5 | throughput per GPU (TFLOP/s/GPU): 123.4 | learning rate: 1.500E-04 | global batch size:    "
            "64 | lm loss: 1.054321E+01 | loss scale: 4294967296.0 | grad norm: 12.345 | number of skipped "
            "iterations:   0 | number of nan iterations:   0 |");
}

TEST(TrainingLog, HeadLineWithAllFieldsParses) {
  const std::string line = obs::format_iteration_line(full_log());
  std::smatch m;
  ASSERT_TRUE(std::regex_match(line, m, kLineRegex)) << line;
  EXPECT_EQ(m[1].str(), " [2026-01-02 03:04:05.123456]");
  EXPECT_EQ(m[2].str(), "10");
  EXPECT_EQ(m[3].str(), "3125000");
  EXPECT_EQ(m[4].str(), "640");
  EXPECT_EQ(m[5].str(), "1234.5");
  EXPECT_EQ(m[7].str(), "123.4");
  EXPECT_EQ(m[8].str(), "1.500000E-04");  // HEAD: {:.6E}
  EXPECT_EQ(m[9].str(), "64");
  EXPECT_EQ(m[11].str(), "1.054321E+01");
  EXPECT_EQ(m[12].str(), "4294967296.0");
  EXPECT_EQ(m[14].str(), "12.345");
  EXPECT_EQ(m[16].str(), "7.0");
  EXPECT_EQ(m[18].str(), "250.125");
  EXPECT_EQ(m[19].str(), "1");
  EXPECT_EQ(m[20].str(), "0");
  EXPECT_EQ(m[22].str(), "53084");
  EXPECT_EQ(m[24].str() + ":" + m[25].str() + ":" + m[26].str(), "0:18:31");
  // Fixed widths: {:8d}, {:12d}, {:5d}, {:3d}.
  EXPECT_NE(line.find(" iteration       10/ 3125000 |"), std::string::npos);
  EXPECT_NE(line.find(" consumed samples:          640 |"), std::string::npos);
  EXPECT_NE(line.find(" global batch size:    64 |"), std::string::npos);
  EXPECT_NE(line.find(" number of skipped iterations:   1 |"), std::string::npos);
  // Our additions come after Megatron's last field.
  EXPECT_LT(line.find("number of nan iterations"), line.find("tokens per second"));
}

TEST(TrainingLog, MinimalLineParsesWithoutOptionalFields) {
  obs::IterationLog l;
  l.iteration = 1;
  l.train_iters = 100;
  l.consumed_samples = 8;
  l.elapsed_ms = 87.04;
  l.learning_rate = 0.0;
  l.global_batch_size = 8;
  l.losses = {{"lm loss", 10.86954}};
  l.loss_scale = 1.0;
  const std::string line = obs::format_iteration_line(l);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(line, m, kLineRegex)) << line;
  EXPECT_FALSE(m[1].matched);
  EXPECT_FALSE(m[6].matched);
  EXPECT_FALSE(m[13].matched);
  EXPECT_FALSE(m[15].matched);
  EXPECT_FALSE(m[17].matched);
  EXPECT_FALSE(m[21].matched);
  EXPECT_FALSE(m[23].matched);
  EXPECT_EQ(m[5].str(), "87.0");
  EXPECT_EQ(m[8].str(), "0.000000E+00");
  EXPECT_EQ(m[12].str(), "1.0");
}

// --log-energy (Megatron HEAD's training_log): the two fields right after throughput, .1f each.
TEST(TrainingLog, EnergyAndPowerFollowThroughput) {
  obs::IterationLog l = full_log();
  l.energy_per_gpu_j = 812.34;
  l.power_per_gpu_w = 658.04;
  const std::string line = obs::format_iteration_line(l);
  EXPECT_NE(line.find("| throughput per GPU (TFLOP/s/GPU): 123.4 | energy per GPU (J/iter/GPU): 812.3 | power per "
                      "GPU (W/GPU): 658.0 | learning rate: 1.500000E-04 |"),
            std::string::npos)
      << line;
  EXPECT_EQ(obs::format_iteration_line(full_log()).find("energy"), std::string::npos);
}

TEST(TrainingLog, LossShownOnlyWhenPositiveC23OrNonNegativeHead) {
  obs::IterationLog l;
  l.iteration = 5;
  l.train_iters = 5;
  l.losses = {{"lm loss", 0.0}};
  EXPECT_EQ(obs::format_iteration_line(l, obs::LogStyle::kC23).find("lm loss"), std::string::npos);
  EXPECT_NE(obs::format_iteration_line(l, obs::LogStyle::kHead).find("lm loss: 0.000000E+00 |"), std::string::npos);
  l.losses = {{"lm loss", std::numeric_limits<double>::quiet_NaN()}};
  EXPECT_EQ(obs::format_iteration_line(l, obs::LogStyle::kHead).find("lm loss"), std::string::npos);
}

TEST(TrainingLog, C23NumZerosAndNoTimestamp) {
  obs::IterationLog l = full_log();
  const std::string line = obs::format_iteration_line(l, obs::LogStyle::kC23);
  EXPECT_EQ(line.find('['), std::string::npos);
  EXPECT_NE(line.find(" num zeros: 7.0 |"), std::string::npos);
  EXPECT_NE(line.find(" learning rate: 1.500E-04 |"), std::string::npos);
}

TEST(TrainingLog, PythonEFormat) {
  EXPECT_EQ(obs::py_format_e(10.54321, 6), "1.054321E+01");
  EXPECT_EQ(obs::py_format_e(4.438e-07, 3), "4.438E-07");
  EXPECT_EQ(obs::py_format_e(0.0, 6), "0.000000E+00");
  EXPECT_EQ(obs::py_format_e(-0.0, 3), "-0.000E+00");
  EXPECT_EQ(obs::py_format_e(1e100, 6), "1.000000E+100");
  EXPECT_EQ(obs::py_format_e(1e-300, 3), "1.000E-300");
  EXPECT_EQ(obs::py_format_e(9.9999995, 6), "9.999999E+00");  // binary value is just below the tie
  EXPECT_EQ(obs::py_format_e(9.9999996, 6), "1.000000E+01");  // carries into the exponent
  EXPECT_EQ(obs::py_format_e(-2.5e-5, 6), "-2.500000E-05");
  EXPECT_EQ(obs::py_format_e(std::numeric_limits<double>::infinity(), 6), "INF");
  EXPECT_EQ(obs::py_format_e(-std::numeric_limits<double>::infinity(), 6), "-INF");
  EXPECT_EQ(obs::py_format_e(-std::numeric_limits<double>::quiet_NaN(), 6), "NAN");
  EXPECT_EQ(obs::py_format_f(std::numeric_limits<double>::quiet_NaN(), 3), "nan");
  EXPECT_EQ(obs::py_format_f(0.125, 2), "0.12");  // round-half-even on the exact binary value, as Python
  EXPECT_EQ(obs::py_format_f(4294967296.0, 1), "4294967296.0");
}

TEST(TrainingLog, PythonRepr) {
  EXPECT_EQ(obs::py_repr(1234.5673828125), "1234.5673828125");
  EXPECT_EQ(obs::py_repr(0.0), "0.0");
  EXPECT_EQ(obs::py_repr(-0.0), "-0.0");
  EXPECT_EQ(obs::py_repr(7.0), "7.0");
  EXPECT_EQ(obs::py_repr(1e16), "1e+16");
  EXPECT_EQ(obs::py_repr(1e-5), "1e-05");
  EXPECT_EQ(obs::py_repr(0.0001), "0.0001");
  EXPECT_EQ(obs::py_repr(123456789012345.6), "123456789012345.6");
  EXPECT_EQ(obs::py_repr(1.5e300), "1.5e+300");
  EXPECT_EQ(obs::py_repr(std::ldexp(1.0, -30)), "9.313225746154785e-10");
  EXPECT_EQ(obs::py_repr(0.1 + 0.2), "0.30000000000000004");
}

TEST(TrainingLog, Eta) {
  EXPECT_EQ(obs::format_eta(0), "0:00:00");
  EXPECT_EQ(obs::format_eta(59.6), "0:01:00");
  EXPECT_EQ(obs::format_eta(3600 * 31 + 129), "31:02:09");
  EXPECT_EQ(obs::format_eta(-1), "-:--:--");
}

TEST(TrainingLog, TimestampShape) {
  const std::string ts = obs::format_timestamp(std::chrono::system_clock::now());
  EXPECT_TRUE(std::regex_match(ts, std::regex(R"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{6})"))) << ts;
}

TEST(TrainingLog, ValidationBlock) {
  const std::string block = obs::format_validation_block("iteration 1000", {{"lm loss", 3.456789}});
  const std::string line = " validation loss at iteration 1000 | lm loss value: 3.456789E+00 | lm loss PPL: " +
                           obs::py_format_e(std::exp(3.456789), 6) + " | ";
  EXPECT_EQ(obs::py_format_e(std::exp(3.456789), 6), "3.171498E+01");
  const std::string dashes(line.size() + 1, '-');
  EXPECT_EQ(block, dashes + "\n" + line + "\n" + dashes + "\n");
}

TEST(TrainingLog, ValidationPerplexityCapsAtExp20) {
  const std::string block = obs::format_validation_block("iteration 5 on test set", {{"lm loss", 25.0}});
  EXPECT_NE(block.find("lm loss value: 2.500000E+01 | lm loss PPL: 4.851652E+08 | "), std::string::npos) << block;
  const std::string nan_block =
      obs::format_validation_block("iteration 5", {{"lm loss", std::numeric_limits<double>::quiet_NaN()}});
  // Python: min(20, nan) is 20.
  EXPECT_NE(nan_block.find("lm loss value: NAN | lm loss PPL: 4.851652E+08 | "), std::string::npos) << nan_block;
}

TEST(TrainingLog, MemoryLine) {
  EXPECT_EQ(obs::format_memory_line(3, 10, 1294532608, 2147483648, 3221225472, 3321888768),
            "[Rank 3] (after 10 iterations) memory (MB) | allocated: 1234.5625 | max allocated: 2048.0 | "
            "reserved: 3072.0 | max reserved: 3168.0");
}

}  // namespace
}  // namespace megatron::obs
