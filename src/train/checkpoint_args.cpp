#include "train/checkpoint_args.h"

#include <filesystem>
#include <string>
#include <vector>

#include "core/json_writer.h"
#include "data/dataset_config.h"
#include "optim/lr_scheduler.h"

namespace megatron::train {

namespace {

std::string jd(double v) { return json_double(v); }
std::string ji(int64_t v) { return std::to_string(v); }
std::string jb(bool v) { return v ? "true" : "false"; }
std::string js(const std::string& v) { return json_quote(v); }

}  // namespace

std::map<std::string, std::string> checkpoint_args(const TrainConfig& c) {
  const model::GPTConfig& m = c.model;
  std::map<std::string, std::string> a;
  a["--num-layers"] = ji(m.num_layers);
  a["--hidden-size"] = ji(m.hidden_size);
  a["--num-attention-heads"] = ji(m.num_attention_heads);
  a["--kv-channels"] = ji(m.kv_channels);
  a["--ffn-hidden-size"] = ji(m.ffn_hidden_size);
  a["--seq-length"] = ji(m.seq_length);
  a["--max-position-embeddings"] = ji(m.max_position_embeddings);
  a["vocab_size"] = ji(m.vocab_size);
  a["padded_vocab_size"] = ji(m.padded_vocab_size);
  a["--make-vocab-size-divisible-by"] = ji(c.make_vocab_size_divisible_by);
  a["--untie-embeddings-and-output-weights"] = jb(m.untie_embeddings_and_output_weights);
  a["--disable-bias-linear"] = jb(!m.add_bias_linear);
  a["--normalization"] = js(m.normalization == model::Normalization::kRMSNorm ? "RMSNorm" : "LayerNorm");
  a["--swiglu"] = jb(m.swiglu);
  a["--position-embedding-type"] = js(m.rope() ? "rope" : m.learned_positions() ? "learned_absolute" : "none");
  a["--num-query-groups"] = ji(m.num_query_groups);  // 0: multi-head attention
  a["--apply-layernorm-1p"] = jb(m.apply_layernorm_1p);
  a["--qk-layernorm"] = jb(m.qk_layernorm);
  a["--rotary-base"] = jd(m.rotary.base);
  a["--rotary-percent"] = jd(m.rotary.percent);
  a["--rotary-seq-len-interpolation-factor"] = jd(m.rotary.seq_len_interpolation_factor);
  a["--use-rope-scaling"] = jb(m.rotary.use_rope_scaling);
  a["--rope-scaling-factor"] = jd(m.rotary.rope_scaling_factor);
  a["gelu"] = js(m.gelu == model::Gelu::kTanh ? "tanh" : "exact");
  a["--layernorm-epsilon"] = jd(m.layernorm_epsilon);
  a["--init-method-std"] = jd(m.init_method_std);
  a["--attention-dropout"] = jd(m.attention_dropout);
  a["--hidden-dropout"] = jd(m.hidden_dropout);
  a["--tokenizer-type"] = js(c.tokenizer_type);
  // Only when set (older checkpoints lack the key): generate and convert --save-hf take the
  // tokenizer from here when no flag names it (cli/checkpoint_tokenizer.h).
  if (c.tokenizer_model) {
    std::error_code ec;
    const std::filesystem::path model = std::filesystem::absolute(*c.tokenizer_model, ec);
    a["--tokenizer-model"] = js(ec ? *c.tokenizer_model : model.lexically_normal().string());
  }
  a["precision"] = js(c.bf16 ? "bf16" : c.fp16 ? "fp16" : "fp32");
  a["--micro-batch-size"] = ji(c.micro_batch_size);
  a["--global-batch-size"] = ji(c.global_batch_size);
  a["--seed"] = ji(c.seed);
  a["--lr"] = jd(c.lr);
  a["--min-lr"] = jd(c.min_lr);
  if (c.decoupled_lr) a["--decoupled-lr"] = jd(*c.decoupled_lr);  // only when set: older checkpoints lack the keys
  if (c.decoupled_lr && c.decoupled_min_lr) a["--decoupled-min-lr"] = jd(*c.decoupled_min_lr);
  a["--lr-decay-style"] = js(std::string(optim::to_string(c.lr_decay_style)));
  a["--weight-decay"] = jd(c.weight_decay);
  a["--adam-beta1"] = jd(c.adam_beta1);
  a["--adam-beta2"] = jd(c.adam_beta2);
  a["--adam-eps"] = jd(c.adam_eps);
  a["--clip-grad"] = jd(c.clip_grad);
  a["--split"] = js(c.split);
  auto strings = [](const std::vector<std::string>& v) {
    std::string list = "[";
    for (size_t i = 0; i < v.size(); ++i) list += (i ? "," : "") + js(v[i]);
    return list + "]";
  };
  a["--data-path"] = strings(c.data_path);
  for (int s = 0; s < 3; ++s) {  // only when set: older checkpoints lack the keys
    if (!c.split_data_path[s].empty()) a[data::kSplitDataPathFlags[s]] = strings(c.split_data_path[s]);
  }
  if (c.classic_split) a["--classic-split"] = jb(true);  // only when set: older checkpoints lack the key
  if (c.mock_data) a["--mock-data"] = jb(true);          // only when set: older checkpoints lack the key
  if (c.train_iters) a["--train-iters"] = ji(*c.train_iters);
  if (c.train_samples) a["--train-samples"] = ji(*c.train_samples);
  if (const std::optional<backend::Fp8Config>& f = m.fp8) {  // only with FP8: older checkpoints lack the keys
    a["--fp8-format"] = js(std::string(backend::fp8_mix_name(f->format)));
    a["--fp8-recipe"] = js(std::string(backend::fp8_recipe_name(f->recipe)));
    a["--fp8-margin"] = ji(f->margin);
    a["--fp8-amax-history-len"] = ji(f->amax_history_len);
    a["--fp8-amax-compute-algo"] = js(std::string(backend::fp8_amax_algo_name(f->amax_compute_algo)));
  }
  a["--tensor-model-parallel-size"] = ji(c.tensor_model_parallel_size);
  a["--pipeline-model-parallel-size"] = ji(c.pipeline_model_parallel_size);
  return a;
}

}  // namespace megatron::train
