#include "core/json_writer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace megatron {
namespace {

// Byte offset of the first invalid UTF-8 sequence (strict: no overlong forms, no encoded
// surrogates, nothing above U+10FFFF), or -1 when s is valid.
int64_t first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return static_cast<int64_t>(i);
    }
    if (i + static_cast<size_t>(len) > n) return static_cast<int64_t>(i);
    for (int k = 1; k < len; ++k) {
      const unsigned cc = p[i + static_cast<size_t>(k)];
      if ((cc & 0xC0) != 0x80) return static_cast<int64_t>(i);
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return static_cast<int64_t>(i);
    }
    i += static_cast<size_t>(len);
  }
  return -1;
}

void append_quoted(std::string& out, std::string_view s) {
  const int64_t bad = first_invalid_utf8(s);
  if (bad >= 0) throw_error("JSON string is not valid UTF-8 at byte ", bad);
  out.push_back('"');
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

}  // namespace

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  append_quoted(out, s);
  return out;
}

std::string json_double(double v) {
  if (!std::isfinite(v))
    throw_error("JSON cannot represent the number ", v, " (NaN and infinities have no JSON spelling)");
  char buf[40];
  for (int digits = 15; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
    if (digits == 17 || std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

JsonWriter::JsonWriter(int indent) : indent_(indent < 0 ? 0 : indent) {}

void JsonWriter::newline_indent(size_t depth) {
  out_.push_back('\n');
  out_.append(depth * static_cast<size_t>(indent_), ' ');
}

void JsonWriter::before_value() {
  MT_CHECK(!done_) << "JsonWriter: a second top-level value";
  if (stack_.empty()) return;
  Level& top = stack_.back();
  if (top.object) {
    MT_CHECK(have_key_) << "JsonWriter: an object member needs key() first";
    have_key_ = false;
    return;  // key() already wrote the separator and the indentation
  }
  if (top.count > 0) out_.push_back(',');
  if (indent_ > 0) newline_indent(stack_.size());
  ++top.count;
}

JsonWriter& JsonWriter::key(std::string_view k) {
  MT_CHECK(!stack_.empty() && stack_.back().object) << "JsonWriter: key() outside an object";
  MT_CHECK(!have_key_) << "JsonWriter: two keys in a row";
  std::string quoted = json_quote(k);  // may throw; the output is untouched then
  Level& top = stack_.back();
  if (top.count > 0) out_.push_back(',');
  if (indent_ > 0) newline_indent(stack_.size());
  ++top.count;
  out_ += quoted;
  out_ += indent_ > 0 ? ": " : ":";
  have_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_.push_back('{');
  stack_.push_back({true, 0});
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_.push_back('[');
  stack_.push_back({false, 0});
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  MT_CHECK(!stack_.empty() && stack_.back().object && !have_key_) << "JsonWriter: unbalanced end_object()";
  const bool empty = stack_.back().count == 0;
  stack_.pop_back();
  if (indent_ > 0 && !empty) newline_indent(stack_.size());
  out_.push_back('}');
  if (stack_.empty()) done_ = true;
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  MT_CHECK(!stack_.empty() && !stack_.back().object) << "JsonWriter: unbalanced end_array()";
  const bool empty = stack_.back().count == 0;
  stack_.pop_back();
  if (indent_ > 0 && !empty) newline_indent(stack_.size());
  out_.push_back(']');
  if (stack_.empty()) done_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view s) {
  // Validate before touching the output so that a throw leaves the writer unchanged.
  std::string quoted = json_quote(s);
  before_value();
  out_ += quoted;
  if (stack_.empty()) done_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(int64_t v) {
  before_value();
  out_ += std::to_string(v);
  if (stack_.empty()) done_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(uint64_t v) {
  before_value();
  out_ += std::to_string(v);
  if (stack_.empty()) done_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(double v) {
  std::string text = json_double(v);
  before_value();
  out_ += text;
  if (stack_.empty()) done_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(bool v) {
  before_value();
  out_ += v ? "true" : "false";
  if (stack_.empty()) done_ = true;
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  out_ += "null";
  if (stack_.empty()) done_ = true;
  return *this;
}

JsonWriter& JsonWriter::raw_value(std::string_view json) {
  before_value();
  out_ += json;
  if (stack_.empty()) done_ = true;
  return *this;
}

const std::string& JsonWriter::str() const {
  MT_CHECK(done_) << "JsonWriter: the document is not complete";
  return out_;
}

std::string JsonWriter::take() {
  MT_CHECK(done_) << "JsonWriter: the document is not complete";
  done_ = false;
  return std::move(out_);
}

}  // namespace megatron
