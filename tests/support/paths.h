// Where tests find things: the source tree, the build tree, fetched data, scratch space.
#pragma once

#include <string>

namespace megatron::test {

// Both are compiled in; MEGATRON_TEST_SOURCE_DIR / MEGATRON_TEST_BINARY_DIR override them where
// the test binaries run away from their build (scripts/gpu-check.sh on the GPU machine: the
// repository copy there and the pack holding `megatron`).
std::string source_dir();  // the repository root
std::string binary_dir();  // the build directory (holds the `megatron` binary)
std::string megatron_binary();
// GPT-2 vocabulary fetched by scripts/setup.sh (data/gpt2/vocab.json, merges.txt).
std::string gpt2_vocab_file();
std::string gpt2_merge_file();
// The bytes of the file at `path` ("" if it cannot be read).
std::string read_file(const std::string& path);
// A fresh, empty directory for this test (under the build tree), removed at exit.
std::string scratch_dir(const std::string& name);

// Runs a shell command; returns its exit status and captures stdout (and stderr if asked).
struct CommandResult {
  int status = -1;
  std::string output;
};
CommandResult run_command(const std::string& command, bool capture_stderr = false);

}  // namespace megatron::test
