#include "convert/hf_llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_io.h"
#include "ckpt/checkpoint_metadata.h"
#include "convert/convert_output.h"
#include "core/error.h"
#include "core/json_writer.h"
#include "model/vocab_padding.h"

namespace megatron::convert {
namespace {

namespace fs = std::filesystem;

// The constants Megatron's --use-rope-scaling fixes (backend::RopeScaling).
constexpr double kLowFreqFactor = 1.0, kHighFreqFactor = 4.0;
constexpr int64_t kOriginalMaxPositions = 8192;

struct Dims {
  int64_t h = 0, f = 0, layers = 0, heads = 0, groups = 0, d = 0, positions = 0, vocab = 0, padded_vocab = 0;
  bool bias = false, tied = false;
};

// One of our tensors (declaration order of model/gpt_model.cpp, our shapes).
struct Ours {
  std::string name;
  std::vector<int64_t> shape;
};

// One HF tensor: rows (leading-dimension slices) of one of ours, in HF's row order.
struct Piece {
  std::string hf;
  size_t ours = 0;
  std::vector<int64_t> rows;
  std::vector<int64_t> hf_shape;
};

struct Layout {
  std::vector<Ours> ours;
  std::vector<Piece> pieces;  // in the order transformers' state_dict has them
};

std::vector<int64_t> iota_rows(int64_t begin, int64_t end) {
  std::vector<int64_t> r;
  r.reserve(static_cast<size_t>(end - begin));
  for (int64_t i = begin; i < end; ++i) r.push_back(i);
  return r;
}

Layout llama_layout(const Dims& d) {
  Layout L;
  const int64_t h = d.h, f = d.f, n = d.heads / d.groups, qkv = (d.heads + 2 * d.groups) * d.d;
  auto add_ours = [&](const std::string& name, std::vector<int64_t> shape) {
    L.ours.push_back({name, std::move(shape)});
    return L.ours.size() - 1;
  };
  // HF pieces of our tensor `o` (rows, with the trailing shape of ours).
  auto piece = [&](const std::string& hf, size_t o, std::vector<int64_t> rows) {
    std::vector<int64_t> shape = L.ours[o].shape;
    shape[0] = static_cast<int64_t>(rows.size());
    L.pieces.push_back({hf, o, std::move(rows), std::move(shape)});
  };
  std::vector<int64_t> q_rows, k_rows, v_rows;
  for (int64_t j = 0; j < d.heads; ++j) {
    for (int64_t e = 0; e < d.d; ++e) q_rows.push_back((j / n) * (n + 2) * d.d + (j % n) * d.d + e);
  }
  for (int64_t g = 0; g < d.groups; ++g) {
    for (int64_t e = 0; e < d.d; ++e) {
      k_rows.push_back(g * (n + 2) * d.d + n * d.d + e);
      v_rows.push_back(g * (n + 2) * d.d + (n + 1) * d.d + e);
    }
  }

  const size_t embed = add_ours("embedding.word_embeddings.weight", {d.padded_vocab, h});
  piece("model.embed_tokens.weight", embed, iota_rows(0, d.vocab));
  for (int64_t l = 0; l < d.layers; ++l) {
    const std::string o = "decoder.layers." + std::to_string(l) + ".", x = "model.layers." + std::to_string(l) + ".";
    const size_t in_norm = add_ours(o + "input_layernorm.weight", {h});
    const size_t qkv_w = add_ours(o + "self_attention.linear_qkv.weight", {qkv, h});
    const size_t qkv_b = d.bias ? add_ours(o + "self_attention.linear_qkv.bias", {qkv}) : 0;
    const size_t proj_w = add_ours(o + "self_attention.linear_proj.weight", {h, d.heads * d.d});
    const size_t proj_b = d.bias ? add_ours(o + "self_attention.linear_proj.bias", {h}) : 0;
    const size_t mlp_norm = add_ours(o + "pre_mlp_layernorm.weight", {h});
    const size_t fc1_w = add_ours(o + "mlp.linear_fc1.weight", {2 * f, h});
    const size_t fc1_b = d.bias ? add_ours(o + "mlp.linear_fc1.bias", {2 * f}) : 0;
    const size_t fc2_w = add_ours(o + "mlp.linear_fc2.weight", {h, f});
    const size_t fc2_b = d.bias ? add_ours(o + "mlp.linear_fc2.bias", {h}) : 0;
    const char* proj[3] = {"q_proj", "k_proj", "v_proj"};
    const std::vector<int64_t>* rows[3] = {&q_rows, &k_rows, &v_rows};
    for (int t = 0; t < 3; ++t) {
      piece(x + "self_attn." + proj[t] + ".weight", qkv_w, *rows[t]);
      if (d.bias) piece(x + "self_attn." + proj[t] + ".bias", qkv_b, *rows[t]);
    }
    piece(x + "self_attn.o_proj.weight", proj_w, iota_rows(0, h));
    if (d.bias) piece(x + "self_attn.o_proj.bias", proj_b, iota_rows(0, h));
    piece(x + "mlp.gate_proj.weight", fc1_w, iota_rows(0, f));
    if (d.bias) piece(x + "mlp.gate_proj.bias", fc1_b, iota_rows(0, f));
    piece(x + "mlp.up_proj.weight", fc1_w, iota_rows(f, 2 * f));
    if (d.bias) piece(x + "mlp.up_proj.bias", fc1_b, iota_rows(f, 2 * f));
    piece(x + "mlp.down_proj.weight", fc2_w, iota_rows(0, h));
    if (d.bias) piece(x + "mlp.down_proj.bias", fc2_b, iota_rows(0, h));
    piece(x + "input_layernorm.weight", in_norm, iota_rows(0, h));
    piece(x + "post_attention_layernorm.weight", mlp_norm, iota_rows(0, h));
  }
  const size_t final_norm = add_ours("decoder.final_layernorm.weight", {h});
  piece("model.norm.weight", final_norm, iota_rows(0, h));
  if (!d.tied) {
    const size_t out = add_ours("output_layer.weight", {d.padded_vocab, h});
    piece("lm_head.weight", out, iota_rows(0, d.vocab));
  }
  return L;
}

// Bytes of one row (a leading-dimension slice) of `shape`.
int64_t row_bytes(const std::vector<int64_t>& shape, int64_t es) {
  int64_t n = es;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t x : shape) n *= x;
  return n;
}

// config.json of a Llama (transformers' LlamaConfig / MistralConfig, their defaults for absent
// members), checked for what maps onto our model exactly.
struct LlamaConfig {
  std::string architecture;
  Dims dims;  // without padded_vocab
  double rms_norm_eps = 1e-6, rope_theta = 10000.0, init_std = 0.02, attention_dropout = 0.0;
  bool llama3_scaling = false;
  double llama3_factor = 8.0;
  double linear_factor = 0.0;                             // 0: none
  std::optional<std::string> bos_token_id, eos_token_id;  // JSON text
};

LlamaConfig read_llama_config(const std::string& path) {
  const HfJson cfg = HfJson::read_file(path, "--load-hf");
  LlamaConfig c;
  const std::string model_type = cfg.optional_string("model_type").value_or("");
  if (model_type == "qwen2") {
    throw_error(cfg.where("model_type"),
                " \"qwen2\" is not supported: Qwen2's q/k/v projections have biases and its "
                "other linear layers none (Megatron's --add-qkv-bias), which this model has no option for");
  }
  if (model_type != "llama" && model_type != "mistral") {
    throw_error(cfg.where("model_type"), " \"", model_type, "\" is not supported (llama, mistral)");
  }
  const bool mistral = model_type == "mistral";
  c.architecture = cfg.first_string("architectures").value_or(mistral ? "MistralForCausalLM" : "LlamaForCausalLM");
  if (c.architecture != "LlamaForCausalLM" && c.architecture != "MistralForCausalLM") {
    throw_error(cfg.where("architectures"), " ", c.architecture,
                " is not supported (LlamaForCausalLM, MistralForCausalLM: a causal language model)");
  }
  const std::string act = cfg.optional_string("hidden_act").value_or("silu");
  if (act != "silu" && act != "swish") throw_error(cfg.where("hidden_act"), " \"", act, "\" is not supported (silu)");

  Dims& d = c.dims;
  d.h = cfg.positive_int("hidden_size");
  d.f = cfg.positive_int("intermediate_size");
  d.layers = cfg.positive_int("num_hidden_layers");
  d.heads = cfg.positive_int("num_attention_heads");
  d.groups = cfg.positive_int("num_key_value_heads", d.heads);
  d.positions = cfg.positive_int("max_position_embeddings");
  d.vocab = cfg.positive_int("vocab_size");
  if (!cfg.has("head_dim") && d.h % d.heads != 0) {
    throw_error(cfg.where("hidden_size"), " ", d.h, " is not divisible by num_attention_heads ", d.heads,
                " (and head_dim is not given)");
  }
  d.d = cfg.positive_int("head_dim", d.h / d.heads);
  if (d.heads % d.groups != 0) {
    throw_error(cfg.where("num_key_value_heads"), " ", d.groups, " does not divide num_attention_heads ", d.heads);
  }
  const bool attention_bias = cfg.boolean("attention_bias", false), mlp_bias = cfg.boolean("mlp_bias", false);
  if (attention_bias != mlp_bias) {
    throw_error(cfg.where(attention_bias ? "attention_bias" : "mlp_bias"), " true with ",
                attention_bias ? "mlp_bias" : "attention_bias",
                " false is not supported (--disable-bias-linear applies to every linear layer)");
  }
  d.bias = attention_bias;
  d.tied = cfg.boolean("tie_word_embeddings", false);
  c.rms_norm_eps = cfg.number("rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0.0 && c.rms_norm_eps < 1.0)) throw_error(cfg.where("rms_norm_eps"), " must be in (0, 1)");
  c.init_std = cfg.number("initializer_range", 0.02);
  c.attention_dropout = cfg.number("attention_dropout", 0.0);
  if (cfg.number("partial_rotary_factor", 1.0) != 1.0) {
    throw_error(cfg.where("partial_rotary_factor"), " is not supported (Llama rotates whole heads)");
  }
  if (mistral) {  // MistralConfig's default window is 4096; null is none
    const std::vector<std::string> keys = cfg.keys();
    const bool given = std::find(keys.begin(), keys.end(), "sliding_window") != keys.end();
    const std::optional<int64_t> window = cfg.has("sliding_window")
                                              ? std::optional<int64_t>(cfg.positive_int("sliding_window"))
                                          : given ? std::nullopt
                                                  : std::optional<int64_t>(4096);
    if (window && *window < d.positions) {
      throw_error(cfg.where("sliding_window"), " ", *window, " is less than max_position_embeddings ", d.positions,
                  " (sliding-window attention is not supported)");
    }
  }

  // Rotary: transformers 4's rope_theta + rope_scaling, or transformers 5's rope_parameters
  // (rope_theta inside); rope_scaling wins where both are given, as transformers 5 reads them.
  std::optional<HfJson> rope = cfg.object("rope_scaling");
  if (!rope) rope = cfg.object("rope_parameters");
  c.rope_theta = cfg.number("rope_theta", 10000.0);
  if (rope) {
    const HfJson& r = *rope;
    if (r.has("rope_theta")) c.rope_theta = r.number("rope_theta");
    const std::string type_key = r.has("rope_type") ? "rope_type" : "type";
    const std::string type = r.optional_string(type_key).value_or("default");
    std::set<std::string> allowed = {"rope_type", "type", "rope_theta", "partial_rotary_factor"};
    if (r.number("partial_rotary_factor", 1.0) != 1.0) {
      throw_error(r.where("partial_rotary_factor"), " is not supported (Llama rotates whole heads)");
    }
    if (type == "llama3") {
      for (const char* k : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
        allowed.insert(k);
      }
      c.llama3_scaling = true;
      c.llama3_factor = r.number("factor");
      if (!(c.llama3_factor > 0.0)) throw_error(r.where("factor"), " must be positive");
      auto fixed = [&](const char* key, double want) {
        const double v = r.number(key);
        if (v != want) {
          throw_error(r.where(key), " ", float_json(v), " is not supported (Megatron's --use-rope-scaling fixes it at ",
                      float_json(want), ")");
        }
      };
      fixed("low_freq_factor", kLowFreqFactor);
      fixed("high_freq_factor", kHighFreqFactor);
      fixed("original_max_position_embeddings", static_cast<double>(kOriginalMaxPositions));
    } else if (type == "linear") {
      allowed.insert("factor");
      c.linear_factor = r.number("factor");
      if (!(c.linear_factor > 0.0)) throw_error(r.where("factor"), " must be positive");
    } else if (type != "default") {
      throw_error(r.where(type_key), " \"", type, "\" is not supported (default, llama3, linear)");
    }
    for (const std::string& k : r.keys()) {
      if (!allowed.count(k) && r.has(k)) throw_error(r.where(k), " is not supported for rope_type \"", type, "\"");
    }
  }
  if (!(c.rope_theta > 0.0 && std::isfinite(c.rope_theta))) throw_error(cfg.where("rope_theta"), " must be positive");
  c.bos_token_id = cfg.raw("bos_token_id");
  c.eos_token_id = cfg.raw("eos_token_id");
  return c;
}

std::string rope_description(double theta, bool llama3, double llama3_factor, double linear_factor) {
  std::string s = "rope_theta " + float_json(theta);
  if (llama3) s += ", llama3 scaling factor " + float_json(llama3_factor);
  if (linear_factor > 0) s += ", linear scaling factor " + float_json(linear_factor);
  return s;
}

}  // namespace

HfQkvRow hf_llama_qkv_row(int64_t row, int64_t heads, int64_t groups, int64_t head_dim) {
  const int64_t n = heads / groups, width = (n + 2) * head_dim;
  const int64_t g = row / width, slot = row % width / head_dim, e = row % head_dim;
  if (slot < n) return {0, (g * n + slot) * head_dim + e};
  return {slot == n ? 1 : 2, g * head_dim + e};
}

HfLlamaExportResult export_hf_llama(const std::string& load_dir, std::optional<int64_t> iteration,
                                    const std::string& hf_dir, const HfLlamaExportOptions& options) {
  const ckpt::LoadedCheckpoint ck = ckpt::load_checkpoint_dir(load_dir, iteration);
  if (!ck.found) throw_error("[--load] no checkpoint in ", load_dir, " (", ck.tracker_path, " is missing)");
  const ckpt::CheckpointMetadata meta(ck.directory + "/" + ckpt::kMetadataFileName, ck.metadata_json);
  if (meta.top_string("format") != ckpt::kCheckpointFormat)
    throw_error(meta.path(), ": not a ", ckpt::kCheckpointFormat, " file");
  const ckpt::CheckpointModel cm = ckpt::read_checkpoint_model(ck);
  ckpt::read_checkpoint_state(ck);  // not exported, but a checkpoint no loader takes is not converted either
  ckpt::check_all_finite(ck);
  const model::GPTConfig& g = cm.config;
  const std::string where = " (checkpoint " + ck.directory + "; Hugging Face Llama has no such option)";
  if (!g.rope()) {
    throw_error("[--save-hf] the checkpoint has ", g.learned_positions() ? "learned" : "no",
                " position embeddings (--position-embedding-type); Hugging Face Llama has rotary ones", where);
  }
  if (g.normalization != model::Normalization::kRMSNorm) {
    throw_error("[--save-hf] the checkpoint uses LayerNorm (--normalization LayerNorm)", where);
  }
  if (g.apply_layernorm_1p)
    throw_error("[--save-hf] the checkpoint's norms scale by 1 + weight (--apply-layernorm-1p)", where);
  if (g.qk_layernorm) {
    throw_error(
        "[--save-hf] the checkpoint normalises each query and key head (--qk-layernorm: q_layernorm, "
        "k_layernorm)",
        where);
  }
  if (!g.swiglu) throw_error("[--save-hf] the checkpoint has a GELU MLP (no --swiglu)", where);
  if (g.rotary.percent != 1.0f) {
    throw_error("[--save-hf] the checkpoint rotates part of each head (--rotary-percent ", float_json(g.rotary.percent),
                ")", where);
  }
  if (g.rotary.use_rope_scaling && g.rotary.seq_len_interpolation_factor != 0.0f) {
    throw_error("[--save-hf] the checkpoint has both --use-rope-scaling and --rotary-seq-len-interpolation-factor",
                where);
  }
  Dims d;
  d.h = g.hidden_size;
  d.f = g.ffn_hidden_size;
  d.layers = g.num_layers;
  d.heads = g.num_attention_heads;
  d.groups = g.query_groups();
  d.d = g.kv_channels;
  d.positions = g.max_position_embeddings;
  d.vocab = g.vocab_size;
  d.padded_vocab = g.padded_vocab_size;
  d.bias = g.add_bias_linear;
  d.tied = !g.untie_embeddings_and_output_weights;

  const ckpt::SafetensorsFile& model = ck.model();
  const Layout L = llama_layout(d);
  std::vector<const ckpt::SafetensorsTensor*> src;
  for (const Ours& o : L.ours) {
    const ckpt::SafetensorsTensor& t = model.at(o.name);
    if (t.shape != o.shape) {
      throw_error(model.path(), ": tensor '", o.name, "' has shape ", ckpt::shape_to_string(t.shape), ", expected ",
                  ckpt::shape_to_string(o.shape));
    }
    if (t.dtype != cm.dtype) {
      throw_error(model.path(), ": tensor '", o.name, "' is ", dtype_name(t.dtype), ", the checkpoint's precision is ",
                  dtype_name(cm.dtype));
    }
    src.push_back(&t);
  }
  const int64_t es = dtype_size(cm.dtype);
  std::vector<ckpt::TensorToWrite> tensors;
  for (const Piece& p : L.pieces) {
    ckpt::TensorToWrite w;
    w.name = p.hf;
    w.dtype = cm.dtype;
    w.shape = p.hf_shape;
    const uint8_t* from = src[p.ours]->data;
    const int64_t rb = row_bytes(p.hf_shape, es);
    w.fill = [&p, from, rb](void* dst) {
      auto* out = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < p.rows.size(); ++i)
        std::memcpy(out + static_cast<int64_t>(i) * rb, from + p.rows[i] * rb, rb);
    };
    tensors.push_back(std::move(w));
  }

