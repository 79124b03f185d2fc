#include "ckpt/checkpoint_contents.h"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "ckpt/checkpoint_fp8.h"
#include "core/error.h"
#include "model/gpt_model.h"
#include "model/parameters.h"

namespace megatron::ckpt {
namespace {

// Typed, range-checked reads of metadata.json's members, each error naming the file and the key
// ("args.--num-layers", "scheduler.num_steps", "iteration").
class MetadataReader {
 public:
  MetadataReader(std::string path, const std::string& json) : path_(std::move(path)), padded_(json) {
    if (parser_.parse(padded_).get(doc_) != simdjson::SUCCESS || !doc_.is_object()) {
      throw_error(path_, ": not a JSON object");
    }
  }
  const std::string& path() const { return path_; }

  bool has(const std::string& object, const std::string& key) const { return find(object, key).has_value(); }

  int64_t integer(const std::string& object, const std::string& key, int64_t lo, int64_t hi,
                  const std::string& range_note = "") const {
    const simdjson::dom::element e = need(object, key);
    int64_t v = 0;
    if (e.get_int64().get(v) != simdjson::SUCCESS) throw_error(path_, ": ", name(object, key), " is not an integer");
    if (v < lo || v > hi) {
      throw_error(path_, ": ", name(object, key), " is ", v, ", expected ", lo, " to ", hi,
                  range_note.empty() ? "" : " (" + range_note + ")");
    }
    return v;
  }
  // A finite number in [lo, hi] (or (lo, hi] with lo_open); JSON integers are accepted too.
  double number(const std::string& object, const std::string& key, double lo, double hi, bool lo_open = false) const {
    const simdjson::dom::element e = need(object, key);
    double v = 0;
    if (e.get_double().get(v) != simdjson::SUCCESS) {
      int64_t i = 0;
      if (e.get_int64().get(i) != simdjson::SUCCESS) throw_error(path_, ": ", name(object, key), " is not a number");
      v = static_cast<double>(i);
    }
    if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo)) {
      throw_error(path_, ": ", name(object, key), " is ", v, ", expected a number ", lo_open ? "above " : "from ", lo,
                  hi < std::numeric_limits<double>::max() ? str_cat(" to ", hi) : std::string(" up"));
    }
    return v;
  }
  bool boolean(const std::string& object, const std::string& key) const {
    bool v = false;
    if (need(object, key).get_bool().get(v) != simdjson::SUCCESS) {
      throw_error(path_, ": ", name(object, key), " is not true or false");
    }
    return v;
  }
  std::optional<bool> optional_boolean(const std::string& object, const std::string& key) const {
    if (!has(object, key)) return std::nullopt;
    return boolean(object, key);
  }
  // One of `allowed`; `fallback` when the key is absent and a fallback is given.
  std::string choice(const std::string& object, const std::string& key, std::initializer_list<std::string_view> allowed,
                     std::optional<std::string_view> fallback = std::nullopt) const {
    if (fallback && !has(object, key)) return std::string(*fallback);
    std::string_view v;
    if (need(object, key).get_string().get(v) != simdjson::SUCCESS) {
      throw_error(path_, ": ", name(object, key), " is not a string");
    }
    std::string list;
    for (std::string_view a : allowed) {
      if (a == v) return std::string(v);
      list += (list.empty() ? "" : ", ") + std::string(a);
    }
    std::string shown(v.substr(0, 40));
    for (char& c : shown) {
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    }
    throw_error(path_, ": ", name(object, key), " is '", shown, "', expected one of ", list);
  }

