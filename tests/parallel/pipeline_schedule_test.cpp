// The pipeline tables without communication: every stage's table is run together in a small
// simulator of the executor's semantics (see simulate() below: kComm steps of a stage run one
// after another, messages match in posting order, a compute waits for all posted steps when
// blocking and only for those touching its buffers when overlapped), which checks that every
// forward's input was produced and received, every backward follows its forward and has its
// output gradient, messages pair up with the right data, receives land in free buffers, and
// nothing deadlocks — for the blocking tables and for their --overlap-p2p-communication form
// (overlapped_exchanges). The small cases are also compared with tables worked out by hand,
// and mutations of the overlapped posting order (directions swapped on one peer, 1F1B receives
// one compute earlier, a receive into a busy set or gradient buffer) must fail.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/process_groups.h"

namespace megatron::parallel {
namespace {

std::vector<std::vector<PipelineAction>> all_tables(int64_t pp, int64_t m, int64_t vp, bool forward_only = false) {
  std::vector<std::vector<PipelineAction>> t;
  for (int64_t s = 0; s < pp; ++s) t.push_back(pipeline_schedule({pp, s, m, vp, forward_only}));
  return t;
}

// --overlap-p2p-communication tables of every stage.
std::vector<std::vector<PipelineAction>> overlapped_tables(const std::vector<std::vector<PipelineAction>>& tables,
                                                           int64_t vp) {
  std::vector<std::vector<PipelineAction>> out;
  for (const auto& t : tables) out.push_back(overlapped_exchanges(t, vp));
  return out;
}

// The buffers the executor (parallel/pipeline_executor.h) exchanges through, per stage: the input
// and output activation of set k of the stage's pool (whatever chunk it holds), input_grad
// (one) and output_grad_buffer (one).
enum Buf : int64_t { kIn, kOut, kInGrad, kOutGrad };
using BufId = std::pair<int64_t, int64_t>;  // (Buf, set)

// Runs every stage's table together; returns "" or what went wrong. Each stage posts its kComm
// steps in order; the steps of one stage run one after another, as NCCL groups on one stream
// do (a step starts once the previous one has completed), and two stages' messages match only
// between the steps they are running, the first unmatched message of a kind (peer, send or
// receive) with the first of the other side. Blocking: a compute waits for every step posted
// before it. Overlapped (--overlap-p2p-communication): a compute waits, as the executor does,
// only up to the newest posted step that touches one of its buffers. MPI matches the same
// messages with fewer constraints (any posted step, not only the running one), so a table that
// completes here completes under MPI too.
// Lazy connections (`lazy` given: the directed links (from stage, to stage) open before the
// tables run), NCCL's rule for the others: a link opens at the first message over it, while
// its step is being posted, and the posting stage waits there (no compute, no later step;
// its steps already posted go on) until the stage at the other end is posting its own first
// message over that link (NVIDIA/nccl#783; Communicator::connect_peers).
// Checked on the way: every forward's input and backward's output gradient has arrived
// (forward before backward, the received data the one the compute needs), a send leaves only
// what its compute produced and is still in the buffer, a receive lands only in a free buffer
// (an activation set whose previous micro-batch has run its backward: `slots` per stage, as
// the executor takes them, by default activation_slots() of the table run; the output gradient
// consumed).
std::string simulate(const std::vector<std::vector<PipelineAction>>& tables, int64_t pp, int64_t m, int64_t vp,
                     bool forward_only, bool overlapped = false, std::vector<ActivationSlots> slots = {},
                     const std::set<std::pair<int64_t, int64_t>>* lazy = nullptr) {
  const int64_t last_v = pp * vp - 1;
  // Lazy connections: the links open so far, and per stage the links whose first message it
  // is posting or has posted.
  std::set<std::pair<int64_t, int64_t>> open = lazy != nullptr ? *lazy : std::set<std::pair<int64_t, int64_t>>{};
  std::vector<std::set<std::pair<int64_t, int64_t>>> reached(static_cast<size_t>(pp));
  if (slots.empty()) {
    for (const auto& t : tables) slots.push_back(activation_slots(t));
  }
  using Key = std::tuple<int64_t, int64_t, int64_t>;  // (stage, chunk, micro-batch)
  std::set<Key> fwd_done, bwd_done, input_here, grad_here;
  struct Posted {
    const PipelineAction* step;
    std::vector<bool> matched;
    std::vector<BufId> buffers;
  };
  struct Stage {
    size_t pos = 0;
    std::vector<Posted> posted;
    size_t done = 0;                                                // posted steps completed (in order)
    std::map<BufId, std::pair<int64_t, int64_t>> holds;             // activation buffers: (chunk, micro-batch) in them
    std::pair<int64_t, int64_t> grad_in{-1, -1}, grad_out{-1, -1};  // (chunk, micro-batch) or free
  };
  std::vector<Stage> st(static_cast<size_t>(pp));
  auto set_of = [&](int64_t s, int64_t chunk, int64_t mb) { return slots[static_cast<size_t>(s)].at(chunk, mb); };
  auto buffer_of = [&](int64_t s, const P2PMessage& msg) -> BufId {
    if (msg.gradient) return {msg.send ? kInGrad : kOutGrad, 0};
    return {msg.send ? kOut : kIn, set_of(s, msg.chunk, msg.micro_batch)};
  };
  // What a compute reads or writes (the executor's compute_buffers).
  auto compute_buffers = [&](int64_t s, const PipelineAction& a) {
    const int64_t v = virtual_stage(pp, s, a.chunk), set = set_of(s, a.chunk, a.micro_batch);
    std::vector<BufId> out;
    if (v > 0) out.push_back({kIn, set});
    if (v < last_v) out.push_back({kOut, set});
    const bool backward = a.op == PipelineOp::kBackward;
    if (backward || (v == last_v && !forward_only)) out.push_back({kInGrad, 0});
    if (backward) out.push_back({kOutGrad, 0});
    return out;
  };
  // The virtual stage a message's data goes to (send) or comes from (receive).
  auto other_v = [&](int64_t s, const P2PMessage& msg) {
    const int64_t v = virtual_stage(pp, s, msg.chunk);
    return msg.gradient == msg.send ? v - 1 : v + 1;
  };
  auto held = [](const Stage& me, const BufId& b) {
    const auto it = me.holds.find(b);
    return it == me.holds.end() ? std::pair<int64_t, int64_t>{-1, -1} : it->second;
  };
  auto where = [&](int64_t s, const PipelineAction& a) {
    return "stage " + std::to_string(s) + " " + to_string(a, vp);
  };
  for (;;) {
    bool progress = false, all_done = true;
    for (int64_t s = 0; s < pp; ++s) {
      Stage& me = st[static_cast<size_t>(s)];
      const auto& table = tables[static_cast<size_t>(s)];
      // Match the running step's messages with the peers' running steps.
      if (me.done < me.posted.size()) {
        Posted& mine = me.posted[me.done];
        const std::vector<P2PMessage>& msgs = mine.step->messages;
        for (size_t i = 0; i < msgs.size(); ++i) {
          const P2PMessage& msg = msgs[i];
          if (mine.matched[i]) continue;
          bool earlier = false;
          for (size_t j = 0; j < i; ++j)
            earlier |= !mine.matched[j] && msgs[j].peer == msg.peer && msgs[j].send == msg.send;
          if (earlier) continue;
          Stage& peer = st[static_cast<size_t>(msg.peer)];
          if (peer.done >= peer.posted.size()) continue;
          Posted& theirs = peer.posted[peer.done];
          for (size_t j = 0; j < theirs.step->messages.size(); ++j) {
            const P2PMessage& o = theirs.step->messages[j];
            if (theirs.matched[j] || o.peer != s || o.send == msg.send) continue;
            const bool same = o.gradient == msg.gradient && o.micro_batch == msg.micro_batch &&
                              other_v(msg.peer, o) == virtual_stage(pp, s, msg.chunk) &&
                              other_v(s, msg) == virtual_stage(pp, msg.peer, o.chunk);
            if (!same) return "mismatched messages: " + where(s, *mine.step) + " vs " + where(msg.peer, *theirs.step);
            mine.matched[i] = theirs.matched[j] = true;
            const P2PMessage& recv = msg.send ? o : msg;
            const int64_t at = msg.send ? msg.peer : s;
            (recv.gradient ? grad_here : input_here).insert({at, recv.chunk, recv.micro_batch});
            progress = true;
            break;
          }
        }
        if (std::find(mine.matched.begin(), mine.matched.end(), false) == mine.matched.end()) {
          ++me.done;
          progress = true;
        }
      }
      if (me.pos >= table.size()) {
        all_done &= me.done == me.posted.size();
        continue;
      }
      all_done = false;
      const PipelineAction& a = table[me.pos];
      if (a.op == PipelineOp::kComm && lazy != nullptr) {
        // Opening the step's new links: wait until both ends have reached each of them.
        bool waiting = false;
        for (const P2PMessage& msg : a.messages) {
          const std::pair<int64_t, int64_t> link = msg.send ? std::pair{s, msg.peer} : std::pair{msg.peer, s};
          if (open.count(link)) continue;
          progress |= reached[static_cast<size_t>(s)].insert(link).second;
          if (reached[static_cast<size_t>(msg.peer)].count(link)) {
            open.insert(link);
            progress = true;
          } else {
            waiting = true;
          }
        }
        if (waiting) continue;
      }
      if (a.op == PipelineOp::kComm) {
        // Posting: what is sent is in its buffer, what is received lands in a free one.
        Posted p{&a, std::vector<bool>(a.messages.size(), false), {}};
        for (const P2PMessage& msg : a.messages) {
          const BufId b = buffer_of(s, msg);
          p.buffers.push_back(b);
          const std::pair<int64_t, int64_t> data{msg.chunk, msg.micro_batch};
          if (msg.send && msg.gradient && me.grad_out != data) return "sends a stale input gradient: " + where(s, a);
          if (msg.send && !msg.gradient && (!fwd_done.count({s, msg.chunk, msg.micro_batch}) || held(me, b) != data)) {
            return "sends an activation not in its buffer: " + where(s, a);
          }
          if (!msg.send && msg.gradient) {
            if (me.grad_in.first >= 0) return "output gradient received over an unconsumed one: " + where(s, a);
            me.grad_in = data;
          }
          if (!msg.send && !msg.gradient) {
            if (me.holds.count(b)) return "activation received into a busy set: " + where(s, a);
            me.holds[b] = data;
          }
        }
        me.posted.push_back(std::move(p));
        ++me.pos;
        progress = true;
        continue;
      }
      // A compute: wait for the posted steps the executor would wait for.
      const std::vector<BufId> touched = compute_buffers(s, a);
      size_t need = overlapped ? 0 : me.posted.size();
      for (size_t i = 0; overlapped && i < me.posted.size(); ++i) {
        for (const BufId& b : me.posted[i].buffers) {
          if (std::find(touched.begin(), touched.end(), b) != touched.end()) need = i + 1;
        }
      }
      if (me.done < need) continue;
      const Key key{s, a.chunk, a.micro_batch};
      const int64_t v = virtual_stage(pp, s, a.chunk), set = set_of(s, a.chunk, a.micro_batch);
      const BufId in{kIn, set}, out{kOut, set};
      const std::pair<int64_t, int64_t> data{a.chunk, a.micro_batch};
      if (a.op == PipelineOp::kForward) {
        if (v > 0 && (!input_here.count(key) || held(me, in) != data)) return "forward without input: " + where(s, a);
        if (v == 0) {
          if (me.holds.count(in)) return "forward into a busy set: " + where(s, a);
          me.holds[in] = data;
        }
        if (!fwd_done.insert(key).second) return "forward twice: " + where(s, a);
        me.holds[out] = data;
        if (v == last_v && !forward_only) me.grad_out = {-1, -1};  // the loss head's backward
        if (forward_only) me.holds.erase(in);
      } else {
        if (!fwd_done.count(key)) return "backward before forward: " + where(s, a);
        if (v < last_v) {
          if (!grad_here.count(key) || me.grad_in != std::pair<int64_t, int64_t>{a.chunk, a.micro_batch}) {
            return "backward without gradient: " + where(s, a);
          }
          me.grad_in = {-1, -1};
        }
        if (held(me, in) != data) return "backward of a set holding another micro-batch: " + where(s, a);
        me.holds.erase(in);
        if (!bwd_done.insert(key).second) return "backward twice: " + where(s, a);
        me.grad_out = {a.chunk, a.micro_batch};
      }
      ++me.pos;
      progress = true;
    }
    if (all_done) break;
    if (!progress) {
      std::string state;
      for (int64_t s = 0; s < pp; ++s) {
        const Stage& me = st[static_cast<size_t>(s)];
        const auto& table = tables[static_cast<size_t>(s)];
        state +=
            " stage " + std::to_string(s) + " at " + (me.pos < table.size() ? to_string(table[me.pos], vp) : "end");
        if (me.done < me.posted.size()) state += " running " + to_string(*me.posted[me.done].step, vp);
      }
      return "deadlock:" + state;
    }
  }
  const size_t expect = static_cast<size_t>(pp * vp * m);
  if (fwd_done.size() != expect) return "missing forwards";
  if (bwd_done.size() != (forward_only ? 0 : expect)) return "missing backwards";
  return "";
}

TEST(PipelineSchedule, OneFOneBByHand) {
  const auto t = all_tables(2, 3, 1);
  EXPECT_EQ(to_string(t[0], 1), "F0 [sF0>1] F1 [sF1>1 rB0<1] B0 F2 [sF2>1 rB1<1] B1 [rB2<1] B2");
  EXPECT_EQ(to_string(t[1], 1), "[rF0<0] F0 B0 [sB0>0 rF1<0] F1 B1 [sB1>0 rF2<0] F2 B2 [sB2>0]");
  // Three stages, the middle one both ways: warm-up 2, 1, 0.
  const auto u = all_tables(3, 2, 1);
  EXPECT_EQ(to_string(u[0], 1), "F0 [sF0>1] F1 [sF1>1 rB0<1] B0 [rB1<1] B1");
  EXPECT_EQ(to_string(u[1], 1), "[rF0<0] F0 [sF0>2 rF1<0] F1 [sF1>2 rB0<2] B0 [sB0>0 rB1<2] B1 [sB1>0]");
  EXPECT_EQ(to_string(u[2], 1), "[rF0<1] F0 B0 [sB0>1 rF1<1] F1 B1 [sB1>1]");
}

std::string computes(const std::vector<PipelineAction>& t, int64_t vp) {
  std::vector<PipelineAction> c;
  for (const PipelineAction& a : t) {
    if (a.op != PipelineOp::kComm) c.push_back(a);
  }
  return to_string(c, vp);
}

TEST(PipelineSchedule, InterleavedOrderByHand) {
  // pp 2, vp 2, M 4: stage 0 warms up with (2-0-1)*2 + (2-1)*2 = 4 forwards, stage 1 with 2;
  // forwards go chunk 0 for micro-batches 0,1, chunk 1 for 0,1, then chunk 0 for 2,3 ...;
  // backwards start on the last chunk.
  const auto t = all_tables(2, 4, 2);
  EXPECT_EQ(computes(t[0], 2), "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  EXPECT_EQ(computes(t[1], 2), "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  // The first messages: chunk 1 of stage 0 takes its input from chunk 0 of stage 1.
  EXPECT_EQ(to_string(t[0][1], 2), "[sF0.0>1]");
  EXPECT_EQ(to_string(t[0][3], 2), "[sF1.0>1 rF0.1<1]");
  // Steady-state pairs (F, B) run back to back between one exchange each: the sends of the
  // previous pair and the receives of this one (Megatron's combined exchange).
  EXPECT_EQ(to_string(t[1], 2),
            "[rF0.0<0] F0.0 [sF0.0>0 rF1.0<0] F1.0 [sF1.0>0 rF0.1<0] F0.1 B0.1 [sB0.1>0 rF1.1<0] F1.1 B1.1 "
            "[sB1.1>0 rF2.0<0 rB0.0<0] F2.0 B0.0 [sF2.0>0 sB0.0>0 rF3.0<0 rB1.0<0] F3.0 B1.0 "
            "[sF3.0>0 sB1.0>0 rF2.1<0] F2.1 B2.1 [sB2.1>0 rF3.1<0] F3.1 B3.1 [sB3.1>0 rB2.0<0] B2.0 "
            "[sB2.0>0 rB3.0<0] B3.0 [sB3.0>0]");
  // M == pp: all forwards, then all backwards.
  const auto all = all_tables(2, 2, 2);
  EXPECT_EQ(computes(all[1], 2), "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0");
}

// The links parallel::connect_pipeline_neighbours opens before any table runs: each stage with its
// pipeline_neighbours, both directions.
std::set<std::pair<int64_t, int64_t>> neighbour_links(int64_t pp, int64_t vp) {
  std::set<std::pair<int64_t, int64_t>> links;
  for (int64_t s = 0; s < pp; ++s) {
    for (int64_t peer : parallel::pipeline_neighbours(s, pp, vp > 1)) {
      links.insert({s, peer});
      links.insert({peer, s});
    }
  }
  return links;
}

TEST(PipelineSchedule, EveryShapeRunsWithoutDeadlock) {
  for (int64_t pp : {1, 2, 3, 4}) {
    for (int64_t vp : {1, 2, 3}) {
      if (pp == 1 && vp > 1) continue;
      const auto links = neighbour_links(pp, vp);
      for (int64_t m : {1, 2, 3, 4, 6, 8, 9}) {
        if (vp > 1 && m % pp != 0) continue;
        for (bool fo : {false, true}) {
          const std::string what = "pp " + std::to_string(pp) + " vp " + std::to_string(vp) + " M " +
                                   std::to_string(m) + (fo ? " forward only" : "");
          const auto tables = all_tables(pp, m, vp, fo);
          // Every message goes over a link opened up front (a lazily opened one could deadlock
          // under another table even where this simulation happens to finish).
          for (int64_t s = 0; s < pp; ++s) {
            for (const PipelineAction& a : tables[static_cast<size_t>(s)]) {
              for (const P2PMessage& msg : a.messages) {
                EXPECT_TRUE(links.count(msg.send ? std::pair{s, msg.peer} : std::pair{msg.peer, s}))
                    << what << ": stage " << s << " " << to_string(a, vp);
              }
            }
          }
          // Under NCCL's lazy connections, with the neighbours' links opened first (a message
          // to any other stage would open lazily and could deadlock).
          EXPECT_EQ(simulate(tables, pp, m, vp, fo, false, {}, &links), "") << what;
          // --overlap-p2p-communication: the same, split by direction, with the activation sets
          // the executor takes for it.
          const auto split = overlapped_tables(tables, vp);
          EXPECT_EQ(simulate(split, pp, m, vp, fo, /*overlapped=*/true, {}, &links), "") << what << " overlapped";
        }
      }
    }
  }
}

// What 4 x H100 showed (bench/results/2026-11-28.md, "the first 4-GPU machine"): PP4 with 2
// micro-batches hung in its first iteration while 8 micro-batches ran. Without links opened first,
// stage 0's first receive from stage 1 (B0) shares a group with F1's send, which stage 1 receives
// in a group before its own first send to stage 0: stage 0 waits in the connection for a message
// that needs F1 (with 1 micro-batch: [sF0>1 rB0<1] against stage 1's [rF0<0]). From 4 micro-batches
// on, the first messages each way are in matching groups.
TEST(PipelineSchedule, LazyConnectionsDeadlockFewerMicroBatchesThanStages) {
  const std::set<std::pair<int64_t, int64_t>> none;
  const auto links = neighbour_links(4, 1);
  for (int64_t m : {1, 2, 3}) {
    EXPECT_EQ(simulate(all_tables(4, m, 1), 4, m, 1, false, false, {}, &none).rfind("deadlock:", 0), 0u) << m;
    EXPECT_EQ(simulate(all_tables(4, m, 1), 4, m, 1, false, false, {}, &links), "") << m;
  }
  for (int64_t m : {4, 8}) EXPECT_EQ(simulate(all_tables(4, m, 1), 4, m, 1, false, false, {}, &none), "") << m;
}

TEST(PipelineSchedule, OverlappedExchangesByHand) {
  // 1F1B: each exchange becomes activations, then gradients; no receive moves (see the
  // mutation test below for why).
  const auto t = all_tables(2, 3, 1);
  EXPECT_EQ(to_string(overlapped_exchanges(t[0], 1), 1),
            "F0 [sF0>1] F1 [sF1>1] [rB0<1] B0 F2 [sF2>1] [rB1<1] B1 [rB2<1] B2");
  EXPECT_EQ(to_string(overlapped_exchanges(t[1], 1), 1),
            "[rF0<0] F0 B0 [rF1<0] [sB0>0] F1 B1 [rF2<0] [sB1>0] F2 B2 [sB2>0]");
  // Interleaved pp 2, vp 2, M 4 (the hand table above). After each steady-state pair (F, B)
  // the activation group moves between F and B: F1.1 [rF2.0<0] B1.1 on stage 1 receives F2.0's
  // input beside B1.1, and [sB1.1>0 rB0.0<0] receives B0.0's gradient beside F2.0; likewise
  // F0.1 [rF1.1<0] B0.1, whose receive takes a set beside those the pair holds
  // (ActivationSetsHeldAtOnce).
  const auto u = all_tables(2, 4, 2);
  EXPECT_EQ(to_string(overlapped_exchanges(u[0], 2), 2),
            "F0.0 [sF0.0>1] F1.0 [sF1.0>1 rF0.1<1] F0.1 [sF0.1>1 rF1.1<1] F1.1 [sF1.1>1] [rB0.1<1] F2.0 "
            "[sF2.0>1] B0.1 [sB0.1>1 rB1.1<1] F3.0 [sF3.0>1 rF2.1<1] B1.1 [sB1.1>1 rB0.0<1] F2.1 "
            "[sF2.1>1 rF3.1<1] B0.0 [rB1.0<1] F3.1 [sF3.1>1] B1.0 [rB2.1<1] B2.1 [sB2.1>1 rB3.1<1] B3.1 "
            "[sB3.1>1 rB2.0<1] B2.0 [rB3.0<1] B3.0");
  EXPECT_EQ(to_string(overlapped_exchanges(u[1], 2), 2),
            "[rF0.0<0] F0.0 [sF0.0>0 rF1.0<0] F1.0 [sF1.0>0 rF0.1<0] F0.1 [rF1.1<0] B0.1 [sB0.1>0] F1.1 "
            "[rF2.0<0] B1.1 [sB1.1>0 rB0.0<0] F2.0 [sF2.0>0 rF3.0<0] B0.0 [sB0.0>0 rB1.0<0] F3.0 "
            "[sF3.0>0 rF2.1<0] B1.0 [sB1.0>0] F2.1 [rF3.1<0] B2.1 [sB2.1>0] F3.1 B3.1 [sB3.1>0 rB2.0<0] "
            "B2.0 [sB2.0>0 rB3.0<0] B3.0 [sB3.0>0]");
  // Forward only: nothing to split or move.
  const auto f = all_tables(2, 4, 2, true);
  EXPECT_EQ(overlapped_exchanges(f[1], 2), f[1]);
}

// The pool of activation sets: the blocking interleaved table holds Megatron's count of
// chunks live at once, min(M vp, 2 (pp - s - 1) + (vp - 1) pp + 1), when M > pp (M == pp: all
// M vp, Megatron's all-warm-up case); the overlapped one one set more, the next forward's input
// received beside the backward that frees a set. 1F1B: min(pp - s, M) either way.
TEST(PipelineSchedule, ActivationSetsHeldAtOnce) {
  for (int64_t pp : {2, 3, 4, 8}) {
    for (int64_t vp : {1, 2, 3, 4}) {
      for (int64_t m : {1, 2, 3, 4, 6, 8, 9, 16, 24}) {
        if (vp > 1 && m % pp != 0) continue;
        for (int64_t s = 0; s < pp; ++s) {
          const std::vector<PipelineAction> t = pipeline_schedule({pp, s, m, vp});
          const int64_t blocking = activation_slots(t).count,
                        overlapped = activation_slots(overlapped_exchanges(t, vp)).count;
          SCOPED_TRACE(testing::Message() << "pp " << pp << " vp " << vp << " M " << m << " stage " << s);
          if (vp == 1) {
            EXPECT_EQ(blocking, std::min(pp - s, m));
            EXPECT_EQ(overlapped, blocking);
          } else {
            EXPECT_EQ(blocking, m == pp ? m * vp : std::min(m * vp, 2 * (pp - s - 1) + (vp - 1) * pp + 1));
            EXPECT_EQ(overlapped, m == pp ? blocking : blocking + 1);
          }
          EXPECT_EQ(activation_sets_needed({pp, s, m, vp}, false), blocking);
          EXPECT_EQ(activation_sets_needed({pp, s, m, vp}, true), overlapped);
        }
      }
    }
  }
}

// Swaps each activation group with the gradient group right after it.
std::vector<PipelineAction> gradients_first(std::vector<PipelineAction> t) {
  for (size_t i = 0; i + 1 < t.size(); ++i) {
    if (t[i].op == PipelineOp::kComm && t[i + 1].op == PipelineOp::kComm && !t[i].messages[0].gradient &&
        t[i + 1].messages[0].gradient) {
      std::swap(t[i], t[i + 1]);
      ++i;
    }
  }
  return t;
}

// Each receive posted one compute earlier than pipeline_schedule puts it (joining the group
// after that compute), as Megatron's interleaved steady state does, applied to 1F1B.
std::vector<PipelineAction> receives_one_earlier(const std::vector<PipelineAction>& t) {
  std::vector<PipelineAction> out;
  for (const PipelineAction& a : t) {
    if (a.op != PipelineOp::kComm) {
      out.push_back(a);
      continue;
    }
    PipelineAction sends{PipelineOp::kComm, 0, 0, {}}, recvs = sends;
    for (const P2PMessage& m : a.messages) (m.send ? sends : recvs).messages.push_back(m);
    // Back over the compute before this exchange, into the exchange before that compute (or
    // a new one right after the compute before it).
    size_t at = out.size();
    if (at > 0 && out[at - 1].op != PipelineOp::kComm && !recvs.messages.empty()) {
      if (at > 1 && out[at - 2].op == PipelineOp::kComm) {
        for (const P2PMessage& m : recvs.messages) out[at - 2].messages.push_back(m);
      } else {
        out.insert(out.end() - 1, recvs);
      }
      recvs.messages.clear();
    }
    for (const P2PMessage& m : recvs.messages) sends.messages.push_back(m);
    if (!sends.messages.empty()) out.push_back(sends);
  }
  return out;
}

TEST(PipelineSchedule, OverlappedMutationsFail) {
  // The two directions in opposite orders on one stage: it runs its activation group while its
  // neighbour runs the gradient group, neither completes.
  {
    auto split = overlapped_tables(all_tables(2, 3, 1), 1);
    split[1] = gradients_first(split[1]);
    EXPECT_EQ(simulate(split, 2, 3, 1, false, true).rfind("deadlock:", 0), 0u) << simulate(split, 2, 3, 1, false, true);
    auto inter = overlapped_tables(all_tables(2, 4, 2), 2);
    inter[0] = gradients_first(inter[0]);  // stage 1 has no activation group right before a gradient group
    EXPECT_EQ(simulate(inter, 2, 4, 2, false, true).rfind("deadlock:", 0), 0u) << simulate(inter, 2, 4, 2, false, true);
  }
  // 1F1B with every receive one compute earlier: the last stage posts the next forward's
  // receive before its backward's send, the stage before it the backward's receive before the
  // next forward's send; on one stream each waits for the other (Megatron's 1F1B schedule has
  // no overlapped exchanges either). With enough activation sets, so that only the order fails.
  {
    std::vector<std::vector<PipelineAction>> early;
    std::vector<ActivationSlots> sets;
    for (const auto& t : all_tables(2, 3, 1)) {
      early.push_back(receives_one_earlier(t));
      sets.push_back({3, {{{0, 0}, 0}, {{0, 1}, 1}, {{0, 2}, 2}}});
    }
    EXPECT_EQ(to_string(early[1], 1), "[rF0<0] F0 [rF1<0] B0 [sB0>0] F1 [rF2<0] B1 [sB1>0] F2 B2 [sB2>0]");
    EXPECT_EQ(simulate(early, 2, 3, 1, false, true, sets).rfind("deadlock:", 0), 0u)
        << simulate(early, 2, 3, 1, false, true, sets);
  }
  // Interleaved: the overlapped table run with the sets the blocking one takes. Stage 1 receives
  // F1.1's input beside B0.1, into the set B0.1 is still reading (the pool is one set short).
  {
    const auto blocking = all_tables(2, 4, 2);
    const auto split = overlapped_tables(blocking, 2);
    std::vector<ActivationSlots> short_pool;
    for (const auto& t : blocking) short_pool.push_back(activation_slots(t));
    EXPECT_EQ(simulate(split, 2, 4, 2, false, true, short_pool),
              "activation received into a busy set: stage 1 [rF1.1<0]");
    EXPECT_EQ(simulate(split, 2, 4, 2, false, true), "");
  }
  // The gradient receive of a backward posted before the backward before it consumed its own:
  // one output-gradient buffer is enough only because no table does that.
  {
    auto split = overlapped_tables(all_tables(2, 4, 2), 2);
    auto& t = split[0];
    const auto b = std::find(t.begin(), t.end(), PipelineAction{PipelineOp::kBackward, 0, 0, {}});
    ASSERT_EQ(to_string(*(b + 1), 2), "[rB1.0<1]");
    std::iter_swap(b, b + 1);
    EXPECT_EQ(simulate(split, 2, 4, 2, false, true),
              "output gradient received over an unconsumed one: stage 0 [rB1.0<1]");
  }
}

TEST(PipelineSchedule, ActivationSetsByHand) {
  // Interleaved pp 2, vp 2, M 4 (the hand table above). Stage 0 runs F0.0 F1.0 F0.1 F1.1 F2.0
  // before its first backward B0.1 (5 sets), which frees set 2 for F3.0; B1.1 frees set 3.
  const ActivationSlots s0 = activation_slots(pipeline_schedule({2, 0, 4, 2}));
  EXPECT_EQ(s0.count, 5);
  const std::map<std::pair<int64_t, int64_t>, int64_t> s0_sets{{{0, 0}, 0}, {{0, 1}, 1}, {{0, 2}, 4}, {{0, 3}, 2},
                                                               {{1, 0}, 2}, {{1, 1}, 3}, {{1, 2}, 3}, {{1, 3}, 0}};
  EXPECT_EQ(s0.of, s0_sets);
  // Stage 1 ([rF0.0<0] F0.0 [.. rF1.0<0] F1.0 [.. rF0.1<0] F0.1 B0.1 [.. rF1.1<0] ...): its
  // receives take the sets; 3 at once.
  EXPECT_EQ(activation_slots(pipeline_schedule({2, 1, 4, 2})).count, 3);
  // Evaluation keeps nothing past the forward.
  EXPECT_EQ(activation_slots(pipeline_schedule({2, 0, 4, 2, true})).count, 1);
  EXPECT_EQ(activation_slots(pipeline_schedule({2, 1, 4, 2, true})).count, 1);
}

// The count needs no table of all M micro-batches: 2^40 of them (a global batch of 2^40 at
// --dry-run once grew without bound) take a moment and a few bytes. In a child under a 1 GiB
// address-space limit and a time limit, so that a regression fails instead of exhausting memory.
TEST(PipelineSchedule, ActivationSetsOfHugeMicroBatchCountsAreQuick) {
  auto bounded = [] {
    ::alarm(20);
    const rlimit as{rlim_t{1} << 30, rlim_t{1} << 30};
    ::setrlimit(RLIMIT_AS, &as);
    const int64_t m = int64_t{1} << 40;
    const bool ok =
        activation_sets_needed({1, 0, m, 1}, false) == 1 && activation_sets_needed({4, 1, m, 1}, true) == 3 &&
        activation_sets_needed({4, 3, m, 2}, false) == 5 && activation_sets_needed({4, 0, m, 2}, true) == 12;
    ::_exit(ok ? 0 : 1);
  };
  EXPECT_EXIT(bounded(), ::testing::ExitedWithCode(0), "");
  // The shape is still checked before the count is capped: 2^40 + 2 is not a multiple of 4.
  EXPECT_THROW(activation_sets_needed({4, 0, (int64_t{1} << 40) + 2, 2}, false), Error);
}

TEST(PipelineSchedule, InterleavingNeedsMicroBatchesDivisibleByStages) {
  try {
    pipeline_schedule({4, 0, 6, 2});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[--num-layers-per-virtual-pipeline-stage] number of microbatches (6) is not divisible by "
                 "--pipeline-model-parallel-size (4) when using the interleaved schedule");
  }
}

}  // namespace
}  // namespace megatron::parallel
