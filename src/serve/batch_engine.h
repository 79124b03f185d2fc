// The generation engine behind `megatron serve`: prompts from any number of concurrent HTTP
// requests queue here, and one worker thread runs them through the KV-cache generator
// (model/gpt_generator.h) in batches of up to max_batch sequences. A batch is Megatron's static
// inference batch (megatron/inference/text_generation/generation.py,
// generate_tokens_probs_and_return_on_first_stage): every sequence advances one position per
// step from the shortest prompt's length on; a longer prompt's own tokens are fed at the steps
// that reach them (and their log-probabilities read there), so one KV-cache position serves the
// whole batch. Prompts that arrive while a batch runs wait for the next one.
//
// Each sequence stops at its own limits: the end-of-document token (Megatron's termination id;
// it is kept as the last token), Megatron's stop_on_eol / stop_on_double_eol, a stop string of
// the OpenAI API, or max_new_tokens; a batch ends when all of its sequences have. Sampling is
// model::sample_token with the sequence's seed and draw numbers draw_base, draw_base + 1, ..., so
// a sequence's text does not depend on which batch it ran in.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "data/tokenizer/tokenizer.h"
#include "model/gpt_generator.h"
#include "model/sampling.h"

namespace megatron::serve {

// One prompt to continue.
struct SequenceRequest {
  std::vector<int32_t> prompt;  // at least one token
  int64_t max_new_tokens = 0;   // 0: score the prompt only (with logprobs)
  model::SamplingParams sampling;
  uint64_t draw_base = 0;
  // Megatron's top_p_decay and top_p_bound: after each draw top_p = max(top_p * decay, bound).
  float top_p_decay = 0.0f, top_p_bound = 0.0f;
  // The log-probability of every token after the first (prompt and generated), and the
  // top_logprobs most likely alternatives at each of those positions (0..kMaxTopLogprobs).
  bool logprobs = false;
  int64_t top_logprobs = 0;
  bool stop_on_eol = false, stop_on_double_eol = false, prevent_newline_after_colon = false;
  // Stop once the generated text contains one of these (non-empty) strings.
  std::vector<std::string> stop;
};

enum class FinishReason {
  kLength,      // max_new_tokens generated (or none asked)
  kEndOfText,   // the end-of-document token
  kEndOfLine,   // stop_on_eol / stop_on_double_eol
  kStopString,  // one of `stop`
};

struct SequenceResult {
  std::vector<int32_t> tokens;  // the prompt, then the generated tokens (a stop token included)
  int64_t prompt_length = 0;
  // With logprobs: [tokens.size() - 1], the log-probability of tokens[i + 1] given tokens[0..i]
  // (log-softmax of the unscaled logits over the vocabulary); with top_logprobs > 0, the most
  // likely (id, log-probability) pairs at each of those positions, most likely first.
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;
  FinishReason finish = FinishReason::kLength;
};

inline constexpr int64_t kMaxTopLogprobs = 20;

struct EngineStats {
  int64_t submitted = 0;              // calls of submit()
  int64_t sequences = 0;              // sequences queued in all
  int64_t batches = 0;                // batches run
  int64_t largest_batch = 0;          // sequences in the largest batch
  int64_t multi_request_batches = 0;  // batches that held sequences of more than one submit()
  int64_t generated_tokens = 0;
  int64_t queued = 0;  // sequences waiting now
};

class BatchEngine {
 public:
  struct Options {
    int64_t max_batch = 8;
    // How long the worker waits, once a sequence is queued and the batch is not full, for more
    // to join (0: start at once with what is queued).
    std::chrono::milliseconds batch_wait{0};
    int64_t max_queued = 1024;  // sequences; more are refused (submit throws QueueFull)
    bool log_batches = true;
  };
  struct QueueFull : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  struct ShuttingDown : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

  // The generator (its max_batch() >= options.max_batch) and tokenizer must outlive the engine;
  // only the engine's worker uses the generator from now on. `log` receives one line per batch
  // (from the worker thread).
  using LogLine = std::function<void(const std::string&)>;
  BatchEngine(model::GPTGenerator& generator, const data::Tokenizer& tokenizer, int64_t vocab_size,
              const Options& options, LogLine log);
  ~BatchEngine();
  BatchEngine(const BatchEngine&) = delete;
  BatchEngine& operator=(const BatchEngine&) = delete;

  // Queues `sequences` (validated by the caller: non-empty prompts of ids in the vocabulary,
  // prompt + max_new_tokens within the generator's context); the future holds their results in
  // order, or the exception that ended their batch. Throws QueueFull or ShuttingDown.
  std::future<std::vector<SequenceResult>> submit(std::vector<SequenceRequest> sequences);
  // Lets the running batch finish, refuses what is queued (ShuttingDown) and joins the worker.
  void stop();
  EngineStats stats() const;

  // One batch, run on the calling thread (the worker's body; public for tests).
  std::vector<SequenceResult> run_batch(const std::vector<const SequenceRequest*>& batch);

 private:
  struct Group;
  struct Item {
    std::shared_ptr<Group> group;
    size_t index = 0;
  };
  void work();
  void check(const SequenceRequest& r) const;

  model::GPTGenerator& generator_;
  const data::Tokenizer& tokenizer_;
  int64_t vocab_;
  Options options_;
  LogLine log_;
  int32_t eod_ = -1;
  // Single-token spellings of "\n", "\n\n" and ":" (-1 when the tokenizer has none), Megatron's
  // ids 198, 628 and ':' for GPT-2.
  int32_t eol_ = -1, double_eol_ = -1, colon_ = -1;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  EngineStats stats_;
  std::thread worker_;
};

}  // namespace megatron::serve
