#include "cli/args.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <utility>

#include "core/error.h"

namespace megatron::cli {
namespace {

std::string strip(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n\r\f\v");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\n\r\f\v");
  return s.substr(b, e - b + 1);
}

// Python allows single '_' between digits only: "1_000" but not "_1", "1__0" or "1_".
bool remove_digit_separators(const std::string& in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '_') {
      bool ok = i > 0 && i + 1 < in.size() && std::isdigit(static_cast<unsigned char>(in[i - 1])) &&
                std::isdigit(static_cast<unsigned char>(in[i + 1]));
      if (!ok) return false;
      continue;
    }
    out->push_back(in[i]);
  }
  return true;
}

}  // namespace

int64_t parse_int(const std::string& raw, const std::string& what) {
  std::string s = strip(raw), digits;
  bool ok = !s.empty() && remove_digit_separators(s, &digits);
  size_t start = (ok && (digits[0] == '+' || digits[0] == '-')) ? 1 : 0;
  ok = ok && digits.size() > start;
  for (size_t i = start; ok && i < digits.size(); ++i) ok = std::isdigit(static_cast<unsigned char>(digits[i]));
  if (!ok) throw_error("[", what, "] expected an integer, got '", raw, "'");
  errno = 0;
  long long v = std::strtoll(digits.c_str(), nullptr, 10);
  if (errno == ERANGE) throw_error("[", what, "] integer out of range: '", raw, "'");
  return static_cast<int64_t>(v);
}

double parse_double(const std::string& raw, const std::string& what) {
  std::string s = strip(raw), plain;
  if (s.empty() || !remove_digit_separators(s, &plain)) {
    throw_error("[", what, "] expected a number, got '", raw, "'");
  }
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(plain.c_str(), &end);
  // strtod accepts hex floats and "infinity"-like spellings Python also accepts; reject
  // hex (Python's float() does not) and trailing garbage.
  bool hex = plain.find_first_of("xX") != std::string::npos;
  if (end == plain.c_str() || *end != '\0' || hex) {
    throw_error("[", what, "] expected a number, got '", raw, "'");
  }
  // nan, inf and overflow (strtod's HUGE_VAL with ERANGE); an underflow keeps strtod's tiny or
  // zero value, as Python's float() does.
  if (!std::isfinite(v)) throw_error("[", what, "] expected a finite number, got '", raw, "'");
  return v;
}

int64_t check_int_range(const std::string& name, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return v;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (lo == 1 && hi == kMax) throw_error("[", name, "] must be positive, got ", v);
  if (lo == 0 && hi == kMax) throw_error("[", name, "] must not be negative, got ", v);
  throw_error("[", name, "] must be between ", lo, " and ", hi, ", got ", v);
}

std::string to_string(const RealRange& r) {
  return str_cat(r.lo_open ? "(" : "[", r.lo, ", ", r.hi, r.hi_open ? ")" : "]");
}

double check_real_range(const std::string& name, double v, const RealRange& r, const std::string& text) {
  const bool above = r.lo_open ? v > r.lo : v >= r.lo;
  const bool below = r.hi_open ? v < r.hi : v <= r.hi;
  if (above && below) return v;
  throw_error("[", name, "] must be in ", to_string(r), ", got '", text, "'");
}

void throw_errors(const std::vector<std::string>& errors) {
  MT_CHECK(!errors.empty());
  std::string all;
  for (const std::string& e : errors) all += (all.empty() ? "" : "\n") + e;
  throw Error(all);
}

Args::Args(std::string command, std::string summary) : command_(std::move(command)), summary_(std::move(summary)) {}

Args& Args::add(Spec s) {
  for (const Spec& other : specs_) MT_CHECK(other.name != s.name) << "flag declared twice: " << s.name;
  specs_.push_back(std::move(s));
  return *this;
}

Args& Args::flag(const std::string& name, const std::string& help) {
  return add({name, Kind::kFlag, "", help, std::nullopt, false, 0});
}

Args& Args::option(const std::string& name, const std::string& metavar, const std::string& help,
                   std::optional<std::string> default_value, bool required) {
  return add({name, Kind::kOption, metavar, help, std::move(default_value), required, 0});
}

