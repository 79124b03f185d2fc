// Tests of src/data/tokenizer/gpt2_bpe_tokenizer.*: known GPT-2 ids, byte-level
// facts, round trips over arbitrary bytes, thread safety, and bad vocab/merge files.
// Known ids come from gpt-3-encoder (node) and an independent Python re-statement of
// Megatron's gpt2_tokenization.py run with the `regex` module; the wide comparison
// against gpt-3-encoder lives in gpt2_reference_test.js.
#include "data/tokenizer/gpt2_bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/pretokenizer.h"
#include "support/paths.h"

namespace megatron::data {
namespace {

using Ids = std::vector<int32_t>;

const GPT2BPETokenizer& gpt2() {
  static const GPT2BPETokenizer tokenizer(test::gpt2_vocab_file(), test::gpt2_merge_file());
  return tokenizer;
}

Ids encode(const GPT2BPETokenizer& t, std::string_view text) {
  Ids ids;
  t.encode(text, &ids);
  return ids;
}

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  detail::split_pieces(text, detail::CharClassTable::get(),
                       [&](int64_t offset, int64_t length) { out.emplace_back(text.substr(offset, length)); });
  return out;
}

void write_file(const std::string& path, const std::string& content) {
  std::ofstream f(path, std::ios::binary);
  f << content;
}

// Expects constructing a tokenizer to throw an Error whose message contains each of `parts`.
void expect_load_error(const std::string& vocab, const std::string& merges, const std::vector<std::string>& parts) {
  try {
    GPT2BPETokenizer t(vocab, merges);
    FAIL() << "no error for " << vocab << " / " << merges;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

TEST(GPT2BPETokenizer, VocabSizeAndEod) {
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().eod(), 50256);
}

TEST(GPT2BPETokenizer, KnownIds) {
  EXPECT_EQ(encode(gpt2(), "Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(encode(gpt2(), " hello"), (Ids{23748}));
  EXPECT_EQ(encode(gpt2(), "hello\n\nworld"), (Ids{31373, 198, 198, 6894}));
  EXPECT_EQ(encode(gpt2(), "  leading and trailing  "), (Ids{220, 3756, 290, 25462, 220, 220}));
  EXPECT_EQ(encode(gpt2(), "It's 2024: $1,234.56!"), (Ids{1026, 338, 48609, 25, 720, 16, 11, 24409, 13, 3980, 0}));
  EXPECT_EQ(encode(gpt2(), "don't"), (Ids{9099, 470}));
  EXPECT_EQ(encode(gpt2(), "naïve café"), (Ids{2616, 38776, 40304}));
  EXPECT_EQ(encode(gpt2(), "日本語のテキスト"), (Ids{33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302}));
  EXPECT_EQ(encode(gpt2(), ""), Ids{});
}

TEST(GPT2BPETokenizer, EndOfTextLiteralIsNotSpecial) {
  EXPECT_EQ(encode(gpt2(), "<|endoftext|>"), (Ids{27, 91, 437, 1659, 5239, 91, 29}));
}

TEST(GPT2BPETokenizer, ByteEncoderFacts) {
  EXPECT_EQ(detail::kByteEncoder[' '], 0x120);
  EXPECT_EQ(detail::kByteEncoder['\n'], 0x10A);
  EXPECT_EQ(detail::kByteEncoder[0x00], 0x100);
  EXPECT_EQ(detail::kByteEncoder[0x7F], 0x121);
  EXPECT_EQ(detail::kByteEncoder[0xAD], 0x143);
  EXPECT_EQ(detail::kByteEncoder['!'], '!');
  EXPECT_EQ(detail::kByteEncoder[0xFF], 0xFF);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(detail::kByteDecoder[detail::kByteEncoder[b]], b);
  // Single bytes are ids 0..255 in GPT-2's vocab order: '!' is 0, ' ' ('Ġ') is 220.
  EXPECT_EQ(encode(gpt2(), "!"), (Ids{0}));
  EXPECT_EQ(encode(gpt2(), " "), (Ids{220}));
  EXPECT_EQ(encode(gpt2(), "\n"), (Ids{198}));
}

TEST(Pretokenizer, Pieces) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("a  b\t\n c  "), (V{"a", " ", " b", "\t\n", " c", "  "}));
  EXPECT_EQ(pieces("'''s"), (V{"'''", "s"}));
  EXPECT_EQ(pieces("''s"), (V{"''", "s"}));
  EXPECT_EQ(pieces("he's 'S x'll 're"), (V{"he", "'s", " '", "S", " x", "'ll", " '", "re"}));
  EXPECT_EQ(pieces("a\t\tb"), (V{"a", "\t", "\t", "b"}));
  EXPECT_EQ(pieces("x  \n"), (V{"x", "  \n"}));
  EXPECT_EQ(pieces(" 123abc!!"), (V{" 123", "abc", "!!"}));
  // Only U+0020 prefixes a word: a tab does not.
  EXPECT_EQ(pieces("\tword"), (V{"\t", "word"}));
  // Invalid UTF-8 bytes are Other code points, merged with neighbouring Other ones.
  EXPECT_EQ(pieces("a\xff\xfe!b"), (V{"a", "\xff\xfe!", "b"}));
  EXPECT_EQ(pieces(" \xC3"), (V{" \xC3"}));
}

// Megatron runs Python's `regex`, whose \s is Unicode White_Space: U+0085 is space,
// U+FEFF is not. gpt-3-encoder (JavaScript) has it the other way round, so these ids
// come from the Python re-statement of Megatron's tokenizer, not from node.
TEST(Pretokenizer, WhitespaceFollowsPythonRegex) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(" \u0085x"), (V{" ", "\u0085", "x"}));
  EXPECT_EQ(pieces("a \ufeffb"), (V{"a", " \ufeff", "b"}));
  EXPECT_EQ(encode(gpt2(), " \u0085x"), (Ids{220, 126, 227, 87}));
  EXPECT_EQ(encode(gpt2(), "a \ufeffb"), (Ids{64, 27332, 119, 123, 65}));
  EXPECT_EQ(encode(gpt2(), "x \u0085\u0085 y"), (Ids{87, 1587, 227, 126, 227, 331}));
  // The other White_Space code points are spaces in both engines.
  const detail::CharClassTable& t = detail::CharClassTable::get();
  for (uint32_t cp : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u, 0x200Au, 0x2028u,
                      0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) {
    EXPECT_EQ(t.of(cp), detail::CharClass::kSpace) << std::hex << cp;
  }
  for (uint32_t cp : {0x1Cu, 0x1Fu, 0x180Eu, 0x200Bu, 0xFEFFu})
    EXPECT_EQ(t.of(cp), detail::CharClass::kOther) << std::hex << cp;
}

