// The GPT sample index of classic Megatron-LM (C23 f7727433: megatron/data/gpt_dataset.py,
// dataset_utils.py get_train_valid_test_split_, helpers.cpp build_sample_idx), with its
// index-cache files, reproduced bit for bit (docs/megatron-formats.md, "GPT samples from a dataset").
//
// A GPTDataset is one split (train/valid/test) of one indexed dataset: the sequence
// ids [doc_begin, doc_end) are the split's "documents" (each sequence is a document).
// With T = tokens in the split, s = seq_length and N = requested samples:
//   E        = smallest E >= 1 with (E*T - 1) // s >= N                     (_num_epochs)
//   doc_idx  = the split's ids repeated E times, int32, shuffled; if the last epoch is
//              "separate" (E > 1 and its samples < int(0.8 * ((T-1)//s))), the first
//              E-1 epochs and the last are shuffled separately, in that order
//   sample_idx [(E*T-1)//s + 1, 2] int32: (index into doc_idx, token offset) where each
//              sample starts; sample i spans row i .. row i+1 inclusive = s+1 tokens, so
//              consecutive samples share one token
//   shuffle_idx uint32 (int64 when the count >= 2^32-2): a permutation of the samples;
//              the first n_first (all, or those of the first E-1 epochs when separate)
//              shuffled among themselves, then the rest
// One numpy.random.RandomState(seed) per split dataset; draws: doc_idx shuffle(s), then
// shuffle_idx shuffle(s). dataset[i] = sample(shuffle_idx[i]).
//
// Worked example (no shuffling shown): sizes (3, 0, 4) as doc_idx order, s = 2.
// T = 7, samples = (7-1)//2 = 3, sample_idx = (0,0) (0,2) (2,1) (2,3):
//   sample 0 = doc0[0..2] (3 tokens); sample 1 = doc0[2] + doc2[0..1] (doc1 is empty);
//   sample 2 = doc2[1..3].
//
// Cache (C23): desc = "GPT Dataset\n\nData prefix P\nDataset name train\nNumber of samples N\n
// Sequence length s\nRandom seed R\nSplit 969, 30, 1\n" (plus "Split rule Megatron-Core\n" when
// that rule gives this split other sequences than C23's rule would); files <md5(desc)>.dsc, _doc_idx.npy,
// _sample_idx.npy, _shuffle_idx.npy. Looked for in dirname(P)/index-cache/ and then in
// --data-cache-path; when no location has all four, they are built and written to the last
// location looked in. Loaded files are checked against the dataset (dtype, shape, ranges).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "data/npy.h"
#include "data/numpy_random.h"
#include "data/sequence_source.h"

namespace megatron::data {

// What the training loop reads: size() samples, each seq_length+1 token ids.
class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  virtual int64_t size() const = 0;
  // Replaces *tokens with sample i (i in [0, size()), else Error): tokens[:-1] are the
  // inputs and tokens[1:] the labels.
  virtual void sample(int64_t i, std::vector<int64_t>* tokens) const = 0;
};

// Megatron-Core's parse_and_normalize_split (blended_megatron_dataset_config.py): every match
// of the regex [.0-9]+ is a weight, Python float(); up to 3 (train, valid, test), padded with 0,
// each divided by their sum. Anything between the numbers is ignored, so "969, 30, 1", "98/2/0"
// and a quoted "'99,1,0'" all parse, and "1,-1,1" is (1, 1, 1). Throws naming `flag` for a
// match float() refuses ("." or "1.2.3"), more than 3 weights, or weights summing to 0.
std::array<double, 3> parse_and_normalize_split(const std::string& split, const char* flag = "--split");

// How --split's weights become sequence ranges (both split by sequences, which are the GPT
// datasets' documents). Split i holds [idx[i], idx[i+1]) and is built iff idx[i+1] > idx[i].
enum class SplitRule {
  // Megatron-Core (blended_megatron_dataset_builder.py _build_megatron_dataset_splits): the
  // weights cumulated into bookends b = (0, w0, w0+w1, w0+w1+w2) and idx[i] = round(b[i] * size),
  // Python round (half to even).
  kMegatronCore,
  // --classic-split, older Megatron-LM (C23 get_train_valid_test_split_):
  // idx[i+1] = idx[i] + round(w_i * size), then all shifted so that idx[3] == size.
  kClassic,
};

// The classic rule. Example: ("969, 30, 1", 1000) -> {0, 969, 999, 1000}; ("1,1,1", 5) ->
// {0, 1, 3, 5} (each 5/3 rounds to 2, then the shift by 6 - 5).
std::array<int64_t, 4> train_valid_test_split(const std::string& split, int64_t size, const char* flag = "--split");

// The Megatron-Core rule (also --mock-data's). Examples: ("969, 30, 1", 100000) ->
// {0, 96900, 99900, 100000}; ("1,1,1", 5) -> {0, 2, 3, 5} (round(5/3), round(10/3)).
std::array<int64_t, 4> mcore_split_bounds(const std::string& split, int64_t size, const char* flag = "--split");

// One of the two above.
std::array<int64_t, 4> split_bounds(SplitRule rule, const std::string& split, int64_t size,
                                    const char* flag = "--split");

// C23 _num_epochs; throws when tokens_per_epoch == 0 (Megatron loops forever).
int64_t gpt_num_epochs(int64_t tokens_per_epoch, int64_t seq_length, int64_t num_samples);

