#include "plan/throughput_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "parallel/grad_buckets.h"
#include "plan/comm_model.h"
#include "plan/memory_model.h"

namespace megatron::plan {

namespace {

constexpr double kH100Peak = 989.0;

struct Gpu {
  double flops;      // achievable dense FLOP/s ceiling = peak * gemm_efficiency
  double peak;       // FLOP/s
  double lost_work;  // w0, FLOPs
  double hbm;        // B/s
  double int_ops;    // 32-bit integer operations per second
  double sms;        // multiprocessors
};

Gpu gpu_rates(const GpuSpec& g, const Engine& engine) {
  const double ceiling = engine.gemm_efficiency > 0 ? engine.gemm_efficiency : kGemmCeilingShare * g.gemm_efficiency;
  return {g.peak_tflops * 1e12 * ceiling,
          g.peak_tflops * 1e12,
          kGemmLostWorkH100 * g.peak_tflops / kH100Peak,
          g.hbm_bytes_per_s,
          g.int32_tops * 1e12,
          static_cast<double>(g.sms)};
}

// The transformer layers' linear GEMMs under FP8 (GPTConfig::fp8): the GPU's FP8 peak
// (gpu_spec.h) at the 16-bit curve's ceiling share, with the same lost time per GEMM (w0 scaled
// with the rate). An assumption until an FP8 step is measured: cuBLASLt's FP8 GEMMs on Hopper
// reach about the same fraction of their peak as the bf16 ones.
Gpu fp8_gemm_rates(const GpuSpec& spec, const Gpu& g) {
  if (spec.fp8_tflops <= 0) {
    throw_error("[--fp8-format] ", spec.name, " has no FP8 tensor cores (FP8 needs Hopper: h100-80gb, h200-141gb)");
  }
  const double ratio = spec.fp8_tflops / spec.peak_tflops;
  Gpu f = g;
  f.flops = g.flops * ratio;
  f.peak = g.peak * ratio;
  f.lost_work = g.lost_work * ratio;
  return f;
}

// Forward + dgrad + wgrad of an M x N x K GEMM: 3 * (w + w0) / achievable.
double gemm3_seconds(double m, double n, double k, const Gpu& g) {
  const double w = 2.0 * m * n * k;
  return 3.0 * (w + g.lost_work) / g.flops;
}

// FP8: the bytes one linear [out, in] over n rows moves outside its GEMMs per micro-batch,
// forward and backward (backend/fp8_linear.h on backend/cuda/cuda_fp8.cu): each cast of a
// 16-bit (e-byte) operand reads it twice with the tensorwise recipe (its amax, then the cast)
// and once with the delayed one (the cast records the amax), and writes 1-byte codes: forward x,
// and w in both layouts (the backward reads the saved w^T), backward dy in both layouts (its
// bias gradient summed in the same pass) and x^T. The MLP's casts compute the GELU as they read:
// FC2's input from FC1's output (same bytes as the activation), its x^T codes written by the
// forward and kept (`x_kept`: no backward cast of x); FC1's output gradient from d(act) and the
// pre-activation (`dy_two`: two tensors read). {forward, forward + backward}.
struct Fp8LinearShape {
  double out = 0, in = 0;
  bool x_kept = false, dy_two = false;
};
std::pair<double, double> fp8_linear_bytes(double n, const Fp8LinearShape& l, double e, bool current) {
  const double reads = current ? 2.0 * e : e;
  const double forward = (reads + (l.x_kept ? 2.0 : 1.0)) * n * l.in + (reads + 2.0) * l.out * l.in;
  const double backward =
      (reads * (l.dy_two ? 2.0 : 1.0) + 2.0) * n * l.out + (l.x_kept ? 0.0 : (reads + 1.0) * n * l.in);
  return {forward, forward + backward};
}

struct LayerTimes {
  double gemm = 0, wgrad_overlap = 0, memory = 0, tp_allreduce = 0;
  double fp8_quantize = 0;          // the part of `memory` FP8's quantize passes take
  double fp8_quantize_forward = 0;  // of which the forward's (full recompute runs it again)
  double memory_forward = 0;        // the part of `memory` full recompute runs again
  double attention = 0;             // forward + backward
  double attention_forward = 0;     // what full recompute runs again
};

// Megatron's local core attention (see the header): E score elements of e bytes, head size d,
// C context elements ([b, a/t, s, d], permuted to [s, b, a/t * d] by a copy forward and back).
// Returns {forward, backward} seconds.
std::pair<double, double> local_attention_seconds(double E, double C, double d, double e, double dropout,
                                                  const Gpu& g) {
  const double stream = g.hbm * kStreamEfficiency;
  // One batched score GEMM: 2*E*d FLOPs (plus the per-GEMM lost work), E*e bytes of scores.
  const double bmm = std::max((2.0 * E * d + g.lost_work) / g.flops, E * e / stream);
  const double drop = dropout > 0 ? (2.0 * e + 1.0) * E / stream : 0.0;
  const double permute = 2.0 * C * e / stream;
  const double forward = 2.0 * bmm + 2.0 * E * e / stream + drop + permute;
  const double backward = 4.0 * bmm + 3.0 * E * e / stream + drop + permute;
  return {forward, backward};
}

// What a DP collective of `t` seconds started bucket by bucket beside `window` seconds of compute
// adds to the step: the last bucket (t / buckets) after the compute, what exceeds the window, and
// `contention` of the part that runs beside the compute (its GEMMs slow by that much).
double overlapped_seconds(double t, double window, double buckets, double contention) {
  const double tail = t / buckets, rest = t - tail;
  const double beside = std::min(rest, window);
  return tail + (rest - beside) + contention * beside;
}

// `linear`: the rates of the four linear GEMMs (g's, or fp8_gemm_rates' with FP8).
LayerTimes layer_times(const model::GPTConfig& c, DType dtype, const ParallelConfig& p, const Gpu& g, const Gpu& linear,
                       const Link& tp_link, const Engine& engine) {
  const bool fp8 = c.fp8.has_value();
  const double n = static_cast<double>(p.micro_batch * c.seq_length), h = static_cast<double>(c.hidden_size);
  const double q = static_cast<double>(c.num_attention_heads * c.kv_channels);
  const double f = static_cast<double>(c.ffn_hidden_size), t = static_cast<double>(p.tp);
  const double u = p.sequence_parallel ? t : 1.0, s = static_cast<double>(c.seq_length);
  const double d = static_cast<double>(c.kv_channels), e = static_cast<double>(dtype_size(dtype));
  // FC1's output width: f, or 2f with SwiGLU (gate and up halves, one GEMM of [n, h] x [h, 2f/t]).
  const double f1 = static_cast<double>(c.fc1_out_size());
  LayerTimes lt;
  const double qkv = gemm3_seconds(n, static_cast<double>(c.qkv_out_size()) / t, h, linear),
               fc1 = gemm3_seconds(n, f1 / t, h, linear);
  lt.gemm = qkv + gemm3_seconds(n, h, q / t, linear) + fc1 + gemm3_seconds(n, h, f / t, linear);
  // FP8's column-parallel backward runs dgrad and wgrad as one call and sums dX over TP after
  // it (model/layers/parallel_linear.cpp): nothing left for the all-reduce to overlap.
  lt.wgrad_overlap = fp8 ? 0.0 : (qkv + fc1) / 3.0;
  if (engine.attention == AttentionBackend::kLocal) {
    const double heads = static_cast<double>(c.num_attention_heads) / t;
    const auto [forward, backward] = local_attention_seconds(static_cast<double>(p.micro_batch) * heads * s * s,
                                                             n * q / t, d, e, engine.attention_dropout, g);
    lt.attention = forward + backward;
    lt.attention_forward = forward;
  } else {
    // A head of size d runs as the kernel's head size dk (flash_kernel_head_size): the work of
    // dk at dk's efficiency.
    const double dk = flash_kernel_head_size(d);
    const double attention_flops = 6.0 * static_cast<double>(p.micro_batch) * s * s * q / t * (dk / d);
    const double eff = kAttentionEfficiency * dk / (dk + 64.0) * s / (s + 512.0);
    lt.attention =
        attention_flops / (g.peak * eff) *
        flash_wave_factor(static_cast<double>(p.micro_batch) * static_cast<double>(c.num_attention_heads) / t, s,
                          static_cast<double>(g.sms));
    lt.attention_forward = lt.attention / 3.5;  // flash attention's backward is ~2.5x its forward
    if (engine.attention_dropout > 0) {
      // The mask is drawn inside the kernels, forward and again backward, for every causal score.
      const double drawn =
          static_cast<double>(p.micro_batch) * static_cast<double>(c.num_attention_heads) / t * s * (s + 1.0) / 2.0;
      const double forward = drawn * kFlashDropoutForwardOps / g.int_ops;
      lt.attention += forward + drawn * kFlashDropoutBackwardOps / g.int_ops;
      lt.attention_forward += forward;
      if (p.tp > 1 && engine.own_attention_for_tp_dropout) {
        lt.attention *= kOwnDropoutAttentionFactor;
        lt.attention_forward *= kOwnDropoutAttentionFactor;
      }
    }
    const bool own_kernels = engine.attention_dropout > 0 && p.tp > 1 && engine.own_attention_for_tp_dropout;
    if (engine.document_bias && !own_kernels) {
      // One pass: a 2-byte bias element per causal score of each (batch, head) of this rank.
      const double pass = static_cast<double>(p.micro_batch) * static_cast<double>(c.num_attention_heads) / t * s *
                          (s + 1.0) / 2.0 * 2.0 / g.hbm;
      lt.attention += (kDocumentBiasForwardPasses + kDocumentBiasBackwardPasses) * pass;
      lt.attention_forward += kDocumentBiasForwardPasses * pass;
    }
  }
  // LayerNorms (forward ~1/3 of it); the residual adds where the engine does not fuse them.
  // RMSNorm takes the same term: it moves the same [n, h] tensors (and one fp32 statistic per
  // row fewer, no bias gradient), so it costs slightly less; not measured apart.
  const double nh = n * h / u;
  lt.memory = kElementwiseBytes * nh / g.hbm;
  lt.memory_forward = lt.memory / 3.0;
  // (FP8's projection and FC2 add the residual in a bias-dropout-add after the GEMM.)
  if (!engine.residual_add_in_gemm_epilogue || p.tp > 1 || engine.hidden_dropout > 0 || fp8) {
    lt.memory += kBiasDropoutAddBytes * nh / g.hbm;  // forward only
    lt.memory_forward += kBiasDropoutAddBytes * nh / g.hbm;
  }
  if (!engine.residual_grad_add_in_layernorm) lt.memory += kResidualGradAddBytes * nh / g.hbm;  // backward only
  const double stream = g.hbm * kStreamEfficiency;
  if (c.swiglu) {
    // SwiGLU runs as its own kernels in every engine (no GEMM epilogue computes it; ours:
    // Backend::swiglu_forward / swiglu_backward), so FC1 is a plain GEMM and FC2's dgrad loses
    // the dGELU epilogue (its GEMM is priced the same). Forward reads [n, 2f/t] and writes
    // [n, f/t]; backward reads the output gradient and the saved [n, 2f/t], writes [n, 2f/t].
    lt.memory_forward += kSwigluForwardBytes * e * n * f / t / stream;
    lt.memory += (kSwigluForwardBytes + kSwigluBackwardBytes) * e * n * f / t / stream;
  } else if (!engine.gelu_in_gemm_epilogue && !fp8) {  // FP8: the GELU is computed inside the casts
    lt.memory_forward += 2.0 * e * n * f / t / stream;
    lt.memory += 5.0 * e * n * f / t / stream;
  }
  if (engine.hidden_dropout > 0) {  // two residual dropouts per layer on [n, h/u]
    lt.memory_forward += 2.0 * n * h / u / stream;
    lt.memory += 2.0 * (1.0 + 2.0 * e + 1.0) * n * h / u / stream;
  }
  if (c.rope()) {
    // Rotary embeddings on q and k (the query groups' keys): read and written once forward, and
    // the gradient once backward (its own kernel in every engine), at the streaming rate.
    const double qk = n * static_cast<double>((c.num_attention_heads + c.query_groups()) * c.kv_channels) / t;
    lt.memory_forward += kRopeBytes * e * qk / stream;
    lt.memory += 2.0 * kRopeBytes * e * qk / stream;
  }
  if (!engine.linear_bias_in_epilogue) {  // QKV `+= bias` after the GEMM
    lt.memory_forward += 2.0 * e * n * 3.0 * q / t / stream;
    lt.memory += 2.0 * e * n * 3.0 * q / t / stream;
  }
  if (fp8) {
    const bool current = c.fp8->recipe == backend::Fp8Recipe::kTensorwise, gelu = !c.swiglu;
    const Fp8LinearShape shapes[4] = {{static_cast<double>(c.qkv_out_size()) / t, h, false, false},
                                      {h, q / t, false, false},
                                      {f1 / t, h, false, gelu},
                                      {h, f / t, gelu, false}};
    double forward = 0, all = 0;
    for (const Fp8LinearShape& w : shapes) {
      const auto [fwd, both] = fp8_linear_bytes(n, w, e, current);
      forward += fwd;
      all += both;
    }
    lt.fp8_quantize = all / stream;
    lt.fp8_quantize_forward = forward / stream;
    lt.memory += all / stream;
    lt.memory_forward += forward / stream;
  }
  lt.tp_allreduce = all_reduce_seconds(n * h * e, p.tp, tp_link);
  return lt;
}

}  // namespace

double model_flops(const model::GPTConfig& c, int64_t global_batch, bool causal) {
  const double B = static_cast<double>(global_batch), s = static_cast<double>(c.seq_length);
  const double L = static_cast<double>(c.num_layers), h = static_cast<double>(c.hidden_size);
  // Keys and values: the query groups' heads (train/flops.h: k = g * d).
  const double q = static_cast<double>(c.num_attention_heads * c.kv_channels);
  const double k = static_cast<double>(c.query_groups() * c.kv_channels);
  const double f = static_cast<double>(c.ffn_hidden_size), V = static_cast<double>(c.padded_vocab_size);
  const double mlp_gemms = c.swiglu ? 3.0 : 2.0;  // Megatron's c: FC1 is h x 2f with --swiglu
  return 6.0 * B * s * L * (h * (q + 2.0 * k) + q * h) + (causal ? 6.0 : 12.0) * B * s * s * L * q +
         6.0 * mlp_gemms * B * s * L * h * f + 6.0 * B * s * h * V;
}

void validate_layout(const model::GPTConfig& c, const ParallelConfig& p, int64_t world) {
  if (p.tp < 1) throw_error("[--tensor-model-parallel-size] must be positive, got ", p.tp);
  if (p.pp < 1) throw_error("[--pipeline-model-parallel-size] must be positive, got ", p.pp);
  if (p.micro_batch < 1) throw_error("[--micro-batch-size] must be positive, got ", p.micro_batch);
  if (world % (p.tp * p.pp) != 0) {
    throw_error("[--tensor-model-parallel-size] world size (", world, ") is not divisible by tensor (", p.tp,
                ") x pipeline (", p.pp, ") parallel size");
  }
  if (c.num_attention_heads % p.tp != 0) {
    throw_error("[--num-attention-heads] ", c.num_attention_heads, " is not divisible by --tensor-model-parallel-size ",
                p.tp);
  }
  if (c.query_groups() % p.tp != 0) {
    throw_error("[--num-query-groups] ", c.query_groups(), " is not divisible by --tensor-model-parallel-size ", p.tp);
  }
  if (c.ffn_hidden_size % p.tp != 0) {
    throw_error("[--ffn-hidden-size] ", c.ffn_hidden_size, " is not divisible by --tensor-model-parallel-size ", p.tp);
  }
  if (c.num_layers % p.pp != 0) {
    throw_error("[--num-layers] ", c.num_layers, " is not divisible by --pipeline-model-parallel-size ", p.pp);
  }
  if (p.sequence_parallel && p.tp == 1) throw_error("[--sequence-parallel] needs --tensor-model-parallel-size > 1");
  if (p.sequence_parallel && c.seq_length % p.tp != 0) {
    throw_error("[--sequence-parallel] --seq-length ", c.seq_length,
                " is not divisible by --tensor-model-parallel-size ", p.tp);
  }
  const int64_t per_step = p.micro_batch * p.dp;
  if (p.global_batch % per_step != 0) {
    throw_error("[--global-batch-size] global batch size (", p.global_batch, ") is not divisible by micro batch size (",
                p.micro_batch, ") times data parallel size (", p.dp, ")");
  }
  if (p.vp > 1) {
    if (p.pp < 2) throw_error("[--num-layers-per-virtual-pipeline-stage] needs --pipeline-model-parallel-size > 1");
    if ((c.num_layers / p.pp) % p.vp != 0) {
      throw_error("[--num-layers-per-virtual-pipeline-stage] layers per pipeline stage (", c.num_layers / p.pp,
                  ") do not split into ", p.vp, " virtual stages");
    }
    if (p.num_micro_batches() % p.pp != 0) {
      throw_error("[--num-layers-per-virtual-pipeline-stage] number of microbatches (", p.num_micro_batches(),
                  ") is not divisible by pipeline-model-parallel-size (", p.pp, ") when using interleaved schedule");
    }
  }
}

// The layout of the groups repeats every lcm(size * stride, G) ranks: that span covers them all.
int64_t fewest_group_members_on_a_node(int64_t size, int64_t stride, int64_t G) {
  MT_CHECK(size >= 1 && stride >= 1 && G >= 1)
      << "groups of " << size << " ranks " << stride << " apart on nodes of " << G;
  const int64_t block = size * stride;
  const int64_t span = block / std::gcd(block, G) * G;
  int64_t fewest = size;
  for (int64_t start = 0; start < span; start += block) {
    for (int64_t offset = 0; offset < stride; ++offset) {
      int64_t node = -1, count = 0;
      for (int64_t i = 0; i < size; ++i) {
        const int64_t at = (start + offset + i * stride) / G;
        if (at != node) {
          if (count > 0) fewest = std::min(fewest, count);
          node = at;
          count = 0;
        }
        ++count;
      }
      fewest = std::min(fewest, count);
    }
  }
  return fewest;
}

int64_t most_nodes_of_a_group(int64_t size, int64_t stride, int64_t G) {
  MT_CHECK(size >= 1 && stride >= 1 && G >= 1)
      << "groups of " << size << " ranks " << stride << " apart on nodes of " << G;
  const int64_t block = size * stride;
  const int64_t span = block / std::gcd(block, G) * G;
  int64_t most = 1;
  for (int64_t start = 0; start < span; start += block) {
    for (int64_t offset = 0; offset < stride; ++offset) {
      // Ranks increase along the group, so its nodes are the range from its first to its last.
      const int64_t first = (start + offset) / G, last = (start + offset + (size - 1) * stride) / G;
      most = std::max(most, last - first + 1);
    }
  }
  return most;
}

bool blocks_within_nodes(int64_t block, int64_t gpus_per_node) {
  return block <= gpus_per_node && gpus_per_node % block == 0;
}

Prediction predict(const model::GPTConfig& c, DType dtype, const ParallelConfig& p, const Cluster& cl) {
  const Gpu g = gpu_rates(cl.gpu, cl.engine);
  const Link nvlink{cl.intra_node_bytes_per_s > 0 ? cl.intra_node_bytes_per_s : cl.gpu.nvlink_bytes_per_s,
                    kNvlinkLatency};
  const Link network{cl.inter_node_bytes_per_s > 0 ? cl.inter_node_bytes_per_s : cl.gpu.ib_bytes_per_s,
                     kNetworkLatency};
  const int64_t G = cl.gpus_per_node;
  // In Megatron's rank order (tp-cp-dp-pp) a TP group is `tp` consecutive ranks, a DP group
  // lies in a block of tp * dp consecutive ranks and a pipeline hop goes tp * dp ranks on. All
  // such groups stay inside nodes of G GPUs only if their block divides the node: TP 6 on
  // 8-GPU nodes puts half of its groups across two nodes, and a step waits for its slowest
  // group, so it runs on the network.
  const bool tp_on_nvlink = blocks_within_nodes(p.tp, G);
  // A TP group across nodes runs its rings through each node's NICs: as many of them as it has
  // GPUs on its emptiest node (comm_model.h, group_link): TP 16 on 8-GPU nodes, 8 NICs; TP 8
  // on 4-GPU nodes, 4; TP 6 on 8-GPU nodes, 2 (a group puts 2 + 4 ranks on two nodes).
  Link tp_link = tp_on_nvlink ? nvlink
                              : group_link(nvlink, network, most_nodes_of_a_group(p.tp, 1, G),
                                           fewest_group_members_on_a_node(p.tp, 1, G));
  // TP collectives over NVLink run at our measured share of the link for their message size
  // ([s b, h] of the micro-batch; engine_profile.h), not at the large-message kLinkEfficiency.
  if (tp_on_nvlink && cl.engine.measured_tp_collectives) {
    const double tp_message = static_cast<double>(p.micro_batch * c.seq_length * c.hidden_size * dtype_size(dtype));
    tp_link.bytes_per_s *= our_tp_collective_share(tp_message) / kLinkEfficiency;
  }
  // A DP group with k ranks on each node crosses the network on k NICs at once (NCCL runs a
  // ring/tree channel per NIC), so its network bandwidth is k x the per-GPU figure, at most
  // NVLink's; with k uneven (blocks straddling nodes: TP 4 x DP 3 on 8-GPU nodes puts 2 + 1 of
  // a group's ranks on two nodes) the node with the fewest sets the pace (group_link).
  const bool dp_on_nvlink = blocks_within_nodes(p.tp * p.dp, G);
  const Link dp_link = dp_on_nvlink ? nvlink
                                    : group_link(nvlink, network, most_nodes_of_a_group(p.dp, p.tp, G),
                                                 fewest_group_members_on_a_node(p.dp, p.tp, G));
  const Link& pp_link = blocks_within_nodes(p.tp * p.dp * p.pp, G) ? nvlink : network;

  const double n = static_cast<double>(p.micro_batch * c.seq_length), h = static_cast<double>(c.hidden_size);
  const double e = static_cast<double>(dtype_size(dtype)), t = static_cast<double>(p.tp);
  const double V = static_cast<double>(c.padded_vocab_size);
  const double m = static_cast<double>(p.num_micro_batches());
  const double layers = static_cast<double>(c.num_layers / p.pp);
  const bool full = p.recompute == PlanRecompute::kFull;

  const Gpu linear = c.fp8 ? fp8_gemm_rates(cl.gpu, g) : g;
  const LayerTimes lt = layer_times(c, dtype, p, g, linear, tp_link, cl.engine);
  double layer_gemm = lt.gemm, layer_attention = lt.attention, layer_memory = lt.memory;
  // TP collectives per layer and micro-batch in all-reduce equivalents (an all-gather plus a
  // reduce-scatter of [s b, h] count one all-reduce). Forward 2: attention and MLP. Backward 2
  // started beside the GEMMs: each column-parallel linear's dgrad all-reduce, or under SP its
  // reduce-scatter and the all-gather of the input its weight gradient reads again. Under SP
  // also the row-parallel linears' all-gathers of dy (proj and FC2), 1 more, which block: the
  // dgrad needs them at once. (16.63B TP4 + SP, --profile-ops: per layer 4 blocking all-gathers,
  // 2 blocking reduce-scatters, 2 + 2 started; bench/results/2026-11-28.md, "DP4 on 4 x H200
  // after the in-collective average".)
  const double backward_tp = 2.0 * lt.tp_allreduce;
  const double backward_dy_gathers = p.sequence_parallel ? lt.tp_allreduce : 0.0;
  double layer_tp = 2.0 * lt.tp_allreduce + backward_dy_gathers +
                    (cl.engine.async_tp_allreduce ? std::max(0.0, backward_tp - lt.wgrad_overlap) : backward_tp);
  if (full) {
    layer_gemm += lt.gemm / 3.0;
    layer_memory += lt.memory_forward;
    layer_attention += lt.attention_forward;
    layer_tp += 2.0 * lt.tp_allreduce;
  }
  const double layer_compute = layer_gemm + layer_attention + layer_memory;
  if (cl.engine.tp_comm_overlap && p.sequence_parallel) {
    const double all_tp = (full ? 7.0 : 5.0) * lt.tp_allreduce;  // the layer's, dy gathers included
    layer_tp = std::max(0.0, all_tp - layer_gemm);
  }
  const double logits_seconds = cl.engine.fused_cross_entropy
                                    ? kLogitsBytes * n * V / t / g.hbm
                                    : kUnfusedLogitsBytes * n * V / t / (g.hbm * kStreamEfficiency);
  const double head_gemm = gemm3_seconds(n, V / t, h, g);
  const double head = head_gemm + logits_seconds;
  const double p2p_bytes = cl.engine.pipeline_scatter_gather ? n * h * e / t : n * h * e;
  const double p2p = p.pp > 1 ? 2.0 * static_cast<double>(p.vp) * send_recv_seconds(p2p_bytes, pp_link) : 0.0;

  // Data parallel and optimizer: the first stage holds the most parameters when the embedding is there.
  const int64_t P = std::max(stage_num_parameters(c, p, 0), stage_num_parameters(c, p, p.pp - 1));
  const double Pd = static_cast<double>(P);
  const double stream = g.hbm * kStreamEfficiency;
  // Weight-gradient accumulation outside the GEMMs: m - 1 passes over the stage's parameters,
  // spread over the m micro-batch slots.
  const double accumulate = m > 1 ? (m - 1.0) / m * cl.engine.wgrad_accumulation_bytes * Pd / stream : 0.0;

  // The slowest stage per micro-batch: the last one carries the LM head (the first one's
  // embedding lookup is negligible).
  const double last_compute = layers * layer_compute + head + accumulate;
  const double per_micro = last_compute + layers * layer_tp + p2p;

  Prediction r;
  const double slots = m + static_cast<double>(p.pp - 1) / static_cast<double>(p.vp);
  r.compute_s = m * last_compute;
  r.gemm_s = m * (layers * layer_gemm + head_gemm);
  r.attention_s = m * layers * layer_attention;
  r.memory_bound_s = m * (layers * layer_memory + logits_seconds + accumulate);
  r.fp8_quantize_s = m * layers * (lt.fp8_quantize + (full ? lt.fp8_quantize_forward : 0.0));
  r.tp_comm_s = m * layers * layer_tp;
  r.pp_comm_s = m * p2p;
  r.bubble_s = (slots - m) * per_micro;
  double pipeline = slots * per_micro;

  // Data parallel.
  const double buckets = std::max(1.0, std::ceil(Pd / static_cast<double>(parallel::overlap_bucket_elements(p.dp))));
  const double grad_bytes = Pd * static_cast<double>(cl.engine.grad_reduce_bytes);
  const double grads = p.distributed_optimizer ? reduce_scatter_seconds(grad_bytes, p.dp, dp_link)
                                               : all_reduce_seconds(grad_bytes, p.dp, dp_link);
  const double backward_window = last_compute * 2.0 / 3.0, forward_window = last_compute / 3.0;
  // Over NVLink NCCL's kernels move the data themselves and contend with the GEMMs; across nodes
  // the NICs do, and the kernels mostly wait (Megatron's 48-way DP runs, published_runs_test,
  // stay within 20% only without the term).
  // The copy engines take the reduce-scatters of all but the last parallel::kCopyEngineTailBuckets
  // buckets, and every parameter gather.
  const bool ce_grads = p.uses_copy_engines() && buckets > static_cast<double>(parallel::kCopyEngineTailBuckets);
  const double contention = dp_on_nvlink ? (ce_grads ? kCopyEngineContention : kOverlapContention) : 0.0;
  const double gather_contention =
      dp_on_nvlink ? (p.uses_copy_engines() ? kCopyEngineContention : kOverlapContention) : 0.0;
  double dp = cl.overlap_grad_reduce ? overlapped_seconds(grads, backward_window, buckets, contention) : grads;
  if (p.distributed_optimizer) {
    const double params = all_gather_seconds(Pd * e, p.dp, dp_link);
    dp += cl.overlap_param_gather && cl.overlap_grad_reduce
              ? overlapped_seconds(params, forward_window, buckets, gather_contention)
              : params;
  }
  if (p.pp > 1 && !c.untie_embeddings_and_output_weights) {
    dp += all_reduce_seconds(V / t * h * static_cast<double>(cl.engine.grad_reduce_bytes), 2,
                             pp_link);  // tied embedding grads, first <-> last stage
  }
  r.dp_comm_s = dp;
  const double owned = p.distributed_optimizer ? std::ceil(Pd / static_cast<double>(p.dp)) : Pd;
  r.optimizer_s = cl.engine.optimizer_bytes > 0 ? cl.engine.optimizer_bytes * Pd / stream
                                                : (kGradPassBytes * Pd + kAdamBytes * owned) / g.hbm;

  r.seconds_per_iteration = pipeline + r.dp_comm_s + r.optimizer_s;
  const double tokens = static_cast<double>(p.global_batch * c.seq_length);
  r.tokens_per_s = tokens / r.seconds_per_iteration;
  r.report_time_s = 20e6 / r.tokens_per_s;
  const double world = static_cast<double>(p.world());
  r.tflops_per_gpu_2024 = model_flops(c, p.global_batch, false) / (r.seconds_per_iteration * 1e12 * world);
  r.tflops_per_gpu_2025 = model_flops(c, p.global_batch, true) / (r.seconds_per_iteration * 1e12 * world);
  return r;
}

}  // namespace megatron::plan