 private:
  static std::string name(const std::string& object, const std::string& key) {
    return object.empty() ? key : object + "." + key;
  }
  std::optional<simdjson::dom::element> find(const std::string& object, const std::string& key) const {
    simdjson::dom::element parent = doc_;
    if (!object.empty() && doc_[object].get(parent) != simdjson::SUCCESS) return std::nullopt;
    if (!parent.is_object()) return std::nullopt;
    simdjson::dom::element e;
    if (parent[key].get(e) != simdjson::SUCCESS) return std::nullopt;
    return e;
  }
  simdjson::dom::element need(const std::string& object, const std::string& key) const {
    if (!object.empty()) {
      simdjson::dom::element parent;
      if (doc_[object].get(parent) != simdjson::SUCCESS) throw_error(path_, ": \"", object, "\" is missing");
      if (!parent.is_object()) throw_error(path_, ": \"", object, "\" is not an object");
    }
    const std::optional<simdjson::dom::element> e = find(object, key);
    if (!e) throw_error(path_, ": ", name(object, key), " is missing");
    return *e;
  }

  std::string path_;
  simdjson::padded_string padded_;
  simdjson::dom::parser parser_;
  simdjson::dom::element doc_;
};

std::string metadata_path(const LoadedCheckpoint& ck) { return ck.directory + "/" + kMetadataFileName; }

void check_format(const MetadataReader& m) { m.choice("", "format", {kCheckpointFormat}); }

void check_iteration(const MetadataReader& m, const LoadedCheckpoint& ck) {
  const int64_t it = m.integer("", "iteration", 0, kMaxCheckpointCount);
  if (it != ck.iteration) {
    throw_error(
        m.path(), ": iteration is ", it, " but the directory holds ",
        ck.release ? std::string("a release checkpoint (iteration 0)") : "iteration " + std::to_string(ck.iteration));
  }
}

// a * b, or an Error naming what overflowed.
int64_t checked_product(const std::string& path, int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw_error(path, ": ", what, " (", a, " x ", b, ") is out of range");
  return r;
}

// model.safetensors holds exactly the parameters `config` declares: none missing, none extra,
// each of its global shape, floating point.
void check_model_tensors(const LoadedCheckpoint& ck, const model::GPTConfig& config) {
  model::ParameterSet declared;
  model::GPTModel::declare_stage_parameters(config, model::PipelineStageOptions{}, &declared);
  const SafetensorsFile& file = ck.model();
  std::set<std::string> expected;
  for (const model::Parameter& p : declared.params()) {
    expected.insert(p.name);
    const SafetensorsTensor* t = file.find(p.name);
    if (t == nullptr) {
      throw_error(file.path(), ": tensor '", p.name, "' is missing (the model of ", metadata_path(ck), " needs it)");
    }
    if (t->shape != p.global_shape) {
      throw_error(file.path(), ": tensor '", p.name, "' has shape ", shape_to_string(t->shape), ", the model of ",
                  metadata_path(ck), " expects ", shape_to_string(p.global_shape));
    }
    if (!is_float(t->dtype)) throw_error(file.path(), ": tensor '", p.name, "' is not a floating-point tensor");
  }
  for (const SafetensorsTensor& t : file.tensors()) {
    if (!expected.count(t.name)) {
      throw_error(file.path(), ": tensor '", t.name, "' is not part of the model ", metadata_path(ck), " describes (",
                  config.num_layers, " layers)");
    }
  }
  if (const SafetensorsFile* opt = ck.optimizer()) {
    for (const SafetensorsTensor& t : opt->tensors()) {
      std::string_view param = t.name;
      for (std::string_view prefix : {"main_param.", "exp_avg_sq.", "exp_avg."}) {
        if (param.substr(0, prefix.size()) == prefix) {
          param.remove_prefix(prefix.size());
          break;
        }
      }
      const model::Parameter* p = param.size() == t.name.size() ? nullptr : declared.find(std::string(param));
      if (p == nullptr)
        throw_error(opt->path(), ": tensor '", t.name, "' is not the optimizer state of a model tensor");
      if (t.shape != p->global_shape) {
        throw_error(opt->path(), ": tensor '", t.name, "' has shape ", shape_to_string(t.shape), ", its parameter ",
                    shape_to_string(p->global_shape));
      }
      if (!is_float(t.dtype)) throw_error(opt->path(), ": tensor '", t.name, "' is not a floating-point tensor");
    }
    for (const model::Parameter& p : declared.params()) {
      for (const char* prefix : {"exp_avg.", "exp_avg_sq."}) {
        if (opt->find(prefix + p.name) == nullptr)
          throw_error(opt->path(), ": tensor '", prefix, p.name, "' is missing");
      }
    }
  }
  read_fp8_state_info(ck, config.num_layers);
}

}  // namespace

