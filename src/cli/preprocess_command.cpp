// `megatron preprocess`: Megatron-LM's tools/preprocess_data.py flags, over
// data/preprocess.h. Flags of preprocess_data.py that change nothing here are
// accepted; the ones for features not implemented are one-line errors.
#include <algorithm>
#include <cstdio>
#include <thread>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/tokenizer_flags.h"
#include "core/error.h"
#include "data/preprocess.h"

namespace megatron::cli {

int run_preprocess(const CommandArgs& argv) {
  Args args("megatron preprocess", "JSONL(.gz/.xz/.zst) -> {output-prefix}_{key}_document.bin/.idx (Megatron MMIDIDX)");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  args.option("--input", "FILE", "input JSONL, optionally gzip/xz/zstd compressed (detected from its bytes)",
              std::nullopt, true)
      .option("--output-prefix", "PREFIX", "writes PREFIX_{key}_document.bin/.idx", std::nullopt, true)
      .list("--json-keys", "KEY", "keys to extract from each JSON line (default: text)")
      .flag("--append-eod", "append the tokenizer's end of document (eod) to every non-empty document")
      .option("--workers", "N", "tokenizer threads (default: all cores); outputs do not depend on it",
              std::to_string(cores))
      .option("--log-interval", "N", "progress line every N documents", "1000")
      .option("--partitions", "N", "only 1 (Megatron's round-robin partitions are not supported)", "1")
      .flag("--keep-sequential-samples", "no effect with one partition (as in Megatron)")
      .option("--dataset-impl", "IMPL", "only mmap (Megatron C21 flag)", "mmap")
      .flag("--split-sentences", "not supported (needs NLTK punkt)")
      .flag("--keep-newlines", "only used with --split-sentences (as in Megatron)")
      .option("--lang", "LANG", "only used with --split-sentences (as in Megatron)", "english")
      .option("--vocab-extra-ids", "N", "only 0: preprocess_data.py forces 0", "0")
      .flag("--skip-invalid-lines", "skip (and count) invalid lines instead of stopping at the first");
  declare_tokenizer_flags(args, "", /*required=*/true);
  if (!args.parse(argv)) {
    std::printf("%s", args.usage().c_str());
    return 0;
  }
  if (args.get_string("--dataset-impl") != "mmap") {
    throw_error("[--dataset-impl] ", args.get_string("--dataset-impl"), " is not supported (only mmap)");
  }
  const int64_t partitions = args.get_int("--partitions");
  if (partitions < 1) throw_error("[--partitions] must be at least 1, got ", partitions);
  if (partitions > 1) throw_error("[--partitions] ", partitions, " is not supported yet (only 1)");
  if (args.get_flag("--split-sentences")) throw_error("[--split-sentences] is not supported yet (needs NLTK punkt)");
  if (args.get_int("--vocab-extra-ids") != 0) {
    throw_error("[--vocab-extra-ids] ", args.get_int("--vocab-extra-ids"),
                " is not supported (preprocess_data.py forces 0)");
  }

  data::PreprocessOptions options;
  options.input = args.get_string("--input");
  options.output_prefix = args.get_string("--output-prefix");
  options.tokenizer = tokenizer_options(args);
  if (args.given("--json-keys")) options.json_keys = args.get_list("--json-keys");
  options.append_eod = args.get_flag("--append-eod");
  options.workers = args.get_int("--workers");
  options.log_interval = args.get_int("--log-interval");
  options.skip_invalid_lines = args.get_flag("--skip-invalid-lines");
  data::preprocess_jsonl(options);
  return 0;
}

}  // namespace megatron::cli
