// From Megatron's data flags to the train/valid/test datasets (classic Megatron-LM, C23):
//  - target sample counts: megatron/training.py build_train_valid_test_data_loaders;
//  - --data-path parsing and blend sizes: megatron/data/dataset_utils.py
//    get_datasets_weights_and_num_samples; gpt_dataset.py build_train_valid_test_datasets.
// The sequence ranges of --split follow Megatron-Core's rule unless --classic-split
// (GPTDataConfig::split_rule). One prefix ("--data-path P") builds GPTDatasets directly. A weighted list
// ("--data-path 0.3 A 0.7 B", and also "--data-path 1.0 A") builds one GPTDataset per prefix
// and split with ceil(N_split * w * 1.005) samples each, blended to the sum of those.
// Worked example: N_train = 100, weights (0.3, 0.7): ceil(30.15) = 31 and ceil(70.35) = 71
// samples, a blend of 102.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "data/blended_dataset.h"
#include "data/gpt_dataset.h"
#include "data/sequence_source.h"

namespace megatron::data {

// --data-path (or one of --train/valid/test-data-path, named by `flag`): a single prefix, or
// (weight, prefix) pairs. Throws naming the flag.
struct DataBlend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;  // normalised; empty for a single unweighted prefix
  bool blended() const { return !weights.empty(); }
};
DataBlend parse_data_path(const std::vector<std::string>& values, const char* flag = "--data-path");
// Throws naming `flag` unless <prefix>.idx and <prefix>.bin exist, suggesting a dataset of
// preprocess's naming (<prefix>_text_document, ...) beside it when there is one.
void check_dataset_prefix(const std::string& prefix, const char* flag);

// Megatron's " > datasets target sizes (minimum size):".
struct TargetSamples {
  int64_t train = 0;
  int64_t valid = 0;
  int64_t test = 0;
};
// train = train_samples, or train_iters * gbs; valid = (train_iters // eval_interval + 1) *
// eval_iters * gbs; test = eval_iters * gbs; with train_samples, train_iters = train_samples // gbs.
TargetSamples target_sample_counts(std::optional<int64_t> train_samples, std::optional<int64_t> train_iters,
                                   int64_t global_batch_size, int64_t eval_interval, int64_t eval_iters);

// C23 get_datasets_weights_and_num_samples: ceil(n * w * 1.005) for one split.
int64_t blend_member_samples(int64_t n, double weight);

inline constexpr const char* kSplitNames[3] = {"train", "valid", "test"};
inline constexpr const char* kSplitDataPathFlags[3] = {"--train-data-path", "--valid-data-path", "--test-data-path"};

struct GPTDataConfig {
  std::vector<std::string> data_path;  // as given to --data-path; empty with mock
  // --train-data-path, --valid-data-path, --test-data-path (C23 build_train_valid_test_datasets'
  // "separate data paths"), used when data_path is empty: each split reads all sequences of its
  // own prefix or blend (its own weights, ceil(N * w * 1.005) samples per member, as
  // --data-path's blend). A split without a path is not built. `split` does not choose
  // sequences then, but its text is still part of each dataset's cache description, as in C23.
  std::array<std::vector<std::string>, 3> split_data_path;
  bool has_split_data_path() const {
    return !split_data_path[0].empty() || !split_data_path[1].empty() || !split_data_path[2].empty();
  }
  // --mock-data: Megatron-Core's mock sequences (mock_sequences.h) split evenly (`split` is
  // ignored, as there), their sample index in memory; `eod` is the tokenizer's end of document
  // and `vocab_size` its vocabulary (the mock ids are taken modulo it).
  bool mock = false;
  int64_t eod = -1;
  int64_t vocab_size = 0;
  std::string split = "969, 30, 1";
  int64_t seq_length = 0;
  int64_t seed = 1234;
  // How `split` becomes each prefix's sequence ranges (gpt_dataset.h): Megatron-Core's rule, or
  // older Megatron-LM's with --classic-split.
  SplitRule split_rule = SplitRule::kMegatronCore;
  std::optional<std::string> data_cache_path;
  TargetSamples targets;
  std::ostream* log = nullptr;
};

struct GPTDatasets {
  // What training reads; null where the split is empty.
  std::array<std::shared_ptr<const TokenDataset>, 3> splits;
  const std::shared_ptr<const TokenDataset>& train() const { return splits[0]; }
  const std::shared_ptr<const TokenDataset>& valid() const { return splits[1]; }
  const std::shared_ptr<const TokenDataset>& test() const { return splits[2]; }
  // Details for tools and tests: per prefix (or the mock data), its sequences, split bounds and
  // GPTDatasets. With per-split paths each entry is one prefix of one split (a prefix given for
  // two splits appears twice) and its bounds give that split all sequences, e.g. a valid prefix
  // of S sequences has {0, 0, S, S}. `blend` is --data-path's (empty with per-split paths).
  DataBlend blend;
  std::vector<std::shared_ptr<const SequenceSource>> sources;
  std::vector<std::array<int64_t, 4>> bounds;
  std::vector<std::array<std::shared_ptr<const GPTDataset>, 3>> parts;
  std::array<std::shared_ptr<const BlendedDataset>, 3> blends;
  std::array<int64_t, 3> requested{};  // the samples asked of each split (blend sums included)
};

GPTDatasets build_gpt_datasets(const GPTDataConfig& config);

}  // namespace megatron::data