CheckpointModel read_checkpoint_model(const LoadedCheckpoint& ck) {
  const MetadataReader m(metadata_path(ck), ck.metadata_json);
  check_format(m);
  check_iteration(m, ck);
  // Bounds from the tensors present, before anything is declared from the values: every
  // tensor of a layer is its own, so the layers are at most the tensors; every dimension is
  // one of a non-empty tensor's.
  const SafetensorsFile& file = ck.model();
  const int64_t tensors = static_cast<int64_t>(file.tensors().size());
  int64_t max_dim = 0;
  for (const SafetensorsTensor& t : file.tensors()) {
    if (t.numel == 0) continue;
    for (int64_t d : t.shape) max_dim = std::max(max_dim, d);
  }
  const std::string held = str_cat("the largest dimension of ", file.path());
  const std::string counted = str_cat("the tensors of ", file.path());
  if (max_dim < 1) throw_error(file.path(), ": holds no tensor data");

  CheckpointModel cm;
  model::GPTConfig& g = cm.config;
  g.num_layers = m.integer("args", "--num-layers", 1, tensors, counted);
  g.hidden_size = m.integer("args", "--hidden-size", 1, max_dim, held);
  g.num_attention_heads = m.integer("args", "--num-attention-heads", 1, max_dim, held);
  g.kv_channels = m.integer("args", "--kv-channels", 1, max_dim, held);
  g.ffn_hidden_size = m.integer("args", "--ffn-hidden-size", 1, max_dim, held);
  // A position table bounds the positions (its rows); rotary models have none, and their
  // positions bound only the context a caller asks for: int32 position ids (Llama 3.1 has
  // 131072 positions, more than any of its dimensions).
  const bool rotary = m.choice("args", "--position-embedding-type", {"learned_absolute", "rope", "none"},
                               "learned_absolute") != "learned_absolute";
  g.max_position_embeddings = rotary ? m.integer("args", "--max-position-embeddings", 1,
                                                 std::numeric_limits<int32_t>::max(), "the int32 position ids")
                                     : m.integer("args", "--max-position-embeddings", 1, max_dim, held);
  g.seq_length = m.integer("args", "--seq-length", 1, g.max_position_embeddings, "args.--max-position-embeddings");
  g.padded_vocab_size = m.integer("args", "padded_vocab_size", 1, max_dim, held);
  g.vocab_size = m.integer("args", "vocab_size", 1, g.padded_vocab_size, "args.padded_vocab_size");
  g.layernorm_epsilon = static_cast<float>(m.number("args", "--layernorm-epsilon", 0.0, 1.0, /*lo_open=*/true));
  g.init_method_std = static_cast<float>(m.number("args", "--init-method-std", 0.0, 1e6));
  g.attention_dropout = 0.0f;
  g.hidden_dropout = 0.0f;
  g.untie_embeddings_and_output_weights = m.boolean("args", "--untie-embeddings-and-output-weights");
  g.add_bias_linear = !m.boolean("args", "--disable-bias-linear");
  // Absent from checkpoints written before the variants: LayerNorm, no SwiGLU.
  const std::string normalization = m.choice("args", "--normalization", {"LayerNorm", "RMSNorm"}, "LayerNorm");
  g.normalization = normalization == "RMSNorm" ? model::Normalization::kRMSNorm : model::Normalization::kLayerNorm;
  g.swiglu = m.optional_boolean("args", "--swiglu").value_or(false);
  // Absent from checkpoints written before rotary embeddings and query groups: learned positions,
  // one key/value head per query head.
  const std::string positions =
      m.choice("args", "--position-embedding-type", {"learned_absolute", "rope", "none"}, "learned_absolute");
  g.position_embedding = positions == "rope"   ? model::PositionEmbedding::kRope
                         : positions == "none" ? model::PositionEmbedding::kNone
                                               : model::PositionEmbedding::kLearnedAbsolute;
  if (m.has("args", "--num-query-groups")) {
    g.num_query_groups =
        m.integer("args", "--num-query-groups", 0, g.num_attention_heads, "args.--num-attention-heads");
    if (g.num_query_groups > 0 && g.num_attention_heads % g.num_query_groups != 0) {
      throw_error(m.path(), ": args.--num-query-groups ", g.num_query_groups,
                  " does not divide args.--num-attention-heads ", g.num_attention_heads);
    }
  }
  // The rotary settings, range-checked wherever recorded (a resume compares them even without
  // rotary embeddings); required with them.
  auto rotary_number = [&](const char* key, double lo, double hi, bool lo_open, float absent) {
    if (!g.rope() && !m.has("args", key)) return absent;
    return static_cast<float>(m.number("args", key, lo, hi, lo_open));
  };
  g.rotary.base = rotary_number("--rotary-base", 0.0, 1e12, /*lo_open=*/true, g.rotary.base);
  g.rotary.percent = rotary_number("--rotary-percent", 0.0, 1.0, /*lo_open=*/true, g.rotary.percent);
  g.rotary.seq_len_interpolation_factor = rotary_number("--rotary-seq-len-interpolation-factor", 0.0, 1e6,
                                                        /*lo_open=*/false, g.rotary.seq_len_interpolation_factor);
  g.rotary.rope_scaling_factor =
      rotary_number("--rope-scaling-factor", 0.0, 1e6, /*lo_open=*/true, g.rotary.rope_scaling_factor);
  g.rotary.use_rope_scaling = m.optional_boolean("args", "--use-rope-scaling").value_or(false);
  g.apply_layernorm_1p = m.optional_boolean("args", "--apply-layernorm-1p").value_or(false);
  g.qk_layernorm = m.optional_boolean("args", "--qk-layernorm").value_or(false);
  g.gelu = m.choice("args", "gelu", {"tanh", "exact"}) == "exact" ? model::Gelu::kExact : model::Gelu::kTanh;
  const std::string precision = m.choice("args", "precision", {"fp32", "bf16", "fp16"});
  cm.dtype = precision == "bf16" ? DType::kBF16 : precision == "fp16" ? DType::kF16 : DType::kF32;
  cm.iteration = ck.iteration;

  // The widths of the declared tensors, then their sizes, must be representable.
  const int64_t q = checked_product(m.path(), g.num_attention_heads, g.kv_channels, "heads x kv-channels");
  checked_product(m.path(), checked_product(m.path(), 3, q, "the QKV rows"), g.hidden_size, "the QKV weight");
  // (H + 2G) d <= 3 H d: the bound above covers grouped-query attention's QKV too.
  checked_product(m.path(), g.fc1_out_size(), g.hidden_size, "the FC1 weight");
  checked_product(m.path(), g.padded_vocab_size, g.hidden_size, "the word embedding");
  checked_product(m.path(), g.max_position_embeddings, g.hidden_size, "the position embedding");
  check_model_tensors(ck, g);
  return cm;
}

