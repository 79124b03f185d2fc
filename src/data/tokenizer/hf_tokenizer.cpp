// HuggingFaceTokenizer: tokenizer.json read with simdjson (see the header for what is
// supported and Megatron's semantics).
#include "data/tokenizer/hf_tokenizer.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <filesystem>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "data/tokenizer/byte_level_bpe.h"
#include "data/tokenizer/hf_normalizer.h"
#include "data/tokenizer/regex_splitter.h"

namespace megatron::data {

namespace {

namespace fs = std::filesystem;
using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

// GPT-2's pattern, which ByteLevel's use_regex applies (tokenizers' byte_level.rs).
constexpr const char* kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext };

struct PreStep {
  std::unique_ptr<detail::RegexSplitter> regex;  // null: a ByteLevel step without use_regex
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
};

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

// Reads a file's JSON (simdjson keeps the buffer; elements live as long as the parser).
struct JsonFile {
  std::string path;
  simdjson::padded_string text;
  simdjson::dom::parser parser;
  element root;
  explicit JsonFile(const std::string& p) : path(p) {
    if (simdjson::padded_string::load(p).get(text) != simdjson::SUCCESS) throw_error(p, ": cannot read the file");
    const auto err = parser.parse(text).get(root);
    if (err != simdjson::SUCCESS) throw_error(p, ": not valid JSON (", simdjson::error_message(err), ")");
  }
};

std::string field_type(element e) {
  std::string_view t;
  if (e.is_null()) return "null";
  object o;
  if (e.get_object().get(o) != simdjson::SUCCESS) return "?";
  if (o["type"].get_string().get(t) != simdjson::SUCCESS) return "?";
  return std::string(t);
}

std::string get_string(element parent, const char* key, const std::string& where) {
  std::string_view s;
  if (parent[key].get_string().get(s) != simdjson::SUCCESS) throw_error(where, ": expected a string \"", key, "\"");
  return std::string(s);
}

bool get_bool(element parent, const char* key, bool fallback) {
  bool b = fallback;
  element e;
  if (parent[key].get(e) != simdjson::SUCCESS || e.is_null()) return fallback;
  if (e.get_bool().get(b) != simdjson::SUCCESS) return fallback;
  return b;
}

// What tokenizer_config.json / special_tokens_map.json say. Read with simdjson's on-demand
// parser, which skips what is not asked for (tokenizer_config.json's model_max_length is often
// 1e30 written as an integer, which a DOM parse rejects).
struct TokenizerConfig {
  std::optional<std::string> eos, bos, sep, tokenizer_class;
  std::optional<bool> add_bos_token, add_eos_token;
};

TokenizerConfig read_tokenizer_config(const std::string& path) {
  simdjson::padded_string text;
  if (simdjson::padded_string::load(path).get(text) != simdjson::SUCCESS) throw_error(path, ": cannot read the file");
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document doc;
  simdjson::ondemand::object obj;
  if (parser.iterate(text).get(doc) != simdjson::SUCCESS || doc.get_object().get(obj) != simdjson::SUCCESS) {
    throw_error(path, ": not a JSON object");
  }
  TokenizerConfig c;
  for (auto field : obj) {
    std::string_view key;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS) throw_error(path, ": not valid JSON");
    simdjson::ondemand::value v = field.value();
    auto token = [&](std::optional<std::string>* into) {
      std::string_view s;
      simdjson::ondemand::object o;
      if (v.get_string().get(s) == simdjson::SUCCESS) {
        *into = std::string(s);
      } else if (v.get_object().get(o) == simdjson::SUCCESS && o["content"].get_string().get(s) == simdjson::SUCCESS) {
        *into = std::string(s);
      }
    };
    bool b;
    if (key == "eos_token") {
      token(&c.eos);
    } else if (key == "bos_token") {
      token(&c.bos);
    } else if (key == "sep_token") {
      token(&c.sep);
    } else if (key == "tokenizer_class") {
      token(&c.tokenizer_class);
    } else if (key == "add_bos_token" && v.get_bool().get(b) == simdjson::SUCCESS) {
      c.add_bos_token = b;
    } else if (key == "add_eos_token" && v.get_bool().get(b) == simdjson::SUCCESS) {
      c.add_eos_token = b;
    }
  }
  return c;
}

