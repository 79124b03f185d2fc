// megatron dataset-info: what an indexed dataset holds and which samples training reads.
//
//   megatron dataset-info PREFIX
//       dtype, sequence / document / token counts, document-length statistics.
//   megatron dataset-info PREFIX --seq-length S (--train-samples N | --train-iters I
//       [--global-batch-size G] [--micro-batch-size M]) [--eval-interval --eval-iters
//       --split --classic-split --seed --data-cache-path DIR] [--show-samples K]
//       also Megatron's target sizes, the split ranges, epochs, whether the last epoch
//       is separate, and the index-cache files loaded or built (classic Megatron C23 rules,
//       data/gpt_dataset.h). --data-path (one prefix, or weight/prefix pairs) replaces PREFIX;
//       so do --train-data-path / --valid-data-path / --test-data-path (each split its own data).
//   megatron dataset-info --mock-data [--eod ID] ...
//       the same for Megatron-Core's mock data (data/mock_sequences.h; its split rule, no cache).
//   With --tokenizer-type and its files (cli/tokenizer_flags.h) the tokenizer's vocabulary and
//   end of document are reported, --mock-data takes its end of document, and each shown sample
//   also has its "text" (decoded; bytes that are not UTF-8 become U+FFFD).
//
// Machine-readable mode: with --show-samples K, stdout holds only K JSON lines
// {"index": i, "tokens": [...]} (i = position in training order, tokens = seq_length+1 ids)
// and the summary goes to stderr.
#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/tokenizer_flags.h"
#include "core/error.h"
#include "core/json_writer.h"
#include "data/dataset_config.h"
#include "data/indexed_dataset.h"
#include "data/mock_sequences.h"
#include "data/tokenizer/tokenizer.h"

