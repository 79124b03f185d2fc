// An environment variable set for the scope of a test, the previous value (or its absence)
// restored after: for the switches read from the environment (MEGATRON_ATTENTION_IMPL,
// MEGATRON_TEST_NCCL_FAIL, ...).
#pragma once

#include <cstdlib>
#include <string>

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

}  // namespace megatron::test
