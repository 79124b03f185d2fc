// A pre-tokenizer regex run through PCRE2 (UTF + UCP, JIT-compiled): the pieces of a text are
// its matches and the gaps between them, in order (Hugging Face's Split with behavior
// "Isolated", tiktoken's regex pass, which drops gaps: see keep_gaps).
//
// Patterns are written for Oniguruma (Hugging Face tokenizers) or fancy-regex (tiktoken). Both
// read \s as Unicode White_Space (U+0009-000D, U+0085, \p{Z}); PCRE2's \s also takes U+180E,
// so \s and \S are rewritten to explicit classes before compiling. \p{L}, \p{N}, \p{Lu}, ...
// are PCRE2's Unicode tables (libpcre2 10.42: Unicode 15.0).
//
// Input must be valid UTF-8 (Python and Rust strings are): invalid input is an Error.
// Immutable after construction; split() is safe from many threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace megatron::data::detail {

class RegexSplitter {
 public:
  // `source` names the file (and field) the pattern came from, for errors.
  RegexSplitter(const std::string& pattern, const std::string& source);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Calls on_piece(offset, length, matched) for each match (matched = true) and, when
  // keep_gaps, each non-empty gap before, between and after them (matched = false).
  void split(std::string_view text, bool keep_gaps, const std::function<void(int64_t, int64_t, bool)>& on_piece) const;

  // `pattern` with \s and \S replaced by White_Space classes (exposed for tests).
  static std::string rewrite_whitespace(const std::string& pattern);

 private:
  void* code_ = nullptr;  // pcre2_code_8
  std::string source_;
};

// Throws Error naming `what` when `text` is not valid UTF-8.
void check_utf8(std::string_view text, const char* what);

}  // namespace megatron::data::detail
