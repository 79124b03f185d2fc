// The overlap points of the pipeline executor on one stage of PP2, 1F1B and interleaved (vp 2),
// run alone (the pipeline group moves nothing) with a recording data-parallel group
// (support/recording_communicator.h) and the distributed optimizer's buffer (4 micro-batches,
// buckets of ~300 elements: several per chunk, the tied embedding alone). The log interleaves
// the model's hook calls ("final k": gradients of parameters [k, chunk end) final; "read k":
// parameters [0, k) about to be read) with the collectives started and waited for, and the
// test checks, bucket by bucket:
//  - grad reduce: a bucket starts right after the hook call that makes its parameters final
//    for the 4th (last) time — never during an earlier micro-batch's backward — except the tied
//    embedding's, which starts only in finish_grad_sync (after the embedding-group sum);
//    nothing is waited for before finish_grad_sync, everything is by its end;
//  - param gather: the gathers start in reading order (chunk 0's buckets first) and each is
//    waited for right after the first "read k" that reaches into its bucket, not before.
// And the pipeline exchanges under --overlap-p2p-communication, with a recording pipeline
// group: every started group is waited for once, in order, only right before a compute that
// touches one of its buffers and before any compute that does; interleaved receives start
// before the compute preceding the one that reads them; a 1F1B forward does not wait for the
// gradient group started with its input's receive.
#include "parallel/pipeline_executor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "parallel/grad_buffer.h"
#include "support/recording_communicator.h"

namespace megatron::parallel {
namespace {

model::GPTConfig tiny_config(int64_t layers = 4) {
  model::GPTConfig c;
  c.num_layers = layers;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.kv_channels = 4;
  c.ffn_hidden_size = 16;
  c.seq_length = 4;
  c.max_position_embeddings = 4;
  c.vocab_size = 13;
  c.padded_vocab_size = 16;
  c.attention_dropout = 0.0f;
  c.hidden_dropout = 0.0f;
  return c;
}

// The callbacks of a stage fed one fixed micro-batch (tokens 5, labels 7, every position
// counted) without dropout; `head` is the loss head's backward on the last stage.
parallel::PipelineCallbacks fixed_batch_callbacks(const model::GPTConfig& c, model::HeadBackward* head) {
  parallel::PipelineCallbacks cb;
  cb.load = [seq = c.seq_length](int64_t, model::MicroBatch* mb) {
    mb->batch = 1;
    mb->seq = seq;
    mb->tokens.assign(static_cast<size_t>(seq), 5);
    mb->labels.assign(static_cast<size_t>(seq), 7);
    mb->loss_mask.assign(static_cast<size_t>(seq), 1.0f);
  };
  cb.dropout = [](int64_t) { return model::DropoutContext{}; };
  cb.head = head;
  return cb;
}

// The pipeline group of a stage that runs alone: receives fill zeros, sends go nowhere.
class NoPeers final : public comm::Communicator {
 public:
  int64_t rank() const override { return 0; }
  int64_t size() const override { return 2; }
  const std::string& name() const override { return name_; }
  void all_reduce(Tensor&, comm::ReduceOp) override {}
  void all_reduce_host(std::span<double>, comm::ReduceOp) override {}
  void reduce_scatter(Tensor&, Tensor&, std::span<const int64_t>, comm::ReduceOp) override {}
  void all_gather(const Tensor&, Tensor&, std::span<const int64_t>) override {}
  void broadcast(Tensor&, int64_t) override {}
  void send(const Tensor&, int64_t) override {}
  void recv(Tensor&, int64_t) override {}
  void send_recv(std::span<const comm::PointToPoint> ops) override {
    for (const comm::PointToPoint& op : ops) {
      if (!op.send) std::memset(op.tensor.data(), 0, static_cast<size_t>(op.tensor.nbytes()));
    }
  }
  void barrier() override {}
  std::unique_ptr<comm::Communicator> split(int64_t, int64_t, const std::string&) override { return nullptr; }

