#include "convert/hf_gpt2.h"

#include <simdjson.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_io.h"
#include "ckpt/checkpoint_metadata.h"
#include "ckpt/safetensors.h"
#include "convert/convert_output.h"
#include "convert/hf_common.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/file.h"
#include "core/json_writer.h"
#include "model/vocab_padding.h"

namespace megatron::convert {
namespace {

namespace fs = std::filesystem;

constexpr const char* kHfPrefix = "transformer.";

// How a tensor maps between the two layouts (the table in the header).
enum class Map {
  kCopy,       // same shape and order
  kTranspose,  // ours [out, in] <-> HF Conv1D [in, out]
  kQkvWeight,  // ours [3h, h] (per-head q|k|v rows) <-> HF [h, 3h] ([q | k | v] columns)
  kQkvBias,    // ours [3h] <-> HF [3h], the same permutation
  kVocabRows,  // ours [V_pad, h] <-> HF [V, h]: dummy rows dropped on export, zero on import
};

// The model dimensions: h = hidden, f = FFN, heads, positions P, vocabulary V and padded V_pad.
struct Dims {
  int64_t h = 0, f = 0, layers = 0, heads = 0, positions = 0, vocab = 0, padded_vocab = 0;
};

struct Entry {
  std::string ours, hf;  // hf without the "transformer." prefix
  Map map;
  std::vector<int64_t> shape;  // ours
};

// Every parameter of a GPT-2-shaped model in our declaration order (model/gpt_model.cpp),
// with our shapes (model/gpt_model.h).
std::vector<Entry> gpt2_entries(const Dims& d) {
  const int64_t h = d.h, f = d.f;
  std::vector<Entry> e = {{"embedding.word_embeddings.weight", "wte.weight", Map::kVocabRows, {d.padded_vocab, h}},
                          {"embedding.position_embeddings.weight", "wpe.weight", Map::kCopy, {d.positions, h}}};
  for (int64_t l = 0; l < d.layers; ++l) {
    const std::string o = "decoder.layers." + std::to_string(l) + ".", x = "h." + std::to_string(l) + ".";
    e.push_back({o + "input_layernorm.weight", x + "ln_1.weight", Map::kCopy, {h}});
    e.push_back({o + "input_layernorm.bias", x + "ln_1.bias", Map::kCopy, {h}});
    e.push_back({o + "self_attention.linear_qkv.weight", x + "attn.c_attn.weight", Map::kQkvWeight, {3 * h, h}});
    e.push_back({o + "self_attention.linear_qkv.bias", x + "attn.c_attn.bias", Map::kQkvBias, {3 * h}});
    e.push_back({o + "self_attention.linear_proj.weight", x + "attn.c_proj.weight", Map::kTranspose, {h, h}});
    e.push_back({o + "self_attention.linear_proj.bias", x + "attn.c_proj.bias", Map::kCopy, {h}});
    e.push_back({o + "pre_mlp_layernorm.weight", x + "ln_2.weight", Map::kCopy, {h}});
    e.push_back({o + "pre_mlp_layernorm.bias", x + "ln_2.bias", Map::kCopy, {h}});
    e.push_back({o + "mlp.linear_fc1.weight", x + "mlp.c_fc.weight", Map::kTranspose, {f, h}});
    e.push_back({o + "mlp.linear_fc1.bias", x + "mlp.c_fc.bias", Map::kCopy, {f}});
    e.push_back({o + "mlp.linear_fc2.weight", x + "mlp.c_proj.weight", Map::kTranspose, {h, f}});
    e.push_back({o + "mlp.linear_fc2.bias", x + "mlp.c_proj.bias", Map::kCopy, {h}});
  }
  e.push_back({"decoder.final_layernorm.weight", "ln_f.weight", Map::kCopy, {h}});
  e.push_back({"decoder.final_layernorm.bias", "ln_f.bias", Map::kCopy, {h}});
  return e;
}

std::vector<int64_t> hf_shape(const Entry& e, const Dims& d) {
  std::vector<int64_t> s = e.shape;
  if (e.map == Map::kVocabRows) s[0] = d.vocab;
  if (e.map == Map::kTranspose || e.map == Map::kQkvWeight) std::swap(s[0], s[1]);
  return s;
}

// dst[c, r] = src[r, c] for src [rows, cols] of `es`-byte elements.
void transpose_bytes(const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols, int64_t es) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) std::memcpy(dst + (c * rows + r) * es, src + (r * cols + c) * es, es);
  }
}

