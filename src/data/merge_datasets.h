// `megatron merge-datasets`: concatenates indexed datasets, like Megatron-LM's
// tools/merge_datasets.py (IndexedDatasetBuilder.add_index over each input prefix).
//
// Inputs are dataset prefixes, merged in the order given. A single input that is a
// directory stands for every "<name>" in it that has both <name>.bin and <name>.idx,
// in sorted (byte-wise = code point) order, as merge_datasets.py does; a lone .bin or
// .idx there is an error, other files are ignored. The output takes the first
// input's dtype; a different dtype is an error naming the file. The output is
// written under temporary names and renamed at the end (nothing left on failure).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace megatron::data {

// The prefixes to merge, in order, after expanding a single directory input.
std::vector<std::string> merge_input_prefixes(const std::vector<std::string>& inputs);

struct MergeStats {
  int64_t datasets = 0;
  int64_t documents = 0;
  int64_t sequences = 0;
  int64_t tokens = 0;
};

MergeStats merge_datasets(const std::vector<std::string>& prefixes, const std::string& output_prefix);

}  // namespace megatron::data