Args& Args::list(const std::string& name, const std::string& metavar, const std::string& help, int exact_count,
                 bool required) {
  return add({name, Kind::kList, metavar, help, std::nullopt, required, exact_count});
}

Args& Args::positional(const std::string& name, const std::string& help, bool required) {
  return add({name, Kind::kPositional, name, help, std::nullopt, required, 0});
}

const Args::Spec& Args::spec(const std::string& name) const {
  for (const Spec& s : specs_) {
    if (s.name == name) return s;
  }
  MT_CHECK(false) << "flag not declared: " << name;
  __builtin_unreachable();
}

namespace {

// Optimal string alignment distance (Levenshtein with adjacent transpositions).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::string dashes_for_underscores(std::string s) {
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

}  // namespace

std::string Args::closest_flag(const std::string& name) const {
  // '_' and '-' count as the same; past that, up to 1 edit for short names, 2 from 8
  // characters, 3 from 16 (a typo, not another flag).
  const std::string wanted = dashes_for_underscores(name);
  const size_t limit = wanted.size() >= 16 ? 3 : wanted.size() >= 8 ? 2 : 1;
  std::string best;
  size_t best_distance = limit + 1;
  for (const Spec& s : specs_) {
    if (s.kind == Kind::kPositional) continue;
    const size_t dist = edit_distance(wanted, dashes_for_underscores(s.name));
    if (dist < best_distance) {
      best_distance = dist;
      best = s.name;
    }
  }
  return best;
}

bool Args::parse(const std::vector<std::string>& argv) {
  std::vector<std::string> errors;
  const bool parsed = parse(argv, &errors);
  if (!errors.empty()) throw_errors(errors);
  return parsed;
}

bool Args::parse(const std::vector<std::string>& argv, std::vector<std::string>* error_list) {
  values_.clear();
  std::vector<std::string>& errors = *error_list;
  errors.clear();
  std::vector<const Spec*> positionals;
  for (const Spec& s : specs_) {
    if (s.kind == Kind::kPositional) positionals.push_back(&s);
  }
  size_t next_positional = 0;
  auto is_flag_like = [](const std::string& a) {
    // "-5" and "-1e3" are values (negative numbers), "--x" and "-x" are flags.
    if (a.size() < 2 || a[0] != '-') return false;
    return !(std::isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.');
  };
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "-h" || arg == "--help") return false;
    if (!is_flag_like(arg)) {
      if (next_positional >= positionals.size()) {
        errors.push_back(str_cat(command_, ": unexpected argument '", arg, "'"));
        continue;
      }
      values_[positionals[next_positional++]->name] = {arg};
      continue;
    }
    std::string name = arg;
    std::optional<std::string> inline_value;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    const Spec* s = nullptr;
    for (const Spec& cand : specs_) {
      if (cand.name == name && cand.kind != Kind::kPositional) s = &cand;
    }
    if (s == nullptr) {
      const std::string suggestion = closest_flag(name);
      errors.push_back(suggestion.empty()
                           ? str_cat("[", name, "] unknown flag for ", command_, " (see --help)")
                           : str_cat("[", name, "] unknown flag for ", command_, "; did you mean ", suggestion, "?"));
      // The words after it are taken as its values, not as positionals: one line per unknown flag.
      while (!inline_value && i + 1 < argv.size() && !is_flag_like(argv[i + 1])) ++i;
      continue;
    }
    // A repeated flag keeps its last value, as argparse does: job scripts append overrides
    // ("$COMMON_ARGS --train-iters 10").
    std::vector<std::string> vals;
    if (s->kind == Kind::kFlag) {
      if (inline_value) {
        errors.push_back(str_cat("[", name, "] takes no value"));
        values_.erase(name);
      } else {
        values_[name] = {};
      }
      continue;
    }
    if (inline_value) {
      vals.push_back(*inline_value);
    } else {
      while (i + 1 < argv.size() && !is_flag_like(argv[i + 1])) {
        vals.push_back(argv[++i]);
        if (s->kind == Kind::kOption) break;
        if (s->exact_count > 0 && static_cast<int>(vals.size()) == s->exact_count) break;
      }
    }
    // A flag in error holds no value: get_*() then read its default, never an empty entry.
    if (vals.empty()) {
      errors.push_back(str_cat("[", name, "] expected a value"));
      values_.erase(name);
      continue;
    }
    if (s->kind == Kind::kList && s->exact_count > 0 && static_cast<int>(vals.size()) != s->exact_count) {
      errors.push_back(str_cat("[", name, "] expected ", s->exact_count, " values, got ", vals.size()));
      values_.erase(name);
      continue;
    }
    values_[name] = std::move(vals);
  }
  for (const Spec& s : specs_) {
    if (s.required && values_.count(s.name) == 0) {
      const bool in_error = std::any_of(errors.begin(), errors.end(),
                                        [&](const std::string& e) { return e.rfind("[" + s.name + "]", 0) == 0; });
      if (in_error) continue;
      if (s.kind == Kind::kPositional) {
        errors.push_back(str_cat(command_, ": missing argument <", s.name, ">"));
      } else {
        errors.push_back(str_cat("[", s.name, "] is required for ", command_));
      }
    }
  }
  return true;
}

