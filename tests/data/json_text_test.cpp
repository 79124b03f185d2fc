// Tests for data/json_text.h: Python json.loads acceptance + Megatron's key lookup.
#include "data/json_text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace megatron::data {
namespace {

struct Parsed {
  bool ok = false;
  std::vector<Sentences> values;
  std::string error;
};

Parsed parse(const std::string& line, std::vector<std::string> keys = {"text"}) {
  JsonTextExtractor x(std::move(keys));
  Parsed p;
  p.ok = x.extract(line, &p.values, &p.error);
  return p;
}

// The single sentence of the single key, or "<error: ...>".
std::string text_of(const std::string& line) {
  Parsed p = parse(line);
  if (!p.ok) return "<error: " + p.error + ">";
  if (p.values.size() != 1 || p.values[0].size() != 1) return "<not one sentence>";
  return p.values[0][0];
}

void expect_error(const std::string& line, const std::string& fragment, std::vector<std::string> keys = {"text"}) {
  Parsed p = parse(line, std::move(keys));
  EXPECT_FALSE(p.ok) << "accepted: " << line;
  EXPECT_NE(p.error.find(fragment), std::string::npos) << "line: " << line << "\nerror: " << p.error;
}

TEST(JsonText, PlainString) { EXPECT_EQ(text_of(R"({"text": "hello world"})"), "hello world"); }

TEST(JsonText, SimpleEscapes) { EXPECT_EQ(text_of(R"({"text": "a\"b\\c\/d\b\f\n\r\te"})"), "a\"b\\c/d\b\f\n\r\te"); }

TEST(JsonText, UnicodeEscapesAndSurrogatePairs) {
  EXPECT_EQ(text_of(R"({"text": "caf\u00e9 \u20AC \u0000!"})"), std::string("caf\xC3\xA9 \xE2\x82\xAC \0!", 12));
  EXPECT_EQ(text_of(R"({"text": "\ud83d\ude00"})"), "\xF0\x9F\x98\x80");  // U+1F600
  EXPECT_EQ(text_of(R"({"text": "\uD83D\uDE00x"})"), "\xF0\x9F\x98\x80x");
  EXPECT_EQ(text_of(R"({"text": "\udbff\udfff"})"), "\xF4\x8F\xBF\xBF");  // U+10FFFF
  // Raw UTF-8 passes through unchanged.
  EXPECT_EQ(text_of("{\"text\": \"\xE6\x97\xA5\xF0\x9F\x98\x80\"}"), "\xE6\x97\xA5\xF0\x9F\x98\x80");
}

TEST(JsonText, LoneSurrogatesInTokenizedValuesAreRejected) {
  // Python decodes them into the str; GPT-2's tokenizer then fails on str.encode('utf-8').
  expect_error(R"({"text": "a\ud800b"})", "lone surrogate \\ud800");
  expect_error(R"({"text": "\udc00"})", "lone surrogate \\udc00");
  expect_error(R"({"text": "\ud800\u0041"})", "lone surrogate \\ud800");  // high + non-low
  expect_error(R"({"text": "\ude00\ud83d"})", "lone surrogate \\ude00");  // reversed pair
  expect_error(R"({"text": ["ok", "\ud800"]})", "element 1: lone surrogate");
}

TEST(JsonText, LoneSurrogatesElsewhereAreAccepted) {
  EXPECT_EQ(text_of(R"({"other": "\ud800", "text": "x"})"), "x");
  EXPECT_EQ(text_of(R"({"te\ud800xt": "no", "text": "x"})"), "x");  // a key that matches nothing
  expect_error(R"({"te\ud800xt": "no"})", "missing key 'text'");
}

TEST(JsonText, EscapedKeysMatchAfterDecoding) {
  EXPECT_EQ(text_of(R"({"te\u0078t": "y"})"), "y");
  EXPECT_EQ(text_of(R"({"\u0074ext": "y", "text ": "no"})"), "y");
}

