// Command-line flags in Megatron-LM's spelling (argparse conventions).
//
// Each subcommand declares its flags, then parse() fills them. Unknown flags,
// missing values and unparsable numbers are megatron::Error with a one-line
// reason naming the flag, e.g. "[--workers] expected an integer, got 'x'"; parse()
// reports every such problem of the command line at once, one line each (throw_errors).
// An unknown flag close to a declared one names it: "[--lr-warmup-iter] unknown flag for
// megatron train; did you mean --lr-warmup-iters?".
// Values may be given as "--flag value" or "--flag=value". Integers follow
// Python's int(): an optional sign, digits, and '_' separators (5_000_000), within int64.
// Reals follow Python's float() but must be finite: nan, inf and what overflows a double
// (1e400) are errors, as no flag means anything by them.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace megatron::cli {

// The largest tensor dimension or parallel size a flag may give (layers, hidden, heads, sequence,
// micro-batch, TP, PP, ...): token ids and positions are int32, no tensor has a dimension of
// 2^31, and the bound keeps the sizes derived from these (4h, the padded vocabulary, tokens =
// seq * micro-batch) far inside int64.
constexpr int64_t kMaxDimension = std::numeric_limits<int32_t>::max();
// The largest magnitude of a real flag the engine computes with in fp32 (learning rates, weight
// decay, epsilons, loss scales, temperatures): float's largest finite value.
constexpr double kMaxFp32 = std::numeric_limits<float>::max();

// The valid values of a real flag: lo..hi, each end included unless open.
struct RealRange {
  double lo = 0;
  double hi = kMaxFp32;
  bool lo_open = false;
  bool hi_open = false;
};

class Args {
 public:
  explicit Args(std::string command, std::string summary = "");

  // A boolean switch: present or not.
  Args& flag(const std::string& name, const std::string& help);
  // A flag taking one value; `default_value` is what get_*() returns when absent.
  Args& option(const std::string& name, const std::string& metavar, const std::string& help,
               std::optional<std::string> default_value = std::nullopt, bool required = false);
  // A flag taking `min_count` or more values (argparse nargs='+'), or exactly
  // `exact_count` values when it is > 0.
  Args& list(const std::string& name, const std::string& metavar, const std::string& help, int exact_count = 0,
             bool required = false);
  // A positional argument, in declaration order.
  Args& positional(const std::string& name, const std::string& help, bool required = true);

  // Returns false when --help was given (usage() is then printed by the caller). Throws one
  // Error holding every problem found, one per line.
  bool parse(const std::vector<std::string>& argv);
  // The same, the problems left in `errors` (one line each) instead of thrown; the flags in
  // error read as not given.
  bool parse(const std::vector<std::string>& argv, std::vector<std::string>* errors);

  bool has(const std::string& name) const;    // given on the command line, or has a default
  bool given(const std::string& name) const;  // given on the command line
  bool get_flag(const std::string& name) const;
  std::string get_string(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  double get_double(const std::string& name) const;
  // The same, checked against the flag's valid range: Error "[--x] must be between 1 and 8, got
  // 9" ("must be positive" for [1, int64 max], "must not be negative" for [0, int64 max]), or
  // "[--x] must be in (0, 1], got '2'".
  int64_t get_int(const std::string& name, int64_t lo, int64_t hi = std::numeric_limits<int64_t>::max()) const;
  double get_double(const std::string& name, const RealRange& range) const;
  std::vector<std::string> get_list(const std::string& name) const;
  std::vector<int64_t> get_int_list(const std::string& name) const;

  // Every declared flag (positionals left out), in declaration order: whether it was given
  // and its value as text (a switch: "1" or "0"; a list: its values joined by ' '; an absent
  // option: its default, or "" when it has none).
  struct Setting {
    std::string name;
    std::string metavar;
    bool given = false;
    std::string value;
    int arity = 1;  // values it takes: 0 a switch, 1 an option, n > 1 a list of n, -1 a list of 1 or more
  };
  std::vector<Setting> settings() const;
  std::string usage() const;
  const std::string& command() const { return command_; }

 private:
  enum class Kind { kFlag, kOption, kList, kPositional };
  struct Spec {
    std::string name;
    Kind kind;
    std::string metavar;
    std::string help;
    std::optional<std::string> default_value;
    bool required = false;
    int exact_count = 0;
  };
  const Spec& spec(const std::string& name) const;
  // The declared flag nearest to `name` by edit distance, or "" when none is close.
  std::string closest_flag(const std::string& name) const;
  Args& add(Spec spec);

  std::string command_;
  std::string summary_;
  std::vector<Spec> specs_;
  std::map<std::string, std::vector<std::string>> values_;
};

// Throws one megatron::Error whose message is `errors` (not empty), one per line; main()
// prints each line as "error: <line>".
[[noreturn]] void throw_errors(const std::vector<std::string>& errors);

// Python int() semantics for one string; throws Error "[what] expected an integer, got 's'"
// (or "integer out of range" beyond int64).
int64_t parse_int(const std::string& s, const std::string& what);
// Python float() semantics for finite decimal strings ("1e-5", "1_000.5", "-0.5"; an underflow
// such as 1e-400 reads as Python's 0.0); throws Error "[what] expected a finite number, got 's'"
// for nan, inf and overflow (1e400).
double parse_double(const std::string& s, const std::string& what);

// Range checks of a value already parsed, with the messages of Args::get_int / get_double
// (`text`: the value as given).
int64_t check_int_range(const std::string& name, int64_t v, int64_t lo,
                        int64_t hi = std::numeric_limits<int64_t>::max());
double check_real_range(const std::string& name, double v, const RealRange& range, const std::string& text);
// "(0, 3.40282e+38]", "[0, 1)".
std::string to_string(const RealRange& range);

}  // namespace megatron::cli
