// For the tests of Llama checkpoints with their tokenizers (checkpoint_tokenizer_test,
// convert_command_llama_test): a SentencePiece model trained here with Debian's spm_train (BPE,
// 64 pieces: <unk> 0, <s> 1, </s> 2), and random Hugging Face Llamas of that vocabulary written by
// tests/convert/hf_llama_reference.py with the tokenizer.model beside them, as hub directories hold it.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "support/paths.h"

namespace megatron::test {

inline constexpr int kSpVocab = 64;

// DIR/sp.model (trained once per DIR).
inline std::string sentencepiece_model(const std::string& dir) {
  const std::string model = dir + "/sp.model";
  if (std::filesystem::exists(model)) return model;
  {
    std::ofstream corpus(dir + "/corpus.txt");
    for (int i = 0; i < 40; ++i) {
      corpus << "the cat sat on the mat and the dog ran in the park.\n"
             << "a bird sang to the sun; it was warm, bright and quiet.\n";
    }
  }
  const CommandResult r = run_command("spm_train --input=" + dir + "/corpus.txt --model_prefix=" + dir +
                                          "/sp --model_type=bpe --vocab_size=" + std::to_string(kSpVocab) +
                                          " --character_coverage=1.0 --num_threads=1 --minloglevel=2",
                                      true);
  if (r.status != 0) return "spm_train failed: " + r.output;
  return model;
}

// DIR/<name>/hf_in: the reference script's `variant` (llama2, stop, ...) with vocab_size 64 and
// the SentencePiece model as tokenizer.model. Returns "" or what failed.
inline std::string make_hf_llama(const std::string& dir, const std::string& name, const std::string& variant) {
  const std::string model = sentencepiece_model(dir);
  if (!std::filesystem::exists(model)) return model;
  const std::string script = source_dir() + "/tests/convert/hf_llama_reference.py";
  const CommandResult r = run_command("/usr/bin/python3 " + script + " make " + dir + "/" + name + " " + variant + " " +
                                          std::to_string(kSpVocab),
                                      true);
  if (r.status != 0) return r.output;
  std::filesystem::copy_file(model, dir + "/" + name + "/hf_in/tokenizer.model");
  return "";
}

}  // namespace megatron::test
