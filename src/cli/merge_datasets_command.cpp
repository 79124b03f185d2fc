// `megatron merge-datasets`: Megatron-LM's tools/merge_datasets.py over data/merge_datasets.h.
// --input takes several prefixes (merged in that order) or one directory.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "data/merge_datasets.h"

namespace megatron::cli {

int run_merge_datasets(const CommandArgs& argv) {
  Args args("megatron merge-datasets", "concatenate indexed datasets (.bin/.idx) in order");
  args.list("--input", "PREFIX", "dataset prefixes in order, or one directory (its datasets in sorted order)", 0, true)
      .option("--output-prefix", "PREFIX", "writes PREFIX.bin/.idx", std::nullopt, true)
      .flag("--multimodal", "not supported");
  if (!args.parse(argv)) {
    std::printf("%s", args.usage().c_str());
    return 0;
  }
  if (args.get_flag("--multimodal")) throw_error("[--multimodal] is not supported yet");
  const std::vector<std::string> prefixes = data::merge_input_prefixes(args.get_list("--input"));
  const std::string output = args.get_string("--output-prefix");
  const data::MergeStats stats = data::merge_datasets(prefixes, output);
  std::printf("Merged %lld datasets: %lld documents, %lld sequences, %lld tokens -> %s.bin/.idx\n",
              static_cast<long long>(stats.datasets), static_cast<long long>(stats.documents),
              static_cast<long long>(stats.sequences), static_cast<long long>(stats.tokens), output.c_str());
  return 0;
}

}  // namespace megatron::cli
