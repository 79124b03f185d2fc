// The tokenizer flags of the commands that read text (preprocess, tokenize, generate,
// dataset-info), in Megatron's spelling; train declares the same flags in its flag table
// (cli/train_args.cpp). See data/tokenizer/tokenizer.h for what each type uses.
#pragma once

#include "cli/args.h"
#include "data/tokenizer/tokenizer.h"

namespace megatron::cli {

// Declares --tokenizer-type (required; or with default `default_type`; or, when that is empty
// and not required, optional without a default), --vocab-file, --merge-file,
// --tokenizer-model, --vocab-size, --tiktoken-pattern and --tiktoken-num-special-tokens.
void declare_tokenizer_flags(Args& args, const std::string& default_type, bool required = false);

// The options given (an optional --tokenizer-type without a default that is absent leaves
// TokenizerOptions' default type); flag values are checked (a number, v1|v2), combinations are left to
// data::make_tokenizer.
data::TokenizerOptions tokenizer_options(const Args& args);

}  // namespace megatron::cli