TEST(GPT2BPETokenizer, DecodeRoundTripsRandomBytes) {
  std::mt19937_64 rng(1234);
  // Mostly ASCII with some multi-byte UTF-8 and raw (often invalid) high bytes.
  const std::vector<std::string> pool = {"a",    "Z",    " ",    "  ",           "\n",  "\t",     "'",      "'s",
                                         "9",    "!",    "é",    "日",           "😀",   "\u200d", "\u0085", "\ufeff",
                                         "\xff", "\xc3", "\x80", "\xed\xa0\x80", "\x00"};
  int64_t total_ids = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s;
    const int len = static_cast<int>(rng() % 40);
    for (int k = 0; k < len; ++k) {
      if (rng() % 3 == 0) {
        s.push_back(static_cast<char>(rng() % 256));
      } else {
        s += pool[rng() % pool.size()];
      }
    }
    const Ids ids = encode(gpt2(), s);
    total_ids += static_cast<int64_t>(ids.size());
    ASSERT_EQ(gpt2().decode(ids), s) << "iteration " << iter;
  }
  EXPECT_GT(total_ids, 3000);
}

// Pieces longer than 64 bytes take the heap-based BPE; ids from gpt-3-encoder.
TEST(GPT2BPETokenizer, LongPieces) {
  auto repeat = [](std::string_view s, int n) {
    std::string r;
    for (int k = 0; k < n; ++k) r += s;
    return r;
  };
  auto repeat_ids = [](const Ids& head, const Ids& unit, int n) {
    Ids r = head;
    for (int k = 0; k < n; ++k) r.insert(r.end(), unit.begin(), unit.end());
    return r;
  };
  EXPECT_EQ(encode(gpt2(), repeat("abcdefghij", 8)), repeat_ids({}, {39305, 4299, 456, 2926}, 8));
  // One \p{L}+ piece of 226 bytes.
  EXPECT_EQ(encode(gpt2(), " " + repeat("日本語", 25)),
            repeat_ids({10545, 245, 98, 17312, 105, 45739, 252}, {33768, 98, 17312, 105, 45739, 252}, 24));
  EXPECT_EQ(encode(gpt2(), "x" + repeat("aa", 40)), repeat_ids({87}, {24794}, 20));
  const std::string cjk = repeat("日本", 300);
  EXPECT_EQ(gpt2().decode(encode(gpt2(), cjk)), cjk);
}