bool is_space_byte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_word_byte(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }

}  // namespace

struct HuggingFaceTokenizer::Impl {
  std::string file;  // tokenizer.json
  std::unique_ptr<detail::ByteLevelBpe> bpe;
  std::vector<PreStep> steps;
  std::vector<detail::NormalizerStep> normalizer;
  bool add_prefix_space = false;
  bool byte_level = false;  // the pre-tokenizer has its ByteLevel step
  std::vector<AddedToken> added;
  std::array<std::vector<int32_t>, 256> added_by_first_byte;  // indices into added, longest first
  std::unordered_map<int32_t, int32_t> added_of_id;           // id -> index into added
  std::unordered_map<std::string, int32_t> token_id;          // every token string -> id
  std::vector<int32_t> prefix, suffix;                        // the post-processor's template
  int64_t vocab_size = 0;
  int32_t eod = -1;
  std::string eod_problem;

  void parse_normalizer(element e);
  void parse_pre_tokenizer(element e);
  void parse_post_processor(element e);
  void encode_segment(std::string_view segment, std::vector<int32_t>* out) const;
};

// A Split or Replace "pattern": {"Regex": r} as is, {"String": s} quoted for PCRE2.
static std::string pattern_regex(element e, const std::string& where) {
  std::string_view pattern;
  if (e["pattern"]["Regex"].get_string().get(pattern) == simdjson::SUCCESS) return std::string(pattern);
  if (e["pattern"]["String"].get_string().get(pattern) != simdjson::SUCCESS) {
    throw_error(where, " needs \"pattern\": {\"Regex\": ...} or {\"String\": ...}");
  }
  std::string regex;
  for (char c : pattern) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && static_cast<unsigned char>(c) < 0x80) regex += '\\';
    regex += c;
  }
  return regex;
}

void HuggingFaceTokenizer::Impl::parse_normalizer(element e) {
  const std::string type = field_type(e);
  using Kind = detail::NormalizerStep::Kind;
  detail::NormalizerStep step;
  if (type == "Sequence") {
    array list;
    if (e["normalizers"].get_array().get(list) != simdjson::SUCCESS) {
      throw_error(file, ": normalizer Sequence without a \"normalizers\" list");
    }
    for (element n : list) parse_normalizer(n);
    return;
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.kind = type == "NFC" ? Kind::kNfc : type == "NFD" ? Kind::kNfd : type == "NFKC" ? Kind::kNfkc : Kind::kNfkd;
  } else if (type == "Replace") {
    step.kind = Kind::kReplace;
    const std::string where = str_cat(file, ": normalizer Replace");
    step.pattern = std::make_unique<detail::RegexSplitter>(pattern_regex(e, where), where);
    step.content = get_string(e, "content", where);
  } else if (type == "Prepend") {
    step.kind = Kind::kPrepend;
    step.content = get_string(e, "prepend", str_cat(file, ": normalizer Prepend"));
  } else {
    throw_error(file, ": normalizer \"", type,
                "\" is not supported yet (NFC, NFD, NFKC, NFKD, Replace, Prepend, Sequence)");
  }
  normalizer.push_back(std::move(step));
}