// Our tensor bytes (shape e.shape) -> HF bytes (shape hf_shape).
std::vector<uint8_t> to_hf(const Entry& e, const Dims& d, const uint8_t* src, int64_t es) {
  const std::vector<int64_t> hs = hf_shape(e, d);
  int64_t n = 1;
  for (int64_t x : hs) n *= x;
  std::vector<uint8_t> out(static_cast<size_t>(n * es));
  const int64_t hd = d.h / d.heads;
  switch (e.map) {
    case Map::kCopy:
    case Map::kVocabRows:  // the first V rows
      if (n) std::memcpy(out.data(), src, out.size());
      break;
    case Map::kTranspose:
      transpose_bytes(src, out.data(), hs[1], hs[0], es);
      break;
    case Map::kQkvWeight:  // ours [3h rows, h] -> HF [h, 3h]: HF[i, col(r)] = ours[r, i]
      for (int64_t r = 0; r < 3 * d.h; ++r) {
        const int64_t c = hf_qkv_column(r, d.heads, hd);
        for (int64_t i = 0; i < d.h; ++i)
          std::memcpy(out.data() + (i * 3 * d.h + c) * es, src + (r * d.h + i) * es, es);
      }
      break;
    case Map::kQkvBias:
      for (int64_t r = 0; r < 3 * d.h; ++r)
        std::memcpy(out.data() + hf_qkv_column(r, d.heads, hd) * es, src + r * es, es);
      break;
  }
  return out;
}

// HF bytes (shape hf_shape) -> our tensor bytes (shape e.shape); added vocabulary rows are zero.
std::vector<uint8_t> from_hf(const Entry& e, const Dims& d, const uint8_t* src, int64_t es) {
  const std::vector<int64_t> os = e.shape;
  int64_t n = 1;
  for (int64_t x : os) n *= x;
  std::vector<uint8_t> out(static_cast<size_t>(n * es), 0);
  const int64_t hd = d.h / d.heads;
  switch (e.map) {
    case Map::kCopy:
      if (n) std::memcpy(out.data(), src, out.size());
      break;
    case Map::kVocabRows:
      if (d.vocab) std::memcpy(out.data(), src, static_cast<size_t>(d.vocab * d.h * es));
      break;
    case Map::kTranspose:
      transpose_bytes(src, out.data(), os[1], os[0], es);
      break;
    case Map::kQkvWeight:  // ours[r, i] = HF[i, col(r)]
      for (int64_t r = 0; r < 3 * d.h; ++r) {
        const int64_t c = hf_qkv_column(r, d.heads, hd);
        for (int64_t i = 0; i < d.h; ++i)
          std::memcpy(out.data() + (r * d.h + i) * es, src + (i * 3 * d.h + c) * es, es);
      }
      break;
    case Map::kQkvBias:
      for (int64_t r = 0; r < 3 * d.h; ++r)
        std::memcpy(out.data() + r * es, src + hf_qkv_column(r, d.heads, hd) * es, es);
      break;
  }
  return out;
}

// config.json of a GPT-2 (transformers' GPT2Config, its defaults for absent members), checked
// for what maps onto our model exactly.
struct HfConfig {
  Dims dims;  // without padded_vocab
  model::Gelu gelu = model::Gelu::kTanh;
  double layernorm_epsilon = 1e-5, init_std = 0.02, attn_pdrop = 0.1, resid_pdrop = 0.1;
};

