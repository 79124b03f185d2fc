// Tests of src/data/tokenizer/tokenizer.* (make_tokenizer: flag checks, one-line load errors
// naming the flag and the file), regex_splitter.* (White_Space rewrite, pieces), and the
// load errors of hf_tokenizer.* and tiktoken_tokenizer.*. Ids against the reference libraries
// are in the *_reference_test scripts beside this file.
#include "data/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/hf_tokenizer.h"
#include "data/tokenizer/regex_splitter.h"
#include "data/tokenizer/tiktoken_tokenizer.h"
#include "support/paths.h"

namespace megatron::data {
namespace {

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

std::string error_of(const TokenizerOptions& o) {
  try {
    make_tokenizer(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MakeTokenizer, FlagCombinationsAreCheckedAllAtOnce) {
  TokenizerOptions o;
  o.type = "Llama2Tokenizer";
  o.vocab_file = "v.json";
  EXPECT_EQ(error_of(o),
            "[--tokenizer-model] is required by --tokenizer-type Llama2Tokenizer; [--vocab-file] is not used by "
            "--tokenizer-type Llama2Tokenizer");
  o = {};
  o.tokenizer_model = "m.model";
  o.vocab_size = 5;
  EXPECT_EQ(error_of(o),
            "[--vocab-file] is required by --tokenizer-type GPT2BPETokenizer; [--merge-file] is required by "
            "--tokenizer-type GPT2BPETokenizer; [--tokenizer-model] is not used by --tokenizer-type GPT2BPETokenizer; "
            "[--vocab-size] is not used by --tokenizer-type GPT2BPETokenizer");
  o = {};
  o.type = "BertWordPieceCase";
  EXPECT_EQ(error_of(o).rfind("[--tokenizer-type] 'BertWordPieceCase' is not supported (expected GPT2BPETokenizer|", 0),
            0u);
  // HuggingFaceTokenizer accepts --vocab-size (Megatron's Llama 3 example passes it; it is not used).
  o = {};
  o.type = "HuggingFaceTokenizer";
  o.tokenizer_model = "/nonexistent/tokenizer.json";
  o.vocab_size = 128256;
  EXPECT_EQ(error_of(o).rfind("[--tokenizer-model] /nonexistent/tokenizer.json: cannot open: ", 0), 0u) << error_of(o);
}

TEST(MakeTokenizer, UnloadableFilesNameTheFlagAndTheFile) {
  const std::string dir = test::scratch_dir("tok_unloadable");
  write_file(dir + "/garbage.model", "not a protobuf at all\n");
  write_file(dir + "/bad.json", "{\"model\": ");
  for (const char* type : {"Llama2Tokenizer", "SentencePieceTokenizer", "GPTSentencePieceTokenizer"}) {
    TokenizerOptions o;
    o.type = type;
    o.tokenizer_model = dir + "/garbage.model";
    const std::string e = error_of(o);
    EXPECT_EQ(e.rfind("[--tokenizer-model] " + dir + "/garbage.model is not a SentencePiece model", 0), 0u) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    o.tokenizer_model = dir + "/missing.model";
    EXPECT_EQ(error_of(o).rfind("[--tokenizer-model] " + dir + "/missing.model: cannot open", 0), 0u) << error_of(o);
  }
  TokenizerOptions hf;
  hf.type = "HuggingFaceTokenizer";
  hf.tokenizer_model = dir + "/bad.json";
  EXPECT_EQ(error_of(hf).rfind("[--tokenizer-model] " + dir + "/bad.json: not valid JSON", 0), 0u) << error_of(hf);
  hf.tokenizer_model = dir;  // a directory without tokenizer.json
  EXPECT_EQ(error_of(hf), "[--tokenizer-model] " + dir + ": the directory has no tokenizer.json");
  TokenizerOptions tik;
  tik.type = "TikTokenizer";
  tik.tokenizer_model = dir + "/garbage.model";
  EXPECT_EQ(error_of(tik).rfind("[--tokenizer-model] " + dir + "/garbage.model: TikTokenizer reads a .json", 0), 0u);
  TokenizerOptions gpt2;
  gpt2.vocab_file = dir + "/bad.json";
  gpt2.merge_file = test::gpt2_merge_file();
  EXPECT_EQ(error_of(gpt2).rfind("[--vocab-file] " + dir + "/bad.json:", 0), 0u) << error_of(gpt2);
}

TEST(RegexSplitter, WhitespaceIsUnicodeWhiteSpace) {
  EXPECT_EQ(detail::RegexSplitter::rewrite_whitespace(R"(\s+(?!\S)|[^\s\p{L}]|[\]\s]|\\s)"),
            R"([\t-\r\x{85}\p{Z}]+(?![^\t-\r\x{85}\p{Z}])|[^\t-\r\x{85}\p{Z}\p{L}]|[\]\t-\r\x{85}\p{Z}]|\\s)");
  // U+0085 is White_Space (Oniguruma, fancy-regex, Python) and U+180E is not; PCRE2's own \s
  // would say the opposite of the second.
  const detail::RegexSplitter ws(R"(\s+|\S+)", "test");
  std::vector<std::string> pieces;
  const std::string text =
      "a\xC2\x85"
      "b\xE1\xA0\x8E"
      "c \t\n";
  ws.split(text, true, [&](int64_t o, int64_t n, bool) { pieces.push_back(text.substr(o, n)); });
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "\xC2\x85",
                                              "b\xE1\xA0\x8E"
                                              "c",
                                              " \t\n"}));
}

TEST(RegexSplitter, GapsAndInvalidUtf8) {
  const detail::RegexSplitter digits(R"(\p{N}{1,3})", "test");
  const std::string text = "ab12345c6";
  std::vector<std::pair<std::string, bool>> pieces;
  digits.split(text, true, [&](int64_t o, int64_t n, bool m) { pieces.emplace_back(text.substr(o, n), m); });
  EXPECT_EQ(pieces, (std::vector<std::pair<std::string, bool>>{
                        {"ab", false}, {"123", true}, {"45", true}, {"c", false}, {"6", true}}));
  pieces.clear();
  digits.split(text, false, [&](int64_t o, int64_t n, bool m) { pieces.emplace_back(text.substr(o, n), m); });
  EXPECT_EQ(pieces.size(), 3u);
  try {
    digits.split("ok \xFF bad", true, [](int64_t, int64_t, bool) {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "test: the text is not valid UTF-8 (byte 3 of 8)");
  }
  EXPECT_THROW(detail::RegexSplitter("(unclosed", "f.json: pre_tokenizer Split"), Error);
}

// A minimal byte-level tokenizer.json: the 256 byte characters, "ab" = 256 by one merge.
std::string byte_level_json(const std::string& extra_fields, const std::string& pre_tokenizer) {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = detail::kByteEncoder[static_cast<size_t>(b)];
    std::string ch;
    if (cp < 0x80) {
      ch = cp == '"' ? "\\\"" : cp == '\\' ? "\\\\" : std::string(1, static_cast<char>(cp));
    } else {
      ch.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      ch.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    vocab += "\"" + ch + "\": " + std::to_string(b) + ", ";
  }
  vocab += "\"ab\": 256";
  return "{" + extra_fields + "\"pre_tokenizer\": " + pre_tokenizer + ", \"model\": {\"type\": \"BPE\", \"vocab\": {" +
         vocab + "}, \"merges\": [\"a b\"]}}";
}

TEST(HuggingFaceTokenizer, SmallFileAndUnsupportedParts) {
  const std::string dir = test::scratch_dir("tok_hf_small");
  const std::string byte_level = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";
  write_file(dir + "/tokenizer.json",
             byte_level_json(R"("added_tokens": [{"id": 257, "content": "<eos>", "special": true}], )", byte_level));
  write_file(dir + "/tokenizer_config.json",
             R"({"eos_token": {"content": "<eos>"}, "model_max_length": 1000000000000000019884624838656})");
  HuggingFaceTokenizer t(dir);
  EXPECT_EQ(t.vocab_size(), 258);
  EXPECT_EQ(t.eod(), 257);
  std::vector<int32_t> ids;
  t.encode("ab<eos>ba", &ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{256, 257, 'b', 'a'}));
  EXPECT_EQ(t.decode(ids), "ab<eos>ba");
  EXPECT_THROW(t.decode(std::vector<int32_t>{258}), Error);

  // Without a configuration beside it there is no eos_token: only eod() fails, naming the file.
  const std::string lone = test::scratch_dir("tok_hf_alone");
  write_file(lone + "/alone.json", byte_level_json("", byte_level));
  HuggingFaceTokenizer alone(lone + "/alone.json");
  try {
    alone.eod();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(lone + "/alone.json: no eos_token", 0), 0u) << e.what();
  }