CheckpointState read_checkpoint_state(const LoadedCheckpoint& ck) {
  const MetadataReader m(metadata_path(ck), ck.metadata_json);
  check_format(m);
  check_iteration(m, ck);
  CheckpointState s;
  s.progress.iteration = ck.iteration;
  s.progress.consumed_train_samples = m.integer("", "consumed_train_samples", 0, kMaxCheckpointCount);
  s.progress.consumed_valid_samples = m.integer("", "consumed_valid_samples", 0, kMaxCheckpointCount);
  s.has_optimizer_state = ck.optimizer() != nullptr;
  if (!s.has_optimizer_state) return s;
  // Each iteration takes at most one optimizer step (fp16 overflows skip theirs).
  s.optimizer_steps = m.integer("", "optimizer_steps", 0, ck.iteration, "at most one step per iteration");
  s.grad_scaler.scale = static_cast<float>(
      m.number("grad_scaler", "scale", 0.0, static_cast<double>(std::numeric_limits<float>::max()), /*lo_open=*/true));
  s.grad_scaler.growth_tracker = m.integer("grad_scaler", "growth_tracker", 0, kMaxCheckpointCount);
  // Megatron's tracker counts down past 0: every overflow after the first --hysteresis ones.
  s.grad_scaler.hysteresis_tracker =
      m.integer("grad_scaler", "hysteresis_tracker", -kMaxCheckpointCount, kMaxCheckpointCount);
  optim::SchedulerState& sc = s.scheduler;
  const double huge = std::numeric_limits<double>::max();
  sc.max_lr = m.number("scheduler", "max_lr", 0.0, huge);
  sc.min_lr = m.number("scheduler", "min_lr", 0.0, huge);
  if (m.has("scheduler", "decoupled_max_lr"))
    sc.decoupled_max_lr = m.number("scheduler", "decoupled_max_lr", 0.0, huge);
  if (m.has("scheduler", "decoupled_min_lr"))
    sc.decoupled_min_lr = m.number("scheduler", "decoupled_min_lr", 0.0, huge);
  sc.warmup_steps = m.number("scheduler", "lr_warmup_steps", 0.0, static_cast<double>(kMaxCheckpointCount));
  sc.decay_steps = m.integer("scheduler", "lr_decay_steps", 0, kMaxCheckpointCount);
  sc.decay_style = optim::parse_lr_decay_style(
      m.choice("scheduler", "lr_decay_style", {"constant", "linear", "cosine", "inverse-square-root", "WSD"}));
  sc.num_steps = m.integer("scheduler", "num_steps", 0, kMaxCheckpointCount);
  sc.start_wd = m.number("scheduler", "start_wd", 0.0, huge);
  sc.end_wd = m.number("scheduler", "end_wd", 0.0, huge);
  sc.wd_incr_steps = m.integer("scheduler", "wd_incr_steps", 0, kMaxCheckpointCount);
  sc.wd_incr_style =
      optim::parse_wd_incr_style(m.choice("scheduler", "wd_incr_style", {"constant", "linear", "cosine"}));
  return s;
}

