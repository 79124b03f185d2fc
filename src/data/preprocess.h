// `megatron preprocess`: JSONL(.gz/.xz/.zst) -> {prefix}_{key}_document.bin/.idx, byte-identical to
// Megatron-LM's tools/preprocess_data.py (Encoder.encode + IndexedDatasetBuilder;
// docs/megatron-formats.md, "What tools/preprocess_data.py writes") for any worker count.
//
// Per line: json.loads semantics (data/json_text.h); for each key the value is one
// sentence (a string) or a list of sentences; each sentence is tokenized, empty token
// lists are dropped; with append_eod a non-empty document gets the EOD id appended to
// its last sentence (the tokenizer's eod()); then add_document(ids, sentence_lens) — an empty document is
// still a document (no sequences).
//
// Pipeline: one reader thread (decompress + split lines into ~1 MB batches), N worker
// threads (JSON + tokenize a whole batch), and the calling thread writing results in
// input order. At most 2N+2 batches are in flight, so memory is bounded by the batch
// size and N, never by the corpus size; the writers spill their index arrays.
//
// Failure: the first bad line in input order (invalid JSON or UTF-8, missing key,
// value that is not a string / list of strings, blank line, lone surrogate) throws
// Error "<input>:<line>: <reason>"; every output is written under a temporary name
// and renamed only after the whole input succeeded, so nothing is left behind and an
// earlier run's outputs under the same prefix stay untouched. With skip_invalid_lines
// such lines are skipped and counted instead; an input whose every line is invalid is then
// still an error (nothing written), while an empty input gives an empty dataset as Megatron's.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "data/tokenizer/tokenizer.h"

namespace megatron::data {

struct PreprocessOptions {
  std::string input;
  std::string output_prefix;
  TokenizerOptions tokenizer;                  // --tokenizer-type and its files (data/tokenizer/tokenizer.h)
  std::vector<std::string> json_keys{"text"};  // duplicates are merged, as Megatron's dicts do
  bool append_eod = false;
  int64_t workers = 1;
  int64_t log_interval = 1000;  // progress line every this many documents
  bool skip_invalid_lines = false;
  int64_t batch_bytes = 1 << 20;  // decompressed bytes per reader batch
  std::FILE* progress = stderr;   // "Processed ..." lines and warnings; nullptr = quiet
  std::FILE* info = stdout;       // "Opening ...", startup time and the summary; nullptr = quiet
};

struct PreprocessStats {
  int64_t documents = 0;
  int64_t sequences = 0;    // summed over keys
  int64_t tokens = 0;       // summed over keys
  int64_t input_bytes = 0;  // decompressed bytes of the accepted lines, terminators included
  int64_t characters = 0;   // Megatron's len(json_line) summed over accepted lines
  int64_t skipped_lines = 0;
  std::vector<int64_t> skipped_line_numbers;  // the first few (1-based)
  std::string first_skip_reason;
  double seconds = 0;
};

// "{output_prefix}_{key}_document": the dataset prefix written for `key`.
std::string preprocess_output_prefix(const std::string& output_prefix, const std::string& key);

// Runs the whole conversion; throws megatron::Error on bad input (see above).
PreprocessStats preprocess_jsonl(const PreprocessOptions& options);

// Python's repr() of a float (shortest round-trip; "1000.0", "1e-05", "1.5e+16"),
// used for Megatron's unformatted progress numbers.
std::string python_float_repr(double v);

}  // namespace megatron::data
