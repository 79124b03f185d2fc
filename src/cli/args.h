// Command-line flags in Megatron-LM's spelling (argparse conventions).
//
// Each subcommand declares its flags, then parse() fills them. Unknown flags,
// missing values and unparsable numbers are megatron::Error with a one-line
// reason naming the flag, e.g. "[--workers] expected an integer, got 'x'".
// Values may be given as "--flag value" or "--flag=value". Integers follow
// Python's int(): an optional sign, digits, and '_' separators (5_000_000).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace megatron::cli {

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
  Args& list(const std::string& name, const std::string& metavar, const std::string& help,
             int exact_count = 0, bool required = false);
  // A positional argument, in declaration order.
  Args& positional(const std::string& name, const std::string& help, bool required = true);

  // Returns false when --help was given (usage() is then printed by the caller).
  bool parse(const std::vector<std::string>& argv);

  bool has(const std::string& name) const;  // given on the command line, or has a default
  bool given(const std::string& name) const;  // given on the command line
  bool get_flag(const std::string& name) const;
  std::string get_string(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  double get_double(const std::string& name) const;
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
  Args& add(Spec spec);

  std::string command_;
  std::string summary_;
  std::vector<Spec> specs_;
  std::map<std::string, std::vector<std::string>> values_;
};

// Python int() semantics for one string; throws Error "[what] expected an integer, got 's'".
int64_t parse_int(const std::string& s, const std::string& what);
// Python float() semantics for decimal strings (incl. "inf", "nan", "1e-5", "1_000.5").
double parse_double(const std::string& s, const std::string& what);

}  // namespace megatron::cli