HfConfig read_hf_config(const std::string& config_path) {
  HfConfig c;
  const std::string text = read_hf_file(config_path, "--load-hf");
  simdjson::dom::parser parser;
  simdjson::dom::element cfg;
  if (parser.parse(text).get(cfg) != simdjson::SUCCESS || !cfg.is_object())
    throw_error(config_path, ": not a JSON object");
  auto get_int = [&](const char* key, std::optional<int64_t> fallback) -> int64_t {
    simdjson::dom::element e;
    if (cfg[key].get(e) != simdjson::SUCCESS || e.is_null()) {
      if (!fallback) throw_error(config_path, ": \"", key, "\" is missing");
      return *fallback;
    }
    int64_t v = 0;
    if (e.get_int64().get(v) != simdjson::SUCCESS || v <= 0)
      throw_error(config_path, ": \"", key, "\" is not a positive integer");
    return v;
  };
  auto get_double = [&](const char* key, double fallback) {
    simdjson::dom::element e;
    if (cfg[key].get(e) != simdjson::SUCCESS || e.is_null()) return fallback;
    double v = 0;
    if (e.get_double().get(v) == simdjson::SUCCESS) return v;
    int64_t i = 0;
    if (e.get_int64().get(i) == simdjson::SUCCESS) return static_cast<double>(i);
    throw_error(config_path, ": \"", key, "\" is not a number");
  };
  auto get_bool = [&](const char* key, bool fallback) {
    simdjson::dom::element e;
    if (cfg[key].get(e) != simdjson::SUCCESS || e.is_null()) return fallback;
    bool v = false;
    if (e.get_bool().get(v) != simdjson::SUCCESS) throw_error(config_path, ": \"", key, "\" is not a boolean");
    return v;
  };
  auto get_string = [&](const char* key, const char* fallback) {
    std::string_view v;
    if (cfg[key].get_string().get(v) != simdjson::SUCCESS) return std::string(fallback);
    return std::string(v);
  };
  const std::string model_type = get_string("model_type", "gpt2");
  if (model_type != "gpt2")
    throw_error(config_path, ": model_type \"", model_type, "\" is not supported (only \"gpt2\")");
  const std::string act = get_string("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") {
    c.gelu = model::Gelu::kTanh;
  } else if (act == "gelu") {
    c.gelu = model::Gelu::kExact;
  } else {
    throw_error(config_path, ": activation_function \"", act,
                "\" is not supported (gelu_new, gelu_pytorch_tanh, gelu)");
  }
  if (!get_bool("scale_attn_weights", true)) throw_error(config_path, ": scale_attn_weights false is not supported");
  if (get_bool("scale_attn_by_inverse_layer_idx", false)) {
    throw_error(config_path, ": scale_attn_by_inverse_layer_idx true is not supported");
  }
  if (get_bool("add_cross_attention", false)) throw_error(config_path, ": add_cross_attention true is not supported");
  if (!get_bool("tie_word_embeddings", true)) {
    throw_error(config_path, ": tie_word_embeddings false (an untied lm_head) is not supported");
  }

  Dims& d = c.dims;
  d.h = get_int("n_embd", std::nullopt);
  d.layers = get_int("n_layer", std::nullopt);
  d.heads = get_int("n_head", std::nullopt);
  d.positions = get_int(
      "n_positions", cfg["n_ctx"].is_int64() ? std::optional<int64_t>(get_int("n_ctx", std::nullopt)) : std::nullopt);
  d.vocab = get_int("vocab_size", std::nullopt);
  d.f = get_int("n_inner", 4 * d.h);
  if (d.h % d.heads != 0) throw_error(config_path, ": n_embd ", d.h, " is not divisible by n_head ", d.heads);
  c.layernorm_epsilon = get_double("layer_norm_epsilon", 1e-5);
  c.init_std = get_double("initializer_range", 0.02);
  c.attn_pdrop = get_double("attn_pdrop", 0.1);
  c.resid_pdrop = get_double("resid_pdrop", 0.1);
  return c;
}

}  // namespace

int64_t hf_qkv_column(int64_t row, int64_t heads, int64_t head_dim) {
  const int64_t head = row / (3 * head_dim), t = row / head_dim % 3, e = row % head_dim;
  return t * heads * head_dim + head * head_dim + e;
}

