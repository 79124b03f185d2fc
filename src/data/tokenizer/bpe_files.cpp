// Readers of vocab.json and merges.txt (see bpe_files.h for the exact semantics).
#include "data/tokenizer/bpe_files.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "core/file.h"
#include "data/json_text.h"

namespace megatron::data::detail {

namespace {

int64_t line_of(std::string_view text, int64_t pos) {
  pos = std::min<int64_t>(pos, static_cast<int64_t>(text.size()));
  return 1 + std::count(text.begin(), text.begin() + pos, '\n');
}

// Length of the valid UTF-8 sequence at s[i], or 0 when it is invalid.
int utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const size_t avail = s.size() - i;
  const uint8_t b0 = b(i);
  auto cont = [&](size_t k) { return (b(k) & 0xC0) == 0x80; };
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return avail >= 2 && cont(i + 1) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (avail < 3) return 0;
    const uint8_t lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    return b(i + 1) >= lo && b(i + 1) <= hi && cont(i + 2) ? 3 : 0;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (avail < 4) return 0;
    const uint8_t lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    return b(i + 1) >= lo && b(i + 1) <= hi && cont(i + 2) && cont(i + 3) ? 4 : 0;
  }
  return 0;
}

class VocabParser {
 public:
  VocabParser(const std::string& path, std::string_view text) : path_(path), text_(text) {}

  std::vector<VocabEntry> parse() {
    if (text_.size() >= 3 && text_.substr(0, 3) == "\xEF\xBB\xBF") fail(0, "unexpected UTF-8 BOM");
    skip_space();
    if (pos_ >= text_.size() || text_[pos_] != '{') fail(pos_, "expected a JSON object of token -> id");
    ++pos_;
    std::vector<VocabEntry> entries;
    std::vector<size_t> id_pos;  // per entry: where its (last) id is, for errors
    std::unordered_map<std::string, size_t> index;
    skip_space();
    if (peek() == '}') {
      ++pos_;
    } else {
      while (true) {
        skip_space();
        if (peek() != '"') fail(pos_, "expected a string key");
        std::string key = parse_string();
        skip_space();
        if (peek() != ':') fail(pos_, "expected ':' after a key");
        ++pos_;
        skip_space();
        const size_t at = pos_;
        const int32_t id = parse_id();
        auto [it, inserted] = index.emplace(key, entries.size());
        if (inserted) {
          entries.push_back({std::move(key), id});
          id_pos.push_back(at);
        } else {
          entries[it->second].id = id;
          id_pos[it->second] = at;
        }
        skip_space();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        if (peek() == '}') {
          ++pos_;
          break;
        }
        fail(pos_, "expected ',' or '}' after a value");
      }
    }
    skip_space();
    if (pos_ != text_.size()) fail(pos_, "extra data after the JSON object");
    check_dense(entries, id_pos);
    return entries;
  }