void HuggingFaceTokenizer::Impl::parse_pre_tokenizer(element e) {
  const std::string type = field_type(e);
  if (type == "Sequence") {
    array list;
    if (e["pretokenizers"].get_array().get(list) != simdjson::SUCCESS) {
      throw_error(file, ": pre_tokenizer Sequence without a \"pretokenizers\" list");
    }
    for (element step : list) parse_pre_tokenizer(step);
    return;
  }
  if (type == "ByteLevel") {
    if (byte_level) throw_error(file, ": pre_tokenizer has two ByteLevel steps");
    byte_level = true;
    if (get_bool(e, "add_prefix_space", true)) {
      if (!steps.empty())
        throw_error(file, ": pre_tokenizer ByteLevel with add_prefix_space after a Split is not supported");
      add_prefix_space = true;
    }
    PreStep step;
    if (get_bool(e, "use_regex", true)) step.regex = std::make_unique<detail::RegexSplitter>(kByteLevelPattern, file);
    steps.push_back(std::move(step));
    return;
  }
  if (type == "Split") {
    PreStep step;
    const std::string regex = pattern_regex(e, str_cat(file, ": pre_tokenizer Split"));
    const std::string behavior = get_string(e, "behavior", str_cat(file, ": pre_tokenizer Split"));
    if (behavior == "Isolated") {
      step.behavior = Behavior::kIsolated;
    } else if (behavior == "Removed") {
      step.behavior = Behavior::kRemoved;
    } else if (behavior == "MergedWithPrevious") {
      step.behavior = Behavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      step.behavior = Behavior::kMergedWithNext;
    } else {
      throw_error(file, ": pre_tokenizer Split behavior \"", behavior, "\" is not supported");
    }
    step.invert = get_bool(e, "invert", false);
    step.regex = std::make_unique<detail::RegexSplitter>(regex, str_cat(file, ": pre_tokenizer Split"));
    steps.push_back(std::move(step));
    return;
  }
  throw_error(file, ": pre_tokenizer \"", type, "\" is not supported (byte-level BPE: ByteLevel, Split, Sequence)");
}

void HuggingFaceTokenizer::Impl::parse_post_processor(element e) {
  const std::string type = field_type(e);
  if (type == "null" || type == "ByteLevel") return;
  if (type == "Sequence") {
    array list;
    if (e["processors"].get_array().get(list) != simdjson::SUCCESS) {
      throw_error(file, ": post_processor Sequence without a \"processors\" list");
    }
    for (element p : list) parse_post_processor(p);
    return;
  }
  std::vector<int32_t> before, after;
  if (type == "TemplateProcessing") {
    array single;
    object special;
    if (e["single"].get_array().get(single) != simdjson::SUCCESS ||
        e["special_tokens"].get_object().get(special) != simdjson::SUCCESS) {
      throw_error(file, ": post_processor TemplateProcessing needs \"single\" and \"special_tokens\"");
    }
    bool seen_sequence = false;
    for (element piece : single) {
      std::string_view name;
      element sequence;
      if (piece["Sequence"].get(sequence) == simdjson::SUCCESS) {
        seen_sequence = true;
        continue;
      }
      if (piece["SpecialToken"]["id"].get_string().get(name) != simdjson::SUCCESS) {
        throw_error(file,
                    ": post_processor TemplateProcessing: a \"single\" item is neither Sequence nor SpecialToken");
      }
      array ids;
      if (special[name]["ids"].get_array().get(ids) != simdjson::SUCCESS) {
        throw_error(file, ": post_processor TemplateProcessing: special token \"", name, "\" has no \"ids\"");
      }
      for (element id : ids) {
        int64_t v;
        if (id.get_int64().get(v) != simdjson::SUCCESS || v < 0 || v > INT32_MAX) {
          throw_error(file, ": post_processor TemplateProcessing: special token \"", name, "\" has a bad id");
        }
        (seen_sequence ? after : before).push_back(static_cast<int32_t>(v));
      }
    }
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    int64_t cls, sep;
    if (e["cls"].at_pointer("/1").get_int64().get(cls) != simdjson::SUCCESS ||
        e["sep"].at_pointer("/1").get_int64().get(sep) != simdjson::SUCCESS) {
      throw_error(file, ": post_processor ", type, " needs \"cls\" and \"sep\" as [token, id]");
    }
    before.push_back(static_cast<int32_t>(cls));
    after.push_back(static_cast<int32_t>(sep));
  } else {
    throw_error(file, ": post_processor \"", type, "\" is not supported");
  }
  // A later processor wraps the result of the earlier ones.
  prefix.insert(prefix.begin(), before.begin(), before.end());
  suffix.insert(suffix.end(), after.begin(), after.end());
}

