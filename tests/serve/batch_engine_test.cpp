// The batch engine on a small random model: a sequence's tokens and log-probabilities do not
// depend on what else runs in its batch (prompts of different lengths, Megatron's step-by-step
// prompt feeding), log-probabilities are the model's, each sequence stops at its own limit,
// concurrent submissions share batches, and a full queue or a stopped engine refuses.
#include "serve/batch_engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "model/gpt_model.h"
#include "serve/char_tokenizer.h"

namespace megatron::serve {
namespace {

model::GPTConfig config() {
  model::GPTConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.kv_channels = 4;
  c.ffn_hidden_size = 32;
  c.seq_length = 16;
  c.max_position_embeddings = 24;
  c.vocab_size = test::CharTokenizer::kVocab;
  c.padded_vocab_size = 32;
  c.init_method_std = 0.3f;
  return c;
}

class BatchEngineTest : public ::testing::Test {
 protected:
  BatchEngineTest()
      : backend_(backend::make_cpu_backend()),
        model_(config(), *backend_, DType::kF32, 1),
        generator_(config(), model_.parameters(), *backend_, 24, 4) {
    model_.parameters().initialize(*backend_, 3, 0.3f, 2);
  }
  SequenceRequest request(const std::string& prompt, int64_t max_new) const {
    SequenceRequest r;
    tokenizer_.encode(prompt, &r.prompt);
    r.max_new_tokens = max_new;
    r.sampling.temperature = 0.0f;
    r.logprobs = true;
    return r;
  }
  std::unique_ptr<BatchEngine> engine(BatchEngine::Options o = {}) {
    o.max_batch = 4;
    o.log_batches = false;
    return std::make_unique<BatchEngine>(generator_, tokenizer_, config().vocab_size, o, nullptr);
  }
  // The log-probabilities of tokens[1..] from one sequence alone, every position at once.
  std::vector<float> reference_logprobs(const std::vector<int32_t>& tokens) {
    model::GPTGenerator g(config(), model_.parameters(), *backend_, 24);
    const std::vector<float> all = g.append(tokens, 1, true);
    const int64_t V = config().padded_vocab_size, vocab = config().vocab_size;
    std::vector<float> out;
    for (size_t p = 0; p + 1 < tokens.size(); ++p) {
      double sum = 0.0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(all[p * V + v]));
      out.push_back(static_cast<float>(all[p * V + tokens[p + 1]] - std::log(sum)));
    }
    return out;
  }