bool Args::given(const std::string& name) const {
  spec(name);
  return values_.count(name) != 0;
}

std::vector<Args::Setting> Args::settings() const {
  std::vector<Setting> out;
  for (const Spec& s : specs_) {
    if (s.kind == Kind::kPositional) continue;
    Setting setting{s.name, s.metavar, values_.count(s.name) != 0, "", 1};
    if (s.kind == Kind::kFlag) setting.arity = 0;
    if (s.kind == Kind::kList) setting.arity = s.exact_count > 0 ? s.exact_count : -1;
    if (s.kind == Kind::kFlag) {
      setting.value = setting.given ? "1" : "0";
    } else if (setting.given) {
      for (const std::string& v : values_.at(s.name)) {
        if (!setting.value.empty()) setting.value += ' ';
        setting.value += v;
      }
    } else if (s.default_value) {
      setting.value = *s.default_value;
    }
    out.push_back(std::move(setting));
  }
  return out;
}

bool Args::has(const std::string& name) const { return given(name) || spec(name).default_value.has_value(); }

bool Args::get_flag(const std::string& name) const {
  MT_CHECK(spec(name).kind == Kind::kFlag) << name;
  return values_.count(name) != 0;
}

std::string Args::get_string(const std::string& name) const {
  const Spec& s = spec(name);
  auto it = values_.find(name);
  if (it != values_.end()) {
    if (it->second.empty()) throw_error("[", name, "] expected a value");  // a switch read as an option
    return it->second.front();
  }
  if (s.default_value) return *s.default_value;
  throw_error("[", name, "] is required for ", command_);
}

int64_t Args::get_int(const std::string& name) const { return parse_int(get_string(name), name); }

double Args::get_double(const std::string& name) const { return parse_double(get_string(name), name); }

int64_t Args::get_int(const std::string& name, int64_t lo, int64_t hi) const {
  return check_int_range(name, get_int(name), lo, hi);
}

double Args::get_double(const std::string& name, const RealRange& range) const {
  return check_real_range(name, get_double(name), range, get_string(name));
}

std::vector<std::string> Args::get_list(const std::string& name) const {
  spec(name);
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

std::vector<int64_t> Args::get_int_list(const std::string& name) const {
  std::vector<int64_t> out;
  for (const std::string& v : get_list(name)) out.push_back(parse_int(v, name));
  return out;
}

std::string Args::usage() const {
  std::ostringstream os;
  os << "usage: " << command_;
  for (const Spec& s : specs_) {
    if (s.kind == Kind::kPositional) os << (s.required ? " <" : " [<") << s.name << (s.required ? ">" : ">]");
  }
  os << " [flags]\n";
  if (!summary_.empty()) os << "\n" << summary_ << "\n";
  os << "\n";
  for (const Spec& s : specs_) {
    std::string left = s.name;
    if (s.kind == Kind::kPositional) left = "<" + s.name + ">";
    if (s.kind == Kind::kOption) left += " " + s.metavar;
    if (s.kind == Kind::kList) left += " " + s.metavar + (s.exact_count > 0 ? "" : " ...");
    os << "  " << left;
    os << std::string(left.size() < 34 ? 34 - left.size() : 1, ' ') << s.help;
    if (s.required) os << " (required)";
    if (s.default_value) os << " [default: " << *s.default_value << "]";
    os << "\n";
  }
  return os.str();
}

}  // namespace megatron::cli
