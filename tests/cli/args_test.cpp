#include "cli/args.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

#include "core/error.h"

namespace megatron::cli {
namespace {

Args make_args() {
  Args a("megatron test");
  a.option("--workers", "N", "workers", "1");
  a.option("--seed", "S", "seed");
  a.option("--lr", "LR", "lr");
  a.flag("--append-eod", "append eod");
  a.list("--data-path", "PATH", "paths");
  a.list("--rampup-batch-size", "N", "ramp", 3);
  a.positional("prefix", "a prefix", false);
  return a;
}

std::string error_of(Args& a, const std::vector<std::string>& argv) {
  try {
    a.parse(argv);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Args, ParsesValuesFlagsListsAndPositionals) {
  Args a = make_args();
  ASSERT_TRUE(a.parse({"pfx", "--workers", "4", "--append-eod", "--data-path", "0.3", "a", "0.7", "b",
                       "--rampup-batch-size", "16", "16", "5_000_000", "--lr=-1.5e-4"}));
  EXPECT_EQ(a.get_int("--workers"), 4);
  EXPECT_TRUE(a.get_flag("--append-eod"));
  EXPECT_EQ(a.get_list("--data-path"), (std::vector<std::string>{"0.3", "a", "0.7", "b"}));
  EXPECT_EQ(a.get_int_list("--rampup-batch-size"), (std::vector<int64_t>{16, 16, 5000000}));
  EXPECT_DOUBLE_EQ(a.get_double("--lr"), -1.5e-4);
  EXPECT_EQ(a.get_string("prefix"), "pfx");
  EXPECT_FALSE(a.given("--seed"));
}

TEST(Args, DefaultsApplyWhenAbsent) {
  Args a = make_args();
  ASSERT_TRUE(a.parse({}));
  EXPECT_EQ(a.get_int("--workers"), 1);
  EXPECT_FALSE(a.get_flag("--append-eod"));
  EXPECT_TRUE(a.get_list("--data-path").empty());
}

TEST(Args, SettingsListEveryDeclaredFlagWithItsValue) {
  Args a = make_args();
  ASSERT_TRUE(a.parse({"pfx", "--lr=3e-4", "--data-path", "0.3", "a", "0.7", "b", "--append-eod"}));
  const std::vector<Args::Setting> s = a.settings();
  ASSERT_EQ(s.size(), 6u);  // the positional left out
  auto expect = [&](size_t i, const char* name, const char* metavar, bool given, const char* value) {
    EXPECT_EQ(s[i].name, name);
    EXPECT_EQ(s[i].metavar, metavar);
    EXPECT_EQ(s[i].given, given) << name;
    EXPECT_EQ(s[i].value, value) << name;
  };
  expect(0, "--workers", "N", false, "1");  // the default
  expect(1, "--seed", "S", false, "");
  expect(2, "--lr", "LR", true, "3e-4");
  expect(3, "--append-eod", "", true, "1");
  expect(4, "--data-path", "PATH", true, "0.3 a 0.7 b");
  expect(5, "--rampup-batch-size", "N", false, "");
  const std::vector<int> arities = {1, 1, 1, 0, -1, 3};
  for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(s[i].arity, arities[i]) << s[i].name;
}

TEST(Args, HelpReturnsFalse) {
  Args a = make_args();
  EXPECT_FALSE(a.parse({"--help"}));
  EXPECT_NE(a.usage().find("--workers N"), std::string::npos);
}

TEST(Args, BadInputNamesTheFlag) {
  Args a = make_args();
  EXPECT_EQ(error_of(a, {"--wokers", "2"}), "[--wokers] unknown flag for megatron test; did you mean --workers?");
  EXPECT_EQ(error_of(a, {"--deepspeed"}), "[--deepspeed] unknown flag for megatron test (see --help)");
  ASSERT_EQ(error_of(a, {"--workers", "x"}), "");  // values are typed when read
  try {
    a.get_int("--workers");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[--workers] expected an integer, got 'x'");
  }
  EXPECT_EQ(error_of(a, {"--workers"}), "[--workers] expected a value");
  EXPECT_EQ(error_of(a, {"--rampup-batch-size", "1", "2"}), "[--rampup-batch-size] expected 3 values, got 2");
  EXPECT_EQ(error_of(a, {"--append-eod=1"}), "[--append-eod] takes no value");
  {
    Args r = a;
    ASSERT_TRUE(r.parse({"--seed", "1", "--seed", "2"}));
    EXPECT_EQ(r.get_int("--seed"), 2) << "the last value wins, as in argparse";
  }
  EXPECT_EQ(error_of(a, {"a", "b"}), "megatron test: unexpected argument 'b'");
  Args b("megatron req");
  b.option("--input", "F", "input", std::nullopt, true);
  EXPECT_EQ(error_of(b, {}), "[--input] is required for megatron req");
}

TEST(Args, UnknownFlagsNameTheClosestDeclaredOne) {
  Args a("megatron test");
  a.option("--lr-warmup-iters", "N", "warmup").option("--lr-decay-iters", "N", "decay").flag("--swiglu", "swiglu");
  auto err = [&](const std::vector<std::string>& argv) { return error_of(a, argv); };
  EXPECT_EQ(err({"--lr-warmup-iter", "5"}),
            "[--lr-warmup-iter] unknown flag for megatron test; did you mean --lr-warmup-iters?");
  // '_' reads as '-'; adjacent letters swapped are one edit.
  EXPECT_EQ(err({"--lr_decay_iters", "5"}),
            "[--lr_decay_iters] unknown flag for megatron test; did you mean --lr-decay-iters?");
  EXPECT_EQ(err({"--swilgu"}), "[--swilgu] unknown flag for megatron test; did you mean --swiglu?");
  // Too far from every name: no guess (2 edits on a short name).
  EXPECT_EQ(err({"--swig"}), "[--swig] unknown flag for megatron test (see --help)");
}

TEST(Args, EveryProblemAtOnceOneLineEach) {
  Args a = make_args();
  // The unknown flag's value is skipped, not read as a second positional; the flags in
  // error read as not given afterwards (their defaults), never as an empty value.
  const std::string all =
      error_of(a, {"x", "--wokers", "2", "--lr", "--append-eod=1", "--rampup-batch-size", "1", "--seed", "3", "y"});
  EXPECT_EQ(all,
            "[--wokers] unknown flag for megatron test; did you mean --workers?\n"
            "[--lr] expected a value\n"
            "[--append-eod] takes no value\n"
            "[--rampup-batch-size] expected 3 values, got 1\n"
            "megatron test: unexpected argument 'y'");
  EXPECT_FALSE(a.given("--lr"));
  EXPECT_THROW(a.get_string("--lr"), Error);  // absent without a default, not an empty entry
  EXPECT_FALSE(a.get_flag("--append-eod"));
  EXPECT_TRUE(a.get_list("--rampup-batch-size").empty());
  EXPECT_EQ(a.get_int("--seed"), 3);
  std::vector<std::string> errors;
  EXPECT_TRUE(a.parse({"--lr", "--seed"}, &errors));
  EXPECT_EQ(errors, (std::vector<std::string>{"[--lr] expected a value", "[--seed] expected a value"}));
}

TEST(Args, PythonIntRules) {
  EXPECT_EQ(parse_int("5_000_000", "x"), 5000000);
  EXPECT_EQ(parse_int(" -12 ", "x"), -12);
  EXPECT_THROW(parse_int("1__0", "x"), Error);
  EXPECT_THROW(parse_int("_1", "x"), Error);
  EXPECT_THROW(parse_int("1.0", "x"), Error);
  EXPECT_THROW(parse_int("99999999999999999999", "x"), Error);
  EXPECT_DOUBLE_EQ(parse_double("1e-5", "x"), 1e-5);
  EXPECT_THROW(parse_double("0x10", "x"), Error);
  EXPECT_THROW(parse_double("1.5abc", "x"), Error);
}

// No flag means anything by nan or inf, and a double overflows to inf: all refused, naming the
// flag. An underflow reads as Python's float() does (1e-400 is 0.0).
TEST(Args, RealsAreFinite) {
  for (const char* bad : {"nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e400", "-1e400", "1_0e400"}) {
    try {
      parse_double(bad, "--lr");
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), std::string("[--lr] expected a finite number, got '") + bad + "'");
    }
  }
  EXPECT_EQ(parse_double("1e-400", "x"), 0.0);
  EXPECT_DOUBLE_EQ(parse_double("1e300", "x"), 1e300);
  EXPECT_DOUBLE_EQ(parse_double("-0.5", "x"), -0.5);
  EXPECT_EQ(parse_int("9223372036854775807", "x"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(parse_int("-9223372036854775808", "x"), std::numeric_limits<int64_t>::min());
  EXPECT_THROW(parse_int("9223372036854775808", "x"), Error);
}

TEST(Args, RangesNameTheFlagAndTheValue) {
  Args a = make_args();
  ASSERT_TRUE(a.parse({"--workers", "0", "--seed", "9", "--lr", "2"}));
  auto error = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error([&] { a.get_int("--workers", 1); }), "[--workers] must be positive, got 0");
  EXPECT_EQ(error([&] { a.get_int("--seed", 0, 8); }), "[--seed] must be between 0 and 8, got 9");
  EXPECT_EQ(a.get_int("--seed", 0), 9);
  EXPECT_EQ(error([&] { check_int_range("--n", -1, 0); }), "[--n] must not be negative, got -1");
  EXPECT_EQ(error([&] { a.get_double("--lr", {0.0, 1.0, false, true}); }), "[--lr] must be in [0, 1), got '2'");
  EXPECT_EQ(error([&] { a.get_double("--lr", {2.0, 3.0, true, false}); }), "[--lr] must be in (2, 3], got '2'");
  EXPECT_EQ(a.get_double("--lr", RealRange{}), 2.0);
  EXPECT_EQ(to_string(RealRange{}), "[0, 3.40282e+38]");
}

}  // namespace
}  // namespace megatron::cli
