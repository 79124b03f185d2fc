// A corpus a tiny model can learn, as a Megatron indexed dataset: 120 documents, each walking
// t -> (3t + 1) mod 37 from t = d mod 37 for 40 + d mod 7 tokens (ids < 37, so any vocabulary
// of at least 37 tokens fits).
#pragma once

#include <string>

namespace megatron::test {

// Writes <dir>/walk_text_document.{bin,idx}; returns the prefix.
std::string write_walk_corpus(const std::string& dir);

// The same walks as 400 short documents of 3 + d mod 9 tokens, each ending with the GPT-2
// end-of-document token 50256 (preprocess --append-eod): a 16-token sample holds several
// documents. Written under the same prefix.
std::string write_short_walk_corpus(const std::string& dir);

}  // namespace megatron::test
