// JSONL line -> text values; see json_text.h for the contract (Python json.loads rules).
#include "data/json_text.h"

#include <simdjson.h>

#include <cstring>

#include "core/error.h"

namespace megatron::data {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// 4 hex digits at p (caller guarantees 4 bytes); -1 if any is not hex.
int32_t hex4(const char* p) {
  int32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    const int h = hex_value(p[i]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

// A validating cursor over one line. Every failure records the first error and
// returns false; positions in messages are 1-based byte offsets into the line.
class Scanner {
 public:
  Scanner(std::string_view s, std::vector<char>* stack)
      : begin_(s.data()), p_(s.data()), end_(s.data() + s.size()), stack_(stack) {}

  const char* pos() const { return p_; }
  bool at_end() const { return p_ == end_; }
  char peek() const { return p_ < end_ ? *p_ : '\0'; }
  void advance() { ++p_; }
  int64_t byte_of(const char* p) const { return static_cast<int64_t>(p - begin_) + 1; }
  const std::string& error() const { return error_; }

  void skip_ws() {
    while (p_ < end_ && is_ws(*p_)) ++p_;
  }

  bool fail(const char* what) { return fail_at(what, p_); }
  bool fail_at(const char* what, const char* at) {
    if (at >= end_) {
      error_ = str_cat("invalid JSON: ", what, " at end of line (byte ", byte_of(at), ")");
    } else {
      error_ = str_cat("invalid JSON: ", what, " at byte ", byte_of(at));
    }
    return false;
  }

  // p_ at '"'. Moves past the closing quote; *has_escape tells whether decoding is needed.
  bool skip_string(bool* has_escape) {
    const char* start = p_;
    ++p_;
    bool escape = false;
    while (true) {
      // The hot loop: plain characters of long text values.
      while (p_ < end_ && *p_ != '"' && *p_ != '\\' && static_cast<unsigned char>(*p_) >= 0x20) ++p_;
      if (p_ >= end_) return fail_at("unterminated string", start);
      const char c = *p_;
      if (c == '"') break;
      if (c != '\\') return fail("invalid control character in a string");
      escape = true;
      if (p_ + 1 >= end_) return fail_at("unterminated string", start);
      const char e = p_[1];
      if (e == 'u') {
        if (end_ - p_ < 6 || hex4(p_ + 2) < 0) return fail("invalid \\uXXXX escape");
        p_ += 6;
      } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
        p_ += 2;
      } else {
        return fail("invalid escape");
      }
    }
    ++p_;
    if (has_escape != nullptr) *has_escape = escape;
    return true;
  }

  bool match_literal(const char* lit) {
    const size_t n = std::strlen(lit);
    if (static_cast<size_t>(end_ - p_) >= n && std::memcmp(p_, lit, n) == 0) {
      p_ += n;
      return true;
    }
    return false;
  }

  // Python's json number grammar: -?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?; an
  // incomplete fraction or exponent ends the number before it (then the caller
  // fails on the stray character, as Python does).
  bool skip_number() {
    if (peek() == '-') ++p_;
    if (!is_digit(peek())) return fail("expecting a value");
    if (*p_ == '0') {
      ++p_;
    } else {
      while (is_digit(peek())) ++p_;
    }
    if (peek() == '.' && p_ + 1 < end_ && is_digit(p_[1])) {
      p_ += 2;
      while (is_digit(peek())) ++p_;
    }
    if (peek() == 'e' || peek() == 'E') {
      const char* q = p_ + 1;
      if (q < end_ && (*q == '+' || *q == '-')) ++q;
      if (q < end_ && is_digit(*q)) {
        p_ = q;
        while (is_digit(peek())) ++p_;
      }
    }
    return true;
  }

  // One scalar or the opening of a container (pushed on the stack).
  bool value_start() {
    switch (peek()) {
      case '"':
        return skip_string(nullptr);
      case '{':
        stack_->push_back('{');
        ++p_;
        return true;
      case '[':
        stack_->push_back('[');
        ++p_;
        return true;
      case 'n':
        return match_literal("null") || fail("expecting a value");
      case 't':
        return match_literal("true") || fail("expecting a value");
      case 'f':
        return match_literal("false") || fail("expecting a value");
      case 'N':
        return match_literal("NaN") || fail("expecting a value");
      case 'I':
        return match_literal("Infinity") || fail("expecting a value");
      case '-':
        if (match_literal("-Infinity")) return true;
        return skip_number();
      default:
        if (is_digit(peek())) return skip_number();
        return fail("expecting a value");
    }
  }

  bool object_key() {
    if (peek() != '"') return fail("expecting a property name in double quotes");
    if (!skip_string(nullptr)) return false;
    skip_ws();
    if (peek() != ':') return fail("expecting ':' delimiter");
    ++p_;
    skip_ws();
    return true;
  }

  // Skips one complete value starting at p_ (no leading whitespace), iteratively.
  bool skip_value() {
    const size_t base = stack_->size();
    bool need_value = true;
    while (true) {
      if (need_value) {
        const size_t depth = stack_->size();
        if (!value_start()) return false;
        need_value = false;
        if (stack_->size() > depth) {  // just opened a container
          skip_ws();
          const char close = stack_->back() == '{' ? '}' : ']';
          if (peek() == close) {
            ++p_;
            stack_->pop_back();
          } else if (stack_->back() == '{') {
            if (!object_key()) return false;
            need_value = true;
            continue;
          } else {
            need_value = true;
            continue;
          }
        }
      }
      if (stack_->size() == base) return true;
      skip_ws();
      const bool in_object = stack_->back() == '{';
      if (peek() == ',') {
        ++p_;
        skip_ws();
        if (in_object && !object_key()) return false;
        need_value = true;
      } else if (peek() == (in_object ? '}' : ']')) {
        ++p_;
        stack_->pop_back();
      } else {
        return fail(in_object ? "expecting ',' or '}'" : "expecting ',' or ']'");
      }
    }
  }

 private:
  const char* begin_;
  const char* p_;
  const char* end_;
  std::vector<char>* stack_;
  std::string error_;
};

// Decodes a validated string literal at `p` ('"' ... '"') into UTF-8, appending to
// *out. Returns the first lone surrogate code unit, or -1 when there is none.
int32_t decode_string(const char* p, std::string* out) {
  ++p;
  int32_t lone = -1;
  while (true) {
    const char* q = p;
    while (*q != '"' && *q != '\\') ++q;
    out->append(p, static_cast<size_t>(q - p));
    p = q;
    if (*p == '"') return lone;
    const char e = p[1];
    if (e != 'u') {
      char c = e;
      switch (e) {
        case 'b':
          c = '\b';
          break;
        case 'f':
          c = '\f';
          break;
        case 'n':
          c = '\n';
          break;
        case 'r':
          c = '\r';
          break;
        case 't':
          c = '\t';
          break;
        default:
          break;  // '"', '\\', '/'
      }
      out->push_back(c);
      p += 2;
      continue;
    }
    uint32_t cp = static_cast<uint32_t>(hex4(p + 2));
    p += 6;
    if (cp >= 0xD800 && cp <= 0xDBFF && p[0] == '\\' && p[1] == 'u') {
      const int32_t low = hex4(p + 2);  // the string is validated: p+2..p+5 are hex
      if (low >= 0xDC00 && low <= 0xDFFF) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (static_cast<uint32_t>(low) - 0xDC00);
        p += 6;
      }
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) {
      // Python keeps the lone surrogate in the str; it only fails when encoded.
      if (lone < 0) lone = static_cast<int32_t>(cp);
      append_utf8(0xFFFD, out);
      continue;
    }
    append_utf8(cp, out);
  }
}

const char* kind_name(char c) {
  switch (c) {
    case '{':
      return "an object";
    case '[':
      return "a list";
    case 'n':
      return "null";
    case 't':
    case 'f':
      return "a boolean";
    default:
      return "a number";
  }
}

std::string hex_unit(int32_t u) {
  static const char* digits = "0123456789abcdef";
  std::string s = "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) s.push_back(digits[(u >> shift) & 0xF]);
  return s;
}

}  // namespace

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