HfExportResult export_hf_gpt2(const std::string& load_dir, std::optional<int64_t> iteration,
                              const std::string& hf_dir) {
  const ckpt::LoadedCheckpoint ck = ckpt::load_checkpoint_dir(load_dir, iteration);
  if (!ck.found) throw_error("[--load] no checkpoint in ", load_dir, " (", ck.tracker_path, " is missing)");
  const ckpt::CheckpointMetadata meta(ck.directory + "/" + ckpt::kMetadataFileName, ck.metadata_json);
  if (meta.top_string("format") != ckpt::kCheckpointFormat)
    throw_error(meta.path(), ": not a ", ckpt::kCheckpointFormat, " file");
  const ckpt::CheckpointModel cm = ckpt::read_checkpoint_model(ck);
  ckpt::read_checkpoint_state(ck);  // not exported, but a checkpoint no loader takes is not converted either
  ckpt::check_all_finite(ck);
  const model::GPTConfig& g = cm.config;
  const std::string where = " (checkpoint " + ck.directory + "; Hugging Face GPT-2 has no such option)";
  if (g.untie_embeddings_and_output_weights)
    throw_error("[--save-hf] the checkpoint has an untied output layer", where);
  if (!g.add_bias_linear) throw_error("[--save-hf] the checkpoint has no linear biases (--disable-bias-linear)", where);
  if (g.normalization != model::Normalization::kLayerNorm) {
    throw_error("[--save-hf] the checkpoint uses RMSNorm (--normalization RMSNorm)", where);
  }
  if (g.swiglu) throw_error("[--save-hf] the checkpoint has a SwiGLU MLP (--swiglu)", where);
  if (g.apply_layernorm_1p)
    throw_error("[--save-hf] the checkpoint's norms scale by 1 + weight (--apply-layernorm-1p)", where);
  if (g.qk_layernorm) {
    throw_error(
        "[--save-hf] the checkpoint normalises each query and key head (--qk-layernorm: q_layernorm, "
        "k_layernorm)",
        where);
  }
  if (!g.learned_positions()) {
    throw_error("[--save-hf] the checkpoint has ", g.rope() ? "rotary" : "no",
                " position embeddings (--position-embedding-type)", where);
  }
  if (g.query_groups() != g.num_attention_heads) {
    throw_error("[--save-hf] the checkpoint has grouped-query attention (--num-query-groups ", g.num_query_groups, ")",
                where);
  }
  if (g.kv_channels * g.num_attention_heads != g.hidden_size) {
    throw_error("[--save-hf] --kv-channels ", g.kv_channels, " x --num-attention-heads ", g.num_attention_heads,
                " is not --hidden-size ", g.hidden_size, where);
  }
  Dims d;
  d.h = g.hidden_size;
  d.f = g.ffn_hidden_size;
  d.layers = g.num_layers;
  d.heads = g.num_attention_heads;
  d.positions = g.max_position_embeddings;
  d.vocab = g.vocab_size;
  d.padded_vocab = g.padded_vocab_size;

  const ckpt::SafetensorsFile& model = ck.model();
  std::deque<std::vector<uint8_t>> buffers;
  std::vector<ckpt::TensorToWrite> tensors;
  for (const Entry& e : gpt2_entries(d)) {
    const ckpt::SafetensorsTensor& t = model.at(e.ours);
    if (t.shape != e.shape) {
      throw_error(model.path(), ": tensor '", e.ours, "' has shape ", ckpt::shape_to_string(t.shape), ", expected ",
                  ckpt::shape_to_string(e.shape));
    }
    if (t.dtype != cm.dtype) {
      throw_error(model.path(), ": tensor '", e.ours, "' is ", dtype_name(t.dtype), ", the checkpoint's precision is ",
                  dtype_name(cm.dtype));
    }
    buffers.push_back(to_hf(e, d, t.data, dtype_size(t.dtype)));
    ckpt::TensorToWrite w;
    w.name = kHfPrefix + e.hf;
    w.dtype = t.dtype;
    w.shape = hf_shape(e, d);
    w.data = buffers.back().data();
    tensors.push_back(std::move(w));
  }

  // config.json: transformers' GPT2Config fields (n_inner null means 4 * n_embd).
  JsonWriter w(2);
  w.begin_object();
  w.key("architectures").begin_array().value("GPT2LMHeadModel").end_array();
  w.key("model_type").value("gpt2");
  w.key("vocab_size").value(d.vocab);
  w.key("n_positions").value(d.positions);
  w.key("n_ctx").value(d.positions);
  w.key("n_embd").value(d.h);
  w.key("n_layer").value(d.layers);
  w.key("n_head").value(d.heads);
  w.key("n_inner");
  if (d.f == 4 * d.h) {
    w.null();
  } else {
    w.value(d.f);
  }
  w.key("activation_function").value(g.gelu == model::Gelu::kTanh ? "gelu_new" : "gelu");
  const double hidden_dropout = meta.arg_double("--hidden-dropout"),
               attention_dropout = meta.arg_double("--attention-dropout");
  w.key("resid_pdrop").raw_value(float_json(hidden_dropout));
  w.key("embd_pdrop").raw_value(float_json(hidden_dropout));
  w.key("attn_pdrop").raw_value(float_json(attention_dropout));
  w.key("layer_norm_epsilon").raw_value(float_json(g.layernorm_epsilon));
  w.key("initializer_range").raw_value(float_json(g.init_method_std));
  w.key("scale_attn_weights").value(true);
  w.key("scale_attn_by_inverse_layer_idx").value(false);
  w.key("reorder_and_upcast_attn").value(false);
  w.key("tie_word_embeddings").value(true);
  w.key("use_cache").value(true);
  if (d.vocab == 50257) {  // GPT-2's tokenizer: <|endoftext|> = 50256 is its only special id
    w.key("bos_token_id").value(int64_t{50256});
    w.key("eos_token_id").value(int64_t{50256});
  }
  w.key("torch_dtype").value(hf_torch_dtype(cm.dtype));
  w.end_object();
  const std::string config = w.take() + "\n";

  write_new_directory(hf_dir, "--save-hf", [&](const std::string& tmp) {
    ckpt::write_checkpoint_files(tmp, {ckpt::CheckpointFile::safetensors(kHfWeightsName, tensors, {{"format", "pt"}}),
                                       ckpt::CheckpointFile::text_file(kHfConfigName, config)});
  });
  HfExportResult r;
  r.iteration = ck.iteration;
  r.tensors = static_cast<int64_t>(tensors.size());
  r.vocab_size = d.vocab;
  r.padded_vocab_size = d.padded_vocab;
  return r;
}

