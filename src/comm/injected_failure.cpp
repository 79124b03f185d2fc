#include "comm/injected_failure.h"

#include <algorithm>
#include <stdexcept>

#include "core/error.h"

namespace megatron::comm {
namespace {

constexpr const char* kVariable = "MEGATRON_TEST_NCCL_FAIL";

// A whole number written in decimal digits only, or nullopt (empty, a sign, any other
// character, too large).
std::optional<int64_t> whole_number(const std::string& s) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  try {
    return std::stoll(s);
  } catch (const std::out_of_range&) {
    return std::nullopt;
  }
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
    const std::optional<int64_t> r = whole_number(rest.substr(at + 1));
    if (!r) bad();
    f.rank = *r;
    rest.resize(at);
  }
  if (const size_t colon = rest.find(':'); colon != std::string::npos) {
    const std::optional<int64_t> n = whole_number(rest.substr(colon + 1));
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
