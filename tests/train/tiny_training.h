// For the converter tests (reshard_test, hf_gpt2_test): in-process training of a tiny GPT whose
// checkpoints are real (trained weights, biases, LayerNorms, Adam state) and small.
// Vocabulary: 40 ids, padded to 48 (recorded as --make-vocab-size-divisible-by 16 at TP 1, so
// the recorded args agree with the padding); the corpus uses ids < 37.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "cli/args.h"
#include "cli/train_args.h"
#include "data/indexed_dataset.h"
#include "support/paths.h"
#include "train/trainer.h"

namespace megatron::test {

inline constexpr int64_t kTinyVocab = 40;

inline void write_tiny_corpus(const std::string& dir) {
  data::IndexedDatasetWriter writer(dir + "/walk_text_document", data::TokenDType::kUInt16);
  for (int d = 0; d < 60; ++d) {
    std::vector<int32_t> tokens;
    int32_t t = d % 37;
    for (int i = 0; i < 30 + d % 5; ++i) {
      tokens.push_back(t);
      t = (5 * t + 3) % 37;
    }
    const int32_t len = static_cast<int32_t>(tokens.size());
    writer.add_document(tokens, std::span<const int32_t>(&len, 1));
  }
  writer.finalize();
}

// Trains on dir's corpus (2 layers, hidden 16, 2 heads, seq 8) with `extra` flags appended
// (they win); the padded vocabulary follows --make-vocab-size-divisible-by (default 16) and
// --tensor-model-parallel-size as in `megatron train`. Returns the log.
inline std::string train_tiny(const std::string& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> flags = {"--num-layers",
                                    "2",
                                    "--hidden-size",
                                    "16",
                                    "--num-attention-heads",
                                    "2",
                                    "--seq-length",
                                    "8",
                                    "--micro-batch-size",
                                    "2",
                                    "--global-batch-size",
                                    "4",
                                    "--train-iters",
                                    "3",
                                    "--lr",
                                    "0.003",
                                    "--lr-warmup-iters",
                                    "1",
                                    "--log-interval",
                                    "1",
                                    "--eval-interval",
                                    "1000",
                                    "--eval-iters",
                                    "1",
                                    "--split",
                                    "90,10,0",
                                    "--data-path",
                                    dir + "/walk_text_document",
                                    "--data-cache-path",
                                    dir + "/cache",
                                    "--seed",
                                    "11",
                                    "--make-vocab-size-divisible-by",
                                    "16",
                                    "--vocab-file",
                                    gpt2_vocab_file(),
                                    "--merge-file",
                                    gpt2_merge_file()};
  flags.insert(flags.end(), extra.begin(), extra.end());
  cli::Args args("train");
  cli::declare_train_flags(args);
  args.parse(flags);
  train::TrainConfig c = cli::parse_train_config(args);
  c.model.vocab_size = kTinyVocab;
  c.model.padded_vocab_size = model::padded_vocab_size(kTinyVocab, c.make_vocab_size_divisible_by, 1);
  auto backend = backend::make_cpu_backend();
  std::ostringstream out;
  train::Trainer trainer(c, *backend, out);
  trainer.run();
  return out.str();
}

}  // namespace megatron::test