TEST(GPT2BPETokenizer, ThreadsGiveIdenticalIds) {
  std::vector<std::string> texts;
  std::mt19937 rng(7);
  const char* words[] = {"the", " quick", " brown", " fox", "'s", " 123", "!!", "\n\n", " 日本", " naïve", "  "};
  for (int d = 0; d < 200; ++d) {
    std::string t;
    for (int k = 0; k < 50; ++k) t += words[rng() % std::size(words)];
    texts.push_back(t);
  }
  std::vector<Ids> expected;
  for (const auto& t : texts) expected.push_back(encode(gpt2(), t));
  constexpr int kThreads = 8;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      for (int rep = 0; rep < 3; ++rep) {
        for (size_t d = 0; d < texts.size(); ++d) {
          const size_t i = (d + static_cast<size_t>(w) * 17) % texts.size();
          if (encode(gpt2(), texts[i]) != expected[i]) ++mismatches[w];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < kThreads; ++w) EXPECT_EQ(mismatches[w], 0) << "thread " << w;
}

TEST(GPT2BPETokenizer, TwoInstancesInOneThreadKeepSeparateCaches) {
  // A second tokenizer whose merges stop early must not see the first one's cached words.
  const std::string dir = test::scratch_dir("tok_two_instances");
  write_file(dir + "/merges.txt", "#version: 0.2\n");
  GPT2BPETokenizer bytes_only(test::gpt2_vocab_file(), dir + "/merges.txt");
  EXPECT_EQ(encode(gpt2(), " hello"), (Ids{23748}));
  EXPECT_EQ(encode(bytes_only, " hello"), (Ids{220, 71, 68, 75, 75, 78}));
  EXPECT_EQ(encode(gpt2(), " hello"), (Ids{23748}));
}

TEST(GPT2BPETokenizer, MergesWithoutTrailingNewlineLoseTheLastMerge) {
  const std::string dir = test::scratch_dir("tok_trailing_newline");
  // "Ġ t" is GPT-2's first merge (id 256 = "Ġt"), "Ġ a" its second (id 257 = "Ġa").
  write_file(dir + "/with.txt", "#version: 0.2\nĠ t\nĠ a\n");
  write_file(dir + "/without.txt", "#version: 0.2\nĠ t\nĠ a");
  write_file(dir + "/crlf.txt", "#version: 0.2\r\nĠ t\r\nĠ a\r\n");
  GPT2BPETokenizer with(test::gpt2_vocab_file(), dir + "/with.txt");
  GPT2BPETokenizer without(test::gpt2_vocab_file(), dir + "/without.txt");
  GPT2BPETokenizer crlf(test::gpt2_vocab_file(), dir + "/crlf.txt");
  EXPECT_EQ(encode(with, " t a"), (Ids{256, 257}));
  EXPECT_EQ(encode(without, " t a"), (Ids{256, 220, 64}));
  EXPECT_EQ(encode(crlf, " t a"), (Ids{256, 257}));
}

TEST(GPT2BPETokenizer, BadFilesNameFileAndLine) {
  const std::string dir = test::scratch_dir("tok_bad_files");
  const std::string vocab = test::gpt2_vocab_file();
  const std::string merges = test::gpt2_merge_file();
  expect_load_error(dir + "/missing.json", merges, {dir + "/missing.json"});
  expect_load_error(vocab, dir + "/missing.txt", {dir + "/missing.txt"});

  write_file(dir + "/array.json", "[1, 2]\n");
  expect_load_error(dir + "/array.json", merges, {"array.json:1:", "JSON object"});
  write_file(dir + "/string_id.json", "{\n\"a\": 1,\n\"b\": \"x\"\n}\n");
  expect_load_error(dir + "/string_id.json", merges, {"string_id.json:3:", "integer"});
  write_file(dir + "/truncated.json", "{\n\"a\": 1,\n");
  expect_load_error(dir + "/truncated.json", merges, {"truncated.json:3:"});
  write_file(dir + "/bytes_missing.json", "{\"a\": 0}\n");
  expect_load_error(dir + "/bytes_missing.json", merges, {"bytes_missing.json", "no token for byte"});

  write_file(dir + "/three.txt", "#version: 0.2\nĠ t\nĠ a x\n");
  expect_load_error(vocab, dir + "/three.txt", {"three.txt:3:", "two tokens"});
  write_file(dir + "/one.txt", "#version: 0.2\nĠt\n");
  expect_load_error(vocab, dir + "/one.txt", {"one.txt:2:", "two tokens"});
  write_file(dir + "/unknown_symbol.txt", "#version: 0.2\nĠ t\nĠ ☃\n");
  expect_load_error(vocab, dir + "/unknown_symbol.txt", {"unknown_symbol.txt:3:", "merge symbol", "☃"});
  // "Hello" and "Ġworld" are GPT-2 tokens, "HelloĠworld" is not.
  write_file(dir + "/unknown_result.txt", "#version: 0.2\nHello Ġworld\n");
  expect_load_error(vocab, dir + "/unknown_result.txt", {"unknown_result.txt:2:", "merge result"});
}

// A vocab.json of the 256 byte characters with ids 0..255, then `extra` (",\"tok\": id ...").
std::string byte_vocab_json(const std::string& extra = "") {
  std::string json = "{";
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = detail::kByteEncoder[static_cast<size_t>(b)];
    std::string ch;
    if (cp < 0x80) {
      ch = cp == '"' ? "\\\"" : cp == '\\' ? "\\\\" : std::string(1, static_cast<char>(cp));
    } else {
      ch.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      ch.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    if (b > 0) json += ",";
    json += "\"";
    json += ch;
    json += "\":";
    json += std::to_string(b);
  }
  return json + extra + "}";
}

TEST(GPT2BPETokenizer, EodMissingIsAnError) {
  const std::string dir = test::scratch_dir("tok_no_eod");
  write_file(dir + "/vocab.json", byte_vocab_json());
  write_file(dir + "/merges.txt", "#version: 0.2\n");
  GPT2BPETokenizer t(dir + "/vocab.json", dir + "/merges.txt");
  EXPECT_EQ(t.vocab_size(), 256);
  EXPECT_THROW(t.eod(), Error);
  EXPECT_EQ(t.decode(encode(t, "any text ☃")), "any text ☃");
}

// The ids must be 0..n-1, each once (GPT-2's vocab is dense; the model has n embedding rows).
// An id past the entries is refused, not used to size the decoder table (2^31-1: 24 GiB).
TEST(GPT2BPETokenizer, VocabIdsMustBeDenseAndDistinct) {
  const std::string dir = test::scratch_dir("tok_dense_ids");
  write_file(dir + "/merges.txt", "#version: 0.2\n");
  const std::string merges = dir + "/merges.txt";
  write_file(dir + "/ok.json", byte_vocab_json(",\n\"<|endoftext|>\": 256"));
  EXPECT_EQ(GPT2BPETokenizer(dir + "/ok.json", merges).vocab_size(), 257);
  write_file(dir + "/gap.json", byte_vocab_json(",\n\"<|endoftext|>\": 257"));
  expect_load_error(dir + "/gap.json", merges,
                    {"gap.json:2: token \"<|endoftext|>\" has id 257, but the 257 entries must have the ids 0..256"});
  write_file(dir + "/twice.json", byte_vocab_json(",\n\"ab\": 256,\n\"a\\nb\": 97"));
  expect_load_error(
      dir + "/twice.json", merges,
      {"twice.json:3: token \"a\\x0ab\" has id 97, already the id of \"a\"", "(each id must appear once)"});
  write_file(dir + "/huge.json", byte_vocab_json(",\n\"zzz\": 2147483647"));
  expect_load_error(dir + "/huge.json", merges, {"huge.json:2: token \"zzz\" has id 2147483647, but the 257 entries"});
}

TEST(GPT2BPETokenizer, DecodeRejectsUnknownIds) {
  EXPECT_THROW(gpt2().decode(Ids{50257}), Error);
  EXPECT_THROW(gpt2().decode(Ids{-1}), Error);
  EXPECT_EQ(gpt2().decode(Ids{50256}), "<|endoftext|>");
}

}  // namespace
}  // namespace megatron::data
