// `megatron tokenize` (src/cli/tokenize_command.cpp): line mode, --whole, --null-data,
// --decode round trips of arbitrary bytes through the CLI, and one-line errors.
// The ids themselves are compared with gpt-3-encoder in tests/data/tokenizer/gpt2_reference_test.js.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/tokenizer/gpt2_bpe_tokenizer.h"
#include "support/paths.h"

namespace megatron {
namespace {

void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

using test::read_file;

std::string tokenize_cli(const std::string& flags) {
  return str_cat(test::megatron_binary(), " tokenize --vocab-file '", test::gpt2_vocab_file(), "' --merge-file '",
                 test::gpt2_merge_file(), "' ", flags);
}

const data::GPT2BPETokenizer& gpt2() {
  static const data::GPT2BPETokenizer t(test::gpt2_vocab_file(), test::gpt2_merge_file());
  return t;
}

std::string ids_line(const std::string& text) {
  std::vector<int32_t> ids;
  gpt2().encode(text, &ids);
  std::string out;
  for (size_t k = 0; k < ids.size(); ++k) out += str_cat(k ? " " : "", ids[k]);
  return out + "\n";
}

TEST(TokenizeCommand, LineModeWholeAndNullData) {
  const std::string dir = test::scratch_dir("tokenize_cli");
  write_file(dir + "/in.txt", "Hello world\n\n  two  spaces\r\nlast line without newline");
  auto r = test::run_command(tokenize_cli("< '" + dir + "/in.txt'"));
  ASSERT_EQ(r.status, 0);
  // One output line per input line, an empty line for an empty line; '\r' stays in its line.
  EXPECT_EQ(r.output,
            ids_line("Hello world") + "\n" + ids_line("  two  spaces\r") + ids_line("last line without newline"));
  EXPECT_EQ(ids_line("Hello world"), "15496 995\n");  // GPT-2's well-known ids

  r = test::run_command(tokenize_cli("--whole < '" + dir + "/in.txt'"));
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.output, ids_line("Hello world\n\n  two  spaces\r\nlast line without newline"));

  write_file(dir + "/nul.txt", std::string("multi\nline\0second\n\0", 19));
  r = test::run_command(tokenize_cli("--null-data < '" + dir + "/nul.txt'"));
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.output, ids_line("multi\nline") + ids_line("second\n"));

  write_file(dir + "/empty.txt", "");
  r = test::run_command(tokenize_cli("< '" + dir + "/empty.txt'"));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.output, "");
}

// decode(encode(x)) == x through the CLI for arbitrary bytes (invalid UTF-8, NUL, CR included).
TEST(TokenizeCommand, DecodeReproducesArbitraryBytes) {
  const std::string dir = test::scratch_dir("tokenize_roundtrip");
  std::mt19937 rng(77);
  const std::vector<std::string> pool = {"a",      " the", "  ",       "\t",           "\r",
                                         "'s",     "12",   "é",        "日本",         "😀",
                                         "\xff",   "\xc3", "\xe2\x82", "\xed\xa0\x80", std::string(1, '\0'),
                                         "\u0085", "!?"};
  std::string whole;
  for (int k = 0; k < 3000; ++k) {
    whole += rng() % 4 == 0 ? std::string(1, static_cast<char>(rng() % 256)) : pool[rng() % pool.size()];
    if (rng() % 40 == 0) whole += "\n";
  }
  write_file(dir + "/in.bin", whole);
  auto r = test::run_command(tokenize_cli("--whole < '" + dir + "/in.bin' > '" + dir + "/ids.txt'"));
  ASSERT_EQ(r.status, 0);
  r = test::run_command(tokenize_cli("--whole --decode < '" + dir + "/ids.txt' > '" + dir + "/out.bin'"));
  ASSERT_EQ(r.status, 0);
  EXPECT_TRUE(read_file(dir + "/out.bin") == whole);

  // Line mode: newline-terminated input comes back exactly.
  std::string lines;
  for (char c : whole) lines.push_back(c == '\0' ? ' ' : c);
  lines += "\n";
  write_file(dir + "/lines.bin", lines);
  r = test::run_command(
      tokenize_cli("< '" + dir + "/lines.bin' | " + tokenize_cli("--decode") + " > '" + dir + "/lines.out'"));
  ASSERT_EQ(r.status, 0);
  EXPECT_TRUE(read_file(dir + "/lines.out") == lines);
}

TEST(TokenizeCommand, ErrorsAreOneLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {tokenize_cli("--decode <<< '1 2 x'"), "error: [stdin line 1] expected an integer, got 'x'"},
      {tokenize_cli("--decode <<< '50257'"), "error: decode: token id 50257 is not in the vocab file"},
      {tokenize_cli("--tokenizer-type BertWordPieceLowerCase <<< 'x'"), "error: [--tokenizer-type]"},
      {str_cat(test::megatron_binary(), " tokenize --vocab-file /nonexistent/v.json --merge-file '",
               test::gpt2_merge_file(), "' <<< 'x'"),
       "error: [--vocab-file] /nonexistent/v.json: cannot open"},
  };
  for (const auto& [cmd, expected] : cases) {
    const auto r = test::run_command("bash -c \"" + cmd + "\" 2>&1 >/dev/null");
    EXPECT_NE(r.status, 0) << cmd;
    EXPECT_EQ(r.output.find(expected), 0u) << cmd << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
}

}  // namespace
}  // namespace megatron