 private:
  // The ids must be 0 .. n-1, each once: the model's vocabulary is len(encoder) = n rows, so
  // any other id indexes past the embedding (and a huge one would size the decoder table).
  void check_dense(const std::vector<VocabEntry>& entries, const std::vector<size_t>& id_pos) const {
    const int64_t n = static_cast<int64_t>(entries.size());
    std::vector<int64_t> owner(entries.size(), -1);  // id -> entry
    for (size_t k = 0; k < entries.size(); ++k) {
      const VocabEntry& e = entries[k];
      auto refuse = [&](const std::string& why) {
        fail(id_pos[k], str_cat("token ", printable(e.token), " has id ", e.id, why));
      };
      if (e.id >= n) refuse(str_cat(", but the ", n, " entries must have the ids 0..", n - 1));
      int64_t& o = owner[static_cast<size_t>(e.id)];
      if (o >= 0) {
        refuse(str_cat(", already the id of ", printable(entries[static_cast<size_t>(o)].token),
                       " (each id must appear once)"));
      }
      o = static_cast<int64_t>(k);
    }
  }
  // A token for a one-line message: quoted, control bytes, quote and backslash as \xNN, cut after
  // about 40 bytes (at a character boundary).
  static std::string printable(const std::string& token) {
    std::string out = "\"";
    for (size_t i = 0; i < token.size(); ++i) {
      const auto c = static_cast<unsigned char>(token[i]);
      if (i >= 40 && (c & 0xC0) != 0x80) {
        out += "...";
        break;
      }
      if (c < 0x20 || c == 0x7F || c == '"' || c == '\\') {
        out += str_cat("\\x", "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]);
      } else {
        out.push_back(static_cast<char>(c));
      }
    }
    return out + "\"";
  }

  [[noreturn]] void fail(size_t pos, const std::string& what) const {
    throw_error(path_, ":", line_of(text_, static_cast<int64_t>(pos)), ": ", what);
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  uint32_t hex4() {
    if (pos_ + 4 > text_.size()) fail(pos_, "truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text_[pos_ + k];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= c - '0';
      else if (c >= 'a' && c <= 'f')
        v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        v |= c - 'A' + 10;
      else
        fail(pos_, "invalid \\u escape");
    }
    pos_ += 4;
    return v;
  }

  std::string parse_string() {
    const size_t start = pos_;
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail(start, "unterminated string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<uint8_t>(c) < 0x20) fail(pos_, "control character in a string");
      if (c != '\\') {
        const int len = utf8_length(text_, pos_);
        if (len == 0) fail(pos_, "invalid UTF-8");
        out.append(text_.substr(pos_, len));
        pos_ += len;
        continue;
      }
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '/':
          out.push_back('/');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          uint32_t cp = hex4();
          // A high surrogate followed by an escaped low surrogate is one code point (Python json).
          if (cp >= 0xD800 && cp <= 0xDBFF && text_.substr(pos_, 2) == "\\u") {
            const size_t save = pos_;
            pos_ += 2;
            const uint32_t lo = hex4();
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              pos_ = save;
            }
          }
          data::append_utf8(cp, &out);
          break;
        }
        default:
          fail(pos_ - 1, "invalid escape in a string");
      }
    }
  }

  int32_t parse_id() {
    const size_t start = pos_;
    if (peek() == '-') fail(start, "token ids must be non-negative integers");
    int64_t v = 0;
    size_t digits = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      v = v * 10 + (text_[pos_] - '0');
      if (v >= (int64_t{1} << 31)) fail(start, "token id out of range (max 2^31-1)");
      ++pos_;
      ++digits;
    }
    if (digits == 0 || (digits > 1 && text_[start] == '0')) fail(start, "expected an integer token id");
    const char c = peek();
    if (c == '.' || c == 'e' || c == 'E') fail(start, "expected an integer token id");
    return static_cast<int32_t>(v);
  }

  const std::string& path_;
  std::string_view text_;
  size_t pos_ = 0;
};

// Python's str.split() separators (str.isspace) that can appear in a merges file.
bool is_python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

uint32_t decode_at(std::string_view s, size_t i, int len) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[k])); };
  switch (len) {
    case 1:
      return b(i);
    case 2:
      return ((b(i) & 0x1F) << 6) | (b(i + 1) & 0x3F);
    case 3:
      return ((b(i) & 0x0F) << 12) | ((b(i + 1) & 0x3F) << 6) | (b(i + 2) & 0x3F);
    default:
      return ((b(i) & 0x07) << 18) | ((b(i + 1) & 0x3F) << 12) | ((b(i + 2) & 0x3F) << 6) | (b(i + 3) & 0x3F);
  }
}

}  // namespace

std::vector<VocabEntry> read_vocab_json(const std::string& path) {
  MappedFile file(path);
  std::string_view text(reinterpret_cast<const char*>(file.data()), static_cast<size_t>(file.size()));
  return VocabParser(path, text).parse();
}

std::vector<MergeRule> read_merges(const std::string& path) {
  MappedFile file(path);
  std::string_view text(reinterpret_cast<const char*>(file.data()), static_cast<size_t>(file.size()));
  // Split into lines at \n, \r\n or \r, remembering whether the last one was terminated.
  std::vector<std::string_view> lines;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\n' && text[i] != '\r') continue;
    lines.push_back(text.substr(start, i - start));
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
    start = i + 1;
  }
  // split('\n') yields a final element after the last newline (maybe empty); [1:-1]
  // drops it together with the header: only terminated lines after line 1 count.
  std::vector<MergeRule> merges;
  for (size_t k = 1; k < lines.size(); ++k) {
    const std::string_view line = lines[k];
    const int64_t line_number = static_cast<int64_t>(k) + 1;
    std::vector<std::string_view> fields;
    size_t i = 0, field_start = 0;
    bool in_field = false;
    while (i < line.size()) {
      const int len = utf8_length(line, i);
      if (len == 0) throw_error(path, ":", line_number, ": invalid UTF-8");
      const bool space = is_python_space(decode_at(line, i, len));
      if (space && in_field) fields.push_back(line.substr(field_start, i - field_start));
      if (!space && !in_field) field_start = i;
      in_field = !space;
      i += len;
    }
    if (in_field) fields.push_back(line.substr(field_start));
    if (fields.empty()) continue;  // Python's (): takes a rank, never matches
    if (fields.size() != 2) {
      throw_error(path, ":", line_number, ": expected a merge of two tokens \"a b\", got ", fields.size(), " fields");
    }
    merges.push_back({std::string(fields[0]), std::string(fields[1]), static_cast<int32_t>(k - 1), line_number});
  }
  return merges;
}

}  // namespace megatron::data::detail
