// Pipeline schedules as pure tables (docs/design.md, "Conventions": schedules are data): for one
// pipeline stage, the ordered list of what it does in one iteration — forward or backward of
// micro-batch k on model chunk c, and between them the point-to-point messages to post
// together. No communication here; parallel/pipeline_executor.h runs a table over the pp group.
//
// Layout (docs/megatron-formats.md §7). pp stages, each holding vp model chunks (vp = 1 without
// interleaving). Chunk c of stage s is virtual stage v = c * pp + s and holds the layers
// [v * L / (pp * vp), (v + 1) * L / (pp * vp)). Activations flow v -> v + 1: from stage s to
// s + 1 within a chunk, and from the last stage's chunk c to the first stage's chunk c + 1.
// Virtual stage 0 (stage 0, chunk 0) has the embedding, virtual stage pp * vp - 1 (last stage,
// last chunk) the final LayerNorm, output layer and loss.
//
// Order of the computations (Megatron's schedules.py):
//   1F1B (vp = 1): warm-up min(pp - s - 1, M) forwards, then 1F1B pairs (forward k + warm-up,
//     backward k) and a cool-down of the remaining backwards.
//   interleaved (vp > 1, M % pp == 0): the same on the M * vp "virtual micro-batches" i, with
//     warm-up min((pp - s - 1) * 2 + (vp - 1) * pp, M * vp) (all of them when M == pp); the
//     i-th forward runs chunk (i mod (pp * vp)) / pp on micro-batch (i / (pp * vp)) * pp + i mod
//     pp, the i-th backward the same micro-batch on chunk vp - 1 - that: micro-batches go
//     through the chunks in groups of pp.
//   forward only (evaluation): every forward in that order, no backward.
// Messages: each compute's input arrives (a receive) in the kComm step just before it and its
// output leaves (a send) in the kComm step just after it, together with the next compute's
// receive; in the interleaved steady state the pair (forward, backward) runs back to back
// with one kComm step before it (both receives, the previous pair's sends), as Megatron's
// combined exchange: separate steps there deadlock (a stage blocks sending a gradient that
// its neighbour receives only after an exchange waiting on the first stage). A kComm step's messages are posted at once
// and all complete before the stage goes on (MPI Isend/Irecv + Waitall, an NCCL group), which is what keeps
// neighbouring stages that both send and receive in one step from deadlocking. Between two stages messages match in
// posting order (one tag): the tests check both sides list them in the same order.
//
// Overlapped exchanges (--overlap-p2p-communication, overlapped_exchanges()). The executor
// starts each kComm step and waits for it only before the first compute that touches one of
// its buffers; started steps still run one after another (NCCL: groups on one stream), so a
// step that waits on a neighbour holds back every later step of its stage. Each exchange is
// split into an activation group (sends to the next stage, receives from the previous) and a
// gradient group after it (the other way), so that a forward waits only for activations. In the
// interleaved steady state the activation group after a pair (F, B) moves between F and B
// (Megatron's send_forward_recv_forward right after the forward): the next forward's input is
// received while B runs, and the gradient group after B receives the next backward's gradient
// while the next F runs. Both peers split the same exchange the same way, activations first,
// so their groups still pair up as the blocking steps did. The moved receive needs an
// activation set beside the ones the pair holds: activation_slots() of the table as run counts
// it. Not moved: 1F1B receives: there the last stage would post the
// next forward's receive before its backward's send while the stage before it posts that
// backward's receive before the next forward's send, a cycle on one stream (Megatron's 1F1B
// has no overlapped exchanges either). A gradient receive is never posted before the previous
// backward has read its own, so one output-gradient buffer is enough.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace megatron::parallel {

enum class PipelineOp : uint8_t { kForward, kBackward, kComm };

// One message of a kComm step. `chunk` and `micro_batch` name the data on THIS stage: a send
// carries the output (activation) or input gradient of (chunk, micro_batch) computed here; a
// receive delivers the input activation or output gradient that (chunk, micro_batch) needs.
struct P2PMessage {
  bool send = false;
  bool gradient = false;  // false: an activation going forward; true: a gradient going backward
  int64_t peer = 0;       // pipeline rank of the other side
  int64_t chunk = 0;
  int64_t micro_batch = 0;
  bool operator==(const P2PMessage&) const = default;
};