TEST(JsonText, DuplicateKeysKeepTheLastValue) {
  EXPECT_EQ(text_of(R"({"text": "a", "text": "b"})"), "b");
  EXPECT_EQ(text_of(R"({"text": 5, "text": "b"})"), "b");  // the first value is never used
  EXPECT_EQ(text_of(R"({"text": "\ud800", "text": "b"})"), "b");
  expect_error(R"({"text": "b", "text": 5})", "key 'text' is a number");
}

TEST(JsonText, NestedValuesAreSkippedAndOnlyTopLevelKeysCount) {
  EXPECT_EQ(
      text_of(R"({"meta": {"a": [1, 2.5e-3, {"b": null, "text": "no"}], "c": [[], {}]}, "text": "x", "n": -0.0})"),
      "x");
  expect_error(R"({"meta": {"text": "nested"}})", "missing key 'text'");
  // Python's extra literals are valid JSON for json.loads.
  EXPECT_EQ(text_of(R"({"a": NaN, "b": Infinity, "c": -Infinity, "d": [true, false, null], "text": "x"})"), "x");
}

TEST(JsonText, ListsOfSentences) {
  Parsed p = parse(R"({"text": ["first", "", "third \u00e9"]})");
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.values[0], (Sentences{"first", "", "third \xC3\xA9"}));
  p = parse(R"({"text": []})");
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_TRUE(p.values[0].empty());
  p = parse(R"({"text": [ "a" , "b" ] })");
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.values[0], (Sentences{"a", "b"}));
}

TEST(JsonText, MultipleKeysInRequestedOrder) {
  Parsed p = parse(R"({"b": "B", "a": ["A1", "A2"], "c": 1})", {"a", "b"});
  ASSERT_TRUE(p.ok) << p.error;
  ASSERT_EQ(p.values.size(), 2u);
  EXPECT_EQ(p.values[0], (Sentences{"A1", "A2"}));
  EXPECT_EQ(p.values[1], (Sentences{"B"}));
  expect_error(R"({"a": "A"})", "missing key 'b'", {"a", "b"});
}

// A missing key lists the line's own top-level keys (as written) and names --json-keys.
TEST(JsonText, MissingKeyListsTheKeysThere) {
  expect_error(R"({"content": "x", "m\u0065ta": {"text": 1}})",
               "missing key 'text' (the line's keys: 'content', 'm\\u0065ta'; choose them with --json-keys)");
  expect_error(R"({})", "missing key 'text' (the object has no keys)");
}

TEST(JsonText, ExtractorIsReusable) {
  JsonTextExtractor x({"text"});
  std::vector<Sentences> out;
  std::string error;
  ASSERT_TRUE(x.extract(R"({"text": ["a", "b", "c"]})", &out, &error));
  ASSERT_TRUE(x.extract(R"({"text": "d"})", &out, &error));
  EXPECT_EQ(out[0], (Sentences{"d"}));
  EXPECT_FALSE(x.extract(R"({"other": "d"})", &out, &error));
  ASSERT_TRUE(x.extract(R"({"text": ""})", &out, &error));
  EXPECT_EQ(out[0], (Sentences{""}));
}

TEST(JsonText, NonStringValuesAreRejected) {
  expect_error(R"({"text": 5})", "key 'text' is a number, not a string or a list of strings");
  expect_error(R"({"text": null})", "key 'text' is null");
  expect_error(R"({"text": true})", "key 'text' is a boolean");
  expect_error(R"({"text": {"a": "b"}})", "key 'text' is an object");
  expect_error(R"({"text": ["a", 1]})", "list element 1 is a number, not a string");
  expect_error(R"({"text": [["a"]]})", "list element 0 is a list");
}

TEST(JsonText, WhitespaceFollowsPython) {
  EXPECT_EQ(text_of(" \t{\"text\" :\t\"a\" }\r"), "a");        // a trailing '\r' is JSON whitespace
  expect_error("\x0c{\"text\": \"a\"}", "expecting a value");  // form feed is not
}

