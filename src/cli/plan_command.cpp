// megatron plan: which (TP, PP, virtual PP, DP, micro-batch, recompute, distributed optimizer,
// sequence parallel) layouts of a GPT fit on a cluster, and how fast each would train
// (src/plan/: the memory and throughput models, their constants and sources).
//
//   megatron plan --model gpt3-175b --gpu h100-80gb --gpus-per-node 8 --nodes 16 --global-batch-size 1536
//   megatron plan --model gpt3-175b --gpu a100-80gb --nodes-range 1..64 --target-report-time 560
//   megatron plan --num-layers 40 --hidden-size 5120 --num-attention-heads 32 --seq-length 2048
//       --gpu h100-80gb --nodes 2 --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2
//       --micro-batch-size 1 --global-batch-size 512 --json
// With --tensor-model-parallel-size, --pipeline-model-parallel-size and --micro-batch-size all
// given, exactly that layout is evaluated (Megatron's meaning for the absent switches: no
// distributed optimizer, no SP, no recompute); otherwise the given flags fix those knobs and
// the rest are searched.
#include <cstdio>
#include <iostream>
#include <string>

#include "backend/fp8_recipe.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/plan_args.h"
#include "core/error.h"
#include "core/json_writer.h"
#include "plan/search.h"

namespace megatron::cli {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string table_header() {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%4s %4s %4s %5s %4s %6s %-9s %-4s %-3s %10s %-4s %12s %8s %9s %7s\n", "TP", "PP",
                "VP", "DP", "MBS", "GBS", "recompute", "dopt", "SP", "mem/GPU", "fits", "tokens/s", "TFLOP/s",
                "report s", "bubble");
  return buf;
}

std::string table_row(const plan::Candidate& k) {
  const plan::ParallelConfig& p = k.parallel;
  const plan::Prediction& r = k.prediction;
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "%4lld %4lld %4lld %5lld %4lld %6lld %-9s %-4s %-3s %6.2f GiB %-4s %12.0f %8.1f %9.1f %6.1f%%\n",
                static_cast<long long>(p.tp), static_cast<long long>(p.pp), static_cast<long long>(p.vp),
                static_cast<long long>(p.dp), static_cast<long long>(p.micro_batch),
                static_cast<long long>(p.global_batch), plan::recompute_name(p.recompute),
                p.distributed_optimizer ? "yes" : "no", p.sequence_parallel ? "yes" : "no",
                static_cast<double>(k.memory.worst.total()) / kGiB, k.fits ? "yes" : "NO", r.tokens_per_s,
                r.tflops_per_gpu_2024, r.report_time_s, 100.0 * r.bubble_s / r.seconds_per_iteration);
  return buf;
}

