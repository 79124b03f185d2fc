// A small JSON builder for the files we write (checkpoint metadata, safetensors headers).
// Parsing is simdjson's job (see ckpt/safetensors.cpp); this only produces text.
//
//   JsonWriter w(2);                       // indent 2 = Python json.dumps(obj, indent=2) layout
//   w.begin_object();
//   w.key("iteration").value(int64_t{100});
//   w.key("lr").value(6e-5);
//   w.key("ranks").begin_array().value(0).value(1).end_array();
//   w.end_object();
//   std::string text = w.take();
//
// Rules:
//  - Strings must be valid UTF-8 (Error otherwise). '"', '\\' and the control characters
//    U+0000..U+001F are escaped (\b \f \n \r \t, the rest as \u00XX); everything else,
//    non-ASCII included, is written as its UTF-8 bytes.
//  - Doubles are written with the fewest significant digits (15, 16 or 17) that parse back
//    to the same bits, so every finite double round-trips exactly; a value without '.' or
//    an exponent gets ".0" so that it stays a float for the reader (1.0 -> "1.0").
//  - NaN and +-inf have no JSON spelling: value(double) throws megatron::Error for them.
//    A caller that must store one writes it as a string ("nan", "inf", "-inf").
//  - Misuse (a value where a key is expected, unbalanced end_*, take() before the document
//    is complete) is a bug in the caller and fails an MT_CHECK.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace megatron {

class JsonWriter {
 public:
  // indent == 0: compact, no whitespace at all. indent > 0: one member per line.
  explicit JsonWriter(int indent = 0);

  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  // The key of the next object member.
  JsonWriter& key(std::string_view k);

  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(int64_t v);
  JsonWriter& value(int v) { return value(static_cast<int64_t>(v)); }
  JsonWriter& value(uint64_t v);
  JsonWriter& value(double v);
  JsonWriter& value(bool v);
  JsonWriter& null();
  // Inserts already-serialised JSON as one value; the caller guarantees it is valid.
  JsonWriter& raw_value(std::string_view json);

  // True once exactly one complete top-level value has been written.
  bool complete() const { return done_; }
  const std::string& str() const;
  std::string take();

 private:
  struct Level {
    bool object;
    int64_t count;
  };
  void before_value();
  void newline_indent(size_t depth);

  int indent_;
  std::string out_;
  std::vector<Level> stack_;
  bool have_key_ = false;
  bool done_ = false;
};

// The quoted, escaped JSON spelling of s (throws Error when s is not valid UTF-8).
std::string json_quote(std::string_view s);
// The shortest exactly round-tripping spelling of a finite double (throws Error for NaN/inf).
std::string json_double(double v);

}  // namespace megatron
