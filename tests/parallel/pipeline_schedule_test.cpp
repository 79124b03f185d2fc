// The pipeline tables without communication: every stage's table is run together in a small
// simulator of the executor's semantics (a kComm step posts all its messages, the stage waits
// until each is matched; between two stages messages match in posting order), which checks
// that every forward's input was produced and received, every backward follows its forward and
// has its output gradient, messages pair up with the right data, and nothing deadlocks. The
// small cases are also compared with tables worked out by hand.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"

namespace megatron::parallel {
namespace {

std::vector<std::vector<PipelineAction>> all_tables(int64_t pp, int64_t m, int64_t vp, bool forward_only = false) {
  std::vector<std::vector<PipelineAction>> t;
  for (int64_t s = 0; s < pp; ++s) t.push_back(pipeline_schedule({pp, s, m, vp, forward_only}));
  return t;
}

// Runs the tables; returns "" or what went wrong.
std::string simulate(const std::vector<std::vector<PipelineAction>>& tables, int64_t pp, int64_t m, int64_t vp,
                     bool forward_only) {
  const int64_t last_v = pp * vp - 1;
  using Key = std::tuple<int64_t, int64_t, int64_t>;  // (stage, chunk, micro-batch)
  std::set<Key> fwd_done, bwd_done, input_here, grad_here;
  std::vector<size_t> pos(static_cast<size_t>(pp), 0);
  // Per stage, which messages of its current kComm step are matched.
  std::vector<std::vector<bool>> matched(static_cast<size_t>(pp));
  auto step_of = [&](int64_t s) -> const PipelineAction* {
    const auto& t = tables[static_cast<size_t>(s)];
    return pos[static_cast<size_t>(s)] < t.size() ? &t[pos[static_cast<size_t>(s)]] : nullptr;
  };
  // The virtual stage a message's data goes to (send) or comes from (receive).
  auto other_v = [&](int64_t s, const P2PMessage& msg) {
    const int64_t v = virtual_stage(pp, s, msg.chunk);
    return msg.gradient == msg.send ? v - 1 : v + 1;
  };
  for (;;) {
    bool progress = false, all_done = true;
    for (int64_t s = 0; s < pp; ++s) {
      const PipelineAction* a = step_of(s);
      if (!a) continue;
      all_done = false;
      const Key key{s, a->chunk, a->micro_batch};
      const int64_t v = virtual_stage(pp, s, a->chunk);
      if (a->op == PipelineOp::kForward) {
        if (v > 0 && !input_here.count(key)) return "forward without input: stage " + std::to_string(s) + " " + to_string(*a, vp);
        if (!fwd_done.insert(key).second) return "forward twice: " + to_string(*a, vp);
        ++pos[static_cast<size_t>(s)];
        progress = true;
        continue;
      }
      if (a->op == PipelineOp::kBackward) {
        if (!fwd_done.count(key)) return "backward before forward: " + to_string(*a, vp);
        if (v < last_v && !grad_here.count(key)) return "backward without gradient: " + to_string(*a, vp);
        if (!bwd_done.insert(key).second) return "backward twice: " + to_string(*a, vp);
        ++pos[static_cast<size_t>(s)];
        progress = true;
        continue;
      }
      auto& mine = matched[static_cast<size_t>(s)];
      if (mine.size() != a->messages.size()) mine.assign(a->messages.size(), false);
      for (size_t i = 0; i < a->messages.size(); ++i) {
        const P2PMessage& msg = a->messages[i];
        if (mine[i]) continue;
        // Only the earliest unmatched message of this direction to this peer can match.
        bool earlier = false;
        for (size_t j = 0; j < i; ++j) {
          earlier |= !mine[j] && a->messages[j].peer == msg.peer && a->messages[j].send == msg.send;
        }
        if (earlier) continue;
        if (msg.send) {
          const Key produced{s, msg.chunk, msg.micro_batch};
          if (!(msg.gradient ? bwd_done : fwd_done).count(produced)) return "send before compute: " + to_string(*a, vp);
        }
        const PipelineAction* b = step_of(msg.peer);
        if (!b || b->op != PipelineOp::kComm) continue;
        auto& theirs = matched[static_cast<size_t>(msg.peer)];
        if (theirs.size() != b->messages.size()) theirs.assign(b->messages.size(), false);
        for (size_t j = 0; j < b->messages.size(); ++j) {
          const P2PMessage& o = b->messages[j];
          if (theirs[j] || o.peer != s || o.send == msg.send) continue;
          // The first unmatched opposite message from s: it must carry the same data.
          const bool same = o.gradient == msg.gradient && o.micro_batch == msg.micro_batch &&
                            other_v(msg.peer, o) == virtual_stage(pp, s, msg.chunk) &&
                            other_v(s, msg) == virtual_stage(pp, msg.peer, o.chunk);
          if (!same) return "mismatched messages: stage " + std::to_string(s) + " " + to_string(*a, vp) + " vs stage " +
                            std::to_string(msg.peer) + " " + to_string(*b, vp);
          mine[i] = theirs[j] = true;
          const P2PMessage& recv = msg.send ? o : msg;
          const int64_t at = msg.send ? msg.peer : s;
          (recv.gradient ? grad_here : input_here).insert({at, recv.chunk, recv.micro_batch});
          progress = true;
          break;
        }
      }
      bool complete = true;
      for (bool x : mine) complete &= x;
      if (complete) {
        mine.clear();
        ++pos[static_cast<size_t>(s)];
        progress = true;
      }
    }
    if (all_done) break;
    if (!progress) {
      std::string where;
      for (int64_t s = 0; s < pp; ++s) {
        const PipelineAction* a = step_of(s);
        where += " stage " + std::to_string(s) + " at " + (a ? to_string(*a, vp) : "end");
      }
      return "deadlock:" + where;
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
  EXPECT_EQ(computes(t[0], 2),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  EXPECT_EQ(computes(t[1], 2),
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
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

TEST(PipelineSchedule, EveryShapeRunsWithoutDeadlock) {
  for (int64_t pp : {1, 2, 3, 4}) {
    for (int64_t vp : {1, 2, 3}) {
      if (pp == 1 && vp > 1) continue;
      for (int64_t m : {1, 2, 3, 4, 6, 8, 9}) {
        if (vp > 1 && m % pp != 0) continue;
        for (bool fo : {false, true}) {
          const std::string what = "pp " + std::to_string(pp) + " vp " + std::to_string(vp) + " M " +
                                   std::to_string(m) + (fo ? " forward only" : "");
          EXPECT_EQ(simulate(all_tables(pp, m, vp, fo), pp, m, vp, fo), "") << what;
        }
      }
    }
  }
}

TEST(PipelineSchedule, InFlightActivations) {
  // 1F1B: stage s holds at most min(pp - s, M) micro-batches.
  for (int64_t s = 0; s < 4; ++s) {
    EXPECT_EQ(max_in_flight(pipeline_schedule({4, s, 8, 1}), 1), std::vector<int64_t>{4 - s});
    EXPECT_EQ(max_in_flight(pipeline_schedule({4, s, 2, 1}), 1), std::vector<int64_t>{std::min<int64_t>(4 - s, 2)});
  }
  // Interleaved pp 2, vp 2, M 4 (the hand table above): stage 0 runs 4 forwards of chunk 0
  // before its first backward, 2 of chunk 1.
  EXPECT_EQ(max_in_flight(pipeline_schedule({2, 0, 4, 2}), 2), (std::vector<int64_t>{4, 2}));
  // Stage 1 runs F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0: 3 of chunk 0, 1 of chunk 1.
  EXPECT_EQ(max_in_flight(pipeline_schedule({2, 1, 4, 2}), 2), (std::vector<int64_t>{3, 1}));
  // Evaluation keeps nothing.
  EXPECT_EQ(max_in_flight(pipeline_schedule({2, 0, 4, 2, true}), 2), (std::vector<int64_t>{1, 1}));
}

TEST(PipelineSchedule, SetsFollowMicroBatchOrder) {
  // Per chunk, forwards and backwards come in micro-batch order (what lets micro-batch k use
  // activation set k mod max_in_flight).
  for (int64_t pp : {2, 4}) {
    for (int64_t vp : {1, 2}) {
      for (int64_t s = 0; s < pp; ++s) {
        const auto t = pipeline_schedule({pp, s, 8, vp});
        std::map<std::pair<int, int64_t>, int64_t> next;
        for (const PipelineAction& a : t) {
          if (a.op == PipelineOp::kComm) continue;
          int64_t& n = next[{a.op == PipelineOp::kForward ? 0 : 1, a.chunk}];
          EXPECT_EQ(a.micro_batch, n++);
        }
      }
    }
  }
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
