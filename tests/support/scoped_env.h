// Environments for tests: a variable of the process set for the scope of a test, the previous
// value (or its absence) restored after (the switches read from the environment:
// MEGATRON_ATTENTION_IMPL, MEGATRON_TEST_NCCL_FAIL, ...), and a made-up environment for the
// readers that take a comm::EnvLookup.
#pragma once

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "comm/launch_env.h"

namespace megatron::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
      had_ = true;
    }
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

inline comm::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace megatron::test
