#include "comm/injected_failure.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "core/error.h"

namespace megatron::comm {
namespace {

constexpr const char* kVariable = "MEGATRON_TEST_NCCL_FAIL";

// A positive integer, or nullopt.
std::optional<int64_t> positive(const std::string& s) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  try {
    const long long v = std::stoll(s);
    if (v >= 0) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace

std::optional<InjectedFailure> injected_failure_from(const EnvLookup& env) {
  const std::optional<std::string> v = env(kVariable);
  if (!v || v->empty()) return std::nullopt;
  auto bad = [&]() {
    throw_error("[", kVariable, "] expected <call>[:<n>][@<rank>] with <call> ncclMemAlloc, ncclCommSplit or ",
                "ncclCommWindowRegister, <n> >= 1, <rank> >= 0; got '", *v, "'");
  };
  InjectedFailure f;
  std::string rest = *v;
  if (const size_t at = rest.find('@'); at != std::string::npos) {
    const std::optional<int64_t> r = positive(rest.substr(at + 1));
    if (!r) bad();
    f.rank = *r;
    rest.resize(at);
  }
  if (const size_t colon = rest.find(':'); colon != std::string::npos) {
    const std::optional<int64_t> n = positive(rest.substr(colon + 1));
    if (!n || *n == 0) bad();
    f.nth = *n;
    rest.resize(colon);
  }
  if (std::none_of(std::begin(kInjectableCalls), std::end(kInjectableCalls),
                   [&](const char* c) { return rest == c; })) {
    bad();
  }
  f.call = rest;
  return f;
}

bool injected_failure(const char* call, int64_t nth) {
  const EnvLookup env = process_environment();
  const std::optional<InjectedFailure> f = injected_failure_from(env);
  if (!f || f->call != call || (f->nth != 0 && f->nth != nth)) return false;
  return f->rank < 0 || f->rank == detect_launch_env(env).rank;
}

}  // namespace megatron::comm
