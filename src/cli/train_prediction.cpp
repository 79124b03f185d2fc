#include "cli/train_prediction.h"

#include <cstdio>

#include "core/error.h"
#include "parallel/data_parallel_setup.h"
#include "plan/search.h"

namespace megatron::cli {

namespace {
std::string fmt_1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}
}  // namespace

SpeedPrediction predict_speed(const train::TrainConfig& c, const plan::GpuSpec& gpu, int64_t gpus_per_node) {
  // What the planner does not model gets a reason instead of a wrong number.
  auto none = [&](const std::string& why) {
    return SpeedPrediction{str_cat(" > no prediction by megatron plan for ", gpu.name, ": ", why, "\n"), 0.0};
  };
  if (!c.bf16 && !c.fp16) return none("it models bf16 and fp16 training (this run is fp32)");
  if (c.model.fp8 && gpu.fp8_tflops <= 0) return none("the GPU has no FP8 tensor cores (this run has --fp8-format)");
  if (c.recompute_granularity == train::RecomputeGranularity::kFull &&
      c.recompute_method == train::RecomputeMethod::kBlock &&
      c.recompute_num_layers.value_or(0) * c.pipeline_model_parallel_size < c.model.num_layers) {
    return none(
        "it recomputes every layer under full recompute (this run's --recompute-method block recomputes "
        "fewer)");
  }
  if (c.world_size % gpus_per_node != 0) gpus_per_node = c.world_size;  // ranks per node unknown: one node
  plan::PlanModel m;
  m.config = c.model;
  m.make_vocab_size_divisible_by = c.make_vocab_size_divisible_by;
  m.dtype = train::model_dtype(c);
  plan::ParallelConfig p;
  p.tp = c.tensor_model_parallel_size;
  p.pp = c.pipeline_model_parallel_size;
  p.vp = c.virtual_pipeline_chunks();
  p.dp = c.data_parallel_size;
  p.micro_batch = c.micro_batch_size;
  p.global_batch = c.global_batch_size;
  p.recompute = c.recompute_granularity == train::RecomputeGranularity::kFull        ? plan::PlanRecompute::kFull
                : c.recompute_granularity == train::RecomputeGranularity::kSelective ? plan::PlanRecompute::kSelective
                                                                                     : plan::PlanRecompute::kNone;
  p.distributed_optimizer = c.use_distributed_optimizer;
  p.sequence_parallel = c.sequence_parallel;
  p.overlap_p2p = c.overlap_p2p_communication;
  plan::Cluster cluster;
  cluster.gpu = gpu;
  cluster.gpus_per_node = gpus_per_node;
  cluster.nodes = c.world_size / gpus_per_node;
  cluster.overlap_grad_reduce = c.overlap_grad_reduce;
  cluster.overlap_param_gather = c.overlap_param_gather;
  cluster.dp_copy_engine = parallel::copy_engine_planned();
  cluster.engine.attention_dropout = c.model.attention_dropout;
  cluster.engine.hidden_dropout = c.model.hidden_dropout;
  cluster.engine.document_bias = c.model.reset_attention_mask;
  const plan::Candidate k = plan::evaluate_layout(m, cluster, p);
  const plan::Prediction& q = k.prediction;
  // TFLOP/s in Megatron's 2024 convention, as `megatron plan` prints them, and in the run's own
  // (--flops-convention, what its log lines print) where that is another.
  const std::string tflops =
      c.flops_convention == train::FlopsConvention::k2025
          ? str_cat(fmt_1(q.tflops_per_gpu_2024), " TFLOP/s/GPU (Megatron 2024 convention, as megatron plan; ",
                    fmt_1(q.tflops_per_gpu_2025), " in this run's 2025 convention)")
          : str_cat(fmt_1(q.tflops_per_gpu_2024), " TFLOP/s/GPU (Megatron 2024 convention, as megatron plan)");
  const double gib = 1024.0 * 1024.0 * 1024.0;
  char buf[500];
  std::snprintf(
      buf, sizeof(buf),
      " > predicted by megatron plan for %s (%lld node(s) x %lld GPU(s)): %.1f ms per iteration, %.0f tokens/s, "
      "%s, report time %.1f s; %s (%.1f of %.1f GiB per GPU)\n",
      gpu.name, static_cast<long long>(cluster.nodes), static_cast<long long>(gpus_per_node),
      q.seconds_per_iteration * 1e3, q.tokens_per_s, tflops.c_str(), q.report_time_s, k.fits ? "fits" : "does NOT fit",
      static_cast<double>(k.memory.worst.total()) / gib, k.capacity_bytes / gib);
  std::string line = buf;
  if (c.rampup_batch_size) {
    line.insert(line.size() - 1, " (at the global batch after --rampup-batch-size; no comparison at the end)");
    return {line, 0.0};
  }
  return {line, q.seconds_per_iteration * 1e3};
}

}  // namespace megatron::cli