HfImportResult import_hf_gpt2(const std::string& hf_dir, const std::string& save_dir, const HfImportOptions& options) {
  const std::string config_path = (fs::path(hf_dir) / kHfConfigName).string();
  if (!fs::exists(config_path))
    throw_error("[--load-hf] ", config_path, " does not exist (a Hugging Face model directory is expected)");

  const HfConfig hc = read_hf_config(config_path);
  Dims d = hc.dims;
  const int64_t tp = options.tensor_model_parallel_size, pp = options.pipeline_model_parallel_size;
  if (tp <= 0) throw_error("[--target-tensor-parallel-size] must be positive, got ", tp);
  if (pp <= 0) throw_error("[--target-pipeline-model-parallel-size] must be positive, got ", pp);
  if (d.heads % tp != 0)
    throw_error("[--target-tensor-parallel-size] ", tp, " does not divide n_head ", d.heads, " of ", config_path);
  if (d.f % tp != 0)
    throw_error("[--target-tensor-parallel-size] ", tp, " does not divide the FFN size ", d.f, " of ", config_path);
  if (d.layers % pp != 0) {
    throw_error("[--target-pipeline-model-parallel-size] ", pp, " does not divide n_layer ", d.layers, " of ",
                config_path);
  }
  d.padded_vocab = model::padded_vocab_size(d.vocab, options.make_vocab_size_divisible_by, tp);
  const int64_t seq_length = options.seq_length.value_or(d.positions);
  if (seq_length <= 0 || seq_length > d.positions) {
    throw_error("[--seq-length] ", seq_length, " must be in [1, n_positions ", d.positions, "]");
  }

  // Weights: every HF tensor must be used (buffers aside), every one of ours found.
  // model.safetensors, or the shards its index names.
  const HfWeights hf(hf_dir, "--load-hf");
  std::map<std::string, const ckpt::SafetensorsTensor*> by_name;
  std::map<std::string, const std::string*> file_of;  // the file holding each tensor, for errors
  for (const auto& [full, entry] : hf.tensors()) {
    const ckpt::SafetensorsTensor& t = *entry.tensor;
    file_of[t.name] = entry.file;
    std::string name = t.name;
    if (name.rfind(kHfPrefix, 0) == 0) name = name.substr(std::strlen(kHfPrefix));
    // The causal-mask buffers older transformers saved ("h.N.attn.bias", "h.N.attn.masked_bias").
    const bool buffer = name.rfind("h.", 0) == 0 &&
                        (name.size() > 10 && (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias")));
    if (buffer) continue;
    if (!by_name.emplace(name, &t).second) throw_error(*entry.file, ": tensor '", name, "' appears twice");
  }
  std::optional<DType> dtype;
  std::deque<std::vector<uint8_t>> buffers;
  std::vector<ckpt::TensorToWrite> tensors;
  std::set<std::string> used;
  for (const Entry& e : gpt2_entries(d)) {
    const auto it = by_name.find(e.hf);
    if (it == by_name.end()) throw_error(hf.source(), ": tensor '", kHfPrefix, e.hf, "' is missing");
    const ckpt::SafetensorsTensor& t = *it->second;
    const std::string& weights_path = *file_of.at(t.name);
    if (t.shape != hf_shape(e, d)) {
      throw_error(weights_path, ": tensor '", t.name, "' has shape ", ckpt::shape_to_string(t.shape),
                  ", config.json implies ", ckpt::shape_to_string(hf_shape(e, d)));
    }
    if (!is_float(t.dtype) || (dtype && t.dtype != *dtype)) {
      throw_error(weights_path, ": tensor '", t.name, "' is ", ckpt::safetensors_dtype_name(t.dtype),
                  "; all tensors must share one float dtype (F32, BF16 or F16)");
    }
    dtype = t.dtype;
    used.insert(e.hf);
    buffers.push_back(from_hf(e, d, t.data, dtype_size(t.dtype)));
    ckpt::TensorToWrite w;
    w.name = e.ours;
    w.dtype = t.dtype;
    w.shape = e.shape;
    w.data = buffers.back().data();
    tensors.push_back(std::move(w));
  }
  for (const auto& [name, t] : by_name) {
    if (used.count(name)) continue;
    if (name == "lm_head.weight") {
      const ckpt::SafetensorsTensor& wte = *by_name.at("wte.weight");
      if (t->shape == wte.shape && t->dtype == wte.dtype && std::memcmp(t->data, wte.data, t->bytes) == 0) continue;
      throw_error(*file_of.at(t->name),
                  ": lm_head.weight differs from wte.weight (an untied output layer is not supported)");
    }
    throw_error(*file_of.at(t->name), ": unexpected tensor '", t->name, "' (not part of a GPT-2 model)");
  }

  const char* precision = *dtype == DType::kBF16 ? "bf16" : *dtype == DType::kF16 ? "fp16" : "fp32";
  // Float-typed model fields as the trainer records them (checkpoint_args: the float widened
  // to double), so that a later `train --load` reports no spurious differences.
  auto jd = [](double v) { return json_double(static_cast<double>(static_cast<float>(v))); };
  std::map<std::string, std::string> args = {
      {"--num-layers", std::to_string(d.layers)},
      {"--hidden-size", std::to_string(d.h)},
      {"--num-attention-heads", std::to_string(d.heads)},
      {"--kv-channels", std::to_string(d.h / d.heads)},
      {"--ffn-hidden-size", std::to_string(d.f)},
      {"--seq-length", std::to_string(seq_length)},
      {"--max-position-embeddings", std::to_string(d.positions)},
      {"vocab_size", std::to_string(d.vocab)},
      {"padded_vocab_size", std::to_string(d.padded_vocab)},
      {"--make-vocab-size-divisible-by", std::to_string(options.make_vocab_size_divisible_by)},
      {"--untie-embeddings-and-output-weights", "false"},
      {"--disable-bias-linear", "false"},
      {"gelu", json_quote(hc.gelu == model::Gelu::kTanh ? "tanh" : "exact")},
      {"--layernorm-epsilon", jd(hc.layernorm_epsilon)},
      {"--init-method-std", jd(hc.init_std)},
      {"--attention-dropout", jd(hc.attn_pdrop)},
      {"--hidden-dropout", jd(hc.resid_pdrop)},
      {"--tokenizer-type", json_quote("GPT2BPETokenizer")},
      {"precision", json_quote(precision)},
      {"--tensor-model-parallel-size", std::to_string(tp)},
      {"--pipeline-model-parallel-size", std::to_string(pp)},
  };
  JsonWriter w(0);
  w.begin_object();
  w.key("format").value(ckpt::kCheckpointFormat);
  w.key("converted_from").value("Hugging Face GPT-2 " + fs::absolute(hf_dir).lexically_normal().string());
  w.key("iteration").value(int64_t{0});
  w.key("consumed_train_samples").value(int64_t{0});
  w.key("consumed_valid_samples").value(int64_t{0});
  w.key("optimizer_saved").value(false);
  w.key("layout").begin_object();
  w.key("tensor_model_parallel_size").value(tp);
  w.key("pipeline_model_parallel_size").value(pp);
  w.key("data_parallel_size").value(int64_t{1});
  w.key("model_dtype").value(precision);
  w.end_object();
  w.key("args").begin_object();
  for (const auto& [k, v] : args) w.key(k).raw_value(v);
  w.end_object();
  w.end_object();

  write_new_checkpoint(save_dir, "--save", 0, /*release=*/true,
                       {ckpt::CheckpointFile::safetensors(ckpt::kModelFileName, tensors),
                        ckpt::CheckpointFile::text_file(ckpt::kMetadataFileName, ckpt::reformat_json(w.take(), 2))});
  HfImportResult r;
  r.tensors = static_cast<int64_t>(tensors.size());
  r.vocab_size = d.vocab;
  r.padded_vocab_size = d.padded_vocab;
  r.num_layers = d.layers;
  r.hidden_size = d.h;
  r.num_attention_heads = d.heads;
  return r;
}

}  // namespace megatron::convert