 private:
  std::string name_ = "pp";
};

int64_t number_after(const std::string& entry, const std::string& prefix) {
  return std::stoll(entry.substr(prefix.size()));
}

// "start reduce_scatter [a, b)" -> a.
int64_t range_start(const std::string& entry) { return std::stoll(entry.substr(entry.find('[') + 1)); }

void check_stage(int64_t vp, int64_t stage) {
  SCOPED_TRACE("vp " + std::to_string(vp) + " stage " + std::to_string(stage));
  constexpr int64_t kMicro = 4;
  const model::GPTConfig c = tiny_config();
  const parallel::PipelineShape shape{2, stage, kMicro, vp, false};
  const std::vector<parallel::PipelineAction> table = parallel::pipeline_schedule(shape);
  auto backend = backend::make_cpu_backend();
  model::PipelineStageOptions pipe{2, stage, vp, parallel::activation_slots(table).count};
  model::GPTModel model(c, *backend, DType::kF32, 1, {}, pipe);
  model::ParameterSet& ps = model.parameters();
  ps.initialize(*backend, 3, 0.1f, c.num_layers);
  auto offset = [&](int64_t k) {
    return k < static_cast<int64_t>(ps.params().size()) ? ps[k].offset : ps.total_numel();
  };

  test::RecordingCommunicator dp({ps.grads(), ps.values()});
  std::vector<std::string>& log = dp.log;
  parallel::BucketLayout layout;
  layout.bucket_size = 300;
  for (int64_t ci = 1; ci < vp; ++ci) layout.starts.push_back(model.chunk_parameters(ci).first);
  ASSERT_NE(model.tied_embedding(), nullptr);
  layout.held = model.tied_embedding() - ps.params().data();
  parallel::GradBuffer gb(ps, dp, /*distributed=*/true, layout);
  ASSERT_GT(gb.buckets().size(), static_cast<size_t>(2 * vp)) << "several buckets per chunk";

  model::ParamHooks hooks;
  hooks.before_reading = [&](int64_t k) {
    log.push_back("read " + std::to_string(k));
    gb.before_reading(k);
  };
  hooks.grads_final_from = [&](int64_t k) {
    log.push_back("final " + std::to_string(k));
    gb.grads_final_from(k);
  };
  model.set_param_hooks(hooks);

  gb.start_param_gather(/*overlap=*/true);
  model::HeadBackward head;
  head.grad_scale = 1.0f / kMicro;
  parallel::PipelineCallbacks cb = fixed_batch_callbacks(c, &head);
  cb.grad_sync = [&](int64_t chunk, bool on) {
    if (!on) return gb.disarm_grad_overlap();
    const auto [first, end] = model.chunk_parameters(chunk);
    gb.arm_grad_overlap(first, end);
  };
  NoPeers pp;
  parallel::run_pipeline(table, model, pp, cb);
  log.push_back("finish");
  gb.finish_grad_sync();

  const size_t finish = static_cast<size_t>(std::find(log.begin(), log.end(), "finish") - log.begin());
  // The chunk holding element a, and the hook indices the model reported for each chunk.
  auto chunk_of = [&](int64_t a) {
    for (int64_t ci = 0; ci < vp; ++ci) {
      if (a < offset(model.chunk_parameters(ci).second)) return ci;
    }
    return vp;
  };
  const int64_t held_start = gb.buckets()[gb.held_bucket()].start;
  for (const Range& b : gb.buckets()) {
    const std::string what = "reduce_scatter [" + std::to_string(b.start) + ", " + std::to_string(b.end) + ")";
    SCOPED_TRACE(what);
    const auto start = std::find(log.begin(), log.end(), "start " + what);
    ASSERT_NE(start, log.end());
    EXPECT_EQ(std::count(log.begin(), log.end(), "start " + what), 1);
    const size_t at = static_cast<size_t>(start - log.begin());
    const auto wait = std::find(log.begin(), log.end(), "wait " + what);
    ASSERT_NE(wait, log.end());
    EXPECT_GT(wait - log.begin(), static_cast<std::ptrdiff_t>(finish)) << "waited for in finish_grad_sync";
    if (b.start == held_start) {
      EXPECT_GT(at, finish) << "the tied embedding's bucket starts after the embedding-group sum";
      continue;
    }
    EXPECT_LT(at, finish);
    // The first hook call of a backward that covers the bucket: the largest k of its chunk
    // whose parameters [k, ...) include the bucket's start.
    const int64_t ci = chunk_of(b.start);
    const auto [first, end] = model.chunk_parameters(ci);
    int64_t covering = -1;
    for (const std::string& e : log) {
      if (e.rfind("final ", 0) != 0) continue;
      const int64_t k = number_after(e, "final ");
      if (k >= first && k < end && offset(k) <= b.start) covering = std::max(covering, k);
    }
    ASSERT_GE(covering, 0);
    const std::string final_k = "final " + std::to_string(covering);
    EXPECT_EQ(std::count(log.begin(), start, final_k), kMicro)
        << "started before the last micro-batch's gradients of chunk " << ci << " were final";
    size_t before = at;
    while (before > 0 && log[before - 1].rfind("start reduce_scatter", 0) == 0) --before;
    ASSERT_GT(before, 0u);
    EXPECT_EQ(log[before - 1], final_k) << "not started right when its gradients became final";
  }

  // Gathers: started first, in buffer order (the forward reads chunk 0 first).
  int64_t last = -1;
  size_t gathers = 0;
  for (; gathers < log.size() && log[gathers].rfind("start all_gather", 0) == 0; ++gathers) {
    EXPECT_GT(range_start(log[gathers]), last);
    last = range_start(log[gathers]);
  }
  EXPECT_EQ(gathers, gb.buckets().size());
  for (const Range& b : gb.buckets()) {
    const std::string wait = "wait all_gather [" + std::to_string(b.start) + ", " + std::to_string(b.end) + ")";
    SCOPED_TRACE(wait);
    const auto at = std::find(log.begin(), log.end(), wait);
    ASSERT_NE(at, log.end());
    // The first read reaching into the bucket, and the wait right after it (other gathers'
    // waits for the same read between them).
    const auto first_read = std::find_if(log.begin(), log.end(), [&](const std::string& e) {
      return e.rfind("read ", 0) == 0 && offset(number_after(e, "read ")) > b.start;
    });
    ASSERT_LT(first_read, at) << "waited for before the forward reads it";
    for (auto e = first_read + 1; e != at; ++e) EXPECT_EQ(e->rfind("wait all_gather", 0), 0u) << *e;
  }
}

TEST(PipelineExecutor, OverlapPointsFollowTheLastMicroBatchOfEachChunk) {
  for (int64_t vp : {1, 2}) {
    for (int64_t stage : {0, 1}) check_stage(vp, stage);
  }
}

// ---- --overlap-p2p-communication: where exchanges are started and waited for ----

// One stage of a pipeline of `pp` stages (M micro-batches, vp chunks) run alone with a
// recording pipeline group: the log holds the exchanges ("blocking ...", "start ...",
// "wait ...": "send out 1" = the output in activation set 1, "recv in", "send igrad", "recv
// ograd") and "F3.1" / "B0" for each compute, logged after its waits. `touched` gets, per
// logged compute, the buffers it reads or writes (the executor's rule).
std::vector<std::string> p2p_log(int64_t pp, int64_t vp, int64_t stage, int64_t micro, int64_t layers, bool overlap,
                                 std::map<std::string, std::vector<std::string>>* touched) {
  const model::GPTConfig c = tiny_config(layers);
  const std::vector<parallel::PipelineAction> table = parallel::pipeline_schedule({pp, stage, micro, vp, false});
  auto backend = backend::make_cpu_backend();
  model::GPTModel model(c, *backend, DType::kF32, 1, {},
                        {pp, stage, vp, parallel::activation_sets_needed({pp, stage, micro, vp}, overlap)});
  model.parameters().initialize(*backend, 3, 0.1f, c.num_layers);
  test::RecordingCommunicator comm({});
  auto set_name = [](int64_t set) { return std::to_string(set); };
  comm.p2p_name = [&](const Tensor& t) -> std::string {
    if (t.data() == model.input_grad().data()) return "igrad";
    if (t.data() == model.output_grad_buffer().data()) return "ograd";
    // The pool's sets are the same buffers for every chunk.
    for (int64_t ci = 0; ci < vp; ++ci) {
      for (int64_t k = 0; k < model.activation_sets(); ++k) {
        if (!model.is_first_virtual(ci) && t.data() == model.input_buffer(ci, k).data()) return "in " + set_name(k);
        if (!model.is_last_virtual(ci) && t.data() == model.output(ci, k).data()) return "out " + set_name(k);
      }
    }
    ADD_FAILURE() << "an exchange of an unknown buffer";
    return "?";
  };
  model::HeadBackward head;
  head.grad_scale = 1.0f / static_cast<float>(micro);
  parallel::PipelineCallbacks cb = fixed_batch_callbacks(c, &head);
  cb.overlap_p2p = overlap;
  cb.before_compute = [&](const parallel::PipelineAction& a, int64_t set) {
    const std::string name = parallel::to_string(a, vp);
    comm.log.push_back(name);
    std::vector<std::string>& b = (*touched)[name];
    if (!model.is_first_virtual(a.chunk)) b.push_back("in " + set_name(set));
    if (!model.is_last_virtual(a.chunk)) b.push_back("out " + set_name(set));
    const bool backward = a.op == parallel::PipelineOp::kBackward;
    if (backward || model.is_last_virtual(a.chunk)) b.push_back("igrad");
    if (backward) b.push_back("ograd");
  };
  parallel::run_pipeline(table, model, comm, cb);
  return comm.log;
}

// The buffers of a logged exchange ("start send out 1 recv in 3" -> {out 1, in 3}).
std::vector<std::string> exchange_buffers(const std::string& entry) {
  std::vector<std::string> out;
  std::istringstream in(entry.substr(entry.find(' ') + 1));
  std::string dir, kind, which;
  while (in >> dir >> kind) {
    if (kind == "in" || kind == "out") {
      in >> which;
      kind += " " + which;
    }
    out.push_back(kind);
  }
  return out;
}

bool is_compute(const std::string& e) { return e[0] == 'F' || e[0] == 'B'; }

// Checks the waits of an overlapped log: every started exchange is waited for once, in start
// order; no compute runs while an exchange of one of its buffers is unwaited; and a run of
// waits ends with an exchange of the compute right after it (or the end of the table): no
// wait earlier than needed. Returns, per compute that reads a received buffer, whether that
// receive was started before the compute preceding it (it ran beside that compute).
std::map<std::string, bool> check_waits(const std::vector<std::string>& log,
                                        const std::map<std::string, std::vector<std::string>>& touched) {
  std::deque<std::string> unwaited;           // started, oldest first
  std::map<std::string, size_t> received_at;  // buffer -> log index of the start receiving into it
  std::map<std::string, bool> beside;
  size_t last_compute = 0;
  for (size_t i = 0; i < log.size(); ++i) {
    const std::string& e = log[i];
    EXPECT_NE(e.rfind("blocking", 0), 0u) << "a blocking exchange under --overlap-p2p-communication";
    if (e.rfind("start ", 0) == 0) {
      unwaited.push_back(e.substr(6));
      const std::vector<std::string> bufs = exchange_buffers(e);
      std::istringstream in(e.substr(6));
      for (const std::string& b : bufs) {
        if (e.find("recv " + b) != std::string::npos) received_at[b] = i;
      }
      continue;
    }
    if (e.rfind("wait ", 0) == 0) {
      EXPECT_FALSE(unwaited.empty()) << "wait without start at " << i;
      if (unwaited.empty()) continue;
      EXPECT_EQ(e.substr(5), unwaited.front()) << "waited out of start order at " << i;
      unwaited.pop_front();
      // The last wait of a run: the next compute touches one of its buffers (or none follows).
      if (i + 1 < log.size() && log[i + 1].rfind("wait ", 0) != 0) {
        size_t next = i + 1;
        while (next < log.size() && !is_compute(log[next])) ++next;
        if (next == log.size()) continue;
        const std::vector<std::string>& t = touched.at(log[next]);
        bool hit = false;
        for (const std::string& b : exchange_buffers(e)) hit |= std::find(t.begin(), t.end(), b) != t.end();
        EXPECT_TRUE(hit) << e << " waited for before " << log[next] << ", which does not touch it";
      }
      continue;
    }
    // A compute: nothing it touches is still in flight.
    for (const std::string& pending : unwaited) {
      for (const std::string& b : exchange_buffers("x " + pending)) {
        const std::vector<std::string>& t = touched.at(e);
        EXPECT_EQ(std::find(t.begin(), t.end(), b), t.end()) << e << " runs while '" << pending << "' is in flight";
      }
    }
    const std::string reads = e[0] == 'F' ? (touched.at(e).empty() ? "" : touched.at(e)[0]) : "ograd";
    if (received_at.count(reads) && received_at[reads] > 0) {
      if (reads.rfind("in ", 0) == 0 || e[0] == 'B') beside[e] = received_at[reads] < last_compute;
      received_at.erase(reads);
    }
    last_compute = i;
  }
  EXPECT_TRUE(unwaited.empty()) << "exchanges never waited for";
  return beside;
}

std::vector<std::string> overlapped_computes(const std::map<std::string, bool>& beside) {
  std::vector<std::string> out;
  for (const auto& [compute, yes] : beside) {
    if (yes) out.push_back(compute);
  }
  return out;
}

TEST(PipelineExecutor, OverlappedReceivesRunBesideThePrecedingCompute) {
  // Interleaved PP2 (vp 2, M 4), stage 1: the overlapped table (pipeline_schedule_test's
  // by hand) receives the inputs of F1.1, F2.0, F3.0, F2.1 and F3.1 while the backward before
  // each runs (B0.1, B1.1, B0.0, B1.0, B2.1), and B0.0's gradient while F2.0 runs and B1.0's
  // while F3.0 runs; the blocking run receives nothing early.
  std::map<std::string, std::vector<std::string>> touched;
  const std::vector<std::string> log = p2p_log(2, 2, 1, 4, 4, true, &touched);
  EXPECT_EQ(overlapped_computes(check_waits(log, touched)),
            (std::vector<std::string>{"B0.0", "B1.0", "F1.1", "F2.0", "F2.1", "F3.0", "F3.1"}));
  const auto at = [&](const std::string& e) { return std::find(log.begin(), log.end(), e) - log.begin(); };
  EXPECT_LT(at("start recv in 2"), at("B1.1"));
  EXPECT_EQ(at("wait recv in 2") + 1, at("F2.0")) << "waited for right before the forward that reads it";
  EXPECT_LT(at("start send igrad recv ograd"), at("F2.0"));

  std::map<std::string, std::vector<std::string>> touched_blocking;
  const std::vector<std::string> blocking = p2p_log(2, 2, 1, 4, 4, false, &touched_blocking);
  size_t exchanges = 0;
  for (const std::string& e : blocking) {
    if (is_compute(e)) continue;
    EXPECT_EQ(e.rfind("blocking ", 0), 0u) << e;
    ++exchanges;
  }
  size_t steps = 0;
  for (const parallel::PipelineAction& a : parallel::pipeline_schedule({2, 1, 4, 2, false})) {
    steps += a.op == parallel::PipelineOp::kComm;
  }
  EXPECT_EQ(exchanges, steps) << "the blocking table's steps, unchanged";
}

TEST(PipelineExecutor, OverlappedForwardWaitsOnlyForActivations) {
  // 1F1B PP3 (M 4), the middle stage: the exchange before F2 (sB0 to stage 0, rF2 from it) is
  // two groups; F2 waits for the activation and runs while the gradient send is in flight,
  // which is waited for only before B1 (which overwrites input_grad).
  std::map<std::string, std::vector<std::string>> touched;
  const std::vector<std::string> log = p2p_log(3, 1, 1, 4, 3, true, &touched);
  check_waits(log, touched);
  // The first occurrence of `e` after index `from`.
  const auto at = [&](const std::string& e, std::ptrdiff_t from = -1) {
    return std::find(log.begin() + (from + 1), log.end(), e) - log.begin();
  };
  const auto b0 = at("B0"), f2 = at("F2");
  ASSERT_LT(f2, static_cast<std::ptrdiff_t>(log.size()));
  // Between B0 and F2: the receive of F2's input (set 0), then the send of B0's input gradient.
  EXPECT_EQ(std::vector<std::string>(log.begin() + b0 + 1, log.begin() + f2),
            (std::vector<std::string>{"start recv in 0", "start send igrad", "wait recv in 0"}));
  const auto wait_grad = at("wait send igrad", f2);
  EXPECT_LT(wait_grad, at("B1")) << "waited for after F2, before the next backward";
  // Blocking: one exchange carries both.
  std::map<std::string, std::vector<std::string>> touched_blocking;
  const std::vector<std::string> blocking = p2p_log(3, 1, 1, 4, 3, false, &touched_blocking);
  EXPECT_NE(std::find(blocking.begin(), blocking.end(), "blocking send igrad recv in 0"), blocking.end());
}

// Megatron's p2p_communication names for our exchanges (its timers' names), by which messages
// an exchange holds.
TEST(PipelineExecutor, MegatronTimerNames) {
  using parallel::P2PMessage;
  using parallel::PipelineAction;
  using parallel::PipelineOp;
  auto exchange = [](std::vector<std::pair<bool, bool>> send_gradient) {
    PipelineAction a;
    a.op = PipelineOp::kComm;
    for (const auto& [send, gradient] : send_gradient) {
      P2PMessage m;
      m.send = send;
      m.gradient = gradient;
      a.messages.push_back(m);
    }
    return a;
  };
  PipelineAction f;
  f.op = PipelineOp::kForward;
  PipelineAction b;
  b.op = PipelineOp::kBackward;
  EXPECT_STREQ(parallel::megatron_timer_name(f), "forward-compute");
  EXPECT_STREQ(parallel::megatron_timer_name(b), "backward-compute");
  EXPECT_STREQ(parallel::megatron_timer_name(exchange({{false, false}})), "forward-recv");
  EXPECT_STREQ(parallel::megatron_timer_name(exchange({{true, false}})), "forward-send");
  EXPECT_STREQ(parallel::megatron_timer_name(exchange({{false, true}})), "backward-recv");
  EXPECT_STREQ(parallel::megatron_timer_name(exchange({{true, true}})), "backward-send");
  EXPECT_STREQ(parallel::megatron_timer_name(exchange({{true, false}, {false, true}})), "forward-send-backward-recv");
  EXPECT_STREQ(parallel::megatron_timer_name(exchange({{false, false}, {true, true}})), "backward-send-forward-recv");
  EXPECT_STREQ(parallel::megatron_timer_name(exchange({{true, false}, {false, false}})), "forward-send-forward-recv");
  EXPECT_STREQ(parallel::megatron_timer_name(exchange({{true, true}, {false, true}})), "backward-send-backward-recv");
  EXPECT_STREQ(parallel::megatron_timer_name(exchange({{true, false}, {true, true}, {false, false}, {false, true}})),
               "forward-backward-send-forward-backward-recv");
  // Two activations sent (two virtual chunks) are still one kind of message.
  EXPECT_STREQ(parallel::megatron_timer_name(exchange({{true, false}, {true, false}})), "forward-send");
}

}  // namespace
}  // namespace megatron::parallel
