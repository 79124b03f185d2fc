// Weighted blending of datasets, as classic Megatron-LM (C23 megatron/data/blendable_dataset.py
// BlendableDataset and helpers.cpp build_blending_indices).
//
// For blended position i (0 <= i < size) the dataset d with the largest error
// w[d] * max(i, 1) - count[d] is chosen (strict '>', so the first maximum wins);
// dataset_index[i] = d (uint8), dataset_sample_index[i] = count[d]++ (int64), and
// blended[i] = datasets[d][dataset_sample_index[i]].
// Worked example: w = (0.5, 0.25, 0.25), size 6 ->
//   dataset_index 0 1 2 0 0 1, dataset_sample_index 0 0 0 1 2 1
//   (i=0: errors .5 .25 .25 -> 0; i=1: -.5 .25 .25 -> 1; i=2: 0 -.75 .5 -> 2; ...).
//
// Cache: C23 caches the blend only under --data-cache-path, named by the md5 of a description
// that embeds numpy's repr of the weights array; we do not reproduce numpy's float array repr,
// so our description (and hash) is our own: "Blended dataset (megatron.cpp)" + the member
// datasets' descriptions + the weights at 17 significant digits + the size. Same suffixes
// as C23: <md5>.dsc, <md5>_index.npy, <md5>_sample_index.npy. Without a cache path the
// indices are built in memory.
#pragma once

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "data/gpt_dataset.h"
#include "data/npy.h"

namespace megatron::data {

// helpers.cpp build_blending_indices. weights are already normalised.
void build_blending_indices(const std::vector<double>& weights, int64_t size, std::vector<uint8_t>* dataset_index,
                            std::vector<int64_t>* dataset_sample_index);

class BlendedDataset : public TokenDataset {
 public:
  // weights are normalised again with numpy's pairwise sum, as C23 does. Throws Error when a member
  // dataset is too small for the samples the blend takes from it, or on a bad cache file.
  BlendedDataset(std::vector<std::shared_ptr<const GPTDataset>> datasets, std::vector<double> weights, int64_t size,
                 std::optional<std::string> data_cache_path, std::ostream* log = nullptr);

  int64_t size() const override { return size_; }
  void sample(int64_t i, std::vector<int64_t>* tokens) const override;

  int64_t dataset_index(int64_t i) const { return index_file_ ? index_file_->at(i) : index_[static_cast<size_t>(i)]; }
  int64_t dataset_sample_index(int64_t i) const {
    return index_file_ ? sample_index_file_->at(i) : sample_index_[static_cast<size_t>(i)];
  }
  const std::vector<std::shared_ptr<const GPTDataset>>& datasets() const { return datasets_; }
  const std::vector<double>& weights() const { return weights_; }
  const std::string& description() const { return description_; }
  // Set when --data-cache-path was given.
  const std::optional<CacheFiles>& cache() const { return cache_; }

 private:
  std::vector<std::shared_ptr<const GPTDataset>> datasets_;
  std::vector<double> weights_;
  int64_t size_ = 0;
  std::string description_;
  std::optional<CacheFiles> cache_;
  std::vector<uint8_t> index_;
  std::vector<int64_t> sample_index_;
  std::unique_ptr<NpyFile> index_file_;
  std::unique_ptr<NpyFile> sample_index_file_;
};

}  // namespace megatron::data
