// The two request formats `megatron serve` answers, parsed and checked into sequences for the
// batch engine, and their answers written back (no HTTP here: serve/text_server.h routes).
//
//  - Megatron's text generation API, PUT /api (megatron/inference/text_generation_server.py):
//      {"prompts": ["..."], "tokens_to_generate": 64, "temperature": 1.0, "top_k": 0,
//       "top_p": 0.0, "top_p_decay": 0.0, "top_p_bound": 0.0, "logprobs": false,
//       "add_BOS": false, "stop_on_eol": false, "stop_on_double_eol": false,
//       "prevent_newline_after_colon": false, "random_seed": -1, "no_log": false,
//       "beam_width", "stop_token", "length_penalty" (checked; beam search is not served)}
//    answered {"text": [prompt + generation], "segments": [[token texts]],
//    "logprobs": [[log-probability of each token after the first]] or null, "tokens": [[ids]]}.
//    Its checks and their messages are Megatron's, answered with status 400 (Megatron answers
//    most of them with 200).
//  - The OpenAI completions API, POST /v1/completions (and Megatron's POST /completions):
//      {"model", "prompt": string | [string] | [id] | [[id]], "max_tokens": 16,
//       "temperature": 1, "top_p": 1, "top_k" (an extension, as Megatron's and vLLM's), "n": 1,
//       "stop": string | [string], "logprobs": 0..5, "echo": false, "seed", ...}
//    answered {"id", "object": "text_completion", "created", "model",
//    "choices": [{"text", "index", "logprobs", "finish_reason"}], "usage": {...}}.
//
// Unlike Megatron, each prompt of a request gets its own tokens_to_generate tokens (Megatron
// pads every prompt to the longest one plus tokens_to_generate, so shorter prompts get more),
// which keeps an answer independent of what else ran in its batch.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer/tokenizer.h"
#include "model/sampling.h"
#include "serve/batch_engine.h"

namespace megatron::serve {

// A refused request: its HTTP status and message, and for the OpenAI API the field concerned.
class RequestError : public std::runtime_error {
 public:
  RequestError(int status, const std::string& message, std::string param = "")
      : std::runtime_error(message), status_(status), param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }

 private:
  int status_;
  std::string param_;
};

// The model served and the defaults of what a request leaves out.
struct ServeSettings {
  const data::Tokenizer* tokenizer = nullptr;
  int64_t vocab_size = 0;  // the tokenizer's (unpadded) vocabulary
  int64_t context = 0;     // positions: prompt + generated tokens at most
  std::string model_name;
  int64_t max_prompts = 128;          // per request (Megatron's limit)
  int64_t max_tokens_to_oom = 12000;  // Megatron's --max-tokens-to-oom: prompts x (longest + generated)
  int64_t tokens_to_generate = 64;    // PUT /api's default (Megatron's)
  int64_t max_tokens = 16;            // the OpenAI API's default
  model::SamplingParams sampling;     // temperature, top_k, top_p defaults (the seed is per request)
};

struct ApiRequest {
  std::vector<SequenceRequest> sequences;
  int64_t tokens_to_generate = 0;
  bool logprobs = false;
  bool no_log = false;
};

struct CompletionRequest {
  std::vector<SequenceRequest> sequences;
  std::vector<std::string> prompts;  // as text (a prompt of token ids decoded)
  std::string model;
  int64_t max_tokens = 0;
  bool echo = false;
  std::optional<int64_t> logprobs;  // top alternatives per token, 0..5; nullopt: no logprobs
  std::vector<std::string> stop;
};

// Throw RequestError for a request that is not valid JSON or breaks a rule. `seed` is the
// sampling seed of a request that gives none (random_seed, seed).
ApiRequest parse_api_request(std::string_view body, const ServeSettings& settings, uint64_t seed);
CompletionRequest parse_completion_request(std::string_view body, const ServeSettings& settings, uint64_t seed);

std::string api_response(const ApiRequest& request, const std::vector<SequenceResult>& results,
                         const ServeSettings& settings);
std::string completion_response(const CompletionRequest& request, const std::vector<SequenceResult>& results,
                                const ServeSettings& settings, const std::string& id, int64_t created);

// Error bodies: Megatron's (flask-restful's) {"message": ...}, and OpenAI's
// {"error": {"message", "type", "param", "code"}}.
std::string megatron_error_body(const std::string& message);
std::string openai_error_body(int status, const std::string& message, const std::string& param);

// The bytes each token adds to the text of tokens[0..i) (Megatron's segments: their
// concatenation is the decoded text); decoded with up to 8 tokens before it, since SentencePiece
// drops the word-initial space of a text's first piece.
std::vector<std::string> token_segments(const data::Tokenizer& tokenizer, std::span<const int32_t> tokens);

}  // namespace megatron::serve
