// megatron tokenize: token ids of stdin (any --tokenizer-type, cli/tokenizer_flags.h), for
// scripts and reference tests.
//   megatron tokenize [--tokenizer-type T] (--vocab-file V --merge-file M | --tokenizer-model F)
//                     [--whole] [--decode]
// Line mode (default): each input line (without its '\n') is one text, and its ids
// are printed space-separated on one output line; an empty line gives an empty line.
// --whole: all of stdin is one text (newlines included), printed as one line.
// --null-data: texts end with a NUL byte instead of '\n' (like sort -z), so that many
// multi-line texts fit in one call; each still gives one output line.
// --decode: the reverse: reads ids (space-separated) and writes the bytes they stand
// for; in line mode each input line's bytes are followed by '\n' (NUL with
// --null-data), so `tokenize | tokenize --decode` reproduces terminated input exactly.
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/tokenizer_flags.h"
#include "core/error.h"
#include "data/tokenizer/tokenizer.h"

namespace megatron::cli {

namespace {

std::string read_stdin() {
  std::string data;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), stdin)) > 0) data.append(buf, n);
  if (std::ferror(stdin)) throw_error("stdin: read failed: ", errno_string(errno));
  return data;
}

// The `separator`-terminated lines of `data`; a final separator ends the last line,
// it does not start an empty one.
std::vector<std::string_view> split_lines(std::string_view data, char separator) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < data.size()) {
    size_t end = data.find(separator, start);
    if (end == std::string_view::npos) end = data.size();
    lines.push_back(data.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

void append_ids(const std::vector<int32_t>& ids, std::string* out) {
  char buf[16];
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k > 0) out->push_back(' ');
    const int n = std::snprintf(buf, sizeof(buf), "%d", ids[k]);
    out->append(buf, static_cast<size_t>(n));
  }
  out->push_back('\n');
}

std::vector<int32_t> parse_ids(std::string_view text, int64_t line) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\t' && text[j] != '\r' && text[j] != '\n') ++j;
    const std::string word(text.substr(i, j - i));
    const int64_t id = parse_int(word, str_cat("stdin line ", line));
    if (id < 0 || id > INT32_MAX) throw_error("[stdin line ", line, "] token id ", id, " out of range");
    ids.push_back(static_cast<int32_t>(id));
    i = j;
  }
  return ids;
}

void write_stdout(const std::string& s) {
  if (!s.empty() && std::fwrite(s.data(), 1, s.size(), stdout) != s.size()) {
    throw_error("stdout: write failed: ", errno_string(errno));
  }
}

}  // namespace

int run_tokenize(const CommandArgs& args) {
  Args a("megatron tokenize", "token ids of stdin (Megatron's tokenizer.tokenize): one output line per input line");
  declare_tokenizer_flags(a, "GPT2BPETokenizer");
  a.flag("--whole", "all of stdin is one text, printed as one line of ids");
  a.flag("--null-data", "texts end with NUL instead of newline");
  a.flag("--decode", "read ids, write the text bytes they stand for");
  if (!a.parse(args)) {
    std::fputs(a.usage().c_str(), stdout);
    return 0;
  }
  const std::unique_ptr<data::Tokenizer> tokenizer_ptr = data::make_tokenizer(tokenizer_options(a));
  const data::Tokenizer& tokenizer = *tokenizer_ptr;
  const std::string input = read_stdin();
  const bool whole = a.get_flag("--whole");
  const char separator = a.get_flag("--null-data") ? '\0' : '\n';
  std::string out;

  if (a.get_flag("--decode")) {
    if (whole) {
      out = tokenizer.decode(parse_ids(input, 1));
    } else {
      int64_t line = 0;
      for (std::string_view l : split_lines(input, '\n')) {
        out += tokenizer.decode(parse_ids(l, ++line));
        out.push_back(separator);
      }
    }
    write_stdout(out);
    return 0;
  }

  std::vector<int32_t> ids;
  if (whole) {
    tokenizer.encode(input, &ids);
    append_ids(ids, &out);
  } else {
    for (std::string_view l : split_lines(input, separator)) {
      ids.clear();
      tokenizer.encode(l, &ids);
      append_ids(ids, &out);
      if (out.size() > (1 << 20)) {
        write_stdout(out);
        out.clear();
      }
    }
  }
  write_stdout(out);
  return 0;
}

}  // namespace megatron::cli