void write_candidate(JsonWriter& w, const plan::Candidate& k) {
  const plan::ParallelConfig& p = k.parallel;
  const plan::Prediction& r = k.prediction;
  const model::MemoryPlan& m = k.memory.worst;
  w.begin_object();
  w.key("tensor_model_parallel_size").value(p.tp);
  w.key("pipeline_model_parallel_size").value(p.pp);
  w.key("virtual_pipeline_stages").value(p.vp);
  w.key("data_parallel_size").value(p.dp);
  w.key("micro_batch_size").value(p.micro_batch);
  w.key("global_batch_size").value(p.global_batch);
  w.key("num_micro_batches").value(p.num_micro_batches());
  w.key("recompute").value(plan::recompute_name(p.recompute));
  w.key("use_distributed_optimizer").value(p.distributed_optimizer);
  w.key("sequence_parallel").value(p.sequence_parallel);
  w.key("dp_copy_engine").value(p.dp_copy_engine);
  w.key("memory_per_gpu_bytes").value(m.total());
  w.key("memory_worst_stage").value(k.memory.worst_stage);
  w.key("memory").begin_object();
  w.key("parameters").value(m.parameters);
  w.key("main_parameters").value(m.main_parameters);
  w.key("gradients").value(m.gradients);
  w.key("optimizer").value(m.optimizer);
  w.key("activations").value(m.activations);
  w.key("workspace").value(m.workspace);
  w.key("nccl").value(m.nccl);
  w.key("copy_engine").value(m.copy_engine);
  w.key("fp8").value(m.fp8);
  w.key("num_parameters").value(m.num_parameters);
  w.end_object();
  w.key("capacity_bytes").value(k.capacity_bytes);
  w.key("fits").value(k.fits);
  w.key("seconds_per_iteration").value(r.seconds_per_iteration);
  w.key("tokens_per_s").value(r.tokens_per_s);
  w.key("tflops_per_gpu_2024").value(r.tflops_per_gpu_2024);
  w.key("tflops_per_gpu_2025").value(r.tflops_per_gpu_2025);
  w.key("report_time_s").value(r.report_time_s);
  w.key("breakdown_s").begin_object();
  w.key("compute").value(r.compute_s);
  w.key("compute_gemm").value(r.gemm_s);
  w.key("compute_attention").value(r.attention_s);
  w.key("compute_memory_bound").value(r.memory_bound_s);
  w.key("compute_fp8_quantize").value(r.fp8_quantize_s);
  w.key("tp_comm").value(r.tp_comm_s);
  w.key("pp_comm").value(r.pp_comm_s);
  w.key("bubble").value(r.bubble_s);
  w.key("dp_comm").value(r.dp_comm_s);
  w.key("optimizer").value(r.optimizer_s);
  w.end_object();
  w.end_object();
}

void write_header(JsonWriter& w, const PlanRequest& q) {
  const model::GPTConfig& c = q.model.config;
  w.key("model").begin_object();
  w.key("num_layers").value(c.num_layers);
  w.key("hidden_size").value(c.hidden_size);
  w.key("num_attention_heads").value(c.num_attention_heads);
  w.key("seq_length").value(c.seq_length);
  w.key("ffn_hidden_size").value(c.ffn_hidden_size);
  w.key("vocab_size").value(c.vocab_size);
  w.key("dtype").value(std::string(dtype_name(q.model.dtype)));
  w.key("fp8");
  if (c.fp8) {
    w.begin_object();
    w.key("format").value(std::string(backend::fp8_mix_name(c.fp8->format)));
    w.key("recipe").value(std::string(backend::fp8_recipe_name(c.fp8->recipe)));
    w.key("amax_history_len").value(c.fp8->amax_history_len);
    w.end_object();
  } else {
    w.null();
  }
  w.key("num_parameters").value(plan::stage_num_parameters(plan::config_for_tp(q.model, 1), plan::ParallelConfig{}, 0));
  w.end_object();
  w.key("cluster").begin_object();
  w.key("gpu").value(q.cluster.gpu.name);
  w.key("gpus_per_node").value(q.cluster.gpus_per_node);
  w.key("nodes").value(q.cluster.nodes);
  w.key("intra_node_bytes_per_s")
      .value(q.cluster.intra_node_bytes_per_s > 0 ? q.cluster.intra_node_bytes_per_s
                                                  : q.cluster.gpu.nvlink_bytes_per_s);
  w.key("inter_node_bytes_per_s")
      .value(q.cluster.inter_node_bytes_per_s > 0 ? q.cluster.inter_node_bytes_per_s : q.cluster.gpu.ib_bytes_per_s);
  w.key("dp_copy_engine").value(q.cluster.dp_copy_engine);  // MEGATRON_DP_COPY_ENGINE=1
  w.end_object();
  const plan::Engine& e = q.cluster.engine;
  w.key("engine").begin_object();
  w.key("attention_backend").value(plan::attention_backend_name(e.attention));
  w.key("attention_dropout").value(e.attention_dropout);
  w.key("grad_reduce_bytes").value(e.grad_reduce_bytes);
  w.key("gelu_in_gemm_epilogue").value(e.gelu_in_gemm_epilogue);
  w.key("async_tp_allreduce").value(e.async_tp_allreduce);
  w.key("tp_comm_overlap").value(e.tp_comm_overlap);
  w.key("fused_cross_entropy").value(e.fused_cross_entropy);
  w.key("gemm_efficiency").value(e.gemm_efficiency);  // 0: the GPU's (gpu_spec.h)
  w.key("hidden_dropout").value(e.hidden_dropout);
  w.key("document_bias").value(e.document_bias);
  w.key("linear_bias_in_epilogue").value(e.linear_bias_in_epilogue);
  w.key("residual_add_in_gemm_epilogue").value(e.residual_add_in_gemm_epilogue);
  w.key("residual_grad_add_in_layernorm").value(e.residual_grad_add_in_layernorm);
  w.key("wgrad_accumulation_bytes").value(e.wgrad_accumulation_bytes);
  w.key("optimizer_bytes").value(e.optimizer_bytes);  // 0: ours (measured constants)
  w.end_object();
}