  // config.json, keys sorted as transformers writes them.
  std::optional<std::string> bos = meta.optional_arg_string("hf_bos_token_id");
  std::optional<std::string> eos = meta.optional_arg_string("hf_eos_token_id");
  if (!bos) bos = options.bos_token_id;
  if (!eos) eos = options.eos_token_id;
  JsonWriter w(2);
  w.begin_object();
  w.key("architectures").begin_array().value("LlamaForCausalLM").end_array();
  w.key("attention_bias").value(d.bias);
  w.key("attention_dropout").raw_value(float_json(meta.arg_double("--attention-dropout")));
  if (bos) w.key("bos_token_id").raw_value(*bos);
  if (eos) w.key("eos_token_id").raw_value(*eos);
  w.key("head_dim").value(d.d);
  w.key("hidden_act").value("silu");
  w.key("hidden_size").value(d.h);
  w.key("initializer_range").raw_value(float_json(g.init_method_std));
  w.key("intermediate_size").value(d.f);
  w.key("max_position_embeddings").value(d.positions);
  w.key("mlp_bias").value(d.bias);
  w.key("model_type").value("llama");
  w.key("num_attention_heads").value(d.heads);
  w.key("num_hidden_layers").value(d.layers);
  w.key("num_key_value_heads").value(d.groups);
  w.key("pretraining_tp").value(int64_t{1});
  w.key("rms_norm_eps").raw_value(float_json(g.layernorm_epsilon));
  w.key("rope_scaling");
  if (g.rotary.use_rope_scaling) {
    w.begin_object();
    w.key("factor").raw_value(float_json(g.rotary.rope_scaling_factor));
    w.key("high_freq_factor").raw_value(float_json(kHighFreqFactor));
    w.key("low_freq_factor").raw_value(float_json(kLowFreqFactor));
    w.key("original_max_position_embeddings").value(kOriginalMaxPositions);
    w.key("rope_type").value("llama3");
    w.end_object();
  } else if (g.rotary.seq_len_interpolation_factor != 0.0f) {
    w.begin_object();
    w.key("factor").raw_value(float_json(g.rotary.seq_len_interpolation_factor));
    w.key("rope_type").value("linear");
    w.end_object();
  } else {
    w.null();
  }
  w.key("rope_theta").raw_value(float_json(g.rotary.base));
  w.key("tie_word_embeddings").value(d.tied);
  w.key("torch_dtype").value(hf_torch_dtype(cm.dtype));
  w.key("use_cache").value(true);
  w.key("vocab_size").value(d.vocab);
  w.end_object();
  const std::string config = w.take() + "\n";

