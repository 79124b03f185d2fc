#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace megatron::parallel {

namespace {

struct Compute {
  bool forward;
  int64_t chunk, micro_batch;
};

// The i-th forward (or backward) of a stage: Megatron's get_model_chunk_id and
// get_microbatch_id_in_model_chunk with micro-batch groups of pp.
Compute nth(const PipelineShape& s, int64_t i, bool forward) {
  const int64_t group = s.pp * s.virtual_chunks;
  int64_t chunk = (i % group) / s.pp;
  if (!forward) chunk = s.virtual_chunks - 1 - chunk;
  return {forward, chunk, (i / group) * s.pp + i % s.pp};
}

// Megatron's order: warm-up forwards, 1F1B pairs, cool-down backwards, as units of computes
// with no exchange inside: single computes, except the interleaved schedule's steady-state
// pairs (forward, backward), which run back to back (see pipeline_schedule() for why).
std::vector<std::vector<Compute>> compute_units(const PipelineShape& s) {
  const int64_t total = s.num_microbatches * s.virtual_chunks;
  std::vector<std::vector<Compute>> out;
  if (s.forward_only) {
    for (int64_t i = 0; i < total; ++i) out.push_back({nth(s, i, true)});
    return out;
  }
  int64_t warmup = 0;
  if (s.virtual_chunks == 1) {
    warmup = std::min(s.pp - s.stage - 1, s.num_microbatches);
  } else if (s.num_microbatches == s.pp) {
    warmup = total;
  } else {
    warmup = std::min((s.pp - s.stage - 1) * 2 + (s.virtual_chunks - 1) * s.pp, total);
  }
  const int64_t steady = total - warmup;
  for (int64_t i = 0; i < warmup; ++i) out.push_back({nth(s, i, true)});
  for (int64_t i = 0; i < steady; ++i) {
    if (s.virtual_chunks > 1) {
      out.push_back({nth(s, warmup + i, true), nth(s, i, false)});
    } else {
      out.push_back({nth(s, warmup + i, true)});
      out.push_back({nth(s, i, false)});
    }
  }
  for (int64_t i = steady; i < total; ++i) out.push_back({nth(s, i, false)});
  return out;
}

}  // namespace

int64_t virtual_stage(int64_t pp, int64_t stage, int64_t chunk) { return chunk * pp + stage; }

void check_pipeline_shape(const PipelineShape& s) {
  MT_CHECK(s.pp >= 1 && s.stage >= 0 && s.stage < s.pp && s.num_microbatches >= 1 && s.virtual_chunks >= 1)
      << "pipeline shape pp " << s.pp << " stage " << s.stage << " M " << s.num_microbatches << " vp "
      << s.virtual_chunks;
  if (s.virtual_chunks == 1) return;
  if (s.pp == 1) {
    throw_error(
        "[--num-layers-per-virtual-pipeline-stage] the interleaved schedule needs "
        "--pipeline-model-parallel-size > 1");
  }
  if (s.num_microbatches % s.pp != 0) {
    throw_error("[--num-layers-per-virtual-pipeline-stage] number of microbatches (", s.num_microbatches,
                ") is not divisible by --pipeline-model-parallel-size (", s.pp,
                ") when using the interleaved schedule");
  }
}

std::vector<PipelineAction> pipeline_schedule(const PipelineShape& s) {
  check_pipeline_shape(s);
  const int64_t last_virtual = s.pp * s.virtual_chunks - 1;
  // The stage before / after this one in the activation flow (wrapping between chunks).
  const int64_t prev = (s.stage + s.pp - 1) % s.pp, next = (s.stage + 1) % s.pp;
  // The interleaved steady state runs each pair (forward, backward) back to back: its receives
  // posted together before it, its sends after it (Megatron's
  // send_forward_backward_recv_forward_backward). With an exchange between the two, a stage
  // can block sending a gradient that its neighbour receives only after an exchange waiting
  // on the first stage. Pairing only happens in the steady state: a warm-up forward whose
  // input depends on the neighbour's backward must not wait for its own backward's gradient.
  const std::vector<std::vector<Compute>> units = compute_units(s);
  std::vector<PipelineAction> table;
  std::vector<P2PMessage> pending;  // the sends of the previous unit
  for (const std::vector<Compute>& unit : units) {
    std::vector<P2PMessage> step = std::move(pending);
    pending.clear();
    for (const Compute& c : unit) {
      const int64_t v = virtual_stage(s.pp, s.stage, c.chunk);
      if (c.forward && v > 0) step.push_back({false, false, prev, c.chunk, c.micro_batch});
      if (!c.forward && v < last_virtual) step.push_back({false, true, next, c.chunk, c.micro_batch});
    }
    if (!step.empty()) table.push_back({PipelineOp::kComm, 0, 0, std::move(step)});
    for (const Compute& c : unit) {
      const int64_t v = virtual_stage(s.pp, s.stage, c.chunk);
      table.push_back({c.forward ? PipelineOp::kForward : PipelineOp::kBackward, c.chunk, c.micro_batch, {}});
      if (c.forward && v < last_virtual) pending.push_back({true, false, next, c.chunk, c.micro_batch});
      if (!c.forward && v > 0) pending.push_back({true, true, prev, c.chunk, c.micro_batch});
    }
  }
  if (!pending.empty()) table.push_back({PipelineOp::kComm, 0, 0, std::move(pending)});
  return table;
}

