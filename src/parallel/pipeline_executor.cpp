#include "parallel/pipeline_executor.h"

#include <deque>
#include <memory>

#include "core/error.h"

namespace megatron::parallel {

namespace {

// Bytes [begin, end) of a tensor's storage.
struct Span {
  const char* begin;
  const char* end;
  bool overlaps(const Span& o) const { return begin < o.end && o.begin < end; }
};
Span span_of(const Tensor& t) {
  const char* p = static_cast<const char*>(t.data());
  return {p, p + t.nbytes()};
}

// A started exchange and the buffers it sends from / receives into.
struct Started {
  std::unique_ptr<comm::PendingCollective> handle;
  std::vector<Span> buffers;
};

// What compute `a` reads or writes among the buffers exchanges use.
std::vector<Span> compute_buffers(const parallel::PipelineAction& a, model::GPTModel& model, int64_t set,
                                  bool has_head) {
  std::vector<Span> out;
  const int64_t c = a.chunk;
  if (!model.is_first_virtual(c)) out.push_back(span_of(model.input_buffer(c, set)));
  if (!model.is_last_virtual(c)) out.push_back(span_of(model.output(c, set)));
  const bool backward = a.op == parallel::PipelineOp::kBackward;
  if (backward || (model.is_last_virtual(c) && has_head)) out.push_back(span_of(model.input_grad()));
  if (backward) out.push_back(span_of(model.output_grad_buffer()));
  return out;
}

}  // namespace

double run_pipeline(const std::vector<parallel::PipelineAction>& blocking_table, model::GPTModel& model,
                    comm::Communicator& pp, const PipelineCallbacks& cb) {
  // --overlap-p2p-communication: the exchanges split by direction and posted earlier
  // (parallel::overlapped_exchanges).
  const std::vector<parallel::PipelineAction> table =
      cb.overlap_p2p ? parallel::overlapped_exchanges(blocking_table, model.num_chunks()) : blocking_table;
  // The activation sets in the order this table takes and frees them.
  const parallel::ActivationSlots slots = parallel::activation_slots(table);
  MT_CHECK(slots.count <= model.activation_sets())
      << "the pipeline table holds " << slots.count << " micro-batches in flight, the model has "
      << model.activation_sets() << " activation sets";
  auto set_of = [&](int64_t chunk, int64_t k) { return slots.at(chunk, k); };
  // The computes that finish each chunk's gradients (--overlap-grad-reduce): its last backward,
  // and on the last virtual stage its last forward (the loss head's backward).
  std::vector<size_t> last_backward(static_cast<size_t>(model.num_chunks()), table.size());
  std::vector<size_t> last_forward = last_backward;
  for (size_t i = 0; i < table.size(); ++i) {
    const parallel::PipelineAction& a = table[i];
    if (a.op == parallel::PipelineOp::kBackward) last_backward[static_cast<size_t>(a.chunk)] = i;
    if (a.op == parallel::PipelineOp::kForward) last_forward[static_cast<size_t>(a.chunk)] = i;
  }
  auto finishes_grads = [&](size_t i) {
    const parallel::PipelineAction& a = table[i];
    const size_t c = static_cast<size_t>(a.chunk);
    if (!cb.grad_sync || cb.head == nullptr) return false;
    return last_backward[c] == i || (last_forward[c] == i && model.is_last_virtual(a.chunk));
  };

  std::deque<Started> in_flight;  // started exchanges, oldest first
  // Waits, oldest first, up to the newest exchange that touches one of `buffers` (all: null).
  auto wait_for = [&](const std::vector<Span>* buffers) {
    size_t upto = 0;
    for (size_t i = 0; i < in_flight.size(); ++i) {
      bool hit = buffers == nullptr;
      for (const Span& x : in_flight[i].buffers) {
        for (size_t j = 0; !hit && buffers != nullptr && j < buffers->size(); ++j) hit = x.overlaps((*buffers)[j]);
      }
      if (hit) upto = i + 1;
    }
    for (size_t i = 0; i < upto; ++i) {
      in_flight.front().handle->wait();
      in_flight.pop_front();
    }
  };

  model::MicroBatch mb;
  std::vector<comm::PointToPoint> ops;
  for (size_t i = 0; i < table.size(); ++i) {
    const parallel::PipelineAction& a = table[i];
    if (a.op != parallel::PipelineOp::kComm && !in_flight.empty()) {
      const std::vector<Span> touched = compute_buffers(a, model, set_of(a.chunk, a.micro_batch), cb.head != nullptr);
      wait_for(&touched);
    }
    if (a.op != parallel::PipelineOp::kComm && cb.before_compute) cb.before_compute(a, set_of(a.chunk, a.micro_batch));
    if (cb.phase) cb.phase(a, true);
    const bool sync = a.op != parallel::PipelineOp::kComm && finishes_grads(i);
    if (sync) cb.grad_sync(a.chunk, true);
    switch (a.op) {
      case parallel::PipelineOp::kForward: {
        const bool needs_batch = model.reads_batch(a.chunk);
        if (needs_batch) cb.load(a.micro_batch, &mb);
        model.forward_chunk(a.chunk, set_of(a.chunk, a.micro_batch), needs_batch ? &mb : nullptr,
                            cb.dropout(a.micro_batch), cb.head);
        break;
      }
      case parallel::PipelineOp::kBackward:
        MT_CHECK(cb.head != nullptr) << "backward in a forward-only pipeline";
        model.backward_chunk(a.chunk, set_of(a.chunk, a.micro_batch));
        break;
      case parallel::PipelineOp::kComm: {
        ops.clear();
        Started started;
        for (const parallel::P2PMessage& m : a.messages) {
          const int64_t set = set_of(m.chunk, m.micro_batch);
          Tensor t = m.send ? (m.gradient ? model.input_grad() : model.output(m.chunk, set))
                            : (m.gradient ? model.output_grad_buffer() : model.input_buffer(m.chunk, set));
          ops.push_back({m.send, t, m.peer});
          started.buffers.push_back(span_of(t));
        }
        if (cb.overlap_p2p) {
          started.handle = pp.start_send_recv(ops);
          in_flight.push_back(std::move(started));
        } else {
          pp.send_recv(ops);
        }
        break;
      }
    }
    if (cb.phase) cb.phase(a, false);
    if (sync) cb.grad_sync(a.chunk, false);
  }
  wait_for(nullptr);
  // The losses queued by the last virtual stage's forwards, read once for the whole table.
  return model.take_losses();
}

const char* megatron_timer_name(const parallel::PipelineAction& action) {
  if (action.op == parallel::PipelineOp::kForward) return "forward-compute";
  if (action.op == parallel::PipelineOp::kBackward) return "backward-compute";
  bool send_act = false, recv_act = false, send_grad = false, recv_grad = false;
  for (const parallel::P2PMessage& m : action.messages) {
    (m.gradient ? (m.send ? send_grad : recv_grad) : (m.send ? send_act : recv_act)) = true;
  }
  const int kinds = send_act + recv_act + send_grad + recv_grad;
  if (kinds == 1) {
    return send_act ? "forward-send" : recv_act ? "forward-recv" : send_grad ? "backward-send" : "backward-recv";
  }
  if (kinds == 2) {
    if (send_act && recv_grad) return "forward-send-backward-recv";
    if (send_grad && recv_act) return "backward-send-forward-recv";
    if (send_act && recv_act) return "forward-send-forward-recv";
    if (send_grad && recv_grad) return "backward-send-backward-recv";
  }
  return "forward-backward-send-forward-backward-recv";
}

}  // namespace megatron::parallel
