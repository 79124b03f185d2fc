// TikTokenizer (see the header).
#include "data/tokenizer/tiktoken_tokenizer.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <climits>
#include <unordered_map>

#include "core/error.h"
#include "data/tokenizer/regex_splitter.h"

namespace megatron::data {

namespace {

constexpr const char* kPatternV1 =
    R"([^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
constexpr const char* kPatternV2 =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kNamedSpecial[] = {"<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>"};
constexpr int32_t kEosId = 2;

// RFC 4648 base64 (with '=' padding) -> bytes; false on a malformed string.
bool base64_decode(std::string_view in, std::string* out) {
  static const std::array<int8_t, 256> table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(a[i])] = static_cast<int8_t>(i);
    return t;
  }();
  out->clear();
  if (in.size() % 4 != 0) return false;
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = in[i + static_cast<size_t>(k)];
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else if (pad > 0 || (v[k] = table[static_cast<uint8_t>(c)]) < 0) {
        return false;
      }
    }
    const uint32_t w = (static_cast<uint32_t>(v[0]) << 18) | (static_cast<uint32_t>(v[1]) << 12) |
                       (static_cast<uint32_t>(v[2]) << 6) | static_cast<uint32_t>(v[3]);
    out->push_back(static_cast<char>(w >> 16));
    if (pad < 2) out->push_back(static_cast<char>((w >> 8) & 0xFF));
    if (pad < 1) out->push_back(static_cast<char>(w & 0xFF));
  }
  return true;
}

}  // namespace

struct TikTokenizer::Impl {
  std::string file;
  int64_t vocab_size = 0;
  int32_t num_special = 0;
  std::vector<std::string> special;                     // id -> text
  std::vector<std::string> bytes;                       // (id - num_special) -> bytes
  std::unordered_map<std::string_view, int32_t> id_of;  // bytes -> id (views into `bytes`)
  std::unique_ptr<detail::RegexSplitter> regex;

  int32_t rank(const char* p, size_t n) const {
    auto it = id_of.find(std::string_view(p, n));
    return it == id_of.end() ? INT32_MAX : it->second;
  }
  void encode_piece(std::string_view piece, std::vector<int32_t>* out) const;
  void encode_ordinary(std::string_view text, std::vector<int32_t>* out) const;
};

// tiktoken's byte_pair_merge: parts[k] = (start of part k, rank of parts k and k+1 joined).
void TikTokenizer::Impl::encode_piece(std::string_view piece, std::vector<int32_t>* out) const {
  const int32_t whole = rank(piece.data(), piece.size());
  if (whole != INT32_MAX) {
    out->push_back(whole);
    return;
  }
  thread_local std::vector<std::pair<size_t, int32_t>> parts;
  const size_t n = piece.size();
  parts.clear();
  for (size_t i = 0; i + 1 < n; ++i) parts.emplace_back(i, rank(piece.data() + i, 2));
  parts.emplace_back(n - 1, INT32_MAX);
  parts.emplace_back(n, INT32_MAX);
  // The rank of parts k, k+1 and k+2 joined, were k and k+1 merged.
  auto joined = [&](size_t k) {
    if (k + 3 >= parts.size()) return INT32_MAX;
    return rank(piece.data() + parts[k].first, parts[k + 3].first - parts[k].first);
  };
  while (true) {
    int32_t best = INT32_MAX;
    size_t at = 0;
    for (size_t k = 0; k + 1 < parts.size(); ++k) {
      if (parts[k].second < best) {
        best = parts[k].second;
        at = k;
      }
    }
    if (best == INT32_MAX) break;
    if (at > 0) parts[at - 1].second = joined(at - 1);
    parts[at].second = joined(at);
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  for (size_t k = 0; k + 1 < parts.size(); ++k) {
    const int32_t id = rank(piece.data() + parts[k].first, parts[k + 1].first - parts[k].first);
    MT_CHECK(id != INT32_MAX) << "a merged part is not a token (the 256 single bytes are)";
    out->push_back(id);
  }
}

void TikTokenizer::Impl::encode_ordinary(std::string_view text, std::vector<int32_t>* out) const {
  regex->split(text, /*keep_gaps=*/false, [&](int64_t offset, int64_t length, bool) {
    encode_piece(text.substr(static_cast<size_t>(offset), static_cast<size_t>(length)), out);
  });
}

TikTokenizer::TikTokenizer(const std::string& path, const std::string& pattern, int64_t num_special_tokens,
                           int64_t vocab_size)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.file = path;
  const int64_t named = static_cast<int64_t>(std::size(kNamedSpecial));
  if (num_special_tokens < named) {
    throw_error("[--tiktoken-num-special-tokens] must be at least ", named, " (", kNamedSpecial[0], " ... ",
                kNamedSpecial[named - 1], "), got ", num_special_tokens);
  }
  if (vocab_size <= num_special_tokens) {
    throw_error("[--vocab-size] ", vocab_size, " must exceed --tiktoken-num-special-tokens ", num_special_tokens);
  }
  if (path.size() < 5 || path.compare(path.size() - 5, 5, ".json") != 0) {
    throw_error("[--tokenizer-model] ", path, ": TikTokenizer reads a .json vocabulary (Megatron asserts the name)");
  }
  m.vocab_size = vocab_size;
  m.num_special = static_cast<int32_t>(num_special_tokens);
  for (const char* s : kNamedSpecial) m.special.emplace_back(s);
  for (int64_t i = named; i < num_special_tokens; ++i) m.special.push_back(str_cat("<SPECIAL_", i, ">"));

  simdjson::padded_string text;
  if (simdjson::padded_string::load(path).get(text) != simdjson::SUCCESS) throw_error(path, ": cannot read the file");
  simdjson::dom::parser parser;
  simdjson::dom::array list;
  if (parser.parse(text).get_array().get(list) != simdjson::SUCCESS) {
    throw_error(path, ": expected a JSON list of {\"rank\", \"token_bytes\", \"token_str\"}");
  }
  const int64_t keep = vocab_size - num_special_tokens;  // Megatron's vocab[:max_vocab]
  m.bytes.reserve(static_cast<size_t>(std::min<int64_t>(keep, static_cast<int64_t>(list.size()))));
  int64_t i = 0;
  std::string decoded;
  for (simdjson::dom::element e : list) {
    if (i == keep) break;
    simdjson::dom::object o;
    int64_t rank;
    std::string_view b64;
    std::string_view str;
    if (e.get_object().get(o) != simdjson::SUCCESS || o.size() != 3 ||
        o["rank"].get_int64().get(rank) != simdjson::SUCCESS ||
        o["token_bytes"].get_string().get(b64) != simdjson::SUCCESS ||
        o["token_str"].get_string().get(str) != simdjson::SUCCESS) {
      throw_error(path, ": entry ", i, " is not {\"rank\": int, \"token_bytes\": base64, \"token_str\": string}");
    }
    if (rank != i) throw_error(path, ": entry ", i, " has rank ", rank, " (ranks must be 0, 1, 2, ... in order)");
    if (!base64_decode(b64, &decoded) || decoded.empty())
      throw_error(path, ": entry ", i, ": token_bytes is not base64");
    if (i < 256 && (decoded.size() != 1 || static_cast<uint8_t>(decoded[0]) != i)) {
      throw_error(path, ": entry ", i, " must be the single byte ", i, " (the first 256 entries are the bytes)");
    }
    m.bytes.push_back(decoded);
    ++i;
  }
  if (i < keep) {
    throw_error("[--vocab-size] ", vocab_size, " needs ", keep, " entries in ", path, " (after ", num_special_tokens,
                " special tokens) but it has ", i, ": give --vocab-size ", i + num_special_tokens);
  }
  m.id_of.reserve(m.bytes.size() * 2);
  for (size_t k = 0; k < m.bytes.size(); ++k) {
    if (!m.id_of.emplace(m.bytes[k], static_cast<int32_t>(k) + m.num_special).second) {
      throw_error(path, ": entry ", k, " repeats the bytes of an earlier entry");
    }
  }
  const char* pat = pattern == "v1" ? kPatternV1 : pattern == "v2" ? kPatternV2 : nullptr;
  if (pat == nullptr) throw_error("[--tiktoken-pattern] expected v1 or v2, got '", pattern, "'");
  m.regex = std::make_unique<detail::RegexSplitter>(pat, str_cat("--tiktoken-pattern ", pattern));
}

