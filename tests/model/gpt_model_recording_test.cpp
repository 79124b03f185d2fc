// The bookkeeping GPTModel keeps around recorded device work (set_recording; CUDA graphs on the
// GPU): when it runs work unrecorded, records it, replays it, restores the gradient claims a
// replay makes, and falls back when recording fails. The numbers a replay produces are the GPU
// test's (tests/backend/cuda/gpu_model_test.cpp, RecordedStepsGiveTheBitsOfUnrecordedOnes).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "model/gpt_model.h"
#include "support/micro_batches.h"

namespace megatron::model {
namespace {

// A CPU backend that claims to record. The CPU cannot defer an op, so ops run as they are
// issued also while "recording" (the recording run computes what the real one replays), a
// recording is an empty token and replay() only counts: a replayed run leaves the buffers as
// they were. Optionally end_recording() reports failure, or copy() throws while recording, as
// an op a real backend cannot record would. A failed recording thus ran (part of) its work
// once before the model runs it unrecorded: the model's work must give the same result when
// run again, which the fallback tests check.
class FakeRecordingBackend : public backend::CpuBackend {
 public:
  bool can_record() const override { return true; }
  void begin_recording() override {
    ++begins;
    recording = true;
  }
  std::unique_ptr<backend::Recording> end_recording() override {
    recording = false;
    if (fail_end) return nullptr;
    return std::make_unique<backend::Recording>();
  }
  void replay(const backend::Recording&) override { ++replays; }
  void copy(const Tensor& src, Tensor& dst) override {
    if (recording && throw_in_copy) throw_error("copy cannot be recorded here");
    CpuBackend::copy(src, dst);
  }
  int begins = 0, replays = 0;
  bool fail_end = false, throw_in_copy = false, recording = false;
};

GPTConfig tiny_config(float dropout) {
  GPTConfig c = test::tiny_gpt_config();
  c.attention_dropout = dropout;
  c.hidden_dropout = dropout;
  return c;
}

// A model on `be` stepping as the trainer does: per step the gradients go stale, then each
// micro-batch's forward (with the loss head's backward) and backward, the losses read once.
struct Stepper {
  Stepper(backend::Backend& be, float dropout, int micro_batches)
      : config(tiny_config(dropout)), model(config, be, DType::kF32, 2) {
    model.parameters().initialize(be, 7, config.init_method_std, config.num_layers);
    for (int k = 0; k < micro_batches; ++k) {
      batches.push_back(test::random_micro_batch(2, config.seq_length, config.vocab_size, 11 + k, k % 2 == 1));
    }
  }
  double step(int iteration) {
    model.parameters().forget_grads();
    HeadBackward head;
    head.grad_scale = 1.0f / static_cast<float>(batches.size());
    for (size_t k = 0; k < batches.size(); ++k) {
      DropoutContext d;
      d.seed = 3;
      d.iteration = iteration;
      d.micro_batch = static_cast<int64_t>(k);
      model.forward_chunk(0, 0, &batches[k], d, &head);
      model.backward_chunk(0, 0);
    }
    return model.take_losses();
  }
  GPTConfig config;
  GPTModel model;
  std::vector<MicroBatch> batches;
};

std::vector<float> grads_of(const GPTModel& m) {
  const Tensor& g = m.parameters().grads();
  return std::vector<float>(g.data_as<const float>(), g.data_as<const float>() + g.numel());
}

TEST(GPTModelRecording, RecordsTheSecondRunAndReplaysFromThenOn) {
  FakeRecordingBackend be;
  Stepper s(be, 0.0f, 1);
  s.step(0);
  EXPECT_EQ(be.begins, 0);  // the first run of each work is unrecorded
  EXPECT_EQ(s.model.parameters().first_stale_grad(), -1);
  s.step(1);
  EXPECT_EQ(be.begins, 2);  // forward and backward recorded, then run from their recordings
  EXPECT_EQ(be.replays, 2);
  for (int it = 2; it < 5; ++it) {
    s.step(it);
    // A replay claims, without running the host code, the gradients its recording claimed.
    EXPECT_EQ(s.model.parameters().first_stale_grad(), -1) << "iteration " << it;
  }
  EXPECT_EQ(be.begins, 2);
  EXPECT_EQ(be.replays, 2 + 2 * 3);
  EXPECT_EQ(s.model.replays(), be.replays);
  EXPECT_EQ(s.model.recording_failure(), "");
}

// Micro-batch 0 overwrites the gradients and the others add to them (GradWrite), and the loss
// weights' scale follows each mask's sum: separate recordings, each made on its second run.
// Three micro-batches, the middle one with a partial mask, make five keys: forward 0 (every
// gradient stale), backward 0 (the layers' stale), forward 1 and forward 2 (none stale, two
// scales) and one backward for micro-batches 1 and 2 (none stale), which micro-batch 2 records.
TEST(GPTModelRecording, MicroBatchesThatWriteGradientsDifferentlyAreRecordedApart) {
  FakeRecordingBackend be;
  Stepper s(be, 0.0f, 3);
  s.step(0);
  EXPECT_EQ(be.begins, 1);
  EXPECT_EQ(be.replays, 1);
  s.step(1);
  EXPECT_EQ(be.begins, 5);
  EXPECT_EQ(be.replays, 1 + 6);
  s.step(2);
  EXPECT_EQ(be.begins, 5);
  EXPECT_EQ(be.replays, 7 + 6);
}

// Work that fails to record runs unrecorded in the same call, with the gradient claims put
// back first, so the step computes what a model that never records computes; recording then
// stops for good, with the reason kept.
void expect_fallback_matches_plain(FakeRecordingBackend& be) {
  auto plain_be = backend::make_cpu_backend();
  Stepper plain(*plain_be, 0.0f, 2), rec(be, 0.0f, 2);
  for (int it = 0; it < 3; ++it) {
    EXPECT_EQ(rec.step(it), plain.step(it)) << "iteration " << it;
    EXPECT_EQ(grads_of(rec.model), grads_of(plain.model)) << "iteration " << it;
  }
  EXPECT_NE(rec.model.recording_failure(), "");
  EXPECT_EQ(be.replays, 0);
  EXPECT_EQ(rec.model.replays(), 0);
}

TEST(GPTModelRecording, AFailedRecordingRunsTheWorkUnrecorded) {
  FakeRecordingBackend be;
  be.fail_end = true;
  expect_fallback_matches_plain(be);
  EXPECT_EQ(be.begins, 1);  // the first failure stops recording
}

TEST(GPTModelRecording, AnOpThatThrowsWhileRecordingRunsTheWorkUnrecorded) {
  FakeRecordingBackend be;
  be.throw_in_copy = true;  // the loss weights' copy in the forward's head
  expect_fallback_matches_plain(be);
  EXPECT_EQ(be.begins, 1);  // the first failure stops recording
  EXPECT_FALSE(be.recording);
}

// A loss weight scale that changes every step (here the gradient scale, as a dynamic fp16
// loss scale or masks of changing sums would): the forward's key never repeats, so it is never
// recorded, and the keys tracked stay bounded without dropping the backward's recording.
TEST(GPTModelRecording, KeysThatNeverRepeatStayBoundedAndKeepTheRecordings) {
  FakeRecordingBackend be;
  Stepper s(be, 0.0f, 1);
  constexpr int kSteps = 40;
  for (int it = 0; it < kSteps; ++it) {
    s.model.parameters().forget_grads();
    HeadBackward head;
    head.grad_scale = 1.0f / static_cast<float>(it + 1);
    DropoutContext d;
    s.model.forward_chunk(0, 0, &s.batches[0], d, &head);
    s.model.backward_chunk(0, 0);
    s.model.take_losses();
    EXPECT_LE(s.model.recorded_keys(), GPTModel::kMaxRecordedKeys) << "iteration " << it;
  }
  EXPECT_EQ(be.begins, 1);            // the backward, once
  EXPECT_EQ(be.replays, kSteps - 1);  // and from its recording ever after
}

// With dropout the masks' (iteration, micro-batch) part is read from the activation set's
// dropout stream when the work runs (DropoutParams::stream_add), so dropout steps are recorded
// and replayed like the others (the GPU test checks the replays' bits); evaluation, which
// draws no dropout, gets recordings of its own.
TEST(GPTModelRecording, DropoutStepsAreRecordedToo) {
  FakeRecordingBackend be;
  Stepper s(be, 0.1f, 1);
  s.step(0);
  EXPECT_EQ(be.begins, 0);
  s.step(1);
  EXPECT_EQ(be.begins, 2);
  for (int it = 2; it < 5; ++it) s.step(it);
  EXPECT_EQ(be.begins, 2);
  EXPECT_EQ(be.replays, 2 + 2 * 3);
  DropoutContext eval;
  eval.training = false;
  for (int k = 0; k < 3; ++k) {
    s.model.forward_chunk(0, 0, &s.batches[0], eval);
    s.model.take_losses();
  }
  EXPECT_EQ(be.begins, 3);  // the evaluation forward, on its second run
  EXPECT_EQ(be.replays, 8 + 2);
  EXPECT_EQ(s.model.recording_failure(), "");
}

// With parameter hooks (the data-parallel overlaps) the work is recorded in segments between
// them: the embedding, each layer's forward, the loss head, each layer's backward and the
// embedding's backward; the hooks run between the replays in the same order as between the
// ops, and a replay claims the gradients its recording claimed.
TEST(GPTModelRecording, WithHooksEachSegmentBetweenThemIsRecordedAndTheHooksStillRun) {
  FakeRecordingBackend be;
  Stepper s(be, 0.0f, 1);
  std::vector<std::string> calls;
  ParamHooks hooks;
  hooks.before_reading = [&](int64_t k) { calls.push_back("read " + std::to_string(k)); };
  hooks.grads_final_from = [&](int64_t k) { calls.push_back("final " + std::to_string(k)); };
  s.model.set_param_hooks(hooks);
  const int64_t layers = s.config.num_layers;
  const int64_t segments = 2 * layers + 3;
  s.step(0);
  const std::vector<std::string> first = calls;
  ASSERT_EQ(first.size(), static_cast<size_t>(2 + layers + 1 + layers + 1));  // embedding, layers, head x 2
  EXPECT_EQ(be.begins, 0);
  for (int it = 1; it < 4; ++it) {
    calls.clear();
    s.step(it);
    EXPECT_EQ(calls, first) << "iteration " << it;
    EXPECT_EQ(s.model.parameters().first_stale_grad(), -1) << "iteration " << it;
  }
  EXPECT_EQ(be.begins, segments);  // each segment recorded once, on its second run
  EXPECT_EQ(be.replays, 3 * segments);
  EXPECT_EQ(s.model.recording_failure(), "");
  EXPECT_LE(s.model.recorded_keys(), s.model.recorded_key_limit());
}

// Nothing is recorded when recording is switched off.
TEST(GPTModelRecording, NothingIsRecordedWhenSwitchedOff) {
  FakeRecordingBackend be;
  Stepper off(be, 0.1f, 1);
  off.model.set_recording(false);
  for (int it = 0; it < 3; ++it) off.step(it);
  EXPECT_EQ(be.begins, 0);
  EXPECT_EQ(off.model.replays(), 0);
}

}  // namespace
}  // namespace megatron::model
