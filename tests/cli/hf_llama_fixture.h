// For the tests of Llama checkpoints with their tokenizers (checkpoint_tokenizer_test,
// convert_command_llama_test): a SentencePiece model trained here with Debian's spm_train (BPE,
// 64 pieces: <unk> 0, <s> 1, </s> 2), or a byte-level tokenizer.json whose post-processor puts
// <bos> first (Llama 3's kind, 259 ids), and random Hugging Face Llamas of that vocabulary written
// by tests/convert/hf_llama_reference.py with the tokenizer's files beside them, as hub
// directories hold them.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "data/tokenizer/byte_level.h"
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

// The byte-level tokenizer: the 256 byte characters, "ab" = 256 by one merge, <eos> 257 (the
// tokenizer_config.json's eos_token) and <bos> 258, which the TemplateProcessing post-processor
// puts before every text.
inline constexpr int kByteLevelVocab = 259;

inline void write_byte_level_tokenizer(const std::string& dir) {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = data::detail::kByteEncoder[static_cast<size_t>(b)];
    std::string ch;
    if (cp < 0x80) {
      ch = cp == '"' ? "\\\"" : cp == '\\' ? "\\\\" : std::string(1, static_cast<char>(cp));
    } else {
      ch.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      ch.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    vocab += "\"" + ch + "\": " + std::to_string(b) + ", ";
  }
  std::ofstream(dir + "/tokenizer.json")
      << R"({"added_tokens": [{"id": 257, "content": "<eos>", "special": true}, {"id": 258, "content": "<bos>", "special": true}], )"
      << R"("pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}, )"
      << R"("post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, )"
      << R"({"Sequence": {"id": "A", "type_id": 0}}], "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, )"
      << R"({"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}], )"
      << R"("special_tokens": {"<bos>": {"id": "<bos>", "ids": [258], "tokens": ["<bos>"]}}}, )"
      << R"("decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {)" << vocab
      << R"("ab": 256}, "merges": ["a b"]}})";
  std::ofstream(dir + "/tokenizer_config.json") << R"({"bos_token": "<bos>", "eos_token": "<eos>"})";
}

// DIR/<name>/hf_in: the reference script's `variant` (llama2, stop, ...) with the tokenizer's
// vocabulary and files: the SentencePiece model as tokenizer.model, or (byte_level) the
// tokenizer.json above. Returns "" or what failed.
inline std::string make_hf_llama(const std::string& dir, const std::string& name, const std::string& variant,
                                 bool byte_level = false) {
  const std::string model = byte_level ? "" : sentencepiece_model(dir);
  if (!byte_level && !std::filesystem::exists(model)) return model;
  const std::string script = source_dir() + "/tests/convert/hf_llama_reference.py";
  const CommandResult r = run_command("/usr/bin/python3 " + script + " make " + dir + "/" + name + " " + variant + " " +
                                          std::to_string(byte_level ? kByteLevelVocab : kSpVocab),
                                      true);
  if (r.status != 0) return r.output;
  if (byte_level) {
    write_byte_level_tokenizer(dir + "/" + name + "/hf_in");
  } else {
    std::filesystem::copy_file(model, dir + "/" + name + "/hf_in/tokenizer.model");
  }
  return "";
}

}  // namespace megatron::test
