// One JSONL line -> the text values of the requested top-level keys, with the
// exact acceptance rules of Python's json.loads (C scanner, strict=True) followed by
// Megatron-LM's Encoder.encode lookup (tools/preprocess_data.py):
//   data = json.loads(line); for key in json_keys: text = data[key]
//   a list is a list of sentences, anything else is one sentence given to the tokenizer.
//
// What is accepted is what Python accepts: whitespace is [ \t\n\r], literals include
// NaN / Infinity / -Infinity, raw control characters inside strings are errors,
// \u escapes need exactly 4 hex digits, a high+low surrogate escape pair is one code
// point, and duplicate keys keep the last value. The whole line must be valid UTF-8
// (Python opens the file with encoding='utf-8', strict), so a UTF-8 BOM at the line
// start is an error too ("Unexpected UTF-8 BOM").
// Failures that Megatron only hits in the tokenizer are reported here as well: a
// value that is neither a string nor a list of strings (the regex gets a non-str),
// and a lone surrogate escape inside a value that is tokenized (str.encode('utf-8')
// fails). A lone surrogate elsewhere in the line is accepted, as in Python.
//
// Design: a hand-written single-pass validator instead of a DOM parser. Values of
// the requested keys are only located during the pass (spans); the winning spans are
// decoded afterwards, so a duplicate key costs nothing and nothing else is copied.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace megatron::data {

// Sentences of one key: one element for a string value, the elements of a list.
using Sentences = std::vector<std::string>;

class JsonTextExtractor {
 public:
  // `keys` are the --json-keys, in order; they must be distinct.
  explicit JsonTextExtractor(std::vector<std::string> keys);

  // Parses `line` (without its line terminator). On success fills out[k] with the
  // UTF-8 sentences of keys()[k] and returns true. On failure returns false and sets
  // *error to a one-line reason without file or line, e.g.
  //   "invalid JSON: expecting ':' after an object key at byte 12"
  //   "missing key 'text' (the line's keys: 'content', 'id'; choose them with --json-keys)".
  // `out` is reused across calls (capacity kept), so one extractor per thread.
  bool extract(std::string_view line, std::vector<Sentences>* out, std::string* error);

  const std::vector<std::string>& keys() const { return keys_; }

 private:
  std::vector<std::string> keys_;
  std::vector<std::string_view> spans_;  // raw value text of each key, empty = missing
  std::vector<std::string_view> names_;  // the line's top-level names, as written
  std::string key_buffer_;
  std::vector<char> stack_;
};

// Appends the UTF-8 encoding of code point `cp` (<= U+10FFFF). Lone surrogates are encoded
// like any other code point (the callers decide whether they may occur).
void append_utf8(uint32_t cp, std::string* out);

// Byte offset of the first byte that makes `s` invalid UTF-8 (strict: no overlongs,
// no encoded surrogates, nothing above U+10FFFF), or -1 when `s` is valid.
int64_t find_invalid_utf8(std::string_view s);

}  // namespace megatron::data