std::vector<PipelineAction> overlapped_exchanges(const std::vector<PipelineAction>& table, int64_t vp) {
  std::vector<PipelineAction> out;
  for (size_t i = 0; i < table.size(); ++i) {
    const PipelineAction& a = table[i];
    if (a.op != PipelineOp::kComm) {
      out.push_back(a);
      continue;
    }
    const PipelineAction none{PipelineOp::kComm, 0, 0, {}};
    PipelineAction early = none, act = none, grad = none;
    // The exchange after an interleaved steady-state pair (forward, backward): its activation
    // messages are posted between the two, the receive running beside the backward.
    const bool after_pair =
        vp > 1 && i >= 2 && table[i - 1].op == PipelineOp::kBackward && table[i - 2].op == PipelineOp::kForward;
    for (const P2PMessage& m : a.messages) (m.gradient ? grad : after_pair ? early : act).messages.push_back(m);
    if (!early.messages.empty()) out.insert(out.end() - 1, std::move(early));
    if (!act.messages.empty()) out.push_back(std::move(act));
    if (!grad.messages.empty()) out.push_back(std::move(grad));
  }
  return out;
}

int64_t ActivationSlots::at(int64_t chunk, int64_t micro_batch) const {
  const auto it = of.find({chunk, micro_batch});
  MT_CHECK(it != of.end()) << "no activation set for micro-batch " << micro_batch << " of chunk " << chunk;
  return it->second;
}

ActivationSlots activation_slots(const std::vector<PipelineAction>& table) {
  bool any_backward = false;
  for (const PipelineAction& a : table) any_backward |= a.op == PipelineOp::kBackward;
  ActivationSlots slots;
  std::vector<bool> busy;  // per set
  auto take = [&](int64_t chunk, int64_t micro_batch) {
    if (slots.of.count({chunk, micro_batch})) return;  // its receive took it
    const size_t k = static_cast<size_t>(std::find(busy.begin(), busy.end(), false) - busy.begin());
    if (k == busy.size()) busy.push_back(false);
    busy[k] = true;
    slots.of[{chunk, micro_batch}] = static_cast<int64_t>(k);
  };
  for (const PipelineAction& a : table) {
    if (a.op == PipelineOp::kComm) {
      for (const P2PMessage& m : a.messages) {
        if (!m.send && !m.gradient) take(m.chunk, m.micro_batch);
      }
    } else if (a.op == PipelineOp::kForward) {
      take(a.chunk, a.micro_batch);
      if (!any_backward) busy[static_cast<size_t>(slots.at(a.chunk, a.micro_batch))] = false;
    } else {
      busy[static_cast<size_t>(slots.at(a.chunk, a.micro_batch))] = false;
    }
  }
  slots.count = static_cast<int64_t>(busy.size());
  return slots;
}

int64_t activation_sets_needed(PipelineShape shape, bool overlapped) {
  // Past 3 pp micro-batches the count no longer grows (see the header): the tables of
  // min(M, 3 pp) micro-batches (a multiple of pp, as M must be when interleaved) give it.
  check_pipeline_shape(shape);
  shape.num_microbatches = std::min(shape.num_microbatches, kActivationSetsSaturation * shape.pp);
  int64_t most = 1;
  for (bool forward_only : {false, true}) {
    shape.forward_only = forward_only;
    std::vector<PipelineAction> table = pipeline_schedule(shape);
    if (overlapped) table = overlapped_exchanges(table, shape.virtual_chunks);
    most = std::max(most, activation_slots(table).count);
  }
  return most;
}

std::string to_string(const PipelineAction& a, int64_t vp) {
  auto name = [&](std::string* out, bool gradient, int64_t mb, int64_t chunk) {
    out->push_back(gradient ? 'B' : 'F');
    out->append(std::to_string(mb));
    if (vp > 1) {
      out->push_back('.');
      out->append(std::to_string(chunk));
    }
  };
  std::string s;
  if (a.op != PipelineOp::kComm) {
    name(&s, a.op == PipelineOp::kBackward, a.micro_batch, a.chunk);
    return s;
  }
  s.push_back('[');
  for (size_t i = 0; i < a.messages.size(); ++i) {
    const P2PMessage& m = a.messages[i];
    if (i > 0) s.push_back(' ');
    s.push_back(m.send ? 's' : 'r');
    name(&s, m.gradient, m.micro_batch, m.chunk);
    s.push_back(m.send ? '>' : '<');
    s.append(std::to_string(m.peer));
  }
  s.push_back(']');
  return s;
}

std::string to_string(const std::vector<PipelineAction>& table, int64_t vp) {
  std::string s;
  for (const PipelineAction& a : table) {
    if (!s.empty()) s += ' ';
    s += to_string(a, vp);
  }
  return s;
}

}  // namespace megatron::parallel
