// The tokenizer of a command that reads a checkpoint (generate; convert --save-hf) and what
// generation adds around a prompt.
//
// Tokenizer flags (declare_tokenizer_flags with no default type): each flag given wins; else
// what the checkpoint recorded: --tokenizer-type and --tokenizer-model (the trainer records the
// flags it was given, the model as an absolute path; convert --load-hf the copy of the Hugging
// Face files it puts into the checkpoint's directory; when that path no longer exists, the same
// name in the loaded checkpoint's directory is used, so a moved checkpoint keeps its tokenizer);
// else GPT2BPETokenizer. A recorded type no command here reads (NullTokenizer) is not taken.
//
// Generation (docs/checkpoints.md, "Generating text"):
//   - BOS as the tokenizer defines it: Llama2Tokenizer prepends the model's bos_id (as
//     transformers' LlamaTokenizer, add_bos_token true, and Meta's generation do); a
//     HuggingFaceTokenizer's post-processor already puts it in encode() (Llama 3:
//     <|begin_of_text|>); the other types add none.
//   - Stop tokens: the tokenizer's end of document (eod(), when it has one) and the
//     eos_token_id(s) of the Hugging Face config.json a converted checkpoint recorded (Llama 3
//     Instruct lists several).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/checkpoint_io.h"
#include "cli/args.h"
#include "data/tokenizer/tokenizer.h"

namespace megatron::cli {

data::TokenizerOptions checkpoint_tokenizer_options(const Args& args, const ckpt::LoadedCheckpoint& checkpoint);

struct GenerationTokens {
  std::vector<int32_t> prefix;  // put before every prompt's ids
  std::vector<int32_t> stop;    // generation ends when one of these is sampled
  bool stops(int32_t id) const;
};
// `tokenizer` null (generate --token-ids): no prefix; only the recorded eos ids stop.
GenerationTokens generation_tokens(const data::TokenizerOptions& options, const data::Tokenizer* tokenizer,
                                   const ckpt::LoadedCheckpoint& checkpoint);

}  // namespace megatron::cli
