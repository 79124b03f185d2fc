#include "obs/metrics_jsonl.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "support/error_of.h"
#include "support/paths.h"

namespace megatron::obs {
namespace {

using test::read_file;

std::string json_double(double x) {
  std::string s;
  append_json_double(s, x);
  return s;
}

std::string json_string(std::string_view v) {
  std::string s;
  append_json_string(s, v);
  return s;
}

TEST(MetricsJsonl, ObjectTextForATrainingLine) {
  const MetricFields fields = {{"iteration", 10},
                               {"consumed_samples", int64_t{640}},
                               {"lr", 1.5e-4},
                               {"lm_loss", 10.5},
                               {"grad_norm", std::optional<double>{}},
                               {"loss_scale", std::optional<double>{65536.0}},
                               {"skipped", true},
                               {"run", "gpt \"small\""},
                               {"nothing", nullptr}};
  EXPECT_EQ(metrics_json_object(fields),
            R"({"iteration": 10, "consumed_samples": 640, "lr": 0.00015, "lm_loss": 10.5, "grad_norm": null, )"
            R"("loss_scale": 65536.0, "skipped": true, "run": "gpt \"small\"", "nothing": null})");
  EXPECT_EQ(metrics_json_object({}), "{}");
}

TEST(MetricsJsonl, IntegerTypes) {
  const uint64_t u = 1ull << 40;
  const size_t z = 123;
  const MetricFields fields = {{"i", -3}, {"l", std::numeric_limits<int64_t>::min()}, {"u", u}, {"z", z}};
  EXPECT_EQ(metrics_json_object(fields), R"({"i": -3, "l": -9223372036854775808, "u": 1099511627776, "z": 123})");
}

TEST(MetricsJsonl, DoublesAreShortestAndStayFloats) {
  EXPECT_EQ(json_double(1.5e-4), "0.00015");
  EXPECT_EQ(json_double(0.1), "0.1");
  EXPECT_EQ(json_double(10.5), "10.5");
  EXPECT_EQ(json_double(640.0), "640.0");
  EXPECT_EQ(json_double(0.0), "0.0");
  EXPECT_EQ(json_double(-0.0), "-0.0");
  EXPECT_EQ(json_double(1e20), "1e+20");
  EXPECT_EQ(json_double(1.0 / 3.0), "0.3333333333333333");
  EXPECT_EQ(json_double(std::nan("")), "null");
  EXPECT_EQ(json_double(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json_double(-std::numeric_limits<double>::infinity()), "null");
}

// Every finite double, printed, reads back to the same bits (random bit patterns, extremes,
// subnormals).
TEST(MetricsJsonl, DoublesRoundTripExactly) {
  std::vector<double> values = {std::numeric_limits<double>::max(),
                                std::numeric_limits<double>::min(),
                                std::numeric_limits<double>::denorm_min(),
                                std::numeric_limits<double>::epsilon(),
                                -1e-310,
                                2.5e-4,
                                6.02214076e23,
                                0.1 + 0.2};
  std::mt19937_64 rng(1234);
  while (values.size() < 20000) {
    const uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof(d));
    if (std::isfinite(d)) values.push_back(d);
  }
  for (double d : values) {
    const std::string s = json_double(d);
    const double back = std::strtod(s.c_str(), nullptr);
    ASSERT_EQ(std::memcmp(&back, &d, sizeof(d)), 0) << s;
    ASSERT_LE(s.size(), 25u) << s;
  }
}

TEST(MetricsJsonl, StringEscaping) {
  EXPECT_EQ(json_string("plain"), "\"plain\"");
  EXPECT_EQ(json_string("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(json_string("l1\nl2\r\t"), R"("l1\nl2\r\t")");
  EXPECT_EQ(json_string(std::string("nul\0x\x01\x1f", 7)), R"("nul\u0000x\u0001\u001f")");
  EXPECT_EQ(json_string("/ and \x7f stay"), "\"/ and \x7f stay\"");
  // Valid UTF-8 is copied; bytes that are not UTF-8 become U+FFFD so the line stays JSON.
  EXPECT_EQ(json_string("\xe6\x8d\x9f \xf0\x9f\x98\x80"), "\"\xe6\x8d\x9f \xf0\x9f\x98\x80\"");
  EXPECT_EQ(json_string("bad \xff end"), R"("bad \ufffd end")");
  EXPECT_EQ(json_string("cut \xe6\x8d"), R"("cut \ufffd\ufffd")");
  EXPECT_EQ(json_string("overlong \xc0\xaf"), R"("overlong \ufffd\ufffd")");
  EXPECT_EQ(json_string("surrogate \xed\xa0\x80"), R"("surrogate \ufffd\ufffd\ufffd")");
}

// Each line is on disk as soon as write() returns (no buffering to lose), and reopening the
// file appends, as a resumed run does.
TEST(MetricsJsonl, AppendsLinesImmediately) {
  const std::string path = test::scratch_dir("jsonl_append") + "/metrics.jsonl";
  {
    MetricsJsonlWriter w(path);
    w.write({{"iteration", 1}, {"lm_loss", 11.0}});
    EXPECT_EQ(read_file(path), "{\"iteration\": 1, \"lm_loss\": 11.0}\n");
    w.write({{"iteration", 2}, {"lm_loss", 10.75}});
    EXPECT_EQ(read_file(path), "{\"iteration\": 1, \"lm_loss\": 11.0}\n{\"iteration\": 2, \"lm_loss\": 10.75}\n");
  }
  MetricsJsonlWriter again(path);
  again.write({{"iteration", 3}});
  EXPECT_EQ(read_file(path),
            "{\"iteration\": 1, \"lm_loss\": 11.0}\n{\"iteration\": 2, \"lm_loss\": 10.75}\n{\"iteration\": 3}\n");
}

// A process killed with SIGKILL (no destructors, no exit handlers) keeps every line it wrote.
TEST(MetricsJsonl, KilledProcessKeepsFinishedLines) {
  const std::string path = test::scratch_dir("jsonl_kill") + "/metrics.jsonl";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    MetricsJsonlWriter w(path);
    for (int i = 1; i <= 3; ++i) w.write({{"iteration", i}});
    ::kill(::getpid(), SIGKILL);
    ::_exit(0);  // not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_EQ(read_file(path), "{\"iteration\": 1}\n{\"iteration\": 2}\n{\"iteration\": 3}\n");
}

TEST(MetricsJsonl, ErrorsNameTheFile) {
  const std::string dir = test::scratch_dir("jsonl_errors");
  const std::string file = dir + "/plain_file";
  std::ofstream(file) << "x";
  try {
    MetricsJsonlWriter w(file + "/metrics.jsonl");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--log-jsonl"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
  // A missing directory is not created: it is named, as with any output path.
  const std::string missing = dir + "/missing/run";
  EXPECT_EQ(test::error_of([&] { MetricsJsonlWriter w(missing + "/metrics.jsonl"); }),
            "[--log-jsonl] " + missing + " does not exist (the directory of " + missing + "/metrics.jsonl)");
  EXPECT_FALSE(std::filesystem::exists(dir + "/missing"));
  try {
    MetricsJsonlWriter w(dir);  // a directory
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
  }
  // /dev/full accepts open() and fails every write with ENOSPC.
  if (::access("/dev/full", W_OK) == 0) {
    MetricsJsonlWriter w("/dev/full");
    try {
      w.write({{"iteration", 1}});
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace megatron::obs
