// Readers of GPT-2's two vocabulary files, with Python's semantics as Megatron uses
// them (megatron/tokenizer/gpt2_tokenization.py):
//   encoder = json.load(open(vocab_file))
//   bpe_data = open(merges_file, encoding='utf-8').read().split('\n')[1:-1]
//   bpe_merges = [tuple(merge.split()) for merge in bpe_data]
//   bpe_ranks = dict(zip(bpe_merges, range(len(bpe_merges))))
// Errors are megatron::Error "<file>:<line>: <reason>".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace megatron::data::detail {

struct VocabEntry {
  std::string token;  // UTF-8, as written in the JSON key (escapes decoded)
  int32_t id;
};

// The entries of the top-level JSON object in first-appearance order; a repeated key
// keeps its first position and its last value (a Python dict). Values must be integers, and
// the n entries' ids exactly 0..n-1, each once (GPT-2's vocab is dense: the model has n
// embedding rows). Hand-written rather than a JSON library so that errors name the line.
std::vector<VocabEntry> read_vocab_json(const std::string& path);

struct MergeRule {
  std::string first;
  std::string second;
  int32_t rank;  // the line index after the header: line 2 of the file is rank 0
  int64_t line;  // 1-based line in the file
};

// Merges in file order. As in Megatron: the first line (the "#version" header) is
// dropped unread, and so is everything after the last '\n', so a file without a
// trailing newline silently loses its last merge. Line ends may be \n, \r\n or \r
// (Python's universal newlines). A blank line is a merge of nothing (Python's empty
// tuple, never applied) but still takes a rank; a line with one or three or more
// fields is an error (Python would keep it as a tuple that never matches a pair).
std::vector<MergeRule> read_merges(const std::string& path);

}  // namespace megatron::data::detail