// Notes for a layout whose TP or DP groups cross nodes (why it is slower than on one node).
std::string span_notes(const plan::ParallelConfig& p, int64_t G) {
  std::string out;
  if (p.tp > 1 && !plan::blocks_within_nodes(p.tp, G) && p.tp < G) {
    out += str_cat(" > note: TP ", p.tp, " does not divide ", G,
                   " GPUs per node, so some TP groups span two nodes and their collectives run over the network "
                   "(priced so above)\n");
  } else if (p.tp > G) {
    out += str_cat(" > note: TP ", p.tp, " spans ", plan::most_nodes_of_a_group(p.tp, 1, G), " nodes of ", G,
                   " GPUs, so its TP groups span nodes and their collectives cross the network on the NICs of ",
                   plan::fewest_group_members_on_a_node(p.tp, 1, G), " GPUs per node (priced so above)\n");
  }
  if (p.dp > 1 && p.tp * p.dp < G && !plan::blocks_within_nodes(p.tp * p.dp, G)) {
    out += str_cat(" > note: TP x DP = ", p.tp * p.dp, " does not divide ", G,
                   " GPUs per node, so some DP groups span two nodes and reduce over the network (priced so above)\n");
  }
  return out;
}

// ", FP8 linears (hybrid, delayed)" with --fp8-format, else nothing.
std::string precision_note(const model::GPTConfig& c) {
  if (!c.fp8) return "";
  return str_cat(" with FP8 linears (", backend::fp8_mix_name(c.fp8->format), ", ",
                 backend::fp8_recipe_name(c.fp8->recipe), ")");
}

std::string header_text(const PlanRequest& q) {
  const model::GPTConfig& c = q.model.config;
  const int64_t P = plan::stage_num_parameters(plan::config_for_tp(q.model, 1), plan::ParallelConfig{}, 0);
  return str_cat(" > plan: ", c.num_layers, " layers, hidden ", c.hidden_size, ", ", c.num_attention_heads,
                 " heads, seq ", c.seq_length, ", ", fmt("%.2f", static_cast<double>(P) / 1e9), "B parameters, ",
                 dtype_name(q.model.dtype), precision_note(c), "; ", q.cluster.gpu.name, ", ", q.cluster.gpus_per_node,
                 " GPUs/node; ", plan::attention_backend_name(q.cluster.engine.attention), " attention\n",
                 q.cluster.dp_copy_engine ? " > MEGATRON_DP_COPY_ENGINE=1: layouts with the distributed optimizer and "
                                            "their data-parallel groups inside a node use the copy engines\n"
                                          : "");
}

