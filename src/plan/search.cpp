#include "plan/search.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/checked_int.h"
#include "core/error.h"

namespace megatron::plan {

namespace {

// The divisors of n in increasing order, in sqrt(n) steps (n may be 2^31 - 1 layers).
std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> low, high;
  for (int64_t i = 1; i <= n / i; ++i) {
    if (n % i != 0) continue;
    low.push_back(i);
    if (i != n / i) high.push_back(n / i);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

template <class T>
std::vector<T> fixed_or(const std::optional<T>& fixed, std::vector<T> all) {
  if (fixed) return {*fixed};
  return all;
}

bool searched_tp(int64_t tp, int64_t G, int64_t heads) {
  if (heads % tp != 0) return false;
  return tp <= G || (tp % G == 0 && tp <= kMaxSearchedTp);
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace

int64_t padded_vocab(int64_t vocab, int64_t divisible_by, int64_t tp) {
  const int64_t multiple = divisible_by * tp;
  return (vocab + multiple - 1) / multiple * multiple;
}

model::GPTConfig config_for_tp(const PlanModel& m, int64_t tp) {
  model::GPTConfig c = m.config;
  c.padded_vocab_size = padded_vocab(c.vocab_size, m.make_vocab_size_divisible_by, tp);
  return c;
}

Candidate evaluate_layout(const PlanModel& m, const Cluster& cluster, ParallelConfig p) {
  const model::GPTConfig c = config_for_tp(m, p.tp);
  p.dp_copy_engine = cluster.dp_copy_engine && p.distributed_optimizer && p.dp > 1 &&
                     blocks_within_nodes(p.tp * p.dp, cluster.gpus_per_node);
  p.overlap_grad_reduce = cluster.overlap_grad_reduce;
  validate_layout(c, p, cluster.world());
  if (p.world() != cluster.world()) {
    throw_error("[--nodes] ", cluster.nodes, " nodes x ", cluster.gpus_per_node, " GPUs is ", cluster.world(),
                " GPUs, the layout needs ", p.world());
  }
  Candidate k;
  k.parallel = p;
  k.memory = rank_memory(c, m.dtype, p, cluster.gpus_per_node, cluster.engine.shared_process_groups,
                         grad_dtype_of(m.dtype, cluster.engine.grad_reduce_bytes));
  k.capacity_bytes = cluster.gpu.memory_bytes - kReservedBytes;
  k.fits = static_cast<double>(k.memory.worst.total()) <= k.capacity_bytes;
  k.prediction = predict(c, m.dtype, p, cluster);
  return k;
}

std::vector<Candidate> enumerate_layouts(const PlanModel& m, const Cluster& cluster, const SearchSpace& space) {
  MT_CHECK(space.global_batch > 0);
  const int64_t world = cluster.world();
  const model::GPTConfig& c = m.config;
  std::vector<int64_t> micro;
  for (int64_t b = 1; b <= space.max_micro_batch; b *= 2) micro.push_back(b);
  std::vector<Candidate> out;
  for (int64_t tp : fixed_or(space.tp, divisors(world))) {
    if (!space.tp && !searched_tp(tp, cluster.gpus_per_node, c.num_attention_heads)) continue;
    for (int64_t pp : fixed_or(space.pp, divisors(c.num_layers))) {
      if (world % (tp * pp) != 0) continue;
      const int64_t dp = world / (tp * pp);
      std::vector<int64_t> vps = {1};
      if (pp > 1) {
        for (int64_t v : divisors(c.num_layers / pp)) {
          if (v > 1 && v <= space.max_vp) vps.push_back(v);
        }
      }
      for (int64_t vp : fixed_or(space.vp, vps)) {
        for (int64_t mb : fixed_or(space.micro_batch, micro)) {
          for (PlanRecompute rc : fixed_or(space.recompute, {PlanRecompute::kNone, PlanRecompute::kFull})) {
            for (bool dist : fixed_or(space.distributed_optimizer,
                                      dp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false})) {
              for (bool sp : fixed_or(space.sequence_parallel,
                                      tp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false})) {
                ParallelConfig p{tp, pp, vp, dp, mb, space.global_batch, rc, dist, sp};
                try {
                  out.push_back(evaluate_layout(m, cluster, p));
                } catch (const IntegerOverflow&) {
                  throw;  // the shape's counts do not fit in 64 bits: no layout helps
                } catch (const Error&) {
                  // Not a valid layout for this model and batch: skipped when searching.
                }
              }
            }
          }
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.fits) return a.prediction.report_time_s < b.prediction.report_time_s;
    return a.memory.worst.total() < b.memory.worst.total();
  });
  return out;
}

std::string no_layout_reason(const PlanModel& m, const Cluster& cluster, const SearchSpace& space,
                             const std::vector<Candidate>& all) {
  if (!all.empty()) {
    // enumerate_layouts puts the misfits last, smallest first: all.front() when none fits.
    const Candidate& k = all.front();
    const ParallelConfig& p = k.parallel;
    const double need = static_cast<double>(k.memory.worst.total());
    return str_cat("does not fit: the smallest layout (TP ", p.tp, " x PP ", p.pp, " x DP ", p.dp, ", micro-batch ",
                   p.micro_batch, p.recompute == PlanRecompute::kFull ? ", full recompute" : "",
                   p.distributed_optimizer ? ", distributed optimizer" : "", ") needs ", gib(need), " GiB per GPU, ",
                   gib(need - k.capacity_bytes), " GiB over the ", gib(k.capacity_bytes), " GiB available");
  }
  const model::GPTConfig& c = m.config;
  const int64_t world = cluster.world();
  // Which rule removed every layout, checked in validate_layout's order.
  bool tp_ok = false, pp_ok = false, batch_ok = false;
  std::vector<int64_t> dps;
  for (int64_t tp : fixed_or(space.tp, divisors(world))) {
    if (c.num_attention_heads % tp != 0 || c.ffn_hidden_size % tp != 0) continue;
    if (!space.tp && !searched_tp(tp, cluster.gpus_per_node, c.num_attention_heads)) continue;
    tp_ok = true;
    for (int64_t pp : fixed_or(space.pp, divisors(c.num_layers))) {
      if (world % (tp * pp) != 0 || c.num_layers % pp != 0) continue;
      pp_ok = true;
      const int64_t dp = world / (tp * pp);
      if (std::find(dps.begin(), dps.end(), dp) == dps.end()) dps.push_back(dp);
      if (space.global_batch % dp == 0) batch_ok = true;
    }
  }
  if (!tp_ok) {
    return str_cat("no valid layout: no TP size divides both ", world, " GPUs and the ", c.num_attention_heads,
                   " heads (--num-attention-heads)", space.tp ? " at the TP size given" : "");
  }
  if (!pp_ok) {
    return str_cat("no valid layout: no TP x PP divides ", world, " GPUs with PP dividing the ", c.num_layers,
                   " layers (--num-layers)");
  }
  std::sort(dps.begin(), dps.end());
  std::string list;
  for (int64_t d : dps) list += (list.empty() ? "" : ", ") + std::to_string(d);
  if (!batch_ok) {
    return str_cat("no valid layout: the global batch ", space.global_batch,
                   " (--global-batch-size) is not divisible by any data-parallel size of ", world, " GPUs (", list,
                   ")");
  }
  return str_cat("no valid layout of ", world, " GPUs (data-parallel sizes ", list,
                 ") passes the micro-batch, sequence-parallel and virtual-pipeline rules");
}

NodeSearch smallest_node_count(const PlanModel& m, Cluster cluster, const SearchSpace& space, int64_t first_nodes,
                               int64_t last_nodes, double target) {
  NodeSearch r;
  for (int64_t nodes = first_nodes; nodes <= last_nodes; ++nodes) {
    cluster.nodes = nodes;
    NodeSearchStep step;
    step.nodes = nodes;
    const std::vector<Candidate> all = enumerate_layouts(m, cluster, space);
    if (!all.empty() && all.front().fits)
      step.best = all.front();
    else
      step.why_none = no_layout_reason(m, cluster, space, all);
    r.steps.push_back(step);
    if (step.best && step.best->prediction.report_time_s <= target) {
      r.nodes = nodes;
      break;
    }
  }
  return r;
}

}  // namespace megatron::plan