HuggingFaceTokenizer::HuggingFaceTokenizer(const std::string& path) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  m.file = is_dir ? (fs::path(path) / "tokenizer.json").string() : path;
  const fs::path dir = is_dir ? fs::path(path) : fs::path(path).parent_path();
  if (is_dir && !fs::exists(m.file, ec)) throw_error(path, ": the directory has no tokenizer.json");

  JsonFile json(m.file);
  const element root = json.root;
  element e;
  if (root["normalizer"].get(e) == simdjson::SUCCESS && !e.is_null()) m.parse_normalizer(e);

  // The model.
  element model;
  if (root["model"].get(model) != simdjson::SUCCESS) throw_error(m.file, ": no \"model\"");
  if (field_type(model) != "BPE")
    throw_error(m.file, ": model \"", field_type(model), "\" is not supported (only BPE)");
  if (get_bool(model, "byte_fallback", false)) {
    throw_error(m.file,
                ": model BPE with byte_fallback (a SentencePiece-style vocab) is not supported; only byte-level BPE");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    std::string_view s;
    if (model[key].get_string().get(s) == simdjson::SUCCESS && !s.empty()) {
      throw_error(m.file, ": model BPE with ", key, " is not supported");
    }
  }
  double dropout = 0;
  if (model["dropout"].get_double().get(dropout) == simdjson::SUCCESS && dropout != 0) {
    throw_error(m.file, ": model BPE with dropout is not supported (training-time sampling)");
  }
  object vocab_obj;
  if (model["vocab"].get_object().get(vocab_obj) != simdjson::SUCCESS)
    throw_error(m.file, ": model.vocab is not an object");
  std::vector<detail::VocabEntry> vocab;
  std::unordered_set<int32_t> ids_seen;
  for (auto [key, value] : vocab_obj) {
    int64_t id;
    if (value.get_int64().get(id) != simdjson::SUCCESS || id < 0 || id > INT32_MAX) {
      throw_error(m.file, ": model.vocab[\"", key, "\"] is not a token id");
    }
    if (!ids_seen.insert(static_cast<int32_t>(id)).second) {
      throw_error(m.file, ": model.vocab id ", id, " appears twice");
    }
    vocab.push_back({std::string(key), static_cast<int32_t>(id)});
    m.token_id.emplace(std::string(key), static_cast<int32_t>(id));
  }
  array merges_arr;
  if (model["merges"].get_array().get(merges_arr) != simdjson::SUCCESS)
    throw_error(m.file, ": model.merges is not a list");
  std::vector<detail::MergeRule> merges;
  int32_t rank = 0;
  for (element merge : merges_arr) {
    std::string_view s;
    detail::MergeRule r;
    r.rank = rank;
    r.line = rank + 1;
    if (merge.get_string().get(s) == simdjson::SUCCESS) {
      const size_t space = s.find(' ');
      if (space == std::string_view::npos || s.find(' ', space + 1) != std::string_view::npos) {
        throw_error(m.file, ": model.merges[", rank, "] \"", s, "\" is not two tokens");
      }
      r.first = std::string(s.substr(0, space));
      r.second = std::string(s.substr(space + 1));
    } else {
      std::string_view a, b;
      if (merge.at_pointer("/0").get_string().get(a) != simdjson::SUCCESS ||
          merge.at_pointer("/1").get_string().get(b) != simdjson::SUCCESS) {
        throw_error(m.file, ": model.merges[", rank, "] is neither \"a b\" nor [\"a\", \"b\"]");
      }
      r.first = std::string(a);
      r.second = std::string(b);
    }
    merges.push_back(std::move(r));
    ++rank;
  }
  m.bpe = std::make_unique<detail::ByteLevelBpe>(vocab, merges, m.file, str_cat(m.file, ": model.merges"),
                                                 get_bool(model, "ignore_merges", false));

  // The pre-tokenizer: byte-level BPE needs a ByteLevel step.
  if (root["pre_tokenizer"].get(e) != simdjson::SUCCESS || e.is_null()) {
    throw_error(m.file, ": no pre_tokenizer (byte-level BPE needs ByteLevel)");
  }
  m.parse_pre_tokenizer(e);
  if (!m.byte_level) throw_error(m.file, ": pre_tokenizer has no ByteLevel step: only byte-level BPE is supported");

  // Added tokens, matched in the text before pre-tokenization (leftmost, then longest).
  array added;
  if (root["added_tokens"].get_array().get(added) == simdjson::SUCCESS) {
    for (element t : added) {
      AddedToken a;
      int64_t id;
      if (t["id"].get_int64().get(id) != simdjson::SUCCESS || id < 0 || id > INT32_MAX) {
        throw_error(m.file, ": added_tokens: an entry without a valid \"id\"");
      }
      a.id = static_cast<int32_t>(id);
      a.content = get_string(t, "content", str_cat(m.file, ": added_tokens id ", id));
      if (a.content.empty()) throw_error(m.file, ": added_tokens id ", id, " has empty content");
      a.special = get_bool(t, "special", false);
      a.lstrip = get_bool(t, "lstrip", false);
      a.rstrip = get_bool(t, "rstrip", false);
      a.single_word = get_bool(t, "single_word", false);
      m.token_id[a.content] = a.id;
      m.added_of_id[a.id] = static_cast<int32_t>(m.added.size());
      m.added.push_back(std::move(a));
    }
  }
  for (int32_t k = 0; k < static_cast<int32_t>(m.added.size()); ++k) {
    m.added_by_first_byte[static_cast<uint8_t>(m.added[static_cast<size_t>(k)].content[0])].push_back(k);
  }
  for (auto& list : m.added_by_first_byte) {
    std::stable_sort(list.begin(), list.end(), [&](int32_t a, int32_t b) {
      return m.added[static_cast<size_t>(a)].content.size() > m.added[static_cast<size_t>(b)].content.size();
    });
  }
  m.vocab_size = static_cast<int64_t>(m.token_id.size());

  if (root["post_processor"].get(e) == simdjson::SUCCESS) m.parse_post_processor(e);

  // transformers' configuration: the special tokens, and the classes that rebuild the template.
  std::optional<std::string> eos, bos, sep;
  std::string config_used;
  for (const char* name : {"special_tokens_map.json", "tokenizer_config.json"}) {
    const fs::path p = dir / name;
    if (!fs::exists(p, ec)) continue;
    const TokenizerConfig config = read_tokenizer_config(p.string());
    if (config.eos) eos = config.eos;
    if (config.bos) bos = config.bos;
    if (config.sep) sep = config.sep;
    config_used = p.string();
    const std::string cls = config.tokenizer_class.value_or("");
    if (cls == "LlamaTokenizerFast" || cls == "LlamaTokenizer" || cls == "CodeLlamaTokenizerFast") {
      // LlamaTokenizerFast.update_post_processor: [bos] $A [eos] from add_bos_token (default
      // true) and add_eos_token (default false).
      m.prefix.clear();
      m.suffix.clear();
      auto id_of = [&](const std::optional<std::string>& t, const char* what) {
        if (!t || m.token_id.count(*t) == 0)
          throw_error(p.string(), ": ", what, " is needed by ", cls, " but not a token");
        return m.token_id.at(*t);
      };
      if (config.add_bos_token.value_or(true)) m.prefix.push_back(id_of(bos, "bos_token"));
      if (config.add_eos_token.value_or(false)) m.suffix.push_back(id_of(eos, "eos_token"));
    }
  }
  // Megatron: eos_token, else sep_token (HuggingFaceTokenizer.__init__).
  const std::optional<std::string> end = eos ? eos : sep;
  if (!end) {
    m.eod_problem = str_cat(m.file,
                            ": no eos_token (Megatron's end of document): put a tokenizer_config.json with "
                            "\"eos_token\" beside it");
  } else if (m.token_id.count(*end) == 0) {
    m.eod_problem = str_cat(config_used, ": eos_token \"", *end, "\" is not a token of ", m.file);
  } else {
    m.eod = m.token_id.at(*end);
  }
}