struct PipelineAction {
  PipelineOp op = PipelineOp::kForward;
  int64_t chunk = 0;                 // kForward / kBackward
  int64_t micro_batch = 0;           // kForward / kBackward
  std::vector<P2PMessage> messages;  // kComm only, in posting order
  bool operator==(const PipelineAction&) const = default;
};

struct PipelineShape {
  int64_t pp = 1;                // --pipeline-model-parallel-size
  int64_t stage = 0;             // this rank's pipeline rank
  int64_t num_microbatches = 1;  // per iteration, per data-parallel rank
  int64_t virtual_chunks = 1;    // vp: layers per stage / --num-layers-per-virtual-pipeline-stage
  bool forward_only = false;     // evaluation
};

// Throws megatron::Error (one line naming the flag) for a shape no schedule exists for:
// interleaving with M not divisible by pp, or with pp == 1.
void check_pipeline_shape(const PipelineShape& shape);

// The table of `shape.stage` (checked with check_pipeline_shape).
std::vector<PipelineAction> pipeline_schedule(const PipelineShape& shape);

// --overlap-p2p-communication: `table` (of pipeline_schedule) with each exchange split by
// direction into two started groups, activations then gradients (Megatron's
// send_forward_recv_forward, send_backward_recv_backward); in the interleaved steady state the
// activation group after a pair (forward, backward) moves between the two. See "Overlapped
// exchanges" above. `vp`: the table's virtual_chunks.
std::vector<PipelineAction> overlapped_exchanges(const std::vector<PipelineAction>& table, int64_t vp);

// Activation sets: one pool for all of a stage's chunks (every chunk has L / (pp * vp) layers,
// so a set fits any of them). A micro-batch of a chunk takes a set when its input activation's
// receive is posted (on virtual stage 0: at its forward) and gives it back at its backward
// (forward only: right after its forward, once its output is in the send queue; the executor
// waits for a send before the set's next compute). Each take gets the lowest free set.
// `count` is the most sets held at once (tests/parallel/pipeline_schedule_test.cpp checks it
// for pp <= 8, vp <= 4): 1F1B min(pp - s, M) on stage s; the blocking interleaved table
// Megatron's count of chunks live at once, min(M vp, 2 (pp - s - 1) + (vp - 1) pp + 1) for
// M > pp, all M vp for M == pp (Megatron's all-warm-up case); the overlapped interleaved table
// one more (the next forward's input arrives beside the backward that frees a set). Sets per
// chunk, each sized for the chunk's own busiest moment, held 2-38% more
// (bench/results/2026-11-28.md, "the first 4-GPU machine").
struct ActivationSlots {
  int64_t count = 0;
  std::map<std::pair<int64_t, int64_t>, int64_t> of;  // (chunk, micro-batch) -> set
  // The set of (chunk, micro_batch) (checked: the table takes one for it).
  int64_t at(int64_t chunk, int64_t micro_batch) const;
};
ActivationSlots activation_slots(const std::vector<PipelineAction>& table);

// The sets a stage's model needs for every table the trainer runs on it: training and
// evaluation (forward only) at `shape.num_microbatches`, as blocking or overlapped
// (`overlapped`: --overlap-p2p-communication) exchanges. The counts above stop growing at
// M = pp (1F1B) and M = 2 pp (interleaved: M vp >= 2 pp vp covers the warm-up plus one), so
// the tables built have at most kActivationSetsSaturation * pp micro-batches whatever M is
// (tests/parallel/pipeline_schedule_test.cpp checks the counts agree up to M = 8 pp).
constexpr int64_t kActivationSetsSaturation = 3;
int64_t activation_sets_needed(PipelineShape shape, bool overlapped);

// The virtual stage (c * pp + s) of chunk c on stage s, and the (stage, chunk) before / after
// a virtual stage (-1 stage: none).
int64_t virtual_stage(int64_t pp, int64_t stage, int64_t chunk);

// "F3.1" (forward of micro-batch 3 on chunk 1; "F3" when vp == 1), "B0", "[sF3>1 rB0<1]" (send
// the activation of micro-batch 3 to stage 1, receive the gradient of micro-batch 0 from
// stage 1): for test expectations and messages.
std::string to_string(const PipelineAction& action, int64_t virtual_chunks);
std::string to_string(const std::vector<PipelineAction>& table, int64_t virtual_chunks);

}  // namespace megatron::parallel
