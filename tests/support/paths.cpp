#include "support/paths.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace megatron::test {

namespace {
// The environment's value of `name` when set and non-empty, else `built_in`.
std::string env_or(const char* name, const char* built_in) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : built_in;
}
}  // namespace

std::string source_dir() { return env_or("MEGATRON_TEST_SOURCE_DIR", MT_SOURCE_DIR); }
std::string binary_dir() { return env_or("MEGATRON_TEST_BINARY_DIR", MT_BINARY_DIR); }
std::string megatron_binary() { return binary_dir() + "/megatron"; }
std::string gpt2_vocab_file() { return source_dir() + "/data/gpt2/vocab.json"; }
std::string gpt2_merge_file() { return source_dir() + "/data/gpt2/merges.txt"; }

std::string scratch_dir(const std::string& name) {
  std::string dir = binary_dir() + "/test_scratch/" + name + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

CommandResult run_command(const std::string& command, bool capture_stderr) {
  CommandResult r;
  std::string cmd = command + (capture_stderr ? " 2>&1" : "");
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace megatron::test