int64_t find_invalid_utf8(std::string_view s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  const int64_t n = static_cast<int64_t>(s.size());
  int64_t i = 0;
  while (i < n) {
    const unsigned char c = b[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlongs
      if (c == 0xED) hi = 0x9F;  // no UTF-16 surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // no overlongs
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
      return i;
    }
    if (i + len > n) return i;
    if (b[i + 1] < lo || b[i + 1] > hi) return i;
    for (int k = 2; k < len; ++k) {
      if (b[i + k] < 0x80 || b[i + k] > 0xBF) return i;
    }
    i += len;
  }
  return -1;
}

JsonTextExtractor::JsonTextExtractor(std::vector<std::string> keys) : keys_(std::move(keys)) {
  spans_.resize(keys_.size());
}

bool JsonTextExtractor::extract(std::string_view line, std::vector<Sentences>* out, std::string* error) {
  if (!simdjson::validate_utf8(line.data(), line.size())) {
    *error = str_cat("invalid UTF-8 at byte ", find_invalid_utf8(line) + 1);
    return false;
  }
  if (line.size() >= 3 && std::memcmp(line.data(), "\xEF\xBB\xBF", 3) == 0) {
    *error = "invalid JSON: unexpected UTF-8 BOM";
    return false;
  }
  stack_.clear();
  for (auto& s : spans_) s = {};
  names_.clear();
  Scanner sc(line, &stack_);
  sc.skip_ws();
  if (sc.at_end()) {
    *error = "blank line: expecting a JSON object";
    return false;
  }
  const bool is_object = sc.peek() == '{';
  if (!is_object) {
    const char first = sc.peek();
    if (!sc.skip_value()) {
      *error = sc.error();
      return false;
    }
    sc.skip_ws();
    if (!sc.at_end()) {
      sc.fail("extra data");
      *error = sc.error();
      return false;
    }
    *error = str_cat("the JSON value is ", first == '"' ? "a string" : kind_name(first), ", not an object");
    return false;
  }
  // Top-level object: like skip_value, but matching member names against the keys.
  sc.advance();
  sc.skip_ws();
  bool ok = true;
  if (sc.peek() == '}') {
    sc.advance();
  } else {
    while (true) {
      if (sc.peek() != '"') {
        ok = sc.fail("expecting a property name in double quotes");
        break;
      }
      const char* name_begin = sc.pos();
      bool has_escape = false;
      if (!(ok = sc.skip_string(&has_escape))) break;
      std::string_view name(name_begin + 1, static_cast<size_t>(sc.pos() - name_begin - 2));
      names_.push_back(name);  // as written (escapes undecoded), for the missing-key message
      int32_t lone = -1;
      if (has_escape) {
        key_buffer_.clear();
        lone = decode_string(name_begin, &key_buffer_);
        name = key_buffer_;
      }
      int64_t match = -1;
      if (lone < 0) {  // a name holding a lone surrogate equals no command-line key
        for (size_t k = 0; k < keys_.size(); ++k) {
          if (keys_[k] == name) match = static_cast<int64_t>(k);
        }
      }
      sc.skip_ws();
      if (sc.peek() != ':') {
        ok = sc.fail("expecting ':' delimiter");
        break;
      }
      sc.advance();
      sc.skip_ws();
      const char* value_begin = sc.pos();
      if (!(ok = sc.skip_value())) break;
      if (match >= 0) spans_[match] = std::string_view(value_begin, static_cast<size_t>(sc.pos() - value_begin));
      sc.skip_ws();
      if (sc.peek() == ',') {
        sc.advance();
        sc.skip_ws();
        continue;
      }
      if (sc.peek() == '}') {
        sc.advance();
        break;
      }
      ok = sc.fail("expecting ',' or '}'");
      break;
    }
  }
  if (ok) {
    sc.skip_ws();
    if (!sc.at_end()) ok = sc.fail("extra data");
  }
  if (!ok) {
    *error = sc.error();
    return false;
  }

  out->resize(keys_.size());
  for (size_t k = 0; k < keys_.size(); ++k) {
    Sentences& sentences = (*out)[k];
    const std::string_view span = spans_[k];
    if (span.empty()) {
      std::string seen;
      for (std::string_view n : names_) seen += str_cat(seen.empty() ? "" : ", ", "'", n, "'");
      *error = str_cat("missing key '", keys_[k], "'",
                       seen.empty() ? std::string(" (the object has no keys)")
                                    : str_cat(" (the line's keys: ", seen, "; choose them with --json-keys)"));
      return false;
    }
    size_t used = 0;
    auto decode_into = [&](const char* p, const char* what) {
      if (sentences.size() <= used) sentences.emplace_back();
      std::string& s = sentences[used++];
      s.clear();
      const int32_t lone = decode_string(p, &s);
      if (lone >= 0) {
        *error =
            str_cat("key '", keys_[k], "'", what, ": lone surrogate ", hex_unit(lone), " cannot be encoded as UTF-8");
        return false;
      }
      return true;
    };
    if (span[0] == '"') {
      if (!decode_into(span.data(), "")) return false;
    } else if (span[0] == '[') {
      // A validated list: walk its elements; each must be a string.
      Scanner list(span, &stack_);
      list.advance();
      list.skip_ws();
      int64_t index = 0;
      while (list.peek() != ']') {
        if (list.peek() != '"') {
          *error =
              str_cat("key '", keys_[k], "': list element ", index, " is ", kind_name(list.peek()), ", not a string");
          return false;
        }
        const char* s = list.pos();
        list.skip_string(nullptr);
        const std::string what = str_cat(" element ", index);
        if (!decode_into(s, what.c_str())) return false;
        ++index;
        list.skip_ws();
        if (list.peek() == ',') {
          list.advance();
          list.skip_ws();
        }
      }
    } else {
      *error = str_cat("key '", keys_[k], "' is ", kind_name(span[0]), ", not a string or a list of strings");
      return false;
    }
    sentences.resize(used);
  }
  return true;
}

}  // namespace megatron::data
