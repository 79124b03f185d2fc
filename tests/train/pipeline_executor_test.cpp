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
#include "train/pipeline_executor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "support/recording_communicator.h"
#include "train/grad_buffer.h"

namespace megatron::train {
namespace {

model::GPTConfig tiny_config() {
  model::GPTConfig c;
  c.num_layers = 4;
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
  model::PipelineStageOptions pipe{2, stage, vp, parallel::max_in_flight(table, vp)};
  model::GPTModel model(c, *backend, DType::kF32, 1, {}, pipe);
  model::ParameterSet& ps = model.parameters();
  ps.initialize(*backend, 3, 0.1f, c.num_layers);
  auto offset = [&](int64_t k) { return k < static_cast<int64_t>(ps.params().size()) ? ps[k].offset : ps.total_numel(); };

  test::RecordingCommunicator dp({ps.grads(), ps.values()});
  std::vector<std::string>& log = dp.log;
  BucketLayout layout;
  layout.bucket_size = 300;
  for (int64_t ci = 1; ci < vp; ++ci) layout.starts.push_back(model.chunk_parameters(ci).first);
  ASSERT_NE(model.tied_embedding(), nullptr);
  layout.held = model.tied_embedding() - ps.params().data();
  GradBuffer gb(ps, *backend, dp, /*distributed=*/true, layout);
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
  PipelineCallbacks cb;
  cb.load = [&](int64_t, model::MicroBatch* mb) {
    mb->batch = 1;
    mb->seq = c.seq_length;
    mb->tokens.assign(static_cast<size_t>(c.seq_length), 5);
    mb->labels.assign(static_cast<size_t>(c.seq_length), 7);
    mb->loss_mask.assign(static_cast<size_t>(c.seq_length), 1.0f);
  };
  cb.dropout = [](int64_t) { return model::DropoutContext{}; };
  cb.head = &head;
  cb.grad_sync = [&](int64_t chunk, bool on) {
    if (!on) return gb.disarm_grad_overlap();
    const auto [first, end] = model.chunk_parameters(chunk);
    gb.arm_grad_overlap(first, end);
  };
  NoPeers pp;
  run_pipeline(table, model, pp, cb);
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

}  // namespace
}  // namespace megatron::train
