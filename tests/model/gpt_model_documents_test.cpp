// Documents packed into one sample (--reset-position-ids, --reset-attention-mask): a document
// after an end-of-document token trains exactly as if it started the sample. Its loss and
// every gradient equal those of the same document placed at position 0 with other tokens after
// it; without the two settings they do not. (Pipeline and tensor-parallel layouts: the
// trainer's parity tests.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "backend/ops.h"
#include "model/gpt_model.h"
#include "support/micro_batches.h"
#include "train/micro_batch_documents.h"

namespace megatron::model {
namespace {

constexpr int32_t kEod = 12;  // the tiny vocabulary's last id

// One row of `tokens` (s + 1 with the last label), the loss counted on rows [first, last).
MicroBatch documents_batch(const GPTConfig& c, const std::vector<int32_t>& tokens, int64_t first, int64_t last) {
  const int64_t s = c.seq_length;
  MicroBatch mb;
  mb.batch = 1;
  mb.seq = s;
  mb.tokens.assign(tokens.begin(), tokens.begin() + s);
  mb.labels.assign(tokens.begin() + 1, tokens.begin() + s + 1);
  for (int64_t t = 0; t < s; ++t) mb.loss_mask.push_back(t >= first && t < last ? 1.0f : 0.0f);
  train::mark_documents(c, kEod, &mb);
  return mb;
}

struct Result {
  float loss;
  std::vector<float> grads;
};

Result run(const GPTConfig& c, const MicroBatch& mb) {
  auto backend = backend::make_cpu_backend();
  GPTModel model(c, *backend, DType::kF32, 1);
  model.parameters().initialize(*backend, 7, c.init_method_std, c.num_layers);
  Tensor grads = model.parameters().grads();
  backend->fill(grads, 0.0f);
  Result r;
  r.loss = model.forward(mb, {});
  model.backward(1.0f, 1.0f);
  r.grads.assign(grads.data_as<float>(), grads.data_as<float>() + grads.numel());
  return r;
}

GPTConfig documents_config(bool positions, bool attention) {
  GPTConfig c = test::tiny_gpt_config();
  c.seq_length = 9;
  c.max_position_embeddings = 9;
  c.reset_position_ids = positions;
  c.reset_attention_mask = attention;
  return c;
}

// Document A = {5, 1, 7, 2, 9}: packed after document B = {3, 8, 4, eod}, or alone at position
// 0 followed by other tokens. The loss counts A's predictions of its own next tokens.
const std::vector<int32_t> kPacked = {3, 8, 4, kEod, 5, 1, 7, 2, 9, 6};
const std::vector<int32_t> kAlone = {5, 1, 7, 2, 9, 6, 11, 0, 10, 4};

TEST(GPTModelDocuments, APackedDocumentTrainsAsIfAlone) {
  const GPTConfig c = documents_config(true, true);
  const Result packed = run(c, documents_batch(c, kPacked, 4, 8));
  const Result alone = run(c, documents_batch(c, kAlone, 0, 4));
  // The same arithmetic on the same rows: document B's rows carry exact zeros (no loss, and no
  // query of A sees them), so only the order of a few fp32 sums over rows may differ.
  EXPECT_NEAR(packed.loss, alone.loss, 1e-6 * std::fabs(alone.loss));
  ASSERT_EQ(packed.grads.size(), alone.grads.size());
  double worst = 0.0, largest = 0.0;
  for (size_t i = 0; i < packed.grads.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(packed.grads[i] - alone.grads[i])));
    largest = std::max(largest, static_cast<double>(std::fabs(alone.grads[i])));
  }
  EXPECT_GT(largest, 1e-2);
  EXPECT_LT(worst, 1e-6 * largest) << "largest gradient " << largest;
}

// Each setting matters on its own: without it the packed document sees another's tokens or
// starts at another position, and its loss moves well past fp32 rounding.
TEST(GPTModelDocuments, WithoutEitherSettingThePackedDocumentDiffers) {
  const GPTConfig both = documents_config(true, true);
  const float alone = run(both, documents_batch(both, kAlone, 0, 4)).loss;
  for (const auto& [positions, attention] : {std::pair{false, true}, std::pair{true, false}, std::pair{false, false}}) {
    const GPTConfig c = documents_config(positions, attention);
    const float packed = run(c, documents_batch(c, kPacked, 4, 8)).loss;
    EXPECT_GT(std::fabs(packed - alone), 1e-3 * std::fabs(alone))
        << "reset_position_ids " << positions << ", reset_attention_mask " << attention;
  }
}

// Key starts and position ids the device kernels would trust are checked on the host (the
// trainer makes them: a bad one is our bug, and stops the process).
TEST(GPTModelDocuments, InvalidDocumentIdsStopTheProcess) {
  const GPTConfig c = documents_config(true, true);
  auto backend = backend::make_cpu_backend();
  GPTModel model(c, *backend, DType::kF32, 1);
  MicroBatch mb = documents_batch(c, kPacked, 4, 8);
  mb.key_start[6] = 2;  // below key_start[5] = 4
  EXPECT_DEATH(model.forward(mb, {}), "key_start\\[0, 6\\] = 2: expected within");
  mb = documents_batch(c, kPacked, 4, 8);
  mb.key_start[2] = 3;  // after the query itself
  EXPECT_DEATH(model.forward(mb, {}), "key_start\\[0, 2\\] = 3");
  mb = documents_batch(c, kPacked, 4, 8);
  mb.position_ids[1] = 9;  // outside --max-position-embeddings
  EXPECT_DEATH(model.forward(mb, {}), "position_ids\\[0, 1\\] = 9: expected within \\[0, --max-position-embeddings\\)");
  mb = documents_batch(c, kPacked, 4, 8);
  mb.position_ids.clear();
  EXPECT_DEATH(model.forward(mb, {}), "position_ids: 0 ids for 1x9 tokens");
}

}  // namespace
}  // namespace megatron::model