HuggingFaceTokenizer::~HuggingFaceTokenizer() = default;

int64_t HuggingFaceTokenizer::vocab_size() const { return impl_->vocab_size; }

int32_t HuggingFaceTokenizer::eod() const {
  if (impl_->eod < 0) throw Error(impl_->eod_problem);
  return impl_->eod;
}

// One segment between added tokens: the ByteLevel prefix space, the pre-tokenizer steps, BPE.
void HuggingFaceTokenizer::Impl::encode_segment(std::string_view segment, std::vector<int32_t>* out) const {
  thread_local std::string text;
  thread_local std::vector<std::pair<int64_t, int64_t>> pieces, next;
  text.assign(segment);
  if (!normalizer.empty()) detail::normalize(normalizer, &text, file);
  if (add_prefix_space && !text.empty() && text[0] != ' ') text.insert(0, " ");
  if (text.empty()) return;
  pieces.assign(1, {0, static_cast<int64_t>(text.size())});
  for (const PreStep& step : steps) {
    if (step.regex == nullptr) continue;
    next.clear();
    for (const auto& [offset, length] : pieces) {
      const std::string_view piece(text.data() + offset, static_cast<size_t>(length));
      int64_t pending = -1;  // MergedWithNext: start of a delimiter waiting for what follows
      step.regex->split(piece, /*keep_gaps=*/true, [&](int64_t o, int64_t n, bool matched) {
        const bool delimiter = matched != step.invert;
        const int64_t start = offset + o;
        switch (step.behavior) {
          case Behavior::kIsolated:
            next.emplace_back(start, n);
            break;
          case Behavior::kRemoved:
            if (!delimiter) next.emplace_back(start, n);
            break;
          case Behavior::kMergedWithPrevious:
            if (delimiter && !next.empty() && next.back().first + next.back().second == start &&
                next.back().first >= offset) {
              next.back().second += n;
            } else {
              next.emplace_back(start, n);
            }
            break;
          case Behavior::kMergedWithNext:
            if (delimiter) {
              if (pending < 0) pending = start;
            } else {
              const int64_t s = pending >= 0 ? pending : start;
              next.emplace_back(s, start + n - s);
              pending = -1;
            }
            break;
        }
      });
      if (pending >= 0) next.emplace_back(pending, offset + length - pending);
    }
    pieces.swap(next);
  }
  for (const auto& [offset, length] : pieces) {
    if (length > 0) bpe->encode_piece(text, offset, length, out);
  }
}