int64_t first_non_finite(const void* data, DType dtype, int64_t count) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (dtype == DType::kF32) {
    for (int64_t i = 0; i < count; ++i) {
      uint32_t u;
      std::memcpy(&u, bytes + 4 * i, 4);
      if ((u & 0x7f800000u) == 0x7f800000u) return i;
    }
    return -1;
  }
  MT_CHECK(dtype == DType::kBF16 || dtype == DType::kF16) << "first_non_finite of " << dtype_name(dtype);
  const uint16_t exponent = dtype == DType::kBF16 ? 0x7f80 : 0x7c00;
  for (int64_t i = 0; i < count; ++i) {
    uint16_t u;
    std::memcpy(&u, bytes + 2 * i, 2);
    if ((u & exponent) == exponent) return i;
  }
  return -1;
}

void check_all_finite(const LoadedCheckpoint& ck) {
  for (const auto& [name, file] : ck.tensor_files) {
    // The FP8 amax histories record what the tensors held, an Inf included (the next update
    // skips it): they are not weights.
    if (name == kFp8StateFileName) continue;
    for (const SafetensorsTensor& t : file.tensors()) {
      if (!is_float(t.dtype) || t.numel == 0) continue;
      const int64_t bad = first_non_finite(t.data, t.dtype, t.numel);
      if (bad >= 0) throw_error(file.path(), ": tensor '", t.name, "' holds NaN or Inf (element ", bad, ")");
    }
  }
}

}  // namespace megatron::ckpt
