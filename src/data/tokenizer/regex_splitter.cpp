// RegexSplitter over PCRE2 (see the header).
#include "data/tokenizer/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace megatron::data::detail {

namespace {

constexpr const char* kSpaceClassBody = "\\t-\\r\\x{85}\\p{Z}";  // White_Space

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// Per thread: match data (one pair: the whole match) and a JIT stack large enough for the
// lookahead of long whitespace runs.
struct ThreadMatch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadMatch() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    MT_CHECK(data != nullptr && context != nullptr && stack != nullptr) << "PCRE2 allocation failed";
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatch() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

ThreadMatch& thread_match() {
  thread_local ThreadMatch m;
  return m;
}

}  // namespace

void check_utf8(std::string_view text, const char* what) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const uint8_t b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    }
    bool ok = len > 0 && i + static_cast<size_t>(len) <= n && p[i + 1] >= lo && p[i + 1] <= hi;
    for (int k = 2; ok && k < len; ++k) ok = (p[i + static_cast<size_t>(k)] & 0xC0) == 0x80;
    if (!ok) throw_error(what, ": the text is not valid UTF-8 (byte ", i, " of ", n, ")");
    i += static_cast<size_t>(len);
  }
}

std::string RegexSplitter::rewrite_whitespace(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char d = pattern[i + 1];
      if (d == 's') {
        out += in_class ? kSpaceClassBody : str_cat("[", kSpaceClassBody, "]");
      } else if (d == 'S' && !in_class) {
        out += str_cat("[^", kSpaceClassBody, "]");
      } else {
        out += c;
        out += d;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

RegexSplitter::RegexSplitter(const std::string& pattern, const std::string& source) : source_(source) {
  if (pattern.find("\\S") != std::string::npos) {
    // \S inside a class has no rewrite; no pre-tokenizer we know writes one.
    bool in_class = false;
    for (size_t i = 0; i < pattern.size(); ++i) {
      if (pattern[i] == '\\') {
        if (in_class && i + 1 < pattern.size() && pattern[i + 1] == 'S') {
          throw_error(source, ": the pattern has \\S inside a character class, which is not supported");
        }
        ++i;
      } else if (pattern[i] == '[') {
        in_class = true;
      } else if (pattern[i] == ']') {
        in_class = false;
      }
    }
  }
  const std::string rewritten = rewrite_whitespace(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    throw_error(source, ": the pre-tokenizer regex does not compile at offset ", offset, ": ", pcre2_message(error),
                " (pattern ", pattern, ")");
  }
  const int jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  MT_CHECK(jit == 0 || jit == PCRE2_ERROR_JIT_BADOPTION) << "pcre2_jit_compile: " << pcre2_message(jit);
  code_ = code;
}

RegexSplitter::~RegexSplitter() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void RegexSplitter::split(std::string_view text, bool keep_gaps,
                          const std::function<void(int64_t, int64_t, bool)>& on_piece) const {
  auto* code = static_cast<pcre2_code*>(code_);
  ThreadMatch& m = thread_match();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const PCRE2_SIZE n = text.size();
  PCRE2_SIZE pos = 0;
  PCRE2_SIZE gap_start = 0;
  uint32_t options = 0;  // the first call checks the UTF-8 of the whole subject
  while (pos <= n) {
    const int rc = pcre2_match(code, subject, n, pos, options, m.data, m.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) check_utf8(text, source_.c_str());
      throw_error(source_, ": the pre-tokenizer regex failed: ", pcre2_message(rc));
    }
    options = PCRE2_NO_UTF_CHECK;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.data);
    const PCRE2_SIZE start = ov[0], end = ov[1];
    if (end == start) {
      // An empty match produces no piece; step one code point.
      pos = start + 1;
      while (pos < n && (subject[pos] & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (keep_gaps && start > gap_start) {
      on_piece(static_cast<int64_t>(gap_start), static_cast<int64_t>(start - gap_start), false);
    }
    on_piece(static_cast<int64_t>(start), static_cast<int64_t>(end - start), true);
    pos = end;
    gap_start = end;
  }
  if (keep_gaps && n > gap_start) on_piece(static_cast<int64_t>(gap_start), static_cast<int64_t>(n - gap_start), false);
}

}  // namespace megatron::data::detail