void HuggingFaceTokenizer::encode(std::string_view text, std::vector<int32_t>* out) const {
  const Impl& m = *impl_;
  detail::check_utf8(text, m.file.c_str());
  out->insert(out->end(), m.prefix.begin(), m.prefix.end());
  const size_t n = text.size();
  size_t segment_start = 0;
  size_t i = 0;
  while (i < n) {
    const auto& candidates = m.added_by_first_byte[static_cast<uint8_t>(text[i])];
    const AddedToken* hit = nullptr;
    for (const int32_t k : candidates) {
      const AddedToken& a = m.added[static_cast<size_t>(k)];
      if (text.compare(i, a.content.size(), a.content) != 0) continue;
      if (a.single_word) {
        const bool left_ok = i == 0 || !is_word_byte(static_cast<unsigned char>(text[i - 1]));
        const size_t j = i + a.content.size();
        const bool right_ok = j >= n || !is_word_byte(static_cast<unsigned char>(text[j]));
        if (!left_ok || !right_ok) continue;
      }
      hit = &a;
      break;
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + hit->content.size();
    if (hit->lstrip) {
      while (start > segment_start && is_space_byte(text[start - 1])) --start;
    }
    if (hit->rstrip) {
      while (stop < n && is_space_byte(text[stop])) ++stop;
    }
    if (start > segment_start) m.encode_segment(text.substr(segment_start, start - segment_start), out);
    out->push_back(hit->id);
    segment_start = i = stop;
  }
  if (segment_start < n) m.encode_segment(text.substr(segment_start), out);
  out->insert(out->end(), m.suffix.begin(), m.suffix.end());
}

std::string HuggingFaceTokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& m = *impl_;
  std::string text;
  for (const int32_t id : ids) {
    auto it = m.added_of_id.find(id);
    if (it != m.added_of_id.end()) {
      text += m.added[static_cast<size_t>(it->second)].content;
      continue;
    }
    if (!m.bpe->append_bytes(id, &text)) throw_error("decode: token id ", id, " is not a token of ", m.file);
  }
  return text;
}

}  // namespace megatron::data
