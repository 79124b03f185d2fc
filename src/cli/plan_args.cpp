#include "cli/plan_args.h"

#include <limits>
#include <optional>
#include <string>

#include "backend/fp8_recipe.h"
#include "cli/train_args.h"
#include "core/error.h"
#include "parallel/data_parallel_setup.h"

namespace megatron::cli {

namespace {

// The largest cluster planned: a million GPUs, past any built, so that the layout search (over
// the divisors of the world size, and group placements repeating within it) stays quick.
constexpr int64_t kMaxPlanGpus = int64_t{1} << 20;
// Megatron's --attention-dropout and --hidden-dropout defaults (arguments.py).
constexpr double kMegatronDefaultDropout = 0.1;
// The fastest link a bandwidth flag may give, GB/s per GPU (a petabyte per second).
constexpr double kMaxBandwidthGBs = 1e6;

std::string preset_list() {
  std::string out;
  for (const ModelPreset& p : model_presets()) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

// Sizes, counts and the global batch: 1 .. 2^31 - 1 (as train's tensor dimensions, cli/args.h).
int64_t positive(const Args& a, const char* name) { return a.get_int(name, 1, kMaxDimension); }

double positive_double(const Args& a, const char* name, double most = std::numeric_limits<double>::max()) {
  return a.get_double(name, {0.0, most, true, false});
}

// The NLP (Megatron-LM) benchmark's shapes (docs/benchmarking.md, "The NLP benchmark"): the
// 175B model and its 13B evaluation shape.
bool is_benchmark_preset(const std::string& name) { return name == "gpt3-175b" || name == "gpt3-13b"; }

// --fp8-format with --fp8-recipe and --fp8-amax-history-len, as train reads them (Megatron's
// spellings and defaults; the recipe's other options change neither memory nor speed).
// Refused on the benchmark's presets: its rules fix the numerical accuracy.
std::optional<backend::Fp8Config> parse_fp8(const Args& a) {
  if (!a.given("--fp8-format")) {
    for (const char* flag : {"--fp8-recipe", "--fp8-amax-history-len"}) {
      if (a.given(flag)) throw_error("[", flag, "] needs --fp8-format");
    }
    return std::nullopt;
  }
  if (a.given("--model") && is_benchmark_preset(a.get_string("--model"))) {
    throw_error("[--fp8-format] --model ", a.get_string("--model"),
                " is the NLP (Megatron-LM) benchmark's shape, whose rules fix the numerical accuracy (mixed "
                "precision with fp32 master weights) and forbid reduced precision such as FP8: its runs stay bf16 or "
                "fp16 (plan without --fp8-format; for FP8 outside the benchmark give the shape by --num-layers, "
                "--hidden-size, --num-attention-heads and --seq-length)");
  }
  backend::Fp8Config f;
  const std::string format = a.get_string("--fp8-format");
  if (format == "e4m3")
    f.format = backend::Fp8Mix::kE4M3;
  else if (format == "hybrid")
    f.format = backend::Fp8Mix::kHybrid;
  else
    throw_error("[--fp8-format] invalid choice '", format, "' (choose from e4m3, hybrid)");
  const std::string recipe = a.get_string("--fp8-recipe");
  if (recipe == "tensorwise")
    f.recipe = backend::Fp8Recipe::kTensorwise;
  else if (recipe == "delayed")
    f.recipe = backend::Fp8Recipe::kDelayed;
  else
    throw_error("[--fp8-recipe] invalid choice '", recipe, "' (choose from tensorwise, delayed)");
  f.amax_history_len = a.get_int("--fp8-amax-history-len", 1, 1 << 20);
  return f;
}

plan::PlanModel parse_model(const Args& a) {
  plan::PlanModel m;
  model::GPTConfig& c = m.config;
  if (a.given("--model")) {
    const std::string name = a.get_string("--model");
    const ModelPreset* found = nullptr;
    for (const ModelPreset& p : model_presets()) {
      if (name == p.name) found = &p;
    }
    if (found == nullptr) throw_error("[--model] unknown preset '", name, "' (choose from ", preset_list(), ")");
    c.num_layers = found->num_layers;
    c.hidden_size = found->hidden_size;
    c.num_attention_heads = found->num_attention_heads;
    c.seq_length = found->seq_length;
  }
  auto shape = [&](const char* name, int64_t& field) {
    if (a.given(name)) field = positive(a, name);
    if (field == 0) throw_error("[", name, "] is required (or give --model)");
  };
  shape("--num-layers", c.num_layers);
  shape("--hidden-size", c.hidden_size);
  shape("--num-attention-heads", c.num_attention_heads);
  shape("--seq-length", c.seq_length);
  if (a.given("--kv-channels")) {
    c.kv_channels = positive(a, "--kv-channels");
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      throw_error("[--num-attention-heads] ", c.num_attention_heads, " does not divide --hidden-size ", c.hidden_size,
                  " (or give --kv-channels)");
    }
    c.kv_channels = c.hidden_size / c.num_attention_heads;
  }
  c.swiglu = a.get_flag("--swiglu");
  // As train (Megatron): int(4h * 2/3 / 64) * 64 with SwiGLU, else 4h.
  const int64_t default_ffn = c.swiglu ? c.hidden_size / 24 * 64 : 4 * c.hidden_size;
  c.ffn_hidden_size = a.given("--ffn-hidden-size") ? positive(a, "--ffn-hidden-size") : default_ffn;
  if (c.ffn_hidden_size == 0) {
    throw_error("[--hidden-size] ", c.hidden_size, " is too small for --swiglu's default --ffn-hidden-size ",
                "(int(8h/3/64)*64 = 0): give --ffn-hidden-size");
  }
  const std::string norm = a.get_string("--normalization");
  if (norm == "LayerNorm")
    c.normalization = model::Normalization::kLayerNorm;
  else if (norm == "RMSNorm")
    c.normalization = model::Normalization::kRMSNorm;
  else
    throw_error("[--normalization] invalid choice '", norm, "' (choose from LayerNorm, RMSNorm)");
  c.max_position_embeddings =
      a.given("--max-position-embeddings") ? positive(a, "--max-position-embeddings") : c.seq_length;
  if (c.seq_length > c.max_position_embeddings) {
    throw_error("[--seq-length] ", c.seq_length, " is larger than --max-position-embeddings ",
                c.max_position_embeddings);
  }
  c.vocab_size = positive(a, "--vocab-size");
  m.make_vocab_size_divisible_by = positive(a, "--make-vocab-size-divisible-by");
  c.untie_embeddings_and_output_weights = a.get_flag("--untie-embeddings-and-output-weights");
  // Llama's terms, as train takes them: grouped-query attention (the QKV GEMM's width, the K/V
  // activations and grads in memory), rotary embeddings (no position table; a rotation of q, k).
  if (a.get_flag("--group-query-attention")) {
    c.num_query_groups = positive(a, "--num-query-groups");
    if (c.num_attention_heads % c.num_query_groups != 0) {
      throw_error("[--num-query-groups] ", c.num_query_groups, " does not divide --num-attention-heads ",
                  c.num_attention_heads);
    }
  } else if (a.given("--num-query-groups")) {
    throw_error("[--num-query-groups] needs --group-query-attention");
  }
  const std::string pos = a.get_string("--position-embedding-type");
  if (pos == "learned_absolute")
    c.position_embedding = model::PositionEmbedding::kLearnedAbsolute;
  else if (pos == "rope")
    c.position_embedding = model::PositionEmbedding::kRope;
  else if (pos == "none")
    c.position_embedding = model::PositionEmbedding::kNone;
  else
    throw_error("[--position-embedding-type] invalid choice '", pos, "' (choose from learned_absolute, rope, none)");
  c.add_bias_linear = !a.get_flag("--disable-bias-linear");
  if (a.get_flag("--fp16") && a.get_flag("--bf16")) throw_error("[--fp16/--bf16] give at most one of them");
  m.dtype = a.get_flag("--fp16") ? DType::kF16 : DType::kBF16;
  c.fp8 = parse_fp8(a);
  return m;
}

plan::Cluster parse_cluster(const Args& a, const plan::PlanModel& m) {
  if (!a.given("--gpu")) throw_error("[--gpu] is required (", plan::gpu_names(), ")");
  plan::Cluster cl;
  cl.gpu = plan::find_gpu(a.get_string("--gpu"));
  if (m.dtype == DType::kBF16 && !cl.gpu.bf16) {
    throw_error("[--gpu] ", cl.gpu.name, " has no bf16 tensor cores; plan with --fp16");
  }
  if (m.config.fp8 && cl.gpu.fp8_tflops <= 0) {
    throw_error("[--fp8-format] ", cl.gpu.name, " has no FP8 tensor cores (FP8 needs Hopper: h100-80gb, h200-141gb)");
  }
  cl.gpus_per_node = a.get_int("--gpus-per-node", 1, kMaxPlanGpus);
  cl.nodes = a.get_int("--nodes", 1, kMaxPlanGpus);
  if (cl.world() > kMaxPlanGpus) {
    throw_error("[--nodes] ", cl.nodes, " nodes x ", cl.gpus_per_node, " GPUs (--gpus-per-node) is more than ",
                kMaxPlanGpus, " GPUs");
  }
  // As `megatron train` would run in this environment (parallel/data_parallel_setup.h).
  cl.dp_copy_engine = parallel::copy_engine_planned();
  if (a.given("--intra-node-bandwidth")) {
    cl.intra_node_bytes_per_s = positive_double(a, "--intra-node-bandwidth", kMaxBandwidthGBs) * 1e9;
  }
  if (a.given("--inter-node-bandwidth")) {
    cl.inter_node_bytes_per_s = positive_double(a, "--inter-node-bandwidth", kMaxBandwidthGBs) * 1e9;
  }
  if (a.get_flag("--no-overlap")) {
    cl.overlap_grad_reduce = false;
    cl.overlap_param_gather = false;
  }
  cl.engine = plan::find_engine(a.get_string("--engine"));
  if (!cl.engine.overlap_grad_reduce) {  // the engine's DDP had no overlap (megatron-2021)
    cl.overlap_grad_reduce = false;
    cl.overlap_param_gather = false;
  }
  if (a.given("--attention-backend")) {
    const std::string b = a.get_string("--attention-backend");
    if (b == "flash")
      cl.engine.attention = plan::AttentionBackend::kFlash;
    else if (b == "local")
      cl.engine.attention = plan::AttentionBackend::kLocal;
    else
      throw_error("[--attention-backend] invalid choice '", b, "' (choose from flash, local)");
  }
  // Megatron's defaults (--attention-dropout 0.1, --hidden-dropout 0.1), as `megatron train`
  // runs without the flags, so that both price the same step (cli/train_prediction.cpp).
  cl.engine.attention_dropout = kMegatronDefaultDropout;
  cl.engine.hidden_dropout = kMegatronDefaultDropout;
  if (a.given("--attention-dropout")) {
    const double p = a.get_double("--attention-dropout");
    if (!(p >= 0.0 && p < 1.0))
      throw_error("[--attention-dropout] must be in [0, 1), got ", a.get_string("--attention-dropout"));
    cl.engine.attention_dropout = p;
  }
  if (a.given("--hidden-dropout")) {
    const double p = a.get_double("--hidden-dropout");
    if (!(p >= 0.0 && p < 1.0))
      throw_error("[--hidden-dropout] must be in [0, 1), got ", a.get_string("--hidden-dropout"));
    cl.engine.hidden_dropout = p;
  }
  if (a.get_flag("--tp-comm-overlap")) cl.engine.tp_comm_overlap = true;
  // Documents: our engine reads their bias on cuDNN (priced), and holds it and the key starts
  // (planned); another --engine profile's flash attention ignores the mask (Megatron's TE path).
  const bool documents = a.get_flag("--reset-attention-mask");
  if (documents && a.get_string("--engine") == "ours") cl.engine.document_bias = true;
  if (a.get_flag("--grad-reduce-in-bf16")) cl.engine.grad_reduce_bytes = 2;
  return cl;
}

void parse_nodes_range(const Args& a, PlanRequest& q) {
  const std::string r = a.get_string("--nodes-range");
  const size_t dots = r.find("..");
  if (dots == std::string::npos) throw_error("[--nodes-range] expected a..b, got '", r, "'");
  q.first_nodes = parse_int(r.substr(0, dots), "--nodes-range");
  q.last_nodes = parse_int(r.substr(dots + 2), "--nodes-range");
  if (q.first_nodes < 1 || q.last_nodes < q.first_nodes) {
    throw_error("[--nodes-range] expected 1 <= a <= b, got '", r, "'");
  }
  if (q.last_nodes > kMaxPlanGpus / q.cluster.gpus_per_node) {
    throw_error("[--nodes-range] ", q.last_nodes, " nodes x ", q.cluster.gpus_per_node,
                " GPUs (--gpus-per-node) is more than ", kMaxPlanGpus, " GPUs");
  }
  if (!a.given("--target-report-time")) throw_error("[--nodes-range] needs --target-report-time");
  if (a.given("--nodes")) throw_error("[--nodes-range] give --nodes or --nodes-range, not both");
  q.target_report_time_s = positive_double(a, "--target-report-time");
  q.node_search = true;
}

}  // namespace

void declare_plan_flags(Args& a) {
  a.option("--model", "NAME", "shape preset (" + preset_list() + "); explicit flags override it")
      .option("--num-layers", "L", "transformer layers")
      .option("--hidden-size", "H", "hidden size")
      .option("--num-attention-heads", "N", "attention heads")
      .option("--seq-length", "S", "tokens per sample")
      .option("--ffn-hidden-size", "F", "MLP hidden size (default 4 * hidden; with --swiglu int(8h/3/64)*64)")
      .option("--kv-channels", "D", "head size (default hidden / heads)")
      .option("--max-position-embeddings", "P", "learned positions (default: --seq-length)")
      .option("--vocab-size", "V", "tokenizer vocabulary before padding (GPT-2: 50257)", "50257")
      .option("--make-vocab-size-divisible-by", "N", "pad the vocabulary to a multiple of N * TP", "128")
      .flag("--untie-embeddings-and-output-weights", "separate output layer weights")
      .flag("--disable-bias-linear", "no biases in the linear layers")
      .flag("--group-query-attention", "grouped-query attention (with --num-query-groups)")
      .option("--num-query-groups", "G", "key/value heads with --group-query-attention", "1")
      .option("--position-embedding-type", "T", "learned_absolute, rope or none", "learned_absolute")
      .flag("--swiglu", "SwiGLU MLP: linear_fc1 gives gate and up halves, silu(gate) * up replaces GELU")
      .option("--normalization", "NAME", "LayerNorm or RMSNorm", "LayerNorm")
      .flag("--bf16", "bf16 parameters, fp32 main weights (the default)")
      .flag("--fp16", "fp16 parameters, fp32 main weights")
      .option("--fp8-format", "e4m3|hybrid",
              "FP8 GEMMs for the transformer layers' linears (QKV, projection, FC1, FC2), as train: priced at the "
              "GPU's FP8 peak with the quantize passes, the FP8 buffers in memory; refused on the NLP benchmark's "
              "presets (gpt3-175b, gpt3-13b), whose rules forbid reduced precision")
      .option("--fp8-recipe", "R", "tensorwise or delayed (its amax history in memory)", "delayed")
      .option("--fp8-amax-history-len", "L", "delayed: amaxes kept per tensor", "1");
  a.option("--gpu", "NAME", "GPU kind (" + plan::gpu_names() + ")")
      .option("--gpus-per-node", "G", "GPUs per node", "8")
      .option("--nodes", "N", "nodes", "1")
      .option("--nodes-range", "A..B", "find the smallest node count in A..B meeting --target-report-time")
      .option("--target-report-time", "S", "report time to reach, seconds (20e6 tokens / tokens per second)")
      .option("--intra-node-bandwidth", "GB/s", "NVLink bandwidth per GPU, one direction (default: the GPU's)")
      .option("--inter-node-bandwidth", "GB/s", "network bandwidth per GPU, one direction (default: the GPU's DGX)")
      .flag("--no-overlap", "no overlap of gradient reduction / parameter gather with compute")
      .option("--engine", "NAME", "software profile (" + plan::engine_names() + "; plan/engine_profile.h)", "ours")
      .option("--attention-backend", "B", "flash or local (materialised scores); default: the engine's")
      .option("--attention-dropout", "P", "attention dropout (Megatron's default)", "0.1")
      .option("--hidden-dropout", "P", "dropout on the residual branches (Megatron's default)", "0.1")
      .flag("--tp-comm-overlap", "TP collectives pipelined with the GEMMs (needs --sequence-parallel)")
      .flag("--reset-attention-mask", "attention within documents (cuDNN reads a bias of the documents)")
      .flag("--grad-reduce-in-bf16", "reduce gradients in 16 bits instead of fp32");
  a.option("--global-batch-size", "B", "samples per iteration", std::to_string(kDefaultPlanGlobalBatch))
      .option("--tensor-model-parallel-size", "N", "fix TP (searched otherwise)")
      .option("--pipeline-model-parallel-size", "N", "fix PP (searched otherwise)")
      .option("--num-layers-per-virtual-pipeline-stage", "N", "fix the interleaved schedule's chunk size")
      .option("--micro-batch-size", "N", "fix the micro-batch (searched otherwise: 1, 2, 4, 8)")
      .option("--recompute-granularity", "G", "full or selective (fixes recompute; searched otherwise)")
      .flag("--recompute-activations", "shorthand for --recompute-granularity selective")
      .flag("--use-distributed-optimizer", "fix the distributed optimizer on (searched otherwise)")
      .flag("--sequence-parallel", "fix sequence parallelism on (searched otherwise)")
      .option("--top", "N", "layouts shown (0: all)", "10")
      .flag("--json", "print JSON instead of the table");
}

PlanRequest parse_plan_request(const Args& a) {
  PlanRequest q;
  q.model = parse_model(a);
  q.cluster = parse_cluster(a, q.model);
  // The dropouts priced (the engine's, or the flags') are the model's too (memory plan).
  q.model.config.attention_dropout = static_cast<float>(q.cluster.engine.attention_dropout);
  q.model.config.reset_attention_mask = q.cluster.engine.document_bias;
  q.model.config.hidden_dropout = static_cast<float>(q.cluster.engine.hidden_dropout);
  q.space.global_batch = positive(a, "--global-batch-size");
  const model::GPTConfig& c = q.model.config;
  if (a.given("--tensor-model-parallel-size")) q.space.tp = positive(a, "--tensor-model-parallel-size");
  if (a.given("--pipeline-model-parallel-size")) q.space.pp = positive(a, "--pipeline-model-parallel-size");
  if (a.given("--micro-batch-size")) q.space.micro_batch = positive(a, "--micro-batch-size");
  if (a.given("--num-layers-per-virtual-pipeline-stage")) {
    const int64_t per_chunk = positive(a, "--num-layers-per-virtual-pipeline-stage");
    if (!q.space.pp) throw_error("[--num-layers-per-virtual-pipeline-stage] needs --pipeline-model-parallel-size");
    const int64_t per_stage = c.num_layers / *q.space.pp;
    if (c.num_layers % *q.space.pp != 0 || per_stage % per_chunk != 0) {
      throw_error("[--num-layers-per-virtual-pipeline-stage] ", per_chunk, " does not divide the layers per stage (",
                  c.num_layers, " / ", *q.space.pp, ")");
    }
    q.space.vp = per_stage / per_chunk;
  }
  if (a.given("--recompute-granularity")) {
    const std::string g = a.get_string("--recompute-granularity");
    if (g == "full")
      q.space.recompute = plan::PlanRecompute::kFull;
    else if (g == "selective")
      q.space.recompute = plan::PlanRecompute::kSelective;
    else
      throw_error("[--recompute-granularity] invalid choice '", g, "' (choose from full, selective)");
  }
  if (a.get_flag("--recompute-activations")) q.space.recompute = plan::PlanRecompute::kSelective;
  if (a.get_flag("--use-distributed-optimizer")) q.space.distributed_optimizer = true;
  if (a.get_flag("--sequence-parallel")) q.space.sequence_parallel = true;
  if (a.given("--nodes-range")) parse_nodes_range(a, q);
  if (!q.node_search && a.given("--target-report-time")) {
    throw_error("[--target-report-time] needs --nodes-range a..b");
  }

  q.single = q.space.tp && q.space.pp && q.space.micro_batch && !q.node_search;
  if (q.single) {
    plan::ParallelConfig& p = q.single_layout;
    p.tp = *q.space.tp;
    p.pp = *q.space.pp;
    p.vp = q.space.vp.value_or(1);
    p.micro_batch = *q.space.micro_batch;
    p.global_batch = q.space.global_batch;
    const int64_t world = q.cluster.world();
    if (world % (p.tp * p.pp) != 0) {
      throw_error("[--tensor-model-parallel-size] ", world, " GPUs (", q.cluster.nodes, " nodes x ",
                  q.cluster.gpus_per_node, ") are not divisible by tensor (", p.tp, ") x pipeline (", p.pp,
                  ") parallel size");
    }
    p.dp = world / (p.tp * p.pp);
    p.recompute = q.space.recompute.value_or(plan::PlanRecompute::kNone);
    p.distributed_optimizer = q.space.distributed_optimizer.value_or(false);
    // Megatron turns sequence parallelism off at TP 1.
    p.sequence_parallel = q.space.sequence_parallel.value_or(false) && p.tp > 1;
  }
  return q;
}

}  // namespace megatron::cli
