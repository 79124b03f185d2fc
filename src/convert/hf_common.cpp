#include "convert/hf_common.h"

#include <simdjson.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/file.h"
#include "core/json_writer.h"

namespace megatron::convert {

namespace fs = std::filesystem;

std::string float_json(double v) {
  const float f = static_cast<float>(v);
  char buf[64];
  if (std::isfinite(f) && std::fabs(f) < 1e16f && std::nearbyint(f) == f) {
    std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(f));
    return buf;
  }
  for (int p = 1; p <= 9; ++p) {
    std::snprintf(buf, sizeof(buf), "%.*g", p, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

const char* hf_torch_dtype(DType dt) {
  switch (dt) {
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    default:
      return "float32";
  }
}

std::string read_hf_file(const std::string& path, const std::string& flag) {
  try {
    const MappedFile file(path);
    return std::string(reinterpret_cast<const char*>(file.data()), static_cast<size_t>(file.size()));
  } catch (const Error& e) {
    throw_error("[", flag, "] ", e.what());
  }
}

int64_t parse_shard_size(const std::string& text, const std::string& flag) {
  static const std::pair<const char*, double> kUnits[] = {{"TIB", 1099511627776.0},
                                                          {"GIB", 1073741824.0},
                                                          {"MIB", 1048576.0},
                                                          {"KIB", 1024.0},
                                                          {"TB", 1e12},
                                                          {"GB", 1e9},
                                                          {"MB", 1e6},
                                                          {"KB", 1e3},
                                                          {"B", 1.0}};
  std::string upper;
  for (char c : text) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 1.0;
  std::string number = upper;
  for (const auto& [unit, factor] : kUnits) {
    const std::string u = unit;
    if (upper.size() > u.size() && upper.compare(upper.size() - u.size(), u.size(), u) == 0) {
      number = upper.substr(0, upper.size() - u.size());
      scale = factor;
      break;
    }
  }
  char* end = nullptr;
  const double n = number.empty() ? 0.0 : std::strtod(number.c_str(), &end);
  if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(n) || n * scale < 1.0 ||
      n * scale > 9e18) {
    throw_error("[", flag, "] expected a size such as 5GB, 500MB, 2GiB or a number of bytes, got '", text, "'");
  }
  return static_cast<int64_t>(n * scale);
}

// ---- HfJson ---------------------------------------------------------------------------------

struct HfJson::Node {
  std::shared_ptr<simdjson::dom::parser> parser;  // owns the document
  simdjson::dom::object object;
  std::string path;    // the file
  std::string prefix;  // "" or "rope_scaling."
};

HfJson::HfJson(std::shared_ptr<const Node> node) : node_(std::move(node)) {}

HfJson HfJson::read_file(const std::string& path, const std::string& flag) {
  const std::string text = read_hf_file(path, flag);
  auto node = std::make_shared<Node>();
  node->parser = std::make_shared<simdjson::dom::parser>();
  node->path = path;
  simdjson::dom::element doc;
  if (node->parser->parse(text).get(doc) != simdjson::SUCCESS ||
      doc.get_object().get(node->object) != simdjson::SUCCESS) {
    throw_error(path, ": not a JSON object");
  }
  return HfJson(std::move(node));
}

const std::string& HfJson::path() const { return node_->path; }

std::string HfJson::where(const std::string& key) const { return str_cat(node_->path, ": ", node_->prefix, key); }

namespace {

// The member, or nullopt when absent or null.
std::optional<simdjson::dom::element> member(const simdjson::dom::object& o, const std::string& key) {
  simdjson::dom::element e;
  if (o.at_key(key).get(e) != simdjson::SUCCESS || e.is_null()) return std::nullopt;
  return e;
}

}  // namespace

bool HfJson::has(const std::string& key) const { return member(node_->object, key).has_value(); }

std::vector<std::string> HfJson::keys() const {
  std::vector<std::string> out;
  for (auto field : node_->object) out.emplace_back(field.key);
  return out;
}

int64_t HfJson::positive_int(const std::string& key, std::optional<int64_t> fallback) const {
  const auto e = member(node_->object, key);
  if (!e) {
    if (!fallback) throw_error(where(key), " is missing");
    return *fallback;
  }
  int64_t v = 0;
  if (e->get_int64().get(v) != simdjson::SUCCESS || v <= 0) throw_error(where(key), " is not a positive integer");
  return v;
}

std::optional<int64_t> HfJson::optional_int(const std::string& key) const {
  const auto e = member(node_->object, key);
  if (!e) return std::nullopt;
  int64_t v = 0;
  if (e->get_int64().get(v) != simdjson::SUCCESS) throw_error(where(key), " is not an integer");
  return v;
}

double HfJson::number(const std::string& key, std::optional<double> fallback) const {
  const auto e = member(node_->object, key);
  if (!e) {
    if (!fallback) throw_error(where(key), " is missing");
    return *fallback;
  }
  double v = 0;
  if (e->get_double().get(v) == simdjson::SUCCESS) return v;
  int64_t i = 0;
  if (e->get_int64().get(i) == simdjson::SUCCESS) return static_cast<double>(i);
  throw_error(where(key), " is not a number");
}

bool HfJson::boolean(const std::string& key, bool fallback) const {
  const auto e = member(node_->object, key);
  if (!e) return fallback;
  bool v = false;
  if (e->get_bool().get(v) != simdjson::SUCCESS) throw_error(where(key), " is not a boolean");
  return v;
}

std::optional<std::string> HfJson::optional_string(const std::string& key) const {
  const auto e = member(node_->object, key);
  if (!e) return std::nullopt;
  std::string_view v;
  if (e->get_string().get(v) != simdjson::SUCCESS) throw_error(where(key), " is not a string");
  return std::string(v);
}

std::optional<HfJson> HfJson::object(const std::string& key) const {
  const auto e = member(node_->object, key);
  if (!e) return std::nullopt;
  auto node = std::make_shared<Node>();
  node->parser = node_->parser;
  node->path = node_->path;
  node->prefix = node_->prefix + key + ".";
  if (e->get_object().get(node->object) != simdjson::SUCCESS) throw_error(where(key), " is not an object");
  return HfJson(std::move(node));
}

std::optional<std::string> HfJson::first_string(const std::string& key) const {
  const auto e = member(node_->object, key);
  if (!e) return std::nullopt;
  simdjson::dom::array a;
  std::string_view v;
  if (e->get_array().get(a) != simdjson::SUCCESS || a.size() == 0 || a.at(0).get_string().get(v) != simdjson::SUCCESS) {
    throw_error(where(key), " is not a list of strings");
  }
  return std::string(v);
}

std::optional<std::string> HfJson::raw(const std::string& key) const {
  const auto e = member(node_->object, key);
  if (!e) return std::nullopt;
  return simdjson::minify(*e);
}

std::string hf_model_type(const std::string& hf_dir) {
  const std::string path = (fs::path(hf_dir) / kHfConfigName).string();
  if (!fs::exists(path))
    throw_error("[--load-hf] ", path, " does not exist (a Hugging Face model directory is expected)");
  return HfJson::read_file(path, "--load-hf").optional_string("model_type").value_or("");
}

// ---- HfWeights ------------------------------------------------------------------------------

HfWeights::HfWeights(const std::string& hf_dir, const std::string& flag) {
  const std::string single = (fs::path(hf_dir) / kHfWeightsName).string();
  const std::string index = (fs::path(hf_dir) / kHfIndexName).string();
  auto add_file = [&](const std::string& path) -> const std::string& {
    files_.push_back(std::make_unique<ckpt::SafetensorsFile>(path));
    return files_.back()->path();
  };
  if (fs::exists(single)) {
    source_ = single;
    const std::string& file = add_file(single);
    for (const ckpt::SafetensorsTensor& t : files_.back()->tensors()) tensors_[t.name] = {&t, &file};
    return;
  }
  if (!fs::exists(index)) {
    throw_error("[", flag, "] ", hf_dir, " holds neither ", kHfWeightsName, " nor ", kHfIndexName,
                " (pickle .bin files are not read; save with safetensors)");
  }
  source_ = index;
  const std::string text = read_hf_file(index, flag);
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  simdjson::dom::object weight_map;
  if (parser.parse(text).get(doc) != simdjson::SUCCESS || !doc.is_object()) throw_error(index, ": not a JSON object");
  if (doc["weight_map"].get_object().get(weight_map) != simdjson::SUCCESS) {
    throw_error(index, ": \"weight_map\" is missing or not an object");
  }
  std::map<std::string, std::string> where;  // tensor -> shard file name
  std::set<std::string> shards;              // in name order
  for (auto field : weight_map) {
    std::string_view file;
    if (field.value.get_string().get(file) != simdjson::SUCCESS) {
      throw_error(index, ": weight_map.", field.key, " is not a file name");
    }
    const std::string name(file);
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      throw_error(index, ": weight_map.", field.key, " names '", name, "', not a file of ", hf_dir);
    }
    if (!where.emplace(std::string(field.key), name).second)
      throw_error(index, ": tensor '", field.key, "' appears twice");
    shards.insert(name);
  }
  if (where.empty()) throw_error(index, ": weight_map is empty");
  for (const std::string& shard : shards) {
    const std::string path = (fs::path(hf_dir) / shard).string();
    if (!fs::exists(path)) throw_error(index, ": shard ", shard, " does not exist in ", hf_dir);
    const std::string& file = add_file(path);
    for (const ckpt::SafetensorsTensor& t : files_.back()->tensors()) {
      const auto it = where.find(t.name);
      if (it == where.end()) throw_error(path, ": tensor '", t.name, "' is not in ", index);
      if (it->second != shard) throw_error(path, ": tensor '", t.name, "' is listed in ", index, " as in ", it->second);
      if (!tensors_.emplace(t.name, Entry{&t, &file}).second)
        throw_error(path, ": tensor '", t.name, "' appears twice");
    }
  }
  for (const auto& [name, shard] : where) {
    if (!tensors_.count(name)) throw_error(index, ": tensor '", name, "' is not in ", shard);
  }
}

const HfWeights::Entry* HfWeights::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

// ---- writing --------------------------------------------------------------------------------

std::vector<ckpt::CheckpointFile> hf_weight_files(const std::vector<ckpt::TensorToWrite>& tensors,
                                                  int64_t max_shard_bytes) {
  MT_CHECK(max_shard_bytes > 0) << "max_shard_bytes " << max_shard_bytes;
  auto bytes_of = [](const ckpt::TensorToWrite& t) {
    int64_t n = dtype_size(t.dtype);
    for (int64_t d : t.shape) n *= d;
    return n;
  };
  std::vector<std::vector<ckpt::TensorToWrite>> shards;
  std::vector<ckpt::TensorToWrite> current;
  int64_t current_bytes = 0, total = 0;
  for (const ckpt::TensorToWrite& t : tensors) {
    const int64_t b = bytes_of(t);
    total += b;
    if (b > max_shard_bytes) {
      shards.push_back({t});
      continue;
    }
    if (current_bytes + b > max_shard_bytes) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(t);
    current_bytes += b;
  }
  if (!current.empty() || shards.empty()) shards.push_back(std::move(current));
  const ckpt::StringMap pt = {{"format", "pt"}};
  if (shards.size() == 1) return {ckpt::CheckpointFile::safetensors(kHfWeightsName, shards[0], pt)};

  std::vector<ckpt::CheckpointFile> files;
  std::map<std::string, std::string> weight_map;
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    for (const ckpt::TensorToWrite& t : shards[i]) weight_map[t.name] = name;
    files.push_back(ckpt::CheckpointFile::safetensors(name, shards[i], pt));
  }
  JsonWriter w(2);
  w.begin_object();
  w.key("metadata").begin_object().key("total_size").value(total).end_object();
  w.key("weight_map").begin_object();
  for (const auto& [name, file] : weight_map) w.key(name).value(file);
  w.end_object();
  w.end_object();
  files.push_back(ckpt::CheckpointFile::text_file(kHfIndexName, w.take() + "\n"));
  return files;
}

std::vector<ckpt::CheckpointFile> hf_extra_files(const std::vector<HfExtraFile>& files, const std::string& flag) {
  std::vector<ckpt::CheckpointFile> out;
  for (const HfExtraFile& f : files) {
    out.push_back(ckpt::CheckpointFile::text_file(f.name, f.source.empty() ? f.content : read_hf_file(f.source, flag)));
  }
  return out;
}

}  // namespace megatron::convert