// The epoch plan of one split dataset (C23 _build_index_mappings).
struct EpochPlan {
  int64_t num_epochs = 1;
  bool separate_last_epoch = false;
  int64_t total_samples = 0;       // (E*T - 1) // s = len(dataset)
  int64_t samples_per_epoch = 0;   // (T - 1) // s
  int64_t samples_sans_last = 0;   // ((E-1)*T - 1) // s when E > 1, else 0
  int64_t last_epoch_samples = 0;  // N - samples_sans_last when E > 1
  int64_t shuffle_first = 0;       // n_first of _build_shuffle_idx
};
EpochPlan plan_epochs(int64_t tokens_per_epoch, int64_t seq_length, int64_t num_samples);

// C23 _build_doc_idx (int32, shuffled with rng; see the header comment).
std::vector<int32_t> build_doc_idx(std::span<const int32_t> documents, int64_t num_epochs, bool separate_last_epoch,
                                   NumpyRandomState* rng);

// helpers.cpp build_sample_idx: row-major [(E*T-1)//s + 1, 2] int32. sizes[k] is the length
// of sequence k (all sequences of the indexed dataset); doc_idx entries index sizes.
std::vector<int32_t> build_sample_idx(std::span<const int32_t> sizes, std::span<const int32_t> doc_idx,
                                      int64_t seq_length, int64_t num_epochs, int64_t tokens_per_epoch);

// C23 _build_shuffle_idx: arange(n_first) shuffled, then arange(n_first, total) shuffled.
// Returned as int64 values; shuffle_idx_dtype(total) says how it is stored.
std::vector<int64_t> build_shuffle_idx(int64_t n_first, int64_t total, NumpyRandomState* rng);
NpyDType shuffle_idx_dtype(int64_t total);  // uint32, or int64 when total >= 2^32 - 2

struct GPTDatasetOptions {
  std::string name;       // "train", "valid" or "test" (part of the cache hash)
  std::string prefix;     // the data prefix as given (part of the cache hash)
  int64_t doc_begin = 0;  // sequence ids [doc_begin, doc_end) of this split
  int64_t doc_end = 0;
  int64_t num_samples = 0;  // N, the minimum number of samples wanted
  int64_t seq_length = 0;
  int64_t seed = 1234;
  std::string split_string;  // the --split text, verbatim (part of the cache hash)
  // Empty: the description is C23's. Otherwise a line "Split rule <split_rule>" is added, so that
  // a split whose sequences differ between the rules never shares a cache with the other rule's.
  std::string split_rule;
  std::optional<std::string> data_cache_path;
  // false: the index is built in memory and no cache file is read or written (Megatron-Core's
  // mock data, whose sample index has no cache path).
  bool cache = true;
  std::ostream* log = nullptr;  // progress lines ("loaded"/"built" cache), or none
};

struct CacheFiles {
  std::string directory;
  std::string hash;     // md5 hex of the description
  bool loaded = false;  // true: mapped existing files; false: built and wrote them (or, without
                        // a cache, built in memory: directory is then empty)
  std::string desc_path() const { return directory + "/" + hash + ".dsc"; }
  std::string path(const char* suffix) const { return directory + "/" + hash + suffix; }
};

class GPTDataset : public TokenDataset {
 public:
  // Builds or loads the index (see the header comment). Throws Error on bad input:
  // an empty split, zero tokens, seq_length < 1, an inconsistent cache file.
  GPTDataset(std::shared_ptr<const SequenceSource> sequences, GPTDatasetOptions options);

  int64_t size() const override { return sample_idx_.shape()[0] - 1; }
  void sample(int64_t i, std::vector<int64_t>* tokens) const override;

  const GPTDatasetOptions& options() const { return options_; }
  const SequenceSource& sequences() const { return *sequences_; }
  const EpochPlan& plan() const { return plan_; }
  int64_t tokens_per_epoch() const { return tokens_per_epoch_; }
  const std::string& description() const { return description_; }
  const CacheFiles& cache() const { return cache_; }

  // The mapped index arrays (for tests and tools).
  const NpyFile& doc_idx() const { return doc_idx_; }
  const NpyFile& sample_idx() const { return sample_idx_; }
  const NpyFile& shuffle_idx() const { return shuffle_idx_; }

  // The C23 description text whose md5 names the cache files.
  static std::string describe(const GPTDatasetOptions& options);

 private:
  struct Arrays {
    std::vector<int32_t> doc_idx, sample_idx;
    std::vector<int64_t> shuffle_idx;
  };
  Arrays build(const std::vector<int32_t>& sizes) const;
  void make_cache_directory() const;
  void write_cache(const Arrays& arrays);
  void hold_in_memory(const Arrays& arrays);
  void load_cache();
  void validate(const std::vector<int32_t>& sizes) const;

  std::shared_ptr<const SequenceSource> sequences_;
  GPTDatasetOptions options_;
  EpochPlan plan_;
  int64_t tokens_per_epoch_ = 0;
  std::string description_;
  CacheFiles cache_;
  NpyFile doc_idx_;
  NpyFile sample_idx_;
  NpyFile shuffle_idx_;
};

// Python os.path.join(os.path.dirname(prefix), "index-cache").
std::string default_index_cache_dir(const std::string& prefix);

}  // namespace megatron::data