int run_node_search(const PlanRequest& q, bool json) {
  const plan::NodeSearch r =
      plan::smallest_node_count(q.model, q.cluster, q.space, q.first_nodes, q.last_nodes, q.target_report_time_s);
  if (json) {
    JsonWriter w(2);
    w.begin_object();
    write_header(w, q);
    w.key("target_report_time_s").value(q.target_report_time_s);
    w.key("smallest_nodes");
    if (r.nodes)
      w.value(*r.nodes);
    else
      w.null();
    w.key("steps").begin_array();
    for (const plan::NodeSearchStep& s : r.steps) {
      w.begin_object();
      w.key("nodes").value(s.nodes);
      w.key("best");
      if (s.best)
        write_candidate(w, *s.best);
      else
        w.null();
      if (!s.best) w.key("why_none").value(s.why_none);
      w.end_object();
    }
    w.end_array();
    w.end_object();
    std::cout << w.take() << "\n";
    return 0;
  }
  std::cout << header_text(q) << " > smallest node count in " << q.first_nodes << ".." << q.last_nodes
            << " with report time <= " << q.target_report_time_s << " s (fastest fitting layout per node count):\n";
  std::cout << str_cat("  nodes ") << table_header();
  for (const plan::NodeSearchStep& s : r.steps) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "  %5lld ", static_cast<long long>(s.nodes));
    std::cout << buf << (s.best ? table_row(*s.best) : str_cat("  no layout fits: ", s.why_none, "\n"));
  }
  std::cout << "    TFLOP/s per GPU: Megatron 2024 convention; report time = 20e6 / tokens/s\n";
  if (r.nodes) {
    std::cout << " > answer: " << *r.nodes << " nodes (" << *r.nodes * q.cluster.gpus_per_node << " GPUs)\n";
    std::cout << span_notes(r.steps.back().best->parallel, q.cluster.gpus_per_node);
  } else {
    std::cout << " > answer: no node count in " << q.first_nodes << ".." << q.last_nodes << " reaches "
              << q.target_report_time_s << " s\n";
  }
  return 0;
}

}  // namespace

int run_plan(const CommandArgs& argv) {
  Args args("plan", "memory and throughput model: which (TP, PP, DP, micro-batch, recompute) fits and wins");
  declare_plan_flags(args);
  if (!args.parse(argv)) {
    std::cout << args.usage();
    return 0;
  }
  const PlanRequest q = parse_plan_request(args);
  const bool json = args.get_flag("--json");
  if (q.node_search) return run_node_search(q, json);

  std::vector<plan::Candidate> rows;
  if (q.single) {
    rows.push_back(plan::evaluate_layout(q.model, q.cluster, q.single_layout));
  } else {
    rows = plan::enumerate_layouts(q.model, q.cluster, q.space);
    if (rows.empty()) throw_error("[--global-batch-size] ", plan::no_layout_reason(q.model, q.cluster, q.space, rows));
  }
  int64_t fitting = 0;
  for (const plan::Candidate& k : rows) fitting += k.fits ? 1 : 0;
  const int64_t top = args.get_int("--top");
  const size_t shown = q.single || top <= 0 ? rows.size() : std::min(rows.size(), static_cast<size_t>(top));
  if (json) {
    JsonWriter w(2);
    w.begin_object();
    write_header(w, q);
    w.key("layouts_evaluated").value(static_cast<int64_t>(rows.size()));
    w.key("layouts_fitting").value(fitting);
    w.key("layouts").begin_array();
    for (size_t i = 0; i < shown; ++i) write_candidate(w, rows[i]);
    w.end_array();
    w.end_object();
    std::cout << w.take() << "\n";
    return 0;
  }
  std::cout << header_text(q) << " > " << q.cluster.nodes << " nodes = " << q.cluster.world() << " GPUs; "
            << rows.size() << " layout(s) evaluated, " << fitting << " fit in "
            << fmt("%.1f", rows.front().capacity_bytes / kGiB) << " GiB (GPU memory minus "
            << fmt("%.0f", plan::kReservedBytes / kGiB) << " GiB reserve)"
            << (shown < rows.size() ? str_cat("; the ", shown, " best:") : std::string(":")) << "\n";
  std::cout << table_header();
  for (size_t i = 0; i < shown; ++i) std::cout << table_row(rows[i]);
  std::cout << "    TFLOP/s per GPU: Megatron 2024 convention; report time = 20e6 / tokens/s; memory = the worst "
               "pipeline stage\n";
  // The layout the user chose, or the fastest fitting one: where its groups cross nodes.
  if (q.single || rows.front().fits) std::cout << span_notes(rows.front().parallel, q.cluster.gpus_per_node);
  return 0;
}

}  // namespace megatron::cli
