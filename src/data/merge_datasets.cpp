// Dataset concatenation; see merge_datasets.h (mirrors Megatron-LM tools/merge_datasets.py).
#include "data/merge_datasets.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>

#include "core/error.h"
#include "data/indexed_dataset.h"

namespace megatron::data {

namespace fs = std::filesystem;

std::vector<std::string> merge_input_prefixes(const std::vector<std::string>& inputs) {
  if (inputs.empty()) throw_error("[--input] expected at least one dataset prefix or a directory");
  std::error_code ec;
  if (inputs.size() > 1) {
    for (const std::string& in : inputs) {
      if (fs::is_directory(in, ec))
        throw_error("[--input] ", in, " is a directory: give one directory or only prefixes");
    }
    return inputs;
  }
  const std::string& dir = inputs.front();
  if (!fs::is_directory(dir, ec)) return inputs;

  std::set<std::string> bins, idxs;  // names without the extension
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;  // follows symlinks, like os.path.isfile
    const fs::path& p = it->path();
    const std::string ext = p.extension().string();
    if (ext == ".bin") bins.insert(p.stem().string());
    if (ext == ".idx") idxs.insert(p.stem().string());
  }
  if (ec) throw_error(dir, ": cannot list directory: ", ec.message());
  for (const std::string& name : bins) {
    if (idxs.count(name) == 0) throw_error(dir, "/", name, ".bin: no matching .idx file");
  }
  for (const std::string& name : idxs) {
    if (bins.count(name) == 0) throw_error(dir, "/", name, ".idx: no matching .bin file");
  }
  if (bins.empty()) throw_error(dir, ": no datasets (<name>.bin + <name>.idx) in the directory");
  std::vector<std::string> prefixes;
  const std::string base = dir.back() == '/' ? dir : dir + "/";
  for (const std::string& name : bins) prefixes.push_back(base + name);  // std::set: sorted byte-wise
  return prefixes;
}

MergeStats merge_datasets(const std::vector<std::string>& prefixes, const std::string& output_prefix) {
  MT_CHECK(!prefixes.empty());
  std::unique_ptr<IndexedDatasetWriter> writer;
  MergeStats stats;
  for (const std::string& prefix : prefixes) {
    // One input mapped at a time: memory does not grow with the number of inputs.
    IndexedDataset dataset(prefix);
    if (writer == nullptr) writer = std::make_unique<IndexedDatasetWriter>(output_prefix, dataset.dtype());
    writer->add_dataset(dataset);
    ++stats.datasets;
  }
  stats.documents = writer->document_count();
  stats.sequences = writer->sequence_count();
  stats.tokens = writer->token_count();
  writer->finalize();
  return stats;
}

}  // namespace megatron::data