  test::CharTokenizer tokenizer_;
  std::unique_ptr<backend::Backend> backend_;
  model::GPTModel model_;
  model::GPTGenerator generator_;
};

TEST_F(BatchEngineTest, ASequenceIsTheSameAloneAndInABatch) {
  auto e = engine();
  std::vector<SequenceRequest> reqs = {request("a", 6), request("hello", 3), request("the cat sat", 8),
                                       request("ab", 0)};
  reqs[1].sampling.temperature = 1.3f;  // sampled: the draws follow the sequence, not the batch
  reqs[1].sampling.seed = 77;
  reqs[1].top_logprobs = 3;
  std::vector<const SequenceRequest*> all;
  for (const SequenceRequest& r : reqs) all.push_back(&r);
  const std::vector<SequenceResult> together = e->run_batch(all);
  ASSERT_EQ(together.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const SequenceResult alone = e->run_batch({&reqs[i]})[0];
    const SequenceResult& with = together[i];
    EXPECT_EQ(with.tokens, alone.tokens) << "sequence " << i;
    EXPECT_EQ(with.prompt_length, static_cast<int64_t>(reqs[i].prompt.size()));
    EXPECT_EQ(with.tokens.size(), reqs[i].prompt.size() + static_cast<size_t>(reqs[i].max_new_tokens))
        << "no stop token in this model's few steps";
    EXPECT_EQ(with.finish, FinishReason::kLength);
    const std::vector<float> ref = reference_logprobs(with.tokens);
    ASSERT_EQ(with.logprobs.size(), ref.size());
    for (size_t p = 0; p < ref.size(); ++p) {
      EXPECT_NEAR(with.logprobs[p], ref[p], 1e-4) << "sequence " << i << " token " << p + 1;
      EXPECT_NEAR(alone.logprobs[p], ref[p], 1e-4);
    }
  }
  // Top alternatives: most likely first, the chosen greedy tokens' own among them.
  const SequenceResult& sampled = together[1];
  ASSERT_EQ(sampled.top_logprobs.size(), sampled.logprobs.size());
  for (const auto& top : sampled.top_logprobs) {
    ASSERT_EQ(top.size(), 3u);
    EXPECT_GE(top[0].second, top[1].second);
    EXPECT_GE(top[1].second, top[2].second);
  }
  // Greedy: each generated token is the most likely one.
  const SequenceResult& greedy = together[2];
  SequenceRequest with_top = reqs[2];
  with_top.top_logprobs = 1;
  const SequenceResult g = e->run_batch({&with_top})[0];
  for (size_t p = with_top.prompt.size(); p < g.tokens.size(); ++p) {
    EXPECT_EQ(g.top_logprobs[p - 1][0].first, greedy.tokens[p]);
  }
}

TEST_F(BatchEngineTest, EachSequenceStopsAtItsOwnLimit) {
  auto e = engine();
  // Where an unconstrained run goes, then the same with its third generated character as a
  // stop string: it ends right there, its neighbour in the batch runs on.
  const SequenceRequest free_run = request("abc", 8);
  const SequenceResult full = e->run_batch({&free_run})[0];
  SequenceRequest stopped = free_run;
  stopped.stop = {tokenizer_.decode(std::span<const int32_t>(&full.tokens[5], 1))};
  const std::vector<SequenceResult> both = e->run_batch({&stopped, &free_run});
  size_t first = 3;  // the first generated position whose character is the stop string
  while (full.tokens[first] != full.tokens[5]) ++first;
  EXPECT_EQ(both[0].finish, FinishReason::kStopString);
  EXPECT_EQ(both[0].tokens, std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + first + 1));
  EXPECT_EQ(both[1].tokens, full.tokens);
  EXPECT_EQ(both[1].finish, FinishReason::kLength);
}

TEST_F(BatchEngineTest, ConcurrentSubmissionsShareBatches) {
  BatchEngine::Options o;
  o.batch_wait = std::chrono::milliseconds(300);
  auto e = engine(o);
  const std::vector<std::string> prompts = {"one", "two two", "three", "four four four"};
  std::vector<std::vector<SequenceResult>> got(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] { got[i] = e->submit({request(prompts[i], 5)}).get(); });
  }
  for (std::thread& t : threads) t.join();
  const EngineStats s = e->stats();
  EXPECT_EQ(s.submitted, 4);
  EXPECT_EQ(s.sequences, 4);
  EXPECT_GE(s.largest_batch, 2) << s.batches << " batches";
  EXPECT_GE(s.multi_request_batches, 1);
  EXPECT_EQ(s.generated_tokens, 20);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const SequenceRequest r = request(prompts[i], 5);
    ASSERT_EQ(got[i].size(), 1u);
    EXPECT_EQ(got[i][0].tokens, e->run_batch({&r})[0].tokens) << prompts[i];
  }
  // One submission of more prompts than a batch holds runs over several batches, in order.
  std::vector<SequenceRequest> many;
  for (int i = 0; i < 6; ++i) many.push_back(request(std::string(static_cast<size_t>(i + 1), 'x'), 2));
  const std::vector<SequenceResult> out = e->submit(many).get();
  ASSERT_EQ(out.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out[static_cast<size_t>(i)].prompt_length, i + 1);
}

TEST_F(BatchEngineTest, AFullQueueAndAStoppedEngineRefuse) {
  BatchEngine::Options o;
  o.max_queued = 2;
  auto e = engine(o);
  EXPECT_THROW(e->submit({request("a", 1), request("b", 1), request("c", 1)}), BatchEngine::QueueFull);
  EXPECT_EQ(e->submit({request("a", 1)}).get().size(), 1u) << "the engine still serves";
  e->stop();
  EXPECT_THROW(e->submit({request("a", 1)}), BatchEngine::ShuttingDown);
}

}  // namespace
}  // namespace megatron::serve
