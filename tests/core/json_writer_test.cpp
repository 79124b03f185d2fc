// JsonWriter: exact text for compact and indented layouts (indent=2 is Python's
// json.dumps(obj, indent=2) layout), escaping, strict UTF-8, and doubles that round-trip
// bit for bit; simdjson (through ckpt::reformat_json) parses what it writes.
#include "core/json_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "ckpt/checkpoint_io.h"
#include "core/error.h"

namespace megatron {
namespace {

std::string sample(int indent) {
  JsonWriter w(indent);
  w.begin_object();
  w.key("name").value("gpt");
  w.key("layers").value(int64_t{24});
  w.key("lr").value(6e-5);
  w.key("bf16").value(true);
  w.key("none").null();
  w.key("sizes").begin_array().value(1).value(2).begin_object().key("a").value(false).end_object().end_array();
  w.key("empty_obj").begin_object().end_object();
  w.key("empty_arr").begin_array().end_array();
  w.end_object();
  return w.take();
}

TEST(JsonWriter, CompactLayout) {
  EXPECT_EQ(sample(0), R"({"name":"gpt","layers":24,"lr":6e-05,"bf16":true,"none":null,"sizes":[1,2,{"a":false}],)"
                       R"("empty_obj":{},"empty_arr":[]})");
}

TEST(JsonWriter, IndentedLayoutIsPythonIndent2) {
  // json.dumps({...}, indent=2) for the same object.
  const char* expected = R"({
  "name": "gpt",
  "layers": 24,
  "lr": 6e-05,
  "bf16": true,
  "none": null,
  "sizes": [
    1,
    2,
    {
      "a": false
    }
  ],
  "empty_obj": {},
  "empty_arr": []
})";
  EXPECT_EQ(sample(2), expected);
}

TEST(JsonWriter, ScalarsAtTopLevel) {
  EXPECT_EQ(JsonWriter().value(int64_t{-7}).take(), "-7");
  EXPECT_EQ(JsonWriter().value("x").take(), "\"x\"");
  EXPECT_EQ(JsonWriter().null().take(), "null");
  EXPECT_EQ(JsonWriter().value(std::numeric_limits<int64_t>::min()).take(), "-9223372036854775808");
  EXPECT_EQ(JsonWriter().value(std::numeric_limits<uint64_t>::max()).take(), "18446744073709551615");
  JsonWriter w;
  EXPECT_FALSE(w.complete());
  w.begin_array();
  EXPECT_FALSE(w.complete());
  w.end_array();
  EXPECT_TRUE(w.complete());
}

TEST(JsonWriter, Escaping) {
  EXPECT_EQ(json_quote("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(json_quote("\b\f\n\r\t"), R"("\b\f\n\r\t")");
  EXPECT_EQ(json_quote(std::string("\x00\x01\x1f", 3)), R"("\u0000\u0001\u001f")");
  EXPECT_EQ(json_quote("/\x7f"), "\"/\x7f\"");  // '/' and DEL need no escape
  // Non-ASCII passes through as UTF-8: é (2 bytes), € (3), U+1F600 (4).
  EXPECT_EQ(json_quote("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"), "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
  // Keys are escaped the same way.
  EXPECT_EQ(JsonWriter().begin_object().key("k\n").value("v").end_object().take(), R"({"k\n":"v"})");
}

TEST(JsonWriter, InvalidUtf8IsAnError) {
  for (const char* bad :
       {"\x80", "\xc0\x80", "\xc3", "\xe2\x82", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff", "ok\xfe"}) {
    EXPECT_THROW(json_quote(bad), Error) << bad;
    JsonWriter w;
    w.begin_array();
    EXPECT_THROW(w.value(bad), Error);
    w.value("fine");  // a rejected value leaves the writer usable
    EXPECT_EQ(w.end_array().take(), R"(["fine"])");
  }
  JsonWriter w;
  w.begin_object();
  EXPECT_THROW(w.key("\xc0\xaf"), Error);
  EXPECT_EQ(w.key("k").value(1).end_object().take(), R"({"k":1})");
}

TEST(JsonWriter, DoublesShortestAndKeepTheirType) {
  EXPECT_EQ(json_double(0.1), "0.1");
  EXPECT_EQ(json_double(1.0), "1.0");
  EXPECT_EQ(json_double(-0.0), "-0.0");
  EXPECT_EQ(json_double(1e300), "1e+300");
  EXPECT_EQ(json_double(0.30000000000000004), "0.30000000000000004");
  EXPECT_EQ(json_double(5e-324), "4.94065645841247e-324");
  EXPECT_EQ(json_double(123456789.0), "123456789.0");
  EXPECT_EQ(json_double(1.0 / 3.0), "0.3333333333333333");
  EXPECT_EQ(json_double(100.0), "100.0");
}

TEST(JsonWriter, DoublesRoundTripExactly) {
  std::mt19937_64 rng(7);
  int checked = 0;
  for (int i = 0; i < 50000; ++i) {
    uint64_t bits = rng();
    double v;
    std::memcpy(&v, &bits, sizeof(v));
    if (!std::isfinite(v)) continue;
    const std::string s = json_double(v);
    const double back = std::strtod(s.c_str(), nullptr);
    uint64_t back_bits;
    std::memcpy(&back_bits, &back, sizeof(back));
    ASSERT_EQ(back_bits, bits) << s;
    ++checked;
  }
  EXPECT_GT(checked, 47000);
}

TEST(JsonWriter, NonFiniteDoublesAreRejected) {
  EXPECT_THROW(json_double(std::nan("")), Error);
  EXPECT_THROW(json_double(std::numeric_limits<double>::infinity()), Error);
  EXPECT_THROW(json_double(-std::numeric_limits<double>::infinity()), Error);
  JsonWriter w;
  w.begin_array();
  EXPECT_THROW(w.value(std::numeric_limits<double>::quiet_NaN()), Error);
  EXPECT_EQ(w.value(2.5).end_array().take(), "[2.5]");
}

TEST(JsonWriter, SimdjsonParsesWhatItWrites) {
  // reformat_json parses with simdjson and writes back with JsonWriter: a fixed point.
  const std::string compact = sample(0);
  EXPECT_EQ(ckpt::reformat_json(compact, 0), compact);
  EXPECT_EQ(ckpt::reformat_json(sample(2), 0), compact);
  EXPECT_EQ(ckpt::reformat_json(compact, 2), sample(2));
  JsonWriter w;
  w.begin_array();
  w.value(std::string("\x01\"\\\xe2\x82\xac", 6)).value(0.1).value(-1e-300).value(std::numeric_limits<int64_t>::max());
  w.end_array();
  const std::string text = w.take();
  EXPECT_EQ(ckpt::reformat_json(text, 0), text);
  EXPECT_THROW(ckpt::reformat_json("{\"a\":", 0), Error);
}

}  // namespace
}  // namespace megatron
