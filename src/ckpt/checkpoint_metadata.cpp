#include "ckpt/checkpoint_metadata.h"

#include <simdjson.h>

#include <set>
#include <utility>

#include "ckpt/checkpoint_io.h"
#include "core/error.h"
#include "core/json_writer.h"

namespace megatron::ckpt {
namespace {

// A parsed document; the parser owns the memory `doc` points into.
struct Parsed {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
};

void parse(const std::string& path, const std::string& json, Parsed& p) {
  if (p.parser.parse(json).get(p.doc) != simdjson::SUCCESS || !p.doc.is_object()) {
    throw_error(path, ": not a JSON object");
  }
}

simdjson::dom::element arg(const std::string& path, const std::string& json, Parsed& p, const std::string& key) {
  parse(path, json, p);
  simdjson::dom::element e;
  if (p.doc["args"][key].get(e) != simdjson::SUCCESS) throw_error(path, ": args.", key, " is missing");
  return e;
}

// Writes `obj` (compact) with the members of `set` replaced or appended.
void write_object(JsonWriter& w, simdjson::dom::object obj, const std::map<std::string, std::string>& set) {
  std::set<std::string> done;
  w.begin_object();
  for (auto field : obj) {
    const std::string k(field.key);
    w.key(k);
    if (auto it = set.find(k); it != set.end()) {
      w.raw_value(it->second);
      done.insert(k);
    } else {
      w.raw_value(simdjson::minify(field.value));
    }
  }
  for (const auto& [k, v] : set) {
    if (!done.count(k)) w.key(k).raw_value(v);
  }
  w.end_object();
}

}  // namespace

CheckpointMetadata::CheckpointMetadata(std::string path, std::string json)
    : path_(std::move(path)), json_(std::move(json)) {
  Parsed p;
  parse(path_, json_, p);
}

int64_t CheckpointMetadata::arg_int(const std::string& key) const {
  Parsed p;
  int64_t v = 0;
  if (arg(path_, json_, p, key).get_int64().get(v) != simdjson::SUCCESS)
    throw_error(path_, ": args.", key, " is not an integer");
  return v;
}

double CheckpointMetadata::arg_double(const std::string& key) const {
  Parsed p;
  simdjson::dom::element e = arg(path_, json_, p, key);
  double v = 0;
  if (e.get_double().get(v) == simdjson::SUCCESS) return v;
  int64_t i = 0;
  if (e.get_int64().get(i) == simdjson::SUCCESS) return static_cast<double>(i);
  throw_error(path_, ": args.", key, " is not a number");
}

bool CheckpointMetadata::arg_bool(const std::string& key) const {
  Parsed p;
  bool v = false;
  if (arg(path_, json_, p, key).get_bool().get(v) != simdjson::SUCCESS)
    throw_error(path_, ": args.", key, " is not a boolean");
  return v;
}

std::string CheckpointMetadata::arg_string(const std::string& key) const {
  Parsed p;
  std::string_view v;
  if (arg(path_, json_, p, key).get_string().get(v) != simdjson::SUCCESS)
    throw_error(path_, ": args.", key, " is not a string");
  return std::string(v);
}

std::optional<std::string> CheckpointMetadata::optional_arg_string(const std::string& key) const {
  Parsed p;
  parse(path_, json_, p);
  std::string_view v;
  if (p.doc["args"][key].get_string().get(v) != simdjson::SUCCESS) return std::nullopt;
  return std::string(v);
}

std::optional<bool> CheckpointMetadata::optional_arg_bool(const std::string& key) const {
  Parsed p;
  parse(path_, json_, p);
  bool v = false;
  if (p.doc["args"][key].get_bool().get(v) != simdjson::SUCCESS) return std::nullopt;
  return v;
}

std::optional<int64_t> CheckpointMetadata::optional_arg_int(const std::string& key) const {
  Parsed p;
  parse(path_, json_, p);
  int64_t v = 0;
  if (p.doc["args"][key].get_int64().get(v) != simdjson::SUCCESS) return std::nullopt;
  return v;
}

std::optional<int64_t> CheckpointMetadata::layout_int(const std::string& key) const {
  Parsed p;
  parse(path_, json_, p);
  int64_t v = 0;
  if (p.doc["layout"][key].get_int64().get(v) != simdjson::SUCCESS) return std::nullopt;
  return v;
}

std::optional<int64_t> CheckpointMetadata::top_int(const std::string& key) const {
  Parsed p;
  parse(path_, json_, p);
  int64_t v = 0;
  if (p.doc[key].get_int64().get(v) != simdjson::SUCCESS) return std::nullopt;
  return v;
}

std::optional<std::string> CheckpointMetadata::top_string(const std::string& key) const {
  Parsed p;
  parse(path_, json_, p);
  std::string_view v;
  if (p.doc[key].get_string().get(v) != simdjson::SUCCESS) return std::nullopt;
  return std::string(v);
}

std::string CheckpointMetadata::rewritten(const std::map<std::string, std::string>& args,
                                          const std::map<std::string, std::string>& layout) const {
  Parsed p;
  parse(path_, json_, p);
  JsonWriter w(0);
  w.begin_object();
  std::set<std::string> seen;
  for (auto field : simdjson::dom::object(p.doc)) {
    const std::string k(field.key);
    seen.insert(k);
    w.key(k);
    simdjson::dom::object obj;
    if ((k == "args" || k == "layout") && field.value.get_object().get(obj) == simdjson::SUCCESS) {
      write_object(w, obj, k == "args" ? args : layout);
    } else {
      w.raw_value(simdjson::minify(field.value));
    }
  }
  for (const auto& [name, set] : {std::pair{"layout", &layout}, std::pair{"args", &args}}) {
    if (seen.count(name) || set->empty()) continue;
    w.key(name).begin_object();
    for (const auto& [k, v] : *set) w.key(k).raw_value(v);
    w.end_object();
  }
  w.end_object();
  return reformat_json(w.take(), 2);
}

}  // namespace megatron::ckpt