namespace megatron::cli {
namespace {

using data::IndexedDataset;

// `s` with every byte that does not belong to a valid UTF-8 sequence replaced by U+FFFD (Python's
// errors="replace" per byte): a sample window may cut a character.
std::string utf8_lossy(std::string_view s) {
  std::string out;
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const uint8_t b = p[i];
    size_t len = b < 0x80                   ? 1
                 : (b >= 0xC2 && b <= 0xDF) ? 2
                 : (b >= 0xE0 && b <= 0xEF) ? 3
                 : (b >= 0xF0 && b <= 0xF4) ? 4
                                            : 0;
    bool ok = len > 0 && i + len <= n;
    if (ok && len > 1) {
      const uint8_t lo = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
      const uint8_t hi = b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
      ok = p[i + 1] >= lo && p[i + 1] <= hi;
      for (size_t k = 2; ok && k < len; ++k) ok = (p[i + k] & 0xC0) == 0x80;
    }
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

// numpy.percentile's default (linear interpolation between closest ranks).
double percentile(const std::vector<int64_t>& sorted, double p) {
  const double pos = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return static_cast<double>(sorted[lo]) +
         (static_cast<double>(sorted[hi] - sorted[lo])) * (pos - static_cast<double>(lo));
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

void print_summary(std::ostream& out, const IndexedDataset& ds) {
  out << "dataset " << ds.prefix() << "\n";
  out << "  dtype:      " << data::token_dtype_name(ds.dtype()) << "\n";
  out << "  sequences:  " << ds.sequence_count() << "\n";
  out << "  documents:  " << ds.document_count() << "\n";
  out << "  tokens:     " << ds.token_count() << "\n";
  std::vector<int64_t> doc_tokens(static_cast<size_t>(ds.document_count()), 0);
  int64_t empty = 0;
  for (int64_t d = 0; d < ds.document_count(); ++d) {
    int64_t t = 0;
    for (int64_t s = ds.document_index(d); s < ds.document_index(d + 1); ++s) t += ds.sequence_length(s);
    doc_tokens[static_cast<size_t>(d)] = t;
    empty += t == 0;
  }
  if (doc_tokens.empty()) {
    out << "  document lengths (tokens): no documents\n";
    return;
  }
  std::sort(doc_tokens.begin(), doc_tokens.end());
  double mean = 0;
  for (int64_t t : doc_tokens) mean += static_cast<double>(t);
  mean /= static_cast<double>(doc_tokens.size());
  out << "  document lengths (tokens): min " << doc_tokens.front() << ", mean " << fmt("%.2f", mean) << ", median "
      << fmt("%.1f", percentile(doc_tokens, 50)) << ", p90 " << fmt("%.1f", percentile(doc_tokens, 90)) << ", p99 "
      << fmt("%.1f", percentile(doc_tokens, 99)) << ", max " << doc_tokens.back() << "\n";
  out << "  empty documents: " << empty << "\n";
}

int64_t positive(const Args& a, const std::string& flag, int64_t min_value) {
  const int64_t v = a.get_int(flag);
  if (v < min_value) throw_error("[", flag, "] must be >= ", min_value, ", got ", v);
  return v;
}

}  // namespace

int run_dataset_info(const CommandArgs& argv) {
  Args a("dataset-info", "counts, splits and the training samples of an indexed dataset");
  a.positional("prefix", "dataset prefix (<prefix>.bin/.idx); or use --data-path", false)
      .list("--data-path", "PATH", "a prefix, or weight prefix pairs (a blend), as Megatron's --data-path")
      .list("--train-data-path", "PATH", "the train split's own prefix or weight prefix pairs (all its sequences)")
      .list("--valid-data-path", "PATH", "the valid split's own prefix or weight prefix pairs")
      .list("--test-data-path", "PATH", "the test split's own prefix or weight prefix pairs")
      .flag("--mock-data", "Megatron-Core's mock data instead of a dataset")
      .option("--eod", "ID", "with --mock-data: the end-of-document token id (GPT-2's <|endoftext|>)", "50256")
      .option("--seq-length", "S", "sequence length: build the sample index")
      .option("--train-samples", "N", "training samples (or --train-iters)")
      .option("--train-iters", "I", "training iterations (train samples = I * global batch size)")
      .option("--global-batch-size", "G", "global batch size (default: --micro-batch-size, DP = 1)")
      .option("--micro-batch-size", "M", "micro-batch size", "1")
      .option("--eval-interval", "K", "iterations between evaluations", "1000")
      .option("--eval-iters", "K", "iterations per evaluation", "100")
      .option("--split", "W", "train/valid/test weights of the sequences", "969, 30, 1")
      .flag("--classic-split", "--split's ranges by older Megatron-LM's rule (as megatron train --classic-split)")
      .option("--seed", "R", "numpy RandomState seed of the shuffles", "1234")
      .option("--data-cache-path", "DIR",
              "where index caches are looked for (after dirname(prefix)/index-cache) and built")
      .option("--show-samples", "K", "print the first K training samples as JSON lines on stdout (summary to stderr)");
  declare_tokenizer_flags(a, "");
  if (!a.parse(argv)) {
    std::cout << a.usage();
    return 0;
  }
  std::vector<std::string> data_path;
  std::array<std::vector<std::string>, 3> split_data_path;
  bool per_split = false;
  for (int s = 0; s < 3; ++s) {
    const char* flag = data::kSplitDataPathFlags[s];
    split_data_path[s] = a.get_list(flag);
    if (a.given(flag) && split_data_path[s].empty()) throw_error("[", flag, "] no dataset prefix given");
    per_split = per_split || a.given(flag);
  }
  const bool mock = a.get_flag("--mock-data");
  if (mock) {
    if (a.given("prefix") || a.given("--data-path") || per_split) {
      throw_error("[--mock-data] cannot be combined with a dataset prefix, --data-path or per-split paths (give one)");
    }
  } else if (a.given("--eod")) {
    throw_error("[--eod] only applies to --mock-data (a dataset's tokens are on disk)");
  } else if (a.given("--data-path")) {
    if (a.given("prefix")) throw_error("[--data-path] give either a positional prefix or --data-path, not both");
    data_path = a.get_list("--data-path");
  } else if (a.given("prefix")) {
    if (per_split) throw_error("[--train-data-path] give either a positional prefix or per-split paths, not both");
    data_path = {a.get_string("prefix")};
  } else if (!per_split) {
    throw_error("dataset-info: missing argument <prefix> (or --data-path, --train-data-path, or --mock-data)");
  }

  const bool has_train_target = a.given("--train-samples") || a.given("--train-iters");
  if (a.given("--train-samples") && a.given("--train-iters")) {
    throw_error("[--train-samples] cannot be combined with --train-iters (give one)");
  }
  std::optional<int64_t> seq_length;
  if (a.given("--seq-length")) seq_length = positive(a, "--seq-length", 1);
  if (seq_length && !has_train_target) {
    throw_error("[--seq-length] needs --train-samples or --train-iters to size the sample index");
  }
  if (has_train_target && !seq_length) {
    throw_error("[--seq-length] is required with ", a.given("--train-samples") ? "--train-samples" : "--train-iters");
  }
  std::optional<int64_t> show;
  if (a.given("--show-samples")) {
    show = positive(a, "--show-samples", 0);
    if (!seq_length) throw_error("[--show-samples] needs --seq-length and --train-samples or --train-iters");
  }
  const int64_t mbs = positive(a, "--micro-batch-size", 1);
  const int64_t gbs = a.given("--global-batch-size") ? positive(a, "--global-batch-size", 1) : mbs;
  if (gbs % mbs != 0) {
    throw_error("[--global-batch-size] ", gbs, " is not divisible by --micro-batch-size ", mbs,
                " times the data-parallel size 1");
  }
  const int64_t eval_interval = positive(a, "--eval-interval", 1);
  const int64_t eval_iters = positive(a, "--eval-iters", 0);
  const int64_t seed = a.get_int("--seed");
  data::check_numpy_seed(seed, "--seed");

  // With --show-samples stdout carries only JSON lines.
  std::ostream& out = show ? std::cerr : std::cout;
  std::unique_ptr<data::Tokenizer> tokenizer;
  int64_t eod = positive(a, "--eod", 0);
  if (a.given("--tokenizer-type")) {
    tokenizer = data::make_tokenizer(tokenizer_options(a));
    if (mock) {
      if (a.given("--eod"))
        throw_error("[--eod] give --eod or a tokenizer (whose end of document --mock-data takes), not both");
      eod = tokenizer->eod();
    }
    out << "tokenizer " << a.get_string("--tokenizer-type") << ": vocabulary " << tokenizer->vocab_size();
    try {
      out << ", end of document " << tokenizer->eod() << "\n";
    } catch (const Error&) {
      out << ", no end of document\n";
    }
  }
  if (mock) {
    // The mock ids are taken modulo the tokenizer's vocabulary; without a tokenizer the end of
    // document is taken to be its last id (GPT-2's 50256 of 50257).
    const int64_t vocab = tokenizer ? tokenizer->vocab_size() : eod + 1;
    if (eod >= vocab) throw_error("[--tokenizer-type] end of document ", eod, " is outside the vocabulary of ", vocab);
    const data::MockSequences m(eod, vocab);
    int64_t tokens = 0;
    for (int32_t len : m.sequence_lengths()) tokens += len;
    out << "dataset mock (Megatron-Core MockGPTLowLevelDataset, end of document " << eod << ")\n";
    out << "  sequences:  " << m.sequence_count() << "\n";
    out << "  tokens:     " << tokens << "\n";
  } else if (!data_path.empty()) {
    const data::DataBlend blend = data::parse_data_path(data_path);
    for (const std::string& prefix : blend.prefixes) print_summary(out, IndexedDataset(prefix));
  } else {
    for (int s = 0; s < 3; ++s) {
      if (split_data_path[s].empty()) continue;
      const data::DataBlend blend = data::parse_data_path(split_data_path[s], data::kSplitDataPathFlags[s]);
      for (const std::string& prefix : blend.prefixes) print_summary(out, IndexedDataset(prefix));
    }
  }
  if (!seq_length) return 0;

  std::optional<int64_t> train_samples, train_iters;
  if (a.given("--train-samples")) train_samples = positive(a, "--train-samples", 1);
  if (a.given("--train-iters")) train_iters = positive(a, "--train-iters", 1);
  data::GPTDataConfig config;
  config.data_path = data_path;
  config.split_data_path = split_data_path;
  config.mock = mock;
  config.eod = eod;
  config.vocab_size = tokenizer ? tokenizer->vocab_size() : eod + 1;
  config.split = a.get_string("--split");
  config.seq_length = *seq_length;
  config.seed = seed;
  if (a.given("--data-cache-path")) config.data_cache_path = a.get_string("--data-cache-path");
  config.targets = data::target_sample_counts(train_samples, train_iters, gbs, eval_interval, eval_iters);
  config.log = &out;
  if (a.get_flag("--classic-split")) config.split_rule = data::SplitRule::kClassic;

  out << " > datasets target sizes (minimum size):\n";
  out << "    train:      " << config.targets.train << "\n";
  out << "    validation: " << config.targets.valid << "\n";
  out << "    test:       " << config.targets.test << "\n";
  const data::GPTDatasets sets = data::build_gpt_datasets(config);

  static const char* kPrinted[3] = {"train", "validation", "test"};
  for (size_t p = 0; p < sets.parts.size(); ++p) {
    const auto& b = sets.bounds[p];
    const data::SequenceSource& ds = *sets.sources[p];
    out << " > dataset split of " << ds.prefix() << ":\n";
    for (int s = 0; s < 3; ++s) {
      int64_t tokens = 0;
      for (int64_t k = b[s]; k < b[s + 1]; ++k) tokens += ds.sequence_length(k);
      out << "    " << kPrinted[s] << ":\n     document indices in [" << b[s] << ", " << b[s + 1] << ") total of "
          << b[s + 1] - b[s] << " documents, " << tokens << " tokens\n";
    }
    for (int s = 0; s < 3; ++s) {
      const auto& g = sets.parts[p][s];
      if (!g) {
        out << " > " << data::kSplitNames[s] << ": empty split, not built\n";
        continue;
      }
      const data::EpochPlan& plan = g->plan();
      out << " > " << data::kSplitNames[s] << ": " << g->options().num_samples << " samples requested, "
          << g->tokens_per_epoch() << " tokens per epoch, " << plan.num_epochs
          << " epoch(s), separate last epoch: " << (plan.separate_last_epoch ? "yes" : "no") << ", " << g->size()
          << " samples available\n";
      if (g->options().cache) {
        out << "     cache " << (g->cache().loaded ? "loaded: " : "built: ") << g->cache().path("") << "{.dsc,"
            << "_doc_idx.npy,_sample_idx.npy,_shuffle_idx.npy}\n";
      } else {
        out << "     index built in memory (no cache files)\n";
      }
    }
  }
  for (int s = 0; s < 3; ++s) {
    const auto& bl = sets.blends[s];
    if (!bl) continue;
    out << " > blended " << data::kSplitNames[s] << ": " << bl->size() << " samples from " << bl->datasets().size()
        << " datasets, weights";
    for (double w : bl->weights()) out << " " << fmt("%.6g", w);
    if (bl->cache()) {
      out << "; cache " << (bl->cache()->loaded ? "loaded: " : "built: ") << bl->cache()->path("")
          << "{.dsc,_index.npy,_sample_index.npy}";
    }
    out << "\n";
  }
  out << std::flush;

  if (show) {
    const auto& train = sets.train();
    if (!train) {
      throw_error("[--show-samples] the train split is empty (",
                  per_split && data_path.empty() ? "no --train-data-path" : "see --split", ")");
    }
    if (*show > train->size()) {
      throw_error("[--show-samples] ", *show, " exceeds the ", train->size(), " training samples available");
    }
    std::vector<int64_t> tokens;
    std::string line;
    for (int64_t i = 0; i < *show; ++i) {
      train->sample(i, &tokens);
      line = "{\"index\": " + std::to_string(i) + ", \"tokens\": [";
      for (size_t k = 0; k < tokens.size(); ++k) {
        if (k > 0) line += ", ";
        line += std::to_string(tokens[k]);
      }
      line += "]";
      if (tokenizer) {
        std::vector<int32_t> ids(tokens.begin(), tokens.end());
        line += ", \"text\": " + json_quote(utf8_lossy(tokenizer->decode(ids)));
      }
      line += "}\n";
      std::fwrite(line.data(), 1, line.size(), stdout);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace megatron::cli