  std::vector<ckpt::CheckpointFile> files = hf_weight_files(tensors, options.max_shard_bytes);
  const int64_t weight_files = static_cast<int64_t>(files.size()) - (files.size() > 1 ? 1 : 0);
  files.push_back(ckpt::CheckpointFile::text_file(kHfConfigName, config));
  for (ckpt::CheckpointFile& f : hf_extra_files(options.tokenizer_files, "--tokenizer-model"))
    files.push_back(std::move(f));
  write_new_directory(hf_dir, "--save-hf", [&](const std::string& tmp) { ckpt::write_checkpoint_files(tmp, files); });
  HfLlamaExportResult r;
  r.iteration = ck.iteration;
  r.tensors = static_cast<int64_t>(tensors.size());
  r.shards = weight_files;
  r.vocab_size = d.vocab;
  r.padded_vocab_size = d.padded_vocab;
  return r;
}

HfLlamaImportResult import_hf_llama(const std::string& hf_dir, const std::string& save_dir,
                                    const HfLlamaImportOptions& options) {
  const std::string config_path = (fs::path(hf_dir) / kHfConfigName).string();
  if (!fs::exists(config_path))
    throw_error("[--load-hf] ", config_path, " does not exist (a Hugging Face model directory is expected)");
  const LlamaConfig hc = read_llama_config(config_path);
  Dims d = hc.dims;
  const int64_t tp = options.tensor_model_parallel_size, pp = options.pipeline_model_parallel_size;
  if (tp <= 0) throw_error("[--target-tensor-parallel-size] must be positive, got ", tp);
  if (pp <= 0) throw_error("[--target-pipeline-model-parallel-size] must be positive, got ", pp);
  if (d.groups % tp != 0) {
    throw_error("[--target-tensor-parallel-size] ", tp, " does not divide num_key_value_heads ", d.groups, " of ",
                config_path);
  }
  if (d.f % tp != 0) {
    throw_error("[--target-tensor-parallel-size] ", tp, " does not divide intermediate_size ", d.f, " of ",
                config_path);
  }
  if (d.layers % pp != 0) {
    throw_error("[--target-pipeline-model-parallel-size] ", pp, " does not divide num_hidden_layers ", d.layers, " of ",
                config_path);
  }
  d.padded_vocab = model::padded_vocab_size(d.vocab, options.make_vocab_size_divisible_by, tp);
  const int64_t seq_length = options.seq_length.value_or(d.positions);
  if (seq_length <= 0 || seq_length > d.positions) {
    throw_error("[--seq-length] ", seq_length, " must be in [1, max_position_embeddings ", d.positions, "]");
  }

  // Weights: every HF tensor used (old rotary inv_freq buffers aside), every one of ours found.
  const HfWeights hf(hf_dir, "--load-hf");
  const Layout L = llama_layout(d);
  std::optional<DType> dtype;
  std::vector<const HfWeights::Entry*> piece_src;
  std::set<std::string> used;
  for (const Piece& p : L.pieces) {
    const HfWeights::Entry* e = hf.find(p.hf);
    if (e == nullptr) throw_error(hf.source(), ": tensor '", p.hf, "' is missing");
    const ckpt::SafetensorsTensor& t = *e->tensor;
    if (t.shape != p.hf_shape) {
      throw_error(*e->file, ": tensor '", t.name, "' has shape ", ckpt::shape_to_string(t.shape),
                  ", config.json implies ", ckpt::shape_to_string(p.hf_shape));
    }
    if (!is_float(t.dtype) || (dtype && t.dtype != *dtype)) {
      throw_error(*e->file, ": tensor '", t.name, "' is ", ckpt::safetensors_dtype_name(t.dtype),
                  "; all tensors must share one float dtype (F32, BF16 or F16)");
    }
    dtype = t.dtype;
    used.insert(p.hf);
    piece_src.push_back(e);
  }
  for (const auto& [name, e] : hf.tensors()) {
    if (used.count(name)) continue;
    if (name.ends_with(".self_attn.rotary_emb.inv_freq")) continue;  // a buffer older transformers saved
    if (name == "lm_head.weight" && d.tied) {
      const ckpt::SafetensorsTensor& embed = *hf.find("model.embed_tokens.weight")->tensor;
      const ckpt::SafetensorsTensor& t = *e.tensor;
      if (t.shape == embed.shape && t.dtype == embed.dtype && std::memcmp(t.data, embed.data, t.bytes) == 0) continue;
      throw_error(*e.file,
                  ": lm_head.weight differs from model.embed_tokens.weight but config.json has "
                  "tie_word_embeddings true");
    }
    throw_error(*e.file, ": unexpected tensor '", name, "' (not part of a ", hc.architecture,
                " of config.json's shape)");
  }

  const int64_t es = dtype_size(*dtype);
  std::vector<std::vector<size_t>> pieces_of(L.ours.size());
  for (size_t i = 0; i < L.pieces.size(); ++i) pieces_of[L.pieces[i].ours].push_back(i);
  std::vector<ckpt::TensorToWrite> tensors;
  for (size_t o = 0; o < L.ours.size(); ++o) {
    ckpt::TensorToWrite w;
    w.name = L.ours[o].name;
    w.dtype = *dtype;
    w.shape = L.ours[o].shape;
    const int64_t rb = row_bytes(w.shape, es), total = numel(w.shape) * es;
    w.fill = [&L, &piece_src, pieces = pieces_of[o], rb, total](void* dst) {
      auto* out = static_cast<uint8_t*>(dst);
      std::memset(out, 0, static_cast<size_t>(total));  // the padded vocabulary's dummy rows
      for (size_t i : pieces) {
        const Piece& p = L.pieces[i];
        const uint8_t* from = piece_src[i]->tensor->data;
        for (size_t r = 0; r < p.rows.size(); ++r)
          std::memcpy(out + p.rows[r] * rb, from + static_cast<int64_t>(r) * rb, rb);
      }
    };
    tensors.push_back(std::move(w));
  }

  const char* precision = *dtype == DType::kBF16 ? "bf16" : *dtype == DType::kF16 ? "fp16" : "fp32";
  // Float-typed model fields as the trainer records them (checkpoint_args: the float widened
  // to double), so that a later `train --load` reports no spurious differences.
  auto jd = [](double v) { return json_double(static_cast<double>(static_cast<float>(v))); };
  std::map<std::string, std::string> args = {
      {"--num-layers", std::to_string(d.layers)},
      {"--hidden-size", std::to_string(d.h)},
      {"--num-attention-heads", std::to_string(d.heads)},
      {"--num-query-groups", std::to_string(d.groups == d.heads ? 0 : d.groups)},
      {"--kv-channels", std::to_string(d.d)},
      {"--ffn-hidden-size", std::to_string(d.f)},
      {"--seq-length", std::to_string(seq_length)},
      {"--max-position-embeddings", std::to_string(d.positions)},
      {"vocab_size", std::to_string(d.vocab)},
      {"padded_vocab_size", std::to_string(d.padded_vocab)},
      {"--make-vocab-size-divisible-by", std::to_string(options.make_vocab_size_divisible_by)},
      {"--untie-embeddings-and-output-weights", d.tied ? "false" : "true"},
      {"--disable-bias-linear", d.bias ? "false" : "true"},
      {"--normalization", json_quote("RMSNorm")},
      {"--swiglu", "true"},
      {"--apply-layernorm-1p", "false"},
      {"--qk-layernorm", "false"},
      {"--position-embedding-type", json_quote("rope")},
      {"--rotary-base", jd(hc.rope_theta)},
      {"--rotary-percent", jd(1.0)},
      {"--rotary-seq-len-interpolation-factor", jd(hc.linear_factor)},
      {"--use-rope-scaling", hc.llama3_scaling ? "true" : "false"},
      {"--rope-scaling-factor", jd(hc.llama3_factor)},
      {"gelu", json_quote("tanh")},  // unused with --swiglu; the trainer's default
      {"--layernorm-epsilon", jd(hc.rms_norm_eps)},
      {"--init-method-std", jd(hc.init_std)},
      {"--attention-dropout", jd(hc.attention_dropout)},
      {"--hidden-dropout", jd(0.0)},
      {"precision", json_quote(precision)},
      {"--tensor-model-parallel-size", std::to_string(tp)},
      {"--pipeline-model-parallel-size", std::to_string(pp)},
  };
  if (!options.tokenizer_type.empty()) args["--tokenizer-type"] = json_quote(options.tokenizer_type);
  if (!options.tokenizer_model.empty()) args["--tokenizer-model"] = json_quote(options.tokenizer_model);
  // config.json's token ids as JSON text (an id, or a list for eos), for generate's stop tokens
  // and a later --save-hf.
  if (hc.bos_token_id) args["hf_bos_token_id"] = json_quote(*hc.bos_token_id);
  if (hc.eos_token_id) args["hf_eos_token_id"] = json_quote(*hc.eos_token_id);
  JsonWriter w(0);
  w.begin_object();
  w.key("format").value(ckpt::kCheckpointFormat);
  w.key("converted_from")
      .value("Hugging Face " + hc.architecture + " " + fs::absolute(hf_dir).lexically_normal().string());
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

  std::vector<ckpt::CheckpointFile> files = {
      ckpt::CheckpointFile::safetensors(ckpt::kModelFileName, tensors),
      ckpt::CheckpointFile::text_file(ckpt::kMetadataFileName, ckpt::reformat_json(w.take(), 2))};
  for (ckpt::CheckpointFile& f : hf_extra_files(options.tokenizer_files, "--load-hf")) files.push_back(std::move(f));
  write_new_checkpoint(save_dir, "--save", 0, /*release=*/true, files);
  HfLlamaImportResult r;
  r.architecture = hc.architecture;
  r.tensors = static_cast<int64_t>(tensors.size());
  r.vocab_size = d.vocab;
  r.padded_vocab_size = d.padded_vocab;
  r.num_layers = d.layers;
  r.hidden_size = d.h;
  r.num_attention_heads = d.heads;
  r.num_query_groups = d.groups;
  r.rope = rope_description(hc.rope_theta, hc.llama3_scaling, hc.llama3_factor, hc.linear_factor);
  return r;
}

}  // namespace megatron::convert