TikTokenizer::~TikTokenizer() = default;

const char* TikTokenizer::pattern_v1() { return kPatternV1; }
const char* TikTokenizer::pattern_v2() { return kPatternV2; }

int64_t TikTokenizer::vocab_size() const { return impl_->vocab_size; }

int32_t TikTokenizer::eod() const { return kEosId; }

void TikTokenizer::encode(std::string_view text, std::vector<int32_t>* out) const {
  const Impl& m = *impl_;
  detail::check_utf8(text, m.file.c_str());
  // Special tokens: every one is "<...>" with no '>' inside, so none is a prefix of another
  // and the leftmost match is the only one at its position.
  size_t start = 0;
  size_t i = text.find('<');
  while (i != std::string_view::npos) {
    const size_t close = text.find('>', i + 1);
    if (close == std::string_view::npos) break;
    const std::string_view candidate = text.substr(i, close - i + 1);
    int32_t id = -1;
    for (int32_t k = 0; k < static_cast<int32_t>(std::size(kNamedSpecial)); ++k) {
      if (candidate == kNamedSpecial[k]) id = k;
    }
    if (id < 0 && candidate.size() > 10 && candidate.substr(0, 9) == "<SPECIAL_") {
      const std::string_view digits = candidate.substr(9, candidate.size() - 10);
      int64_t v = 0;
      bool ok = !digits.empty() && digits.size() <= 9 && (digits[0] != '0' || digits.size() == 1);
      for (char c : digits) ok = ok && c >= '0' && c <= '9' && ((v = v * 10 + (c - '0')), true);
      if (ok && v >= static_cast<int64_t>(std::size(kNamedSpecial)) && v < m.num_special) id = static_cast<int32_t>(v);
    }
    if (id < 0) {
      i = text.find('<', i + 1);
      continue;
    }
    if (i > start) m.encode_ordinary(text.substr(start, i - start), out);
    out->push_back(id);
    start = close + 1;
    i = text.find('<', start);
  }
  if (start < text.size()) m.encode_ordinary(text.substr(start), out);
}

std::string TikTokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& m = *impl_;
  std::string text;
  for (const int32_t id : ids) {
    if (id >= 0 && id < m.num_special) {
      text += m.special[static_cast<size_t>(id)];
    } else if (id >= m.num_special && static_cast<size_t>(id - m.num_special) < m.bytes.size()) {
      text += m.bytes[static_cast<size_t>(id - m.num_special)];
    } else {
      throw_error("decode: token id ", id, " is not in ", m.file, " (vocabulary ", m.vocab_size, ")");
    }
  }
  return text;
}

}  // namespace megatron::data
