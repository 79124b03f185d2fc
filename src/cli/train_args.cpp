// parse_train_config: every train flag into a validated TrainConfig (train_args.h). Longer than
// 800 lines because each fill_* below validates one family of flags into one Args, so that every
// error of every family is reported at once; the flag table itself is in train_flag_table.cpp.
#include "cli/train_args.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>

#include <simdjson.h>

#include "backend/cuda/attention_impl.h"
#include "backend/fp8_recipe.h"
#include "ckpt/checkpoint_io.h"
#include "ckpt/checkpoint_metadata.h"
#include "cli/train_flag_table.h"
#include "comm/watchdog.h"
#include "core/error.h"
#include "data/dataset_config.h"
#include "data/numpy_random.h"
#include "obs/timers.h"
#include "parallel/rank_layout.h"
#include "plan/gpu_spec.h"

namespace megatron::cli {
namespace {

using train::TrainConfig;

// The whitespace-separated words of a text file (Megatron: open(path).read().split()).
std::vector<std::string> read_words(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) throw_error("[", flag, "] ", path, ": cannot open");
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// --per-split-data-args-path: {"train": L, "valid": L, "test": L}, each L a list of strings or
// one string of whitespace-separated words (Megatron splits it), or null for no data.
std::array<std::vector<std::string>, 3> read_per_split_data_args(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error("[--per-split-data-args-path] ", path, ": cannot open");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(simdjson::padded_string(text)).get(doc) != simdjson::SUCCESS || !doc.is_object()) {
    throw_error("[--per-split-data-args-path] ", path, ": not a JSON object");
  }
  std::array<std::vector<std::string>, 3> out;
  for (int s = 0; s < 3; ++s) {
    const char* key = data::kSplitNames[s];
    simdjson::dom::element e;
    if (doc[key].get(e) != simdjson::SUCCESS) {
      throw_error("[--per-split-data-args-path] ", path, ": missing \"", key, "\" (null for no ", key, " data)");
    }
    if (e.is_null()) continue;
    std::string_view str;
    simdjson::dom::array list;
    if (e.get_string().get(str) == simdjson::SUCCESS) {
      std::istringstream words{std::string(str)};
      for (std::string w; words >> w;) out[s].push_back(w);
    } else if (e.get_array().get(list) == simdjson::SUCCESS) {
      for (simdjson::dom::element item : list) {
        if (item.get_string().get(str) != simdjson::SUCCESS) {
          throw_error("[--per-split-data-args-path] ", path, ": \"", key, "\" holds a non-string");
        }
        out[s].emplace_back(str);
      }
    } else {
      throw_error("[--per-split-data-args-path] ", path, ": \"", key, "\" must be a list, a string or null");
    }
  }
  return out;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// ---------------------------------------------------------------------------------------------
// Helpers for parse_train_config.
// ---------------------------------------------------------------------------------------------
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();
// Positive reals the engine computes with in fp32: (0, float max].
constexpr RealRange kPositiveFp32{0.0, kMaxFp32, true, false};
// Non-negative reals in fp32: [0, float max].
constexpr RealRange kNonNegativeFp32{0.0, kMaxFp32, false, false};
// Dropouts and Adam's betas: [0, 1).
constexpr RealRange kProbability{0.0, 1.0, false, true};

// The flag's value in [lo, hi] when given.
std::optional<int64_t> opt_int(const Args& a, const std::string& name, int64_t lo, int64_t hi = kMaxInt64) {
  if (!a.given(name)) return std::nullopt;
  return a.get_int(name, lo, hi);
}

// The flag's value when given, its range checked by the caller.
std::optional<int64_t> opt_int(const Args& a, const std::string& name) {
  if (!a.given(name)) return std::nullopt;
  return a.get_int(name);
}

std::optional<double> opt_double(const Args& a, const std::string& name, const RealRange& range) {
  if (!a.given(name)) return std::nullopt;
  return a.get_double(name, range);
}

void require_positive(const std::string& name, int64_t v) { check_int_range(name, v, 1); }

// A real flag the engine uses in fp32: in `range`, and still in it once rounded to float (a
// positive 1e-50 is 0 there, 0.99999999 is 1).
double fp32_flag(const Args& a, const std::string& name, const RealRange& range) {
  const double v = a.get_double(name, range);
  const float f = static_cast<float>(v);
  const bool above = range.lo_open ? f > range.lo : f >= range.lo;
  const bool below = range.hi_open ? f < range.hi : f <= range.hi;
  if (!above || !below) {
    throw_error("[", name, "] ", a.get_string(name), " is ", f, " in fp32 (expected ", to_string(range), ")");
  }
  return v;
}

std::optional<double> opt_fp32_flag(const Args& a, const std::string& name, const RealRange& range) {
  if (!a.given(name)) return std::nullopt;
  return fp32_flag(a, name, range);
}

// a * b for a product of flags that must fit in int64: Error "<what>: a x b does not fit in 64 bits".
int64_t product(int64_t a, int64_t b, const std::string& what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw_error(what, ": ", a, " x ", b, " does not fit in 64 bits");
  return r;
}

// The sample counts Megatron derives from the flags (the data's train/valid/test targets and
// the scheduler's steps, data/dataset_config.h and optim/lr_scheduler.h) must fit in int64.
void check_sample_counts(const TrainConfig& c) {
  const int64_t g = c.global_batch_size;
  const int64_t iters = c.total_train_iters();
  if (c.train_iters) product(iters, g, "[--train-iters] the training samples (--train-iters x --global-batch-size)");
  product(product(iters / c.eval_interval + 1, c.eval_iters,
                  "[--eval-iters] the validation iterations ((train iterations / --eval-interval + 1) x --eval-iters)"),
          g, "[--eval-iters] the validation samples (validation iterations x --global-batch-size)");
  if (c.lr_decay_iters) product(*c.lr_decay_iters, g, "[--lr-decay-iters] the decay samples (x --global-batch-size)");
  product(c.lr_warmup_iters, g, "[--lr-warmup-iters] the warmup samples (x --global-batch-size)");
  if (c.lr_wsd_decay_iters) {
    product(*c.lr_wsd_decay_iters, g, "[--lr-wsd-decay-iters] the WSD decay samples (x --global-batch-size)");
  }
}

template <class E>
E parse_choice(const Args& a, const std::string& name, const std::vector<std::pair<const char*, E>>& choices) {
  const std::string v = a.get_string(name);
  std::vector<std::string> names;
  for (const auto& [text, value] : choices) {
    if (v == text) return value;
    names.push_back(text);
  }
  throw_error("[", name, "] invalid choice '", v, "' (choose from ", join(names, ", "), ")");
}

// --position-embedding-type and its rotary settings; --group-query-attention.
void fill_positions_and_groups(const Args& a, const ModelPreset* preset, model::GPTConfig& m) {
  const bool llama = preset != nullptr && preset->llama;
  const std::string type =
      !a.given("--position-embedding-type") && llama ? "rope" : a.get_string("--position-embedding-type");
  const bool rope = type == "rope" || a.get_flag("--use-rotary-position-embeddings");
  if (a.get_flag("--use-rotary-position-embeddings") && a.given("--position-embedding-type") && type != "rope") {
    throw_error("[--use-rotary-position-embeddings] contradicts --position-embedding-type ", type);
  }
  // Megatron refuses the deprecated switch except beside rotary embeddings, where it changes nothing.
  if (a.get_flag("--no-position-embedding") && !rope) {
    throw_error(
        "[--no-position-embedding] is deprecated except with rotary embeddings: use "
        "--position-embedding-type none");
  }
  m.position_embedding = rope             ? model::PositionEmbedding::kRope
                         : type == "none" ? model::PositionEmbedding::kNone
                                          : model::PositionEmbedding::kLearnedAbsolute;
  if (!rope) {
    for (const char* flag : {"--rotary-seq-len-interpolation-factor", "--use-rope-scaling"}) {
      if (a.given(flag)) throw_error("[", flag, "] needs rotary embeddings (--position-embedding-type rope)");
    }
  }
  m.rotary.base = a.given("--rotary-base") || !llama ? static_cast<float>(fp32_flag(a, "--rotary-base", kPositiveFp32))
                                                     : preset->rotary_base;
  m.rotary.percent = static_cast<float>(fp32_flag(a, "--rotary-percent", RealRange{0.0, 1.0, true, false}));
  if (rope && m.kv_channels * m.rotary.percent < 2) {
    throw_error("[--rotary-percent] ", m.rotary.percent, " of --kv-channels ", m.kv_channels,
                " rotates fewer than 2 dimensions");
  }
  if (a.given("--rotary-seq-len-interpolation-factor")) {
    m.rotary.seq_len_interpolation_factor =
        static_cast<float>(a.get_int("--rotary-seq-len-interpolation-factor", 1, 1 << 20));
  }
  m.rotary.use_rope_scaling = a.get_flag("--use-rope-scaling") || (llama && preset->rope_scaling_factor > 0);
  m.rotary.rope_scaling_factor = a.given("--rope-scaling-factor") || !llama || preset->rope_scaling_factor <= 0
                                     ? static_cast<float>(fp32_flag(a, "--rope-scaling-factor", kPositiveFp32))
                                     : preset->rope_scaling_factor;
  if (a.get_flag("--group-query-attention")) {
    m.num_query_groups = a.get_int("--num-query-groups", 1, kMaxDimension);
    if (m.num_attention_heads % m.num_query_groups != 0) {
      throw_error("[--num-query-groups] ", m.num_query_groups, " does not divide --num-attention-heads ",
                  m.num_attention_heads);
    }
  } else if (a.given("--num-query-groups")) {
    throw_error("[--num-query-groups] takes effect with --group-query-attention only: add it");
  } else if (preset != nullptr && preset->num_query_groups > 0) {
    m.num_query_groups = preset->num_query_groups;
  }
}

void fill_model(const Args& a, TrainConfig& c) {
  model::GPTConfig& m = c.model;
  const ModelPreset* found = nullptr;
  if (a.given("--model")) {
    c.model_preset = a.get_string("--model");
    for (const ModelPreset& p : model_presets()) {
      if (c.model_preset == p.name) found = &p;
    }
    if (found == nullptr)
      throw_error("[--model] unknown preset '", c.model_preset, "' (choose from ", model_preset_names(), ")");
    m.num_layers = found->num_layers;
    m.hidden_size = found->hidden_size;
    m.num_attention_heads = found->num_attention_heads;
    m.seq_length = found->seq_length;
    if (found->vocab_size > 0) c.preset_vocab_size = found->vocab_size;
  }
  const bool llama = found != nullptr && found->llama;
  auto shape = [&](const char* name, int64_t& field) {
    if (a.given(name)) field = a.get_int(name, 1, kMaxDimension);
    if (field == 0) throw_error("[", name, "] is required (or give --model)");
  };
  shape("--num-layers", m.num_layers);
  shape("--hidden-size", m.hidden_size);
  shape("--num-attention-heads", m.num_attention_heads);
  shape("--seq-length", m.seq_length);

  if (a.given("--kv-channels")) {
    m.kv_channels = a.get_int("--kv-channels", 1, kMaxDimension);
  } else {
    if (m.hidden_size % m.num_attention_heads != 0) {
      throw_error("[--num-attention-heads] ", m.num_attention_heads, " does not divide --hidden-size ", m.hidden_size,
                  " (or give --kv-channels)");
    }
    m.kv_channels = m.hidden_size / m.num_attention_heads;
  }
  m.swiglu = a.get_flag("--swiglu") || llama;
  // Megatron: int(4h * 2/3 / 64) * 64 with SwiGLU (two projections share the MLP's width), else 4h.
  const int64_t default_ffn = found != nullptr && found->ffn_hidden_size > 0 ? found->ffn_hidden_size
                              : m.swiglu                                     ? m.hidden_size / 24 * 64
                                                                             : 4 * m.hidden_size;
  m.ffn_hidden_size = a.given("--ffn-hidden-size") ? a.get_int("--ffn-hidden-size", 1, kMaxDimension) : default_ffn;
  if (m.ffn_hidden_size == 0) {
    throw_error("[--hidden-size] ", m.hidden_size, " is too small for --swiglu's default --ffn-hidden-size ",
                "(int(8h/3/64)*64 = 0): give --ffn-hidden-size");
  }
  m.max_position_embeddings =
      a.given("--max-position-embeddings") ? a.get_int("--max-position-embeddings", 1, kMaxDimension) : m.seq_length;
  if (m.seq_length > m.max_position_embeddings) {
    throw_error("[--seq-length] ", m.seq_length, " is larger than --max-position-embeddings ",
                m.max_position_embeddings);
  }
  m.init_method_std = static_cast<float>(fp32_flag(a, "--init-method-std", kPositiveFp32));
  m.attention_dropout = static_cast<float>(fp32_flag(a, "--attention-dropout", kProbability));
  m.hidden_dropout = static_cast<float>(fp32_flag(a, "--hidden-dropout", kProbability));
  if (a.given("--norm-epsilon") && a.given("--layernorm-epsilon")) {
    throw_error("[--norm-epsilon] and --layernorm-epsilon name the same value: give one");
  }
  const char* epsilon = a.given("--norm-epsilon") ? "--norm-epsilon" : "--layernorm-epsilon";
  m.layernorm_epsilon = static_cast<float>(fp32_flag(a, epsilon, kPositiveFp32));
  m.untie_embeddings_and_output_weights =
      a.get_flag("--untie-embeddings-and-output-weights") || (llama && !found->tied);
  m.add_bias_linear = !a.get_flag("--disable-bias-linear") && !llama;
  const bool rms = a.given("--normalization") ? a.get_string("--normalization") == "RMSNorm" : llama;
  m.normalization = rms ? model::Normalization::kRMSNorm : model::Normalization::kLayerNorm;
  fill_positions_and_groups(a, found, m);
  m.apply_layernorm_1p = a.get_flag("--apply-layernorm-1p");
  m.qk_layernorm = a.get_flag("--qk-layernorm");
  // Megatron: --openai-gelu is the tanh form; the default fused bias-GELU is the tanh form too;
  // --no-bias-gelu-fusion falls back to torch's exact erf GELU.
  m.gelu =
      (a.get_flag("--no-bias-gelu-fusion") && !a.get_flag("--openai-gelu")) ? model::Gelu::kExact : model::Gelu::kTanh;
  c.make_vocab_size_divisible_by = a.get_int("--make-vocab-size-divisible-by", 1, kMaxDimension);
}

void fill_parallel_and_batch(const Args& a, TrainConfig& c, int64_t world_size, std::ostream* log) {
  c.world_size = world_size;
  require_positive("world size", world_size);
  c.tensor_model_parallel_size = a.get_int("--tensor-model-parallel-size", 1, kMaxDimension);
  c.pipeline_model_parallel_size = a.get_int("--pipeline-model-parallel-size", 1, kMaxDimension);
  // Megatron's layout check first (docs/megatron-formats.md §7): dp = world / (tp * pp).
  try {
    c.data_parallel_size =
        parallel::parallel_sizes(world_size, c.tensor_model_parallel_size, c.pipeline_model_parallel_size).dp;
  } catch (const Error& e) {
    if (a.given("--world-size")) throw;
    // The world comes from the launcher; a single process checking a layout is told how.
    throw_error(e.what(),
                "; the world size comes from the launcher (torchrun, mpirun, srun or --nproc-per-node N); to check "
                "this layout on one machine: --dry-run --world-size N");
  }
  if (c.model.num_attention_heads % c.tensor_model_parallel_size != 0) {
    throw_error("[--num-attention-heads] ", c.model.num_attention_heads,
                " is not divisible by --tensor-model-parallel-size ", c.tensor_model_parallel_size);
  }
  if (c.model.query_groups() % c.tensor_model_parallel_size != 0) {
    throw_error("[--num-query-groups] ", c.model.query_groups(), " is not divisible by --tensor-model-parallel-size ",
                c.tensor_model_parallel_size, " (tensor parallelism splits whole key/value groups)");
  }
  if (c.model.num_layers % c.pipeline_model_parallel_size != 0) {
    throw_error("[--num-layers] ", c.model.num_layers, " is not divisible by --pipeline-model-parallel-size ",
                c.pipeline_model_parallel_size);
  }
  c.num_layers_per_virtual_pipeline_stage = opt_int(a, "--num-layers-per-virtual-pipeline-stage", 1, kMaxDimension);
  if (c.num_layers_per_virtual_pipeline_stage) {
    const int64_t per_stage = c.model.num_layers / c.pipeline_model_parallel_size;
    if (c.pipeline_model_parallel_size == 1) {
      throw_error(
          "[--num-layers-per-virtual-pipeline-stage] the interleaved schedule needs "
          "--pipeline-model-parallel-size > 1");
    }
    if (per_stage % *c.num_layers_per_virtual_pipeline_stage != 0) {
      throw_error("[--num-layers-per-virtual-pipeline-stage] the layers per pipeline stage (", per_stage,
                  ") are not divisible by ", *c.num_layers_per_virtual_pipeline_stage);
    }
  }
  // Tensor parallelism splits heads, FFN columns and (with --sequence-parallel) the sequence
  // (model/gpt_model.h); the vocabulary is padded to a multiple of T (train/config.h).
  const int64_t tp = c.tensor_model_parallel_size;
  if (c.model.ffn_hidden_size % tp != 0) {
    throw_error("[--ffn-hidden-size] ", c.model.ffn_hidden_size, " is not divisible by --tensor-model-parallel-size ",
                tp);
  }
  // Megatron (arguments.py validate_args) turns sequence parallelism off at TP 1 with a warning,
  // so that the numerics do not change; so does this.
  c.sequence_parallel = a.get_flag("--sequence-parallel");
  if (c.sequence_parallel && tp == 1) {
    if (log != nullptr)
      *log << "warning: Disabling sequence parallelism because tensor model parallelism is disabled\n";
    c.sequence_parallel = false;
  }
  if (c.sequence_parallel && c.model.seq_length % tp != 0) {
    throw_error("[--seq-length] ", c.model.seq_length, " is not divisible by --tensor-model-parallel-size ", tp,
                " (--sequence-parallel splits the sequence)");
  }
  c.use_distributed_optimizer = a.get_flag("--use-distributed-optimizer");
  c.ddp_bucket_size = opt_int(a, "--ddp-bucket-size", 1);
  c.ddp_num_buckets = opt_int(a, "--ddp-num-buckets", 1);
  if (c.ddp_num_buckets && c.ddp_bucket_size) {
    throw_error("[--ddp-num-buckets] cannot be given with --ddp-bucket-size (as in Megatron-LM)");
  }
  c.overlap_grad_reduce = a.get_flag("--overlap-grad-reduce");
  c.overlap_param_gather = a.get_flag("--overlap-param-gather");
  // Megatron HEAD overlaps the pipeline exchanges by default (--no-overlap-p2p-communication:
  // off; older Megatron's --overlap-p2p-communication is that default) and only with the
  // interleaved schedule: validate_args turns it off otherwise, with this warning on PP > 1.
  if (a.get_flag("--overlap-p2p-communication") && a.get_flag("--no-overlap-p2p-communication")) {
    throw_error("[--overlap-p2p-communication] contradicts --no-overlap-p2p-communication (give one)");
  }
  c.overlap_p2p_communication = !a.get_flag("--no-overlap-p2p-communication");
  if (c.overlap_p2p_communication && !c.num_layers_per_virtual_pipeline_stage) {
    c.overlap_p2p_communication = false;
    if (c.pipeline_model_parallel_size > 1 && log != nullptr) {
      *log << "warning: Setting args.overlap_p2p_comm and args.align_param_gather to False since non-interleaved "
              "schedule does not support overlapping p2p communication and aligned param AG\n";
    }
  }
  if (c.overlap_param_gather && !c.use_distributed_optimizer) {
    throw_error("[--overlap-param-gather] needs --use-distributed-optimizer (only its parameters are gathered)");
  }
  if (c.overlap_param_gather && !c.overlap_grad_reduce) {
    throw_error("[--overlap-param-gather] needs --overlap-grad-reduce (as in Megatron-LM)");
  }
  c.distributed_timeout_minutes = a.get_double("--distributed-timeout-minutes", {0.0, comm::kMaxTimeoutMinutes, true});
  c.use_cpu_initialization = a.get_flag("--use-cpu-initialization");

  if (!a.given("--micro-batch-size")) throw_error("[--micro-batch-size] is required");
  c.micro_batch_size = a.get_int("--micro-batch-size", 1, kMaxDimension);
  const int64_t per_step = product(c.micro_batch_size, c.data_parallel_size,
                                   "[--micro-batch-size] the micro-batch times the data-parallel size");
  if (a.given("--step-batch-size-schedule")) {
    // Megatron's validate_args and Megatron-Core's calculator: the schedule sets the batch, and
    // args.global_batch_size falls back to mbs * dp (below) for what reads it (evaluation).
    if (a.given("--global-batch-size")) {
      throw_error(
          "[--step-batch-size-schedule] Cannot specify both --step-batch-size-schedule and --global-batch-size");
    }
    if (a.given("--rampup-batch-size")) {
      throw_error(
          "[--step-batch-size-schedule] cannot be combined with --rampup-batch-size (give one; Megatron-Core "
          "deprecates --rampup-batch-size for it)");
    }
    c.step_batch_size_schedule =
        train::parse_step_batch_size_schedule(a.get_string("--step-batch-size-schedule"), c.model.seq_length);
  }
  if (a.given("--global-batch-size")) {
    c.global_batch_size = a.get_int("--global-batch-size", 1);
  } else {
    c.global_batch_size = per_step;
    if (log != nullptr) *log << "setting global batch size to " << c.global_batch_size << "\n";
  }
  if (c.global_batch_size % per_step != 0) {
    throw_error("[--global-batch-size] global batch size (", c.global_batch_size,
                ") is not divisible by micro batch size (", c.micro_batch_size, ") times data parallel size (",
                c.data_parallel_size, ")");
  }
  if (a.given("--rampup-batch-size")) {
    const std::vector<int64_t> r = a.get_int_list("--rampup-batch-size");
    train::RampupBatchSizeFlags ramp{r[0], r[1], r[2]};
    require_positive("--rampup-batch-size", ramp.start);
    require_positive("--rampup-batch-size", ramp.increment);
    require_positive("--rampup-batch-size", ramp.ramp_samples);
    if (ramp.start >= c.global_batch_size) {
      throw_error("[--rampup-batch-size] start batch size ", ramp.start, " must be smaller than --global-batch-size ",
                  c.global_batch_size);
    }
    if ((c.global_batch_size - ramp.start) % ramp.increment != 0) {
      throw_error("[--rampup-batch-size] expected global batch size interval (", c.global_batch_size - ramp.start,
                  ") to be divisible by global batch size increment (", ramp.increment, ")");
    }
    if (ramp.start % per_step != 0 || ramp.increment % per_step != 0) {
      throw_error("[--rampup-batch-size] start (", ramp.start, ") and increment (", ramp.increment,
                  ") must be multiples of micro batch size (", c.micro_batch_size, ") times data parallel size (",
                  c.data_parallel_size, ")");
    }
    c.rampup_batch_size = ramp;
  }
  // The rest of the batch arithmetic: micro-batches per iteration, the ramp's end.
  const train::NumMicroBatchesCalculator microbatches = c.microbatch_calculator();
  // The interleaved schedule runs micro-batches in groups of pp (parallel/pipeline_schedule.h).
  if (c.virtual_pipeline_chunks() > 1) {
    if (c.rampup_batch_size) {
      throw_error("[--rampup-batch-size] is not supported with --num-layers-per-virtual-pipeline-stage");
    }
    if (c.step_batch_size_schedule) {
      throw_error("[--step-batch-size-schedule] is not supported with --num-layers-per-virtual-pipeline-stage");
    }
    const int64_t m = microbatches.final_num_microbatches();
    if (m % c.pipeline_model_parallel_size != 0) {
      throw_error("[--num-layers-per-virtual-pipeline-stage] number of microbatches (", m,
                  ") is not divisible by --pipeline-model-parallel-size (", c.pipeline_model_parallel_size,
                  ") when using the interleaved schedule");
    }
  }
}

void fill_schedule(const Args& a, TrainConfig& c, std::ostream* log) {
  c.train_iters = opt_int(a, "--train-iters", 1);
  c.train_samples = opt_int(a, "--train-samples", 1);
  if (c.train_iters && c.train_samples) {
    throw_error("[--train-iters/--train-samples] give exactly one of them, got both");
  }
  if (!c.train_iters && !c.train_samples) {
    throw_error("[--train-iters/--train-samples] give exactly one of them, got neither");
  }

  if (!a.given("--lr")) throw_error("[--lr] is required");
  c.lr = fp32_flag(a, "--lr", kNonNegativeFp32);
  c.min_lr = fp32_flag(a, "--min-lr", kNonNegativeFp32);  // Megatron asserts min_lr >= 0
  if (c.min_lr > c.lr) {
    throw_error("[--min-lr] ", a.get_string("--min-lr"), " is larger than --lr ", a.get_string("--lr"));
  }
  c.decoupled_lr = opt_fp32_flag(a, "--decoupled-lr", kNonNegativeFp32);
  c.decoupled_min_lr = opt_fp32_flag(a, "--decoupled-min-lr", kNonNegativeFp32);
  if (c.decoupled_min_lr && !c.decoupled_lr && log != nullptr) {
    // Megatron-Core reads decoupled_min_lr only with decoupled_lr.
    *log << "warning: --decoupled-min-lr has no effect without --decoupled-lr\n";
  }
  c.apply_wd_to_qk_layernorm = a.get_flag("--apply-wd-to-qk-layernorm");
  if (a.given("--no-weight-decay-cond-type")) {
    const std::string v = a.get_string("--no-weight-decay-cond-type");
    if (v != "apply_wd_to_qk_layernorm") {
      throw_error("[--no-weight-decay-cond-type] ", v, " is not a choice (expected apply_wd_to_qk_layernorm)");
    }
    if (log != nullptr) {
      *log << "WARNING: --no-weight-decay-cond-type is deprecated. Please use --apply-wd-to-qk-layernorm instead.\n";
    }
    c.apply_wd_to_qk_layernorm = true;
  }
  c.lr_decay_style =
      parse_choice<optim::LrDecayStyle>(a, "--lr-decay-style",
                                        {{"constant", optim::LrDecayStyle::kConstant},
                                         {"linear", optim::LrDecayStyle::kLinear},
                                         {"cosine", optim::LrDecayStyle::kCosine},
                                         {"inverse-square-root", optim::LrDecayStyle::kInverseSquareRoot},
                                         {"WSD", optim::LrDecayStyle::kWSD}});
  c.lr_decay_iters = opt_int(a, "--lr-decay-iters", 1);
  c.lr_decay_samples = opt_int(a, "--lr-decay-samples", 1);
  c.lr_warmup_iters = a.get_int("--lr-warmup-iters", 0);
  c.lr_warmup_samples = a.get_int("--lr-warmup-samples", 0);
  // Megatron asserts warmup steps (fraction x decay steps) < decay steps.
  c.lr_warmup_fraction = opt_double(a, "--lr-warmup-fraction", {0.0, 1.0, false, true});
  c.lr_warmup_init = fp32_flag(a, "--lr-warmup-init", kNonNegativeFp32);
  c.lr_wsd_decay_style = parse_choice<optim::WsdDecayStyle>(a, "--lr-wsd-decay-style",
                                                            {{"exponential", optim::WsdDecayStyle::kExponential},
                                                             {"linear", optim::WsdDecayStyle::kLinear},
                                                             {"cosine", optim::WsdDecayStyle::kCosine},
                                                             {"minus_sqrt", optim::WsdDecayStyle::kMinusSqrt}});
  c.lr_wsd_decay_iters = opt_int(a, "--lr-wsd-decay-iters", 1);
  c.lr_wsd_decay_samples = opt_int(a, "--lr-wsd-decay-samples", 1);

  // Megatron's validate_args: each mode forbids the other mode's flags.
  if (c.train_iters) {
    if (c.lr_decay_samples) {
      throw_error(
          "[--lr-decay-samples] needs --train-samples; with --train-iters use --lr-decay-iters "
          "(expected iteration-based learning rate decay)");
    }
    if (c.lr_warmup_samples != 0) {
      throw_error(
          "[--lr-warmup-samples] needs --train-samples; with --train-iters use --lr-warmup-iters "
          "(expected iteration-based learning rate warmup)");
    }
    if (a.given("--rampup-batch-size")) {
      throw_error(
          "[--rampup-batch-size] needs --train-samples "
          "(expected no batch-size rampup for iteration-based training)");
    }
    if (c.lr_wsd_decay_samples) throw_error("[--lr-wsd-decay-samples] needs --train-samples; use --lr-wsd-decay-iters");
    if (c.lr_warmup_fraction && c.lr_warmup_iters != 0) {
      throw_error(
          "[--lr-warmup-fraction/--lr-warmup-iters] can only specify one of lr-warmup-fraction and "
          "lr-warmup-iters");
    }
  } else {
    if (c.lr_decay_iters) {
      throw_error(
          "[--lr-decay-iters] needs --train-iters; with --train-samples use --lr-decay-samples "
          "(expected sample-based learning rate decay)");
    }
    if (c.lr_warmup_iters != 0) {
      throw_error(
          "[--lr-warmup-iters] needs --train-iters; with --train-samples use --lr-warmup-samples "
          "(expected sample-based learning rate warmup)");
    }
    if (c.lr_wsd_decay_iters) throw_error("[--lr-wsd-decay-iters] needs --train-iters; use --lr-wsd-decay-samples");
    if (c.lr_warmup_fraction && c.lr_warmup_samples != 0) {
      throw_error(
          "[--lr-warmup-fraction/--lr-warmup-samples] can only specify one of lr-warmup-fraction and "
          "lr-warmup-samples");
    }
  }
  if (c.lr_decay_style == optim::LrDecayStyle::kWSD) {
    if (!c.lr_wsd_decay_iters && !c.lr_wsd_decay_samples) {
      throw_error("[--lr-decay-style] WSD needs ", c.train_iters ? "--lr-wsd-decay-iters" : "--lr-wsd-decay-samples");
    }
  } else if (c.lr_wsd_decay_iters || c.lr_wsd_decay_samples || a.given("--lr-wsd-decay-style")) {
    const char* name = c.lr_wsd_decay_iters     ? "--lr-wsd-decay-iters"
                       : c.lr_wsd_decay_samples ? "--lr-wsd-decay-samples"
                                                : "--lr-wsd-decay-style";
    throw_error("[", name, "] only applies with --lr-decay-style WSD");
  }
  c.override_opt_param_scheduler =
      a.get_flag("--override-opt_param-scheduler") || a.get_flag("--override-opt-param-scheduler");
  c.use_checkpoint_opt_param_scheduler =
      a.get_flag("--use-checkpoint-opt_param-scheduler") || a.get_flag("--use-checkpoint-opt-param-scheduler");
  if (c.override_opt_param_scheduler && c.use_checkpoint_opt_param_scheduler) {
    throw_error(
        "[--override-opt_param-scheduler/--use-checkpoint-opt_param-scheduler] both override and "
        "use-checkpoint are set");
  }
}

void fill_optimizer_and_precision(const Args& a, TrainConfig& c, std::ostream* log) {
  c.weight_decay = fp32_flag(a, "--weight-decay", kNonNegativeFp32);
  c.weight_decay_incr_style =
      parse_choice<train::WeightDecayIncrStyle>(a, "--weight-decay-incr-style",
                                                {{"constant", train::WeightDecayIncrStyle::kConstant},
                                                 {"linear", train::WeightDecayIncrStyle::kLinear},
                                                 {"cosine", train::WeightDecayIncrStyle::kCosine}});
  c.start_weight_decay = opt_fp32_flag(a, "--start-weight-decay", kNonNegativeFp32);
  c.end_weight_decay = opt_fp32_flag(a, "--end-weight-decay", kNonNegativeFp32);
  if (c.weight_decay_incr_style == train::WeightDecayIncrStyle::kConstant) {
    if (c.start_weight_decay || c.end_weight_decay) {
      throw_error("[", c.start_weight_decay ? "--start-weight-decay" : "--end-weight-decay",
                  "] needs --weight-decay-incr-style linear or cosine (constant uses --weight-decay)");
    }
    c.start_weight_decay = c.weight_decay;
    c.end_weight_decay = c.weight_decay;
  } else if (!c.start_weight_decay || !c.end_weight_decay) {
    throw_error("[--weight-decay-incr-style] ", a.get_string("--weight-decay-incr-style"),
                " needs --start-weight-decay and --end-weight-decay");
  }
  c.adam_beta1 = fp32_flag(a, "--adam-beta1", kProbability);
  c.adam_beta2 = fp32_flag(a, "--adam-beta2", kProbability);
  c.adam_eps = fp32_flag(a, "--adam-eps", kPositiveFp32);
  c.clip_grad = a.get_double("--clip-grad", {0.0, std::numeric_limits<double>::max()});

  c.fp16 = a.get_flag("--fp16");
  c.bf16 = a.get_flag("--bf16");
  if (c.fp16 && c.bf16) throw_error("[--fp16/--bf16] give at most one of them");
  // The scales are fp32 (optim/loss_scaler.h).
  c.loss_scale = opt_fp32_flag(a, "--loss-scale", kPositiveFp32);
  if (c.loss_scale && !c.fp16 && !c.bf16) throw_error("[--loss-scale] needs --fp16 or --bf16");
  c.initial_loss_scale = fp32_flag(a, "--initial-loss-scale", kPositiveFp32);
  c.min_loss_scale = fp32_flag(a, "--min-loss-scale", kPositiveFp32);
  c.loss_scale_window = a.get_int("--loss-scale-window", 1);
  c.hysteresis = a.get_int("--hysteresis", 1);
  // Megatron's validate_args: the gradient buffer holds the model dtype (fp16 with --fp16)
  // unless --accumulate-allreduce-grads-in-fp32, which bf16 turns on unless --grad-reduce-in-bf16.
  c.accumulate_allreduce_grads_in_fp32 = a.get_flag("--accumulate-allreduce-grads-in-fp32");
  c.grad_reduce_in_bf16 = a.get_flag("--grad-reduce-in-bf16");
  if (c.bf16 && c.grad_reduce_in_bf16) {
    c.accumulate_allreduce_grads_in_fp32 = false;
  } else if (c.bf16 && !c.accumulate_allreduce_grads_in_fp32) {
    c.accumulate_allreduce_grads_in_fp32 = true;
    if (log != nullptr) *log << "accumulate and all-reduce gradients in fp32 for bfloat16 data type.\n";
  } else if (c.grad_reduce_in_bf16 && log != nullptr) {
    *log << "warning: --grad-reduce-in-bf16 has no effect without --bf16\n";
  }
}

// --fp8-format and its recipe (Megatron-Core's TransformerConfig fp8 fields; Transformer
// Engine's DelayedScaling / Float8CurrentScaling). Each flag's problem is its own line.
std::vector<std::string> fp8_errors(const Args& a, TrainConfig& c, std::ostream* log) {
  std::vector<std::string> errors;
  auto check = [&](auto&& fill) {
    try {
      fill();
    } catch (const Error& e) {
      errors.emplace_back(e.what());
    }
  };
  backend::Fp8Config f;
  check([&] {
    if (!a.given("--fp8-format")) return;
    f.format = parse_choice<backend::Fp8Mix>(a, "--fp8-format",
                                             {{"e4m3", backend::Fp8Mix::kE4M3}, {"hybrid", backend::Fp8Mix::kHybrid}});
  });
  check([&] {
    const std::string r = a.get_string("--fp8-recipe");
    if (r == "mxfp8") {
      throw_error(
          "[--fp8-recipe] mxfp8 is not supported (MXFP8 block scaling needs Blackwell's tensor cores; use "
          "tensorwise or delayed)");
    }
    if (r == "blockwise") {
      throw_error(
          "[--fp8-recipe] blockwise is not supported (Float8BlockScaling's 1x128 and 128x128 block scales "
          "are not implemented; use tensorwise or delayed)");
    }
    if (r == "custom") {
      throw_error(
          "[--fp8-recipe] custom is not supported (it takes a Python quantizer factory, "
          "--fp8-quantizer-factory; use tensorwise or delayed)");
    }
    f.recipe = parse_choice<backend::Fp8Recipe>(
        a, "--fp8-recipe",
        {{"tensorwise", backend::Fp8Recipe::kTensorwise}, {"delayed", backend::Fp8Recipe::kDelayed}});
  });
  // The scale is fp8_max * 2^-margin / amax in fp32: a margin past 64 leaves too little range.
  check([&] { f.margin = a.get_int("--fp8-margin", 0, 64); });
  check([&] { f.amax_history_len = a.get_int("--fp8-amax-history-len", 1, 1 << 20); });
  check([&] {
    f.amax_compute_algo = parse_choice<backend::Fp8AmaxAlgo>(
        a, "--fp8-amax-compute-algo",
        {{"max", backend::Fp8AmaxAlgo::kMax}, {"most_recent", backend::Fp8AmaxAlgo::kMostRecent}});
  });
  // --fp8-param-gather: Megatron's validate_args requires the distributed optimizer (or FSDP2);
  // the flag changes how the weights are held and gathered, not the FP8 GEMMs' inputs.
  const bool param_gather = a.get_flag("--fp8-param-gather");
  if (param_gather && !a.get_flag("--use-distributed-optimizer")) {
    errors.emplace_back(
        "[--fp8-param-gather] is only supported with the distributed optimizer (--use-distributed-optimizer), as in "
        "Megatron-LM");
  }
  if (param_gather && !a.given("--fp8-format")) {
    errors.emplace_back("[--fp8-param-gather] needs --fp8-format (it gathers the FP8 linears' weights)");
  }
  if (!errors.empty()) return errors;
  if (param_gather && log != nullptr) {
    const std::string_view held = dtype_name(train::model_dtype(c));
    *log << "note: --fp8-param-gather differs here: the FP8 linears' weights stay " << held
         << " parameters, all-gathered in " << held
         << " by the distributed optimizer (Megatron gathers their 1-byte codes; the memory plan shows what is held "
            "here) and cast to FP8 by each GEMM from that value (Megatron casts the fp32 main weight: one rounding "
            "fewer)\n";
  }
  const char* delayed_only[] = {"--fp8-margin", "--fp8-amax-history-len", "--fp8-amax-compute-algo"};
  if (!a.given("--fp8-format")) {
    if (log != nullptr) {
      for (const char* flag : {"--fp8-recipe", "--fp8-margin", "--fp8-amax-history-len", "--fp8-amax-compute-algo"}) {
        if (a.given(flag)) *log << "warning: " << flag << " has no effect without --fp8-format\n";
      }
    }
    return errors;
  }
  if (f.recipe == backend::Fp8Recipe::kTensorwise && log != nullptr) {
    for (const char* flag : delayed_only) {
      if (a.given(flag)) *log << "warning: " << flag << " has no effect with --fp8-recipe tensorwise\n";
    }
  }
  c.model.fp8 = f;
  return errors;
}

void fill_recompute(const Args& a, TrainConfig& c) {
  using train::RecomputeGranularity;
  using train::RecomputeMethod;
  if (a.given("--recompute-granularity")) {
    c.recompute_granularity = parse_choice<RecomputeGranularity>(
        a, "--recompute-granularity",
        {{"full", RecomputeGranularity::kFull}, {"selective", RecomputeGranularity::kSelective}});
  }
  // Megatron: --recompute-activations sets selective granularity.
  if (a.get_flag("--recompute-activations")) c.recompute_granularity = RecomputeGranularity::kSelective;
  if (a.given("--recompute-method")) {
    c.recompute_method = parse_choice<RecomputeMethod>(
        a, "--recompute-method", {{"uniform", RecomputeMethod::kUniform}, {"block", RecomputeMethod::kBlock}});
  }
  c.recompute_num_layers = opt_int(a, "--recompute-num-layers");
  switch (c.recompute_granularity) {
    case RecomputeGranularity::kNone:
      if (a.given("--recompute-method")) throw_error("[--recompute-method] needs --recompute-granularity full");
      if (a.given("--recompute-num-layers")) throw_error("[--recompute-num-layers] needs --recompute-granularity full");
      break;
    case RecomputeGranularity::kSelective:
      if (a.given("--recompute-method") || a.given("--recompute-num-layers")) {
        throw_error("[", a.given("--recompute-method") ? "--recompute-method" : "--recompute-num-layers",
                    "] is not supported with selective recompute granularity (only with full)");
      }
      break;
    case RecomputeGranularity::kFull: {
      if (!a.given("--recompute-method")) {
        throw_error("[--recompute-method] is required with --recompute-granularity full (uniform or block)");
      }
      if (!c.recompute_num_layers) {
        throw_error("[--recompute-num-layers] is required with --recompute-granularity full");
      }
      const int64_t per_stage = c.model.num_layers / c.pipeline_model_parallel_size;
      if (*c.recompute_num_layers < 1 || *c.recompute_num_layers > per_stage) {
        throw_error("[--recompute-num-layers] must be between 1 and the layers per pipeline stage (", per_stage,
                    "), got ", *c.recompute_num_layers);
      }
      c.model.recompute =
          c.recompute_method == RecomputeMethod::kUniform ? model::Recompute::kUniform : model::Recompute::kBlock;
      c.model.recompute_num_layers = *c.recompute_num_layers;
      break;
    }
  }
}

void fill_logging_and_data(const Args& a, TrainConfig& c) {
  c.log_interval = a.get_int("--log-interval", 1);
  c.eval_interval = a.get_int("--eval-interval", 1);
  c.eval_iters = a.get_int("--eval-iters", 0);
  c.log_throughput = a.get_flag("--log-throughput");
  c.log_params_norm = a.get_flag("--log-params-norm");
  c.log_progress = a.get_flag("--log-progress");
  c.profile = a.get_flag("--profile");
  c.profile_step_start = a.get_int("--profile-step-start");
  c.profile_step_end = a.get_int("--profile-step-end");
  if (a.given("--profile-ranks")) c.profile_ranks = a.get_int_list("--profile-ranks");
  if (c.profile) {  // as Megatron, the window and ranks matter only with --profile
    if (c.profile_step_start < 0)
      throw_error("[--profile-step-start] must not be negative, got ", c.profile_step_start);
    if (c.profile_step_end <= c.profile_step_start) {
      throw_error("[--profile-step-end] must be greater than --profile-step-start (", c.profile_step_start, "), got ",
                  c.profile_step_end);
    }
    for (int64_t r : c.profile_ranks) {
      if (r < 0 || r >= c.world_size) {
        throw_error("[--profile-ranks] rank ", r, " is not in the world of ", c.world_size, " ranks");
      }
    }
  }
  if (a.given("--gpu")) plan::find_gpu(a.get_string("--gpu"));  // an unknown kind fails here, naming --gpu
  c.log_num_zeros_in_grad = a.get_flag("--log-num-zeros-in-grad");
  c.check_for_nan_in_loss_and_grad = !a.get_flag("--no-check-for-nan-in-loss-and-grad");
  c.flops_convention = parse_choice<train::FlopsConvention>(
      a, "--flops-convention", {{"2025", train::FlopsConvention::k2025}, {"2024", train::FlopsConvention::k2024}});
  c.timing_log_level = a.get_int("--timing-log-level");
  if (c.timing_log_level < 0 || c.timing_log_level > 2) {
    throw_error("[--timing-log-level] must be 0, 1 or 2, got ", c.timing_log_level);
  }
  c.timing_log_option = a.get_string("--timing-log-option");
  obs::parse_timing_log_option(c.timing_log_option);  // a bad value fails here, naming the flag
  c.barrier_with_l1_time = !a.get_flag("--no-barrier-with-level-1-timing");
  c.log_straggler = a.get_flag("--log-straggler");
  c.disable_straggler_on_startup = a.get_flag("--disable-straggler-on-startup");
  c.straggler_ctrlr_port = a.get_int("--straggler-ctrlr-port");
  if (c.straggler_ctrlr_port < 0 || c.straggler_ctrlr_port > 65535) {
    throw_error("[--straggler-ctrlr-port] must be a TCP port (0-65535; 0: any free one), got ", c.straggler_ctrlr_port);
  }
  c.straggler_minmax_count = a.get_int("--straggler-minmax-count", 1);
  c.check_weight_hash_interval = opt_int(a, "--check-weight-hash-across-dp-replicas-interval", 1);
  c.exit_interval = opt_int(a, "--exit-interval", 1);
  c.exit_duration_in_mins = opt_int(a, "--exit-duration-in-mins", 1);
  if (a.given("--save-interval")) c.save_interval = train::SaveSchedule::parse(a.get_string("--save-interval"));
  c.exit_samples = opt_int(a, "--exit-samples", 1);
  c.dry_run = a.get_flag("--dry-run");
  if (a.given("--save")) c.save = a.get_string("--save");
  if (a.given("--load")) c.load = a.get_string("--load");
  c.save_keep_last = a.get_int("--save-keep-last", 0);
  c.no_save_optim = a.get_flag("--no-save-optim");
  c.ckpt_fully_parallel_save = !a.get_flag("--no-ckpt-fully-parallel-save");
  c.async_save = a.get_flag("--async-save");
  if (c.async_save && !c.ckpt_fully_parallel_save) {
    throw_error("[--async-save] needs the parallel save (it cannot be given with --no-ckpt-fully-parallel-save)");
  }
  c.no_load_optim = a.get_flag("--no-load-optim");
  c.finetune = a.get_flag("--finetune");
  c.exit_on_missing_checkpoint = a.get_flag("--exit-on-missing-checkpoint");
  c.exit_signal_handler = a.get_flag("--exit-signal-handler");
  c.ckpt_step = opt_int(a, "--ckpt-step", 1);
  c.skip_train = a.get_flag("--skip-train");
  if ((c.finetune || c.no_load_optim || c.exit_on_missing_checkpoint || c.ckpt_step) && !c.load) {
    throw_error("[--load] is required by ", c.finetune        ? "--finetune"
                                            : c.no_load_optim ? "--no-load-optim"
                                            : c.ckpt_step     ? "--ckpt-step"
                                                              : "--exit-on-missing-checkpoint");
  }
  if (a.given("--tensorboard-dir")) c.tensorboard_dir = a.get_string("--tensorboard-dir");
  c.tensorboard_queue_size = a.get_int("--tensorboard-queue-size", 1);
  c.tensorboard_log_interval = a.get_int("--tensorboard-log-interval", 1);
  c.log_batch_size_to_tensorboard = a.get_flag("--log-batch-size-to-tensorboard");
  c.log_memory_to_tensorboard = a.get_flag("--log-memory-to-tensorboard");
  c.log_world_size_to_tensorboard = a.get_flag("--log-world-size-to-tensorboard");
  c.log_timers_to_tensorboard = a.get_flag("--log-timers-to-tensorboard");
  c.log_validation_ppl_to_tensorboard = a.get_flag("--log-validation-ppl-to-tensorboard");
  c.log_learning_rate_to_tensorboard = !a.get_flag("--no-log-learning-rate-to-tensorboard");
  c.log_loss_scale_to_tensorboard =
      !a.get_flag("--no-log-loss-scale-to-tensorboard") && !a.get_flag("--disable-log-loss-scale-to-tensorboard");
  if (a.given("--log-jsonl")) c.log_jsonl = a.get_string("--log-jsonl");
  c.log_energy = a.get_flag("--log-energy");
  if (a.given("--codecarbon-dir")) c.codecarbon_dir = a.get_string("--codecarbon-dir");
  c.carbon_intensity_g_per_kwh = opt_double(a, "--carbon-intensity-g-per-kwh", {});
  if (c.carbon_intensity_g_per_kwh && !c.codecarbon_dir) {
    throw_error("[--carbon-intensity-g-per-kwh] needs --codecarbon-dir (the emissions go to its emissions.csv)");
  }
  // Weights & Biases (cli/wandb_sync.h): the run writes TensorBoard events for `wandb sync`,
  // to --tensorboard-dir or else <--save>/tensorboard.
  if (a.given("--wandb-project") && !a.get_string("--wandb-project").empty()) {
    if (a.given("--wandb-exp-name") && a.get_string("--wandb-exp-name").empty()) {
      throw_error("[--wandb-exp-name] Please specify the wandb experiment name! (it is empty)");
    }
    if (!c.tensorboard_dir) {
      if (!c.save) {
        throw_error(
            "[--wandb-project] needs --tensorboard-dir or --save: the TensorBoard events that wandb sync "
            "uploads are written there (<--save>/tensorboard)");
      }
      c.tensorboard_dir = *c.save + "/tensorboard";
    }
  }

  c.data_path = a.get_list("--data-path");
  if (a.given("--data-args-path")) {
    if (a.given("--data-path")) throw_error("[--data-args-path] cannot be combined with --data-path (give one)");
    c.data_path = read_words(a.get_string("--data-args-path"), "--data-args-path");
    if (c.data_path.empty())
      throw_error("[--data-args-path] ", a.get_string("--data-args-path"), " holds no data path");
  }
  c.mock_data = a.get_flag("--mock-data");
  c.eod_mask_loss = a.get_flag("--eod-mask-loss");
  c.calculate_per_token_loss = a.get_flag("--calculate-per-token-loss");
  c.model.reset_position_ids = a.get_flag("--reset-position-ids");
  c.model.reset_attention_mask = a.get_flag("--reset-attention-mask");
  if (c.mock_data && !c.data_path.empty()) {
    throw_error("[--mock-data] cannot be combined with ",
                a.given("--data-args-path") ? "--data-args-path" : "--data-path", " (give one)");
  }
  for (int s = 0; s < 3; ++s) {
    const char* flag = data::kSplitDataPathFlags[s];
    c.split_data_path[s] = a.get_list(flag);
    if (c.mock_data && a.given(flag)) throw_error("[--mock-data] cannot be combined with ", flag, " (give one)");
    if (a.given(flag) && c.split_data_path[s].empty()) throw_error("[", flag, "] no dataset prefix given");
  }
  if (a.given("--per-split-data-args-path")) {
    for (const char* flag : data::kSplitDataPathFlags) {
      if (a.given(flag)) throw_error("[--per-split-data-args-path] cannot be combined with ", flag, " (give one)");
    }
    c.split_data_path = read_per_split_data_args(a.get_string("--per-split-data-args-path"));
    if (c.mock_data) throw_error("[--mock-data] cannot be combined with --per-split-data-args-path (give one)");
  }
  c.split = a.get_string("--split");
  c.classic_split = a.get_flag("--classic-split");
  if (!c.data_path.empty()) data::parse_and_normalize_split(c.split);  // its errors before any file is read
  if (a.given("--vocab-file")) c.vocab_file = a.get_string("--vocab-file");
  if (a.given("--merge-file")) c.merge_file = a.get_string("--merge-file");
  if (a.given("--data-cache-path")) c.data_cache_path = a.get_string("--data-cache-path");
  c.tokenizer_type = a.get_string("--tokenizer-type");
  c.seed = a.get_int("--seed");
  data::check_numpy_seed(c.seed, "--seed");  // the datasets shuffle with numpy.random.RandomState(seed)
  const bool null_tokenizer = c.tokenizer_type == "NullTokenizer";
  if (null_tokenizer) {
    // Megatron-Core's NullTokenizer(vocab_size): ids 0..N-1, the EOD being the last, N - 1.
    if (!a.given("--vocab-size")) throw_error("[--vocab-size] is required by --tokenizer-type NullTokenizer");
    c.null_vocab_size = a.get_int("--vocab-size", 1, kMaxDimension);
  } else if (a.given("--vocab-size")) {
    if (c.tokenizer_type != "TikTokenizer" && c.tokenizer_type != "HuggingFaceTokenizer") {
      throw_error("[--vocab-size] is not used by --tokenizer-type ", c.tokenizer_type,
                  " (its vocabulary is its files'); it applies to NullTokenizer and TikTokenizer");
    }
    c.tokenizer_vocab_size = a.get_int("--vocab-size", 1, kMaxDimension - 1);
  }
  if (a.given("--tokenizer-model")) c.tokenizer_model = a.get_string("--tokenizer-model");
  if (a.given("--tiktoken-pattern")) {
    c.tiktoken_pattern = a.get_string("--tiktoken-pattern");
    if (*c.tiktoken_pattern != "v1" && *c.tiktoken_pattern != "v2") {
      throw_error("[--tiktoken-pattern] expected v1 or v2, got '", *c.tiktoken_pattern, "'");
    }
  }
  c.tiktoken_num_special_tokens = a.get_int("--tiktoken-num-special-tokens", 0, kMaxDimension - 1);
  if (!c.dry_run) {
    if (c.data_path.empty() && !c.mock_data && c.split_data_path[0].empty()) {
      if (!c.split_data_path[1].empty() || !c.split_data_path[2].empty()) {
        throw_error("[--train-data-path] is required with --valid-data-path or --test-data-path (no training data)");
      }
      throw_error("[--data-path] is required (unless --dry-run, --mock-data or --train-data-path)");
    }
    if (!null_tokenizer) {
      std::string problems;
      for (const std::string& e : data::tokenizer_option_errors(tokenizer_options(c))) {
        const bool missing = e.find("is required") != std::string::npos;
        problems += str_cat(problems.empty() ? "" : "; ", e, missing ? " (unless --dry-run)" : "");
      }
      if (!problems.empty()) throw Error(problems);
    }
  }
}

}  // namespace

train::TrainConfig parse_train_config(const Args& args, int64_t world_size, std::ostream* log) {
  // Every problem at once: the table's refusals, then each family's first error. A family
  // whose inputs failed is skipped (the batch and recompute checks need the model's shape).
  std::vector<std::string> errors = table_flag_errors(args);
  auto attempt = [&](auto&& fill) {
    try {
      fill();
      return true;
    } catch (const Error& e) {
      errors.emplace_back(e.what());
      return false;
    }
  };
  TrainConfig c;
  c.world_size = world_size;
  const bool model_ok = attempt([&] { fill_model(args, c); });
  const bool layout_ok = model_ok && attempt([&] { fill_parallel_and_batch(args, c, world_size, log); });
  attempt([&] { fill_schedule(args, c, log); });
  attempt([&] { fill_optimizer_and_precision(args, c, log); });
  for (std::string& e : fp8_errors(args, c, log)) errors.push_back(std::move(e));
  if (layout_ok) attempt([&] { fill_recompute(args, c); });
  attempt([&] { fill_logging_and_data(args, c); });
  if (errors.empty()) attempt([&] { check_sample_counts(c); });
  if (!errors.empty()) throw_errors(errors);
  if (log != nullptr) print_table_notes(args, *log);
  if (c.log_progress && !c.save && log != nullptr) {
    *log << "warning: --log-progress writes <--save>/progress.txt; without --save nothing is written\n";
  }
  if (c.model.reset_attention_mask && args.get_flag("--no-create-attention-mask-in-dataloader") && log != nullptr) {
    *log << "warning: --reset-attention-mask with --no-create-attention-mask-in-dataloader: Megatron then builds no "
            "mask and attends across documents; here attention stays within each document\n";
  }
  if (c.model.rope() && c.model.reset_position_ids && log != nullptr) {
    *log << "warning: --reset-position-ids with rotary embeddings: Megatron's rotary embeddings ignore the "
            "position ids (positions 0..s-1 across packed documents); here each document's positions restart at 0\n";
  }
  if (!c.log_straggler && log != nullptr) {
    for (const char* flag : {"--disable-straggler-on-startup", "--straggler-ctrlr-port", "--straggler-minmax-count"}) {
      if (args.given(flag)) *log << "warning: " << flag << " has no effect without --log-straggler\n";
    }
  }
  return c;
}

int64_t vocab_size_without_files(const train::TrainConfig& c) {
  constexpr int64_t kGpt2VocabSize = 50257;  // len(encoder) of GPT-2's vocab.json
  if (c.null_vocab_size) return *c.null_vocab_size;
  return c.preset_vocab_size.value_or(kGpt2VocabSize);
}

data::TokenizerOptions tokenizer_options(const train::TrainConfig& c) {
  data::TokenizerOptions o;
  o.type = c.tokenizer_type;
  o.vocab_file = c.vocab_file;
  o.merge_file = c.merge_file;
  o.tokenizer_model = c.tokenizer_model;
  o.vocab_size = c.tokenizer_vocab_size;
  o.tiktoken_pattern = c.tiktoken_pattern;
  o.tiktoken_num_special_tokens = c.tiktoken_num_special_tokens;
  return o;
}

std::string cuda_attention_problem(const train::TrainConfig& c) {
  const int64_t d = c.model.kv_channels;
  if (d <= backend::kOwnAttentionMaxHeadDim) return "";
  const std::string what = str_cat("[--hidden-size / --num-attention-heads / --kv-channels] head_dim ", d,
                                   " runs on CUDA only on cuDNN's fused attention (our kernels take up to ",
                                   backend::kOwnAttentionMaxHeadDim, "), ");
  if (!c.bf16 && !c.fp16) return what + "which needs --bf16 or --fp16";
  if (c.tensor_model_parallel_size > 1 && c.model.attention_dropout > 0.0f) {
    return what +
           "which cannot apply attention dropout over a tensor-parallel share of the heads: give "
           "--attention-dropout 0 or --tensor-model-parallel-size 1";
  }
  return "";
}

std::vector<std::string> checkpoint_model_args(const Args& a, std::ostream* log) {
  std::vector<std::string> extra;
  if (!a.get_flag("--use-checkpoint-args")) return extra;
  // Megatron's load_args_from_checkpoint: without a directory or a checkpoint in it, the flags
  // given are used as they are.
  if (!a.given("--load")) {
    if (log != nullptr) *log << "No load directory specified, using provided arguments.\n";
    return extra;
  }
  std::optional<int64_t> step;
  if (a.given("--ckpt-step")) step = a.get_int("--ckpt-step");
  const std::string load = a.get_string("--load");
  const ckpt::LoadedCheckpoint ck = ckpt::load_checkpoint_dir(load, step);
  if (!ck.found) {
    if (log != nullptr) *log << "Checkpoint not found to provide arguments, using provided arguments.\n";
    return extra;
  }
  const ckpt::CheckpointMetadata meta(ck.directory + "/" + ckpt::kMetadataFileName, ck.metadata_json);
  auto report = [&](const std::string& flag, const std::string& value) {
    if (log == nullptr) return;
    std::string name = flag.substr(2);
    std::replace(name.begin(), name.end(), '-', '_');
    *log << "Setting " << name << " to " << value << " from checkpoint\n";
  };
  auto take = [&](const std::string& flag, const std::string& value) {
    if (a.given(flag)) return;
    extra.push_back(flag);
    extra.push_back(value);
    report(flag, value);
  };
  for (const char* flag :
       {"--num-layers", "--hidden-size", "--num-attention-heads", "--kv-channels", "--ffn-hidden-size", "--seq-length",
        "--max-position-embeddings", "--make-vocab-size-divisible-by"}) {
    take(flag, std::to_string(meta.arg_int(flag)));
  }
  char eps[64];
  const auto written = std::to_chars(eps, eps + sizeof eps, meta.arg_double("--layernorm-epsilon"));  // shortest
  if (!a.given("--norm-epsilon")) take("--layernorm-epsilon", std::string(eps, written.ptr));
  const std::string tokenizer = meta.arg_string("--tokenizer-type");
  take("--tokenizer-type", tokenizer);
  if (tokenizer == "NullTokenizer" && !a.given("--tokenizer-type")) {
    take("--vocab-size", std::to_string(meta.arg_int("vocab_size")));  // NullTokenizer: N ids
  }
  auto take_switch = [&](const std::string& flag, bool on) {
    if (!on || a.given(flag)) return;
    extra.push_back(flag);
    report(flag, "True");
  };
  take_switch("--untie-embeddings-and-output-weights", meta.arg_bool("--untie-embeddings-and-output-weights"));
  take_switch("--disable-bias-linear", meta.arg_bool("--disable-bias-linear"));
  take_switch("--swiglu", meta.optional_arg_bool("--swiglu").value_or(false));
  take("--normalization", meta.optional_arg_string("--normalization").value_or("LayerNorm"));
  const std::string positions = meta.optional_arg_string("--position-embedding-type").value_or("learned_absolute");
  if (!a.get_flag("--use-rotary-position-embeddings")) take("--position-embedding-type", positions);
  if (positions == "rope") {
    for (const char* flag : {"--rotary-base", "--rotary-percent", "--rope-scaling-factor"}) {
      char text[64];
      const auto end = std::to_chars(text, text + sizeof text, meta.arg_double(flag));  // shortest
      take(flag, std::string(text, end.ptr));
    }
    const double factor = meta.arg_double("--rotary-seq-len-interpolation-factor");
    if (factor > 0) take("--rotary-seq-len-interpolation-factor", std::to_string(static_cast<int64_t>(factor)));
    take_switch("--use-rope-scaling", meta.optional_arg_bool("--use-rope-scaling").value_or(false));
  }
  take_switch("--apply-layernorm-1p", meta.optional_arg_bool("--apply-layernorm-1p").value_or(false));
  take_switch("--qk-layernorm", meta.optional_arg_bool("--qk-layernorm").value_or(false));
  const int64_t groups = meta.optional_arg_int("--num-query-groups").value_or(0);
  if (groups > 0) {
    take_switch("--group-query-attention", true);
    take("--num-query-groups", std::to_string(groups));
  }
  take_switch("--no-bias-gelu-fusion", meta.arg_string("gelu") == "exact" && !a.given("--openai-gelu"));
  return extra;
}

}  // namespace megatron::cli