  const std::vector<std::pair<std::string, std::string>> bad = {
      {byte_level_json(R"("normalizer": {"type": "Lowercase"}, )", byte_level),
       "normalizer \"Lowercase\" is not supported yet"},
      {byte_level_json("", R"({"type": "Metaspace"})"), "pre_tokenizer \"Metaspace\" is not supported"},
      {byte_level_json("", R"({"type": "Split", "pattern": {"Regex": "\\s"}, "behavior": "Isolated"})"),
       "pre_tokenizer has no ByteLevel step"},
      {byte_level_json("", R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "x"},
       "behavior": "Contiguous"}]})"),
       "Split behavior \"Contiguous\" is not supported"},
  };
  for (size_t k = 0; k < bad.size(); ++k) {
    const std::string path = dir + "/bad" + std::to_string(k) + ".json";
    write_file(path, bad[k].first);
    try {
      HuggingFaceTokenizer x(path);
      ADD_FAILURE() << "no error for " << bad[k].second;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(bad[k].second), std::string::npos) << e.what();
    }
  }
}

// Megatron's TikTokenizer vocabulary: the 256 bytes then "ab" (rank 256).
TEST(TikTokenizer, SmallVocabularySpecialsAndSizes) {
  const std::string dir = test::scratch_dir("tok_tik_small");
  auto b64 = [](const std::string& s) {
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (size_t i = 0; i < s.size(); i += 3) {
      uint32_t w = static_cast<uint8_t>(s[i]) << 16;
      if (i + 1 < s.size()) w |= static_cast<uint8_t>(s[i + 1]) << 8;
      if (i + 2 < s.size()) w |= static_cast<uint8_t>(s[i + 2]);
      out += a[w >> 18];
      out += a[(w >> 12) & 63];
      out += i + 1 < s.size() ? a[(w >> 6) & 63] : '=';
      out += i + 2 < s.size() ? a[w & 63] : '=';
    }
    return out;
  };
  std::string json = "[";
  for (int b = 0; b < 257; ++b) {
    const std::string bytes = b < 256 ? std::string(1, static_cast<char>(b)) : "ab";
    json += (b ? "," : "") + std::string("{\"rank\": ") + std::to_string(b) + ", \"token_bytes\": \"" + b64(bytes) +
            "\", \"token_str\": \"x\"}";
  }
  write_file(dir + "/v.json", json + "]");
  TikTokenizer t(dir + "/v.json", "v2", 10, 267);
  EXPECT_EQ(t.vocab_size(), 267);
  EXPECT_EQ(t.eod(), 2);
  std::vector<int32_t> ids;
  t.encode("ab</s>a<SPECIAL_9><SPECIAL_10>", &ids);
  // "ab" = 256 + 10; "</s>" = 2; "a" = 97 + 10; <SPECIAL_9> = 9; <SPECIAL_10> is text (10 specials).
  std::vector<int32_t> want = {266, 2, 107, 9};
  for (char c : std::string("<SPECIAL_10>")) want.push_back(static_cast<uint8_t>(c) + 10);
  EXPECT_EQ(ids, want);
  EXPECT_EQ(t.decode(ids), "ab</s>a<SPECIAL_9><SPECIAL_10>");
  try {
    TikTokenizer big(dir + "/v.json", "v2", 10, 300);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[--vocab-size] 300 needs 290 entries in " + dir + "/v.json", 0), 0u)
        << e.what();
  }
  EXPECT_THROW(TikTokenizer(dir + "/v.json", "v2", 6, 267), Error);  // fewer than the 7 named specials
  write_file(dir + "/order.json", "[{\"rank\": 0, \"token_bytes\": \"AQ==\", \"token_str\": \"x\"}]");
  try {
    TikTokenizer order(dir + "/order.json", "v1", 7, 8);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), dir +
                                         "/order.json: entry 0 must be the single byte 0 (the first 256 entries are "
                                         "the bytes)");
  }
}

}  // namespace
}  // namespace megatron::data