TEST(JsonText, InvalidJsonIsRejected) {
  expect_error("", "blank line");
  expect_error("   ", "blank line");
  expect_error("{", "expecting a property name");
  expect_error(R"({"text": "a",})", "expecting a property name");
  expect_error(R"({"text": ["a",]})", "expecting a value");
  expect_error(R"({'text': 'a'})", "expecting a property name");
  expect_error(R"({"text": "a"} x)", "extra data at byte 15");
  expect_error(R"({"text": "a"}{})", "extra data");
  expect_error(R"({"text" "a"})", "expecting ':'");
  expect_error(R"({"text": "a" "b": 1})", "expecting ',' or '}'");
  expect_error(R"({"text": "abc)", "unterminated string");
  expect_error(R"({"text": "a\x41"})", "invalid escape");
  expect_error(R"({"text": "\u12"})", "invalid \\uXXXX escape");
  expect_error(R"({"text": "\u12G4"})", "invalid \\uXXXX escape");
  expect_error(R"({"text": "\ud800\u12"})", "invalid \\uXXXX escape");
  expect_error("{\"text\": \"a\tb\"}", "invalid control character");  // strict=True
  expect_error("{\"text\": \"a\x01\"}", "invalid control character");
  expect_error(R"({"text": "a", "n": 01})", "expecting ',' or '}'");
  expect_error(R"({"text": "a", "n": 1.})", "expecting ',' or '}'");
  expect_error(R"({"text": "a", "n": -})", "expecting a value");
  expect_error(R"({"text": "a", "n": nan})", "expecting a value");
  expect_error(R"({"text": "a", "n": tru})", "expecting a value");
  expect_error(R"({"text": "a", "n": [1 2]})", "expecting ',' or ']'");
  expect_error("\xEF\xBB\xBF{\"text\": \"a\"}", "BOM");
}

TEST(JsonText, NumbersFollowPythonsGrammar) {
  EXPECT_EQ(text_of(R"({"n": [0, -0, 12, 1.5, 1e5, 1E+5, 2.5e-3, -1.0E2], "text": "x"})"), "x");
}

TEST(JsonText, NonObjectsAreRejected) {
  expect_error(R"(["text"])", "the JSON value is a list, not an object");
  expect_error(R"("text")", "the JSON value is a string");
  expect_error(R"(5)", "the JSON value is a number");
  expect_error(R"([1] 2)", "extra data");
}

TEST(JsonText, InvalidUtf8AnywhereIsRejected) {
  expect_error("{\"text\": \"a\xFF\"}", "invalid UTF-8 at byte 12");
  expect_error("{\"other\": \"\xC0\xAF\", \"text\": \"a\"}", "invalid UTF-8 at byte 12");  // overlong '/'
  expect_error("{\"text\": \"\xED\xA0\x80\"}", "invalid UTF-8");                           // an encoded surrogate
  expect_error("{\"text\": \"\xF4\x90\x80\x80\"}", "invalid UTF-8");                       // above U+10FFFF
  expect_error("{\"text\": \"\xE2\x82\"}", "invalid UTF-8");                               // truncated sequence
}

TEST(JsonText, FindInvalidUtf8) {
  EXPECT_EQ(find_invalid_utf8(""), -1);
  EXPECT_EQ(find_invalid_utf8("plain ascii"), -1);
  EXPECT_EQ(find_invalid_utf8("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF"), -1);
  EXPECT_EQ(find_invalid_utf8("ab\x80"), 2);
  EXPECT_EQ(find_invalid_utf8("a\xC1\xBF"), 1);          // overlong 2-byte
  EXPECT_EQ(find_invalid_utf8("a\xE0\x9F\xBF"), 1);      // overlong 3-byte
  EXPECT_EQ(find_invalid_utf8("a\xF0\x8F\xBF\xBF"), 1);  // overlong 4-byte
  EXPECT_EQ(find_invalid_utf8("\xED\xBF\xBF"), 0);       // U+DFFF
  EXPECT_EQ(find_invalid_utf8("\xEF\xBF\xBF"), -1);      // U+FFFF is fine
  EXPECT_EQ(find_invalid_utf8("\xF5\x80\x80\x80"), 0);
  EXPECT_EQ(find_invalid_utf8("\xC3"), 0);
  EXPECT_EQ(find_invalid_utf8("\xC3x"), 0);
}

}  // namespace
}  // namespace megatron::data
