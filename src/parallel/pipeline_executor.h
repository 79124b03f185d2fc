// Runs a pipeline table (parallel/pipeline_schedule.h) on this rank's stage of the model: each
// kForward / kBackward calls GPTModel::forward_chunk / backward_chunk with the activation set
// that parallel::activation_slots gives its (chunk, micro-batch) in the table as run, each
// kComm step posts its messages together with one Communicator::send_recv over the pipeline group (group rank ==
// pipeline stage):
//   send activation  model.output(chunk, set)        recv activation  model.input_buffer(chunk, set)
//   send gradient    model.input_grad()               recv gradient    model.output_grad_buffer()
// The table keeps the buffers free: input_grad is sent in the exchange right after its
// backward (before another compute can overwrite it); an activation stays in its set until
// the set's backward; a receive is posted in the exchange just before its compute, or before
// the forward that an interleaved steady-state pair runs first (that forward does not touch
// output_grad_buffer); overlapped tables post some receives one compute earlier, into a set
// that activation_slots keeps free for them (parallel/pipeline_schedule.h, "Overlapped
// exchanges").
//
// --overlap-p2p-communication (PipelineCallbacks::overlap_p2p): the table runs as
// parallel::overlapped_exchanges makes it — each exchange split into an activation group and a
// gradient group, and in the interleaved steady state the next forward's receive posted before
// the backward it runs beside. Each group is started (Communicator::start_send_recv: MPI
// Isend/Irecv, an NCCL group on the communicator's own stream) instead of completed on the
// spot, and waited for only just before the first compute that reads one of its receive
// buffers or writes one of its send buffers (the same activation set,
// input_grad, output_grad_buffer), and at the end of the table. A stage whose next compute
// needs nothing from a group (a forward and the gradient group, stage 0 sending warm-up
// activations, the last stage sending gradients before its next forward) computes on while
// its peer has yet to receive. Groups are waited for in the order they were started. The
// values are those of the blocking exchange: the same messages into the same buffers.
//
// --overlap-grad-reduce (PipelineCallbacks::grad_sync): the computes that finish a chunk's
// gradients for the iteration — the backward of its last micro-batch, and on the last virtual
// stage the forward of that micro-batch (the loss head's backward runs inside it) — are
// bracketed by grad_sync(chunk, true) / grad_sync(chunk, false): only there do the model's
// grads_final_from hooks start buckets (Megatron enables grad sync for the last micro-batch
// only, no_sync for the others).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "model/gpt_model.h"
#include "parallel/pipeline_schedule.h"

namespace megatron::parallel {

struct PipelineCallbacks {
  // Fills micro-batch k of the iteration (called on the first and last virtual stage only).
  std::function<void(int64_t k, model::MicroBatch* mb)> load;
  // The dropout context of micro-batch k.
  std::function<model::DropoutContext(int64_t k)> dropout;
  // Training: the loss head's backward scales (the table has backwards). Null: forward only.
  const model::HeadBackward* head = nullptr;
  // Null: not called. See "--overlap-grad-reduce" above.
  std::function<void(int64_t chunk, bool on)> grad_sync;
  // Start exchanges and wait for them only where needed (see above); false: each completes
  // before the next action.
  bool overlap_p2p = false;
  // Null: not called. Called for each kForward / kBackward with the activation set it uses,
  // after the waits for its buffers, just before it runs (tests, tracing).
  std::function<void(const parallel::PipelineAction& compute, int64_t set)> before_compute;
  // Null: not called. Called with started = true just before each action runs (a compute after
  // the waits for its buffers, after before_compute) and with false right after it (an
  // overlapped exchange: after it is posted, not completed): Megatron's timers
  // (megatron_timer_name).
  std::function<void(const parallel::PipelineAction& action, bool started)> phase;
};

// The name of Megatron's timer for an action: "forward-compute" / "backward-compute", and for an
// exchange the name of the p2p_communication function that moves the same messages
// ("forward-recv", "forward-send", "backward-recv", "backward-send", "forward-send-backward-recv",
// "backward-send-forward-recv", "forward-send-forward-recv", "backward-send-backward-recv", and
// "forward-backward-send-forward-backward-recv" for any other mix).
const char* megatron_timer_name(const parallel::PipelineAction& action);

// Runs `table` (the blocking form, as pipeline_schedule makes it) and returns the sum of the
// micro-batch losses (last virtual stage; 0 elsewhere), read from the device once, after the
// last compute (GPTModel::take_losses), so that no micro-batch waits for the host.
double run_pipeline(const std::vector<parallel::PipelineAction>& table, model::GPTModel& model, comm::Communicator& pp,
                    const PipelineCallbacks& callbacks);

}  // namespace megatron::parallel
