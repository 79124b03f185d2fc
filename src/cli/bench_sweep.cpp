#include "cli/bench_sweep.h"

#include <set>

#include "cli/args.h"
#include "cli/train_args.h"
#include "core/error.h"

namespace megatron::cli {

namespace {

enum class ValueKind { kPositive, kRecompute, kOnOff, kPreset };

struct KeySpec {
  const char* key;
  const char* flag;  // the Megatron flag it sets (nullptr: dp, set by the rank count)
  ValueKind kind;
};

// In the order sweep_point_flags emits them.
const KeySpec kKeys[] = {
    {"model", "--model", ValueKind::kPreset},
    {"layers", "--num-layers", ValueKind::kPositive},
    {"hidden", "--hidden-size", ValueKind::kPositive},
    {"heads", "--num-attention-heads", ValueKind::kPositive},
    {"seq", "--seq-length", ValueKind::kPositive},
    {"dp", nullptr, ValueKind::kPositive},
    {"tp", "--tensor-model-parallel-size", ValueKind::kPositive},
    {"pp", "--pipeline-model-parallel-size", ValueKind::kPositive},
    {"mbs", "--micro-batch-size", ValueKind::kPositive},
    {"gbs", "--global-batch-size", ValueKind::kPositive},
    {"recompute", "--recompute-granularity", ValueKind::kRecompute},
    {"sp", "--sequence-parallel", ValueKind::kOnOff},
    {"dist-opt", "--use-distributed-optimizer", ValueKind::kOnOff},
};

const KeySpec* find_key(const std::string& key) {
  for (const KeySpec& k : kKeys) {
    if (key == k.key) return &k;
  }
  return nullptr;
}

std::string key_names() {
  std::string out;
  for (const KeySpec& k : kKeys) out += (out.empty() ? "" : ", ") + std::string(k.key);
  return out;
}

void check_value(const KeySpec& k, const std::string& token, const std::string& v) {
  switch (k.kind) {
    case ValueKind::kPositive: {
      int64_t n = 0;
      try {
        n = parse_int(v, "--sweep");
      } catch (const Error&) {
        throw_error("[--sweep] ", token, ": '", v, "' is not an integer");
      }
      if (n < 1) throw_error("[--sweep] ", token, ": ", k.key, " must be positive, got ", v);
      return;
    }
    case ValueKind::kRecompute:
      if (v != "none" && v != "selective" && v != "full") {
        throw_error("[--sweep] ", token, ": invalid recompute '", v, "' (choose from none, selective, full)");
      }
      return;
    case ValueKind::kOnOff:
      if (v != "on" && v != "off") throw_error("[--sweep] ", token, ": ", k.key, " takes on or off, got '", v, "'");
      return;
    case ValueKind::kPreset:
      for (const ModelPreset& p : model_presets()) {
        if (v == p.name) return;
      }
      throw_error("[--sweep] ", token, ": unknown model preset '", v, "'");
  }
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

}  // namespace

std::vector<SweepAxis> parse_sweep(const std::vector<std::string>& tokens) {
  if (tokens.empty()) throw_error("[--sweep] expected KEY=V[,V...] tokens (keys: ", key_names(), ")");
  std::vector<SweepAxis> axes;
  std::set<std::string> seen;
  for (const std::string& token : tokens) {
    const size_t eq = token.find('=');
    if (eq == std::string::npos) throw_error("[--sweep] '", token, "' is not KEY=V[,V...] (keys: ", key_names(), ")");
    SweepAxis axis;
    axis.key = token.substr(0, eq);
    const KeySpec* k = find_key(axis.key);
    if (k == nullptr) throw_error("[--sweep] unknown key '", axis.key, "' in '", token, "' (keys: ", key_names(), ")");
    if (!seen.insert(axis.key).second) throw_error("[--sweep] key '", axis.key, "' given twice");
    for (const std::string& v : split(token.substr(eq + 1), ',')) {
      if (v.empty()) throw_error("[--sweep] ", token, ": empty value");
      check_value(*k, token, v);
      axis.values.push_back(v);
    }
    axes.push_back(axis);
  }
  return axes;
}

std::vector<SweepPoint> expand_sweep(const std::vector<SweepAxis>& axes) {
  std::vector<SweepPoint> points = {SweepPoint{}};
  for (const SweepAxis& axis : axes) {
    std::vector<SweepPoint> next;
    next.reserve(points.size() * axis.values.size());
    for (const SweepPoint& p : points) {
      for (const std::string& v : axis.values) {
        SweepPoint q = p;
        q[axis.key] = v;
        next.push_back(std::move(q));
      }
    }
    points = std::move(next);
  }
  return points;
}

std::vector<std::string> sweep_key_flags(const std::string& key) {
  if (key == "recompute") {
    return {"--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--recompute-activations"};
  }
  const KeySpec* k = find_key(key);
  MT_CHECK(k != nullptr) << key;
  if (k->flag == nullptr) return {};
  return {k->flag};
}

std::vector<std::string> sweep_point_flags(const SweepPoint& point) {
  std::vector<std::string> out;
  for (const KeySpec& k : kKeys) {
    const auto it = point.find(k.key);
    if (it == point.end() || k.flag == nullptr) continue;
    const std::string& v = it->second;
    switch (k.kind) {
      case ValueKind::kPositive:
      case ValueKind::kPreset:
        out.insert(out.end(), {k.flag, v});
        break;
      case ValueKind::kOnOff:
        if (v == "on") out.push_back(k.flag);
        break;
      case ValueKind::kRecompute:
        if (v == "selective") out.push_back("--recompute-activations");
        if (v == "full") {
          out.insert(out.end(), {"--recompute-granularity", "full", "--recompute-method", "uniform",
                                 "--recompute-num-layers", "1"});
        }
        break;
    }
  }
  return out;
}

std::string sweep_case_name(int64_t dp, int64_t tp, int64_t pp, int64_t global_batch, int64_t hidden, int64_t layers) {
  std::string kind;
  for (const auto& [size, name] : {std::pair{dp, "DP"}, std::pair{tp, "TP"}, std::pair{pp, "PP"}}) {
    if (size > 1) kind += (kind.empty() ? "" : "-") + std::string(name);
  }
  if (kind.empty()) kind = "1GPU";
  return str_cat(kind, "_", dp, "x", tp, "x", pp, "_", global_batch, "_", hidden, "x", layers);
}

}  // namespace megatron::cli
