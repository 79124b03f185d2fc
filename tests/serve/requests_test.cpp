// The request formats of `megatron serve` without a network: every rule of Megatron's PUT /api
// with its message, the OpenAI completions fields, the answers' JSON, and text made valid UTF-8
// as Python's errors="replace" makes it.
#include "serve/requests.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "serve/char_tokenizer.h"
#include "serve/utf8.h"

namespace megatron::serve {
namespace {

class Requests : public ::testing::Test {
 protected:
  Requests() {
    s_.tokenizer = &tokenizer_;
    s_.vocab_size = test::CharTokenizer::kVocab;
    s_.context = 32;
    s_.model_name = "tiny";
    s_.max_tokens_to_oom = 200;
  }
  // The message a refused body gets (and its status), or "" when it is accepted.
  std::pair<int, std::string> api_refusal(const std::string& body) const {
    try {
      parse_api_request(body, s_, 1);
      return {200, ""};
    } catch (const RequestError& e) {
      return {e.status(), e.what()};
    }
  }
  std::string completion_refusal(const std::string& body) const {
    try {
      parse_completion_request(body, s_, 1);
      return "";
    } catch (const RequestError& e) {
      EXPECT_EQ(e.status(), 400);
      return e.what();
    }
  }
  test::CharTokenizer tokenizer_;
  ServeSettings s_;
};

TEST_F(Requests, MegatronApiRulesAndMessages) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "Failed to decode JSON object: "},
      {"{\"prompts\": [\"a\"]", "Failed to decode JSON object: "},
      {"[1, 2]", "the request body must be a JSON object"},
      {"{}", "prompts argument required"},
      {R"({"prompts": ["a"], "max_len": 3})", "max_len is no longer used.  Replace with tokens_to_generate"},
      {R"({"prompts": ["a"], "sentences": ["a"]})", "sentences is no longer used.  Replace with prompts"},
      {R"({"prompts": "a"})", "prompts is not a list of strings"},
      {R"({"prompts": ["a", 3]})", "prompts is not a list of strings"},
      {R"({"prompts": []})", "prompts is empty"},
      {R"({"prompts": ["a"], "tokens_to_generate": "3"})", "tokens_to_generate must be an integer greater than 0"},
      {R"({"prompts": ["a"], "tokens_to_generate": 2.5})", "tokens_to_generate must be an integer greater than 0"},
      {R"({"prompts": ["a"], "tokens_to_generate": -1})",
       "tokens_to_generate must be an integer greater than or equal to 0"},
      {R"({"prompts": ["a"], "logprobs": 1})", "logprobs must be a boolean value"},
      {R"({"prompts": ["a"], "tokens_to_generate": 0})", "tokens_to_generate=0 implies logprobs should be True"},
      {R"({"prompts": ["a"], "temperature": "hot"})",
       "temperature must be a positive number less than or equal to 1000.0"},
      {R"({"prompts": ["a"], "temperature": -0.5})",
       "temperature must be a positive number less than or equal to 100.0"},
      {R"({"prompts": ["a"], "temperature": 0})", "temperature must be a positive number less than or equal to 100.0"},
      {R"({"prompts": ["a"], "top_k": 1.5})",
       "top_k must be an integer equal to or greater than 0 and less than or equal to 1000"},
      {R"({"prompts": ["a"], "top_k": 1001})",
       "top_k must be equal to or greater than 0 and less than or equal to 1000"},
      {R"({"prompts": ["a"], "top_p": "x"})", "top_p must be a positive float less than or equal to 1.0"},
      {R"({"prompts": ["a"], "top_k": 3, "top_p": 0.5})", "cannot set both top-k and top-p samplings."},
      {R"({"prompts": ["a"], "top_p": 1.5})", "top_p must be less than or equal to 1.0"},
      {R"({"prompts": ["a"], "top_p_decay": 0.5})", "top_p_decay cannot be set without top_p"},
      {R"({"prompts": ["a"], "top_p": 0.9, "top_p_bound": 0.95})",
       "top_p_bound must be greater than 0 and less than top_p"},
      {R"({"prompts": ["a"], "add_BOS": "yes"})", "add_BOS must be a boolean value"},
      {R"({"prompts": ["a", ""]})", "Empty prompts require add_BOS=true"},
      {R"({"prompts": ["a"], "stop_on_eol": 1})", "stop_on_eol must be a boolean value"},
      {R"({"prompts": ["a"], "stop_on_double_eol": null})", "stop_on_double_eol must be a boolean value"},
      {R"({"prompts": ["a"], "prevent_newline_after_colon": 0})",
       "prevent_newline_after_colon must be a boolean value"},
      {R"({"prompts": ["a"], "random_seed": "7"})", "random_seed must be integer"},
      {R"({"prompts": ["a"], "random_seed": -7})", "random_seed must be a positive integer"},
      {R"({"prompts": ["a"], "no_log": "no"})", "no_log must be a boolean value"},
      {R"({"prompts": ["a"], "beam_width": 0})", "beam_width must be an integer > 1"},
      {R"({"prompts": ["a", "b"], "beam_width": 2})", "When doing beam_search, batch size must be 1"},
      {R"({"prompts": ["a"], "beam_width": 2})", "beam_width: beam search is not supported by megatron serve"},
      {R"({"prompts": ["a"], "stop_token": "x"})", "stop_token must be an integer"},
      {R"({"prompts": ["a"], "length_penalty": 1})", "length_penalty must be a float"},
      {R"({"prompts": ["abc"], "tokens_to_generate": 30})",
       "Length of prompt + tokens_to_generate longer than allowed 33 > 32"},
      {R"({"prompts": ["a"], "tokens_to_generate": 9223372036854775807})",
       "Length of prompt + tokens_to_generate longer than allowed 9223372036854775807 > 32"},
      {R"({"prompts": ["a"], "tokens_to_generate": 18446744073709551615})",
       "Length of prompt + tokens_to_generate longer than allowed 9223372036854775807 > 32"},
      {R"({"prompts": ["a"], "tokens_to_generate": 99999999999999999999})", "Failed to decode JSON object: "},
      {R"({"prompts": ["a","b","c","d","e","f","g","h","i","j"], "tokens_to_generate": 20})",
       "Too many tokens.  210 is greater than 200"},
  };
  for (const auto& [body, message] : cases) {
    const auto [status, got] = api_refusal(body);
    EXPECT_EQ(status, 400) << body;
    EXPECT_EQ(got.substr(0, message.size()), message) << body;
    if (message.back() != ' ') EXPECT_EQ(got, message) << body;
  }
  std::string many = R"({"prompts": [)";
  for (int i = 0; i < 129; ++i) many += std::string(i ? "," : "") + "\"a\"";
  EXPECT_EQ(api_refusal(many + "], \"tokens_to_generate\": 0, \"logprobs\": true}").second,
            "Maximum number of prompts is 128");
}

TEST_F(Requests, MegatronApiFields) {
  s_.sampling.temperature = 0.0f;  // the server's default: greedy
  ApiRequest r = parse_api_request(R"({"prompts": ["ab", ""], "add_BOS": true, "tokens_to_generate": 5,
      "logprobs": true, "top_p": 0.5, "top_p_decay": 0.9, "top_p_bound": 0.2, "stop_on_eol": true,
      "random_seed": 42, "no_log": true})",
                                   s_, 9);
  ASSERT_EQ(r.sequences.size(), 2u);
  EXPECT_EQ(r.sequences[0].prompt, (std::vector<int32_t>{0, 4, 5})) << "add_BOS prepends the end-of-document id";
  EXPECT_EQ(r.sequences[1].prompt, (std::vector<int32_t>{0}));
  const SequenceRequest& q = r.sequences[1];
  EXPECT_EQ(q.max_new_tokens, 5);
  EXPECT_TRUE(q.logprobs && q.stop_on_eol && r.no_log);
  EXPECT_EQ(q.sampling.seed, 42u);
  EXPECT_EQ(q.draw_base, uint64_t{1} << 32) << "each prompt its own draws";
  EXPECT_FLOAT_EQ(q.sampling.top_p, 0.5f);
  EXPECT_EQ(q.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(q.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(q.top_p_decay, 0.9f);
  EXPECT_FLOAT_EQ(q.top_p_bound, 0.2f);
  // Defaults: tokens_to_generate from the server, the seed it gives.
  s_.tokens_to_generate = 7;
  r = parse_api_request(R"({"prompts": ["a"], "top_k": 1})", s_, 9);
  EXPECT_EQ(r.sequences[0].max_new_tokens, 7);
  EXPECT_EQ(r.sequences[0].sampling.seed, 9u);
  EXPECT_EQ(r.sequences[0].sampling.top_k, 1);
  EXPECT_FALSE(r.sequences[0].logprobs);
}

TEST_F(Requests, MegatronApiAnswer) {
  ApiRequest r;
  r.logprobs = true;
  SequenceResult res;
  res.tokens = {7, 8, 30, 1};  // "de \n"
  res.prompt_length = 2;
  res.logprobs = {-0.5f, -1.25f, -2.0f};
  EXPECT_EQ(
      api_response(r, {res}, s_),
      R"({"text":["de \n"],"segments":[["d","e"," ","\n"]],"logprobs":[[-0.5,-1.25,-2.0]],"tokens":[[7,8,30,1]]})");
  r.logprobs = false;
  res.logprobs.clear();
  EXPECT_EQ(api_response(r, {res}, s_),
            R"({"text":["de \n"],"segments":[["d","e"," ","\n"]],"logprobs":null,"tokens":[[7,8,30,1]]})");
}

TEST_F(Requests, CompletionsRulesAndFields) {
  EXPECT_EQ(completion_refusal("nope").rfind("Failed to decode JSON object: ", 0), 0u);
  EXPECT_EQ(completion_refusal("{}"), "'prompt' is a required property");
  EXPECT_EQ(completion_refusal(R"({"prompt": 5})"),
            "prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids");
  EXPECT_EQ(completion_refusal(R"({"prompt": []})"), "prompt contains no items");
  EXPECT_EQ(completion_refusal(R"({"prompt": [1, 31]})"), "token id 31 is outside the vocabulary [0, 31)");
  EXPECT_EQ(completion_refusal(R"({"prompt": [[1], "a"]})"),
            "prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids");
  EXPECT_EQ(completion_refusal(R"({"prompt": "a", "max_tokens": -1})"), "max_tokens must be a non-negative integer");
  EXPECT_EQ(completion_refusal(R"({"prompt": "a", "temperature": -1})"),
            "temperature must be a number between 0 and 100");
  EXPECT_EQ(completion_refusal(R"({"prompt": "a", "top_p": 2})"), "top_p must be a number between 0 and 1");
  EXPECT_EQ(completion_refusal(R"({"prompt": "a", "n": 2})"), "n > 1 not supported");
  EXPECT_EQ(completion_refusal(R"({"prompt": "a", "best_of": 3})"), "best_of > 1 not supported");
  EXPECT_EQ(completion_refusal(R"({"prompt": "a", "stream": true})"), "stream=true is not supported");
  EXPECT_EQ(completion_refusal(R"({"prompt": "a", "logprobs": 6})"), "logprobs must be an integer between 0 and 5");
  EXPECT_EQ(completion_refusal(R"({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]})"),
            "stop must be a string or a list of at most 4 strings");
  EXPECT_EQ(completion_refusal(R"({"prompt": "a", "presence_penalty": 0.5})"), "presence_penalty is not supported");
  EXPECT_EQ(completion_refusal(R"({"prompt": "a", "logit_bias": {"1": 5}})"), "logit_bias is not supported");
  EXPECT_EQ(completion_refusal(R"({"prompt": "a", "max_tokens": 0})"),
            "echo=False not supported when tokens_to_generate == 0");
  EXPECT_EQ(completion_refusal(R"({"prompt": "abcd", "max_tokens": 30})"),
            "This model's maximum context length is 32 tokens, however you requested 34 tokens (4 in your prompt; 30 "
            "for the completion). Please reduce your prompt; or completion length.");

  CompletionRequest r = parse_completion_request(
      R"({"model": "m", "prompt": ["ab", ""], "max_tokens": 3, "temperature": 0, "logprobs": 2, "echo": true,
          "stop": "x", "seed": 5, "n": 1, "presence_penalty": 0, "logit_bias": {}, "user": "u"})",
      s_, 9);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.sequences.size(), 2u);
  EXPECT_EQ(r.sequences[1].prompt, (std::vector<int32_t>{0})) << "an empty prompt starts a document";
  EXPECT_EQ(r.prompts, (std::vector<std::string>{"ab", ""}));
  EXPECT_EQ(r.sequences[0].stop, (std::vector<std::string>{"x"}));
  EXPECT_EQ(r.sequences[0].top_logprobs, 2);
  EXPECT_TRUE(r.sequences[0].logprobs && r.echo);
  EXPECT_EQ(r.sequences[0].sampling.seed, 5u);
  EXPECT_FLOAT_EQ(r.sequences[0].sampling.temperature, 0.0f);
  r = parse_completion_request(R"({"prompt": [[4, 5], [6]], "top_p": 1})", s_, 9);
  EXPECT_EQ(r.prompts, (std::vector<std::string>{"ab", "c"}));
  EXPECT_EQ(r.max_tokens, 16) << "OpenAI's default";
  EXPECT_FLOAT_EQ(r.sequences[0].sampling.top_p, 0.0f) << "top_p 1 keeps every token";
  EXPECT_EQ(r.sequences[0].sampling.seed, 9u);
  EXPECT_FALSE(r.sequences[0].logprobs);
}

TEST_F(Requests, CompletionsAnswer) {
  CompletionRequest r =
      parse_completion_request(R"({"prompt": "ab", "max_tokens": 4, "logprobs": 1, "stop": "e"})", s_, 9);
  SequenceResult res;
  res.tokens = {4, 5, 6, 7, 8};  // "ab" + "cde": the engine stopped at the token that made "e"
  res.prompt_length = 2;
  res.logprobs = {-1.0f, -0.5f, -0.25f, -0.125f};
  res.top_logprobs = {{{5, -1.0f}}, {{6, -0.5f}}, {{7, -0.25f}}, {{8, -0.125f}}};
  res.finish = FinishReason::kStopString;
  EXPECT_EQ(completion_response(r, {res}, s_, "cmpl-1", 1700000000),
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"tiny","choices":[{"text":"cd",)"
            R"("index":0,"logprobs":{"tokens":["c","d"],"token_logprobs":[-0.5,-0.25],"top_logprobs":[{"c":-0.5},)"
            R"({"d":-0.25}],"text_offset":[2,3]},"finish_reason":"stop"}],)"
            R"("usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}})");
  // The end-of-document token ends the text without being in it; echo puts the prompt first.
  r = parse_completion_request(R"({"prompt": "ab", "max_tokens": 4, "echo": true})", s_, 9);
  res.tokens = {4, 5, 6, 0};
  res.finish = FinishReason::kEndOfText;
  EXPECT_EQ(
      completion_response(r, {res}, s_, "cmpl-2", 1),
      R"({"id":"cmpl-2","object":"text_completion","created":1,"model":"tiny","choices":[{"text":"abc","index":0,)"
      R"("logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":2,"total_tokens":4}})");
}

TEST(Utf8, InvalidBytesBecomeReplacementCharactersAsInPython) {
  // b.decode("utf-8", errors="replace") for each b.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"plain", "plain"},
      {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"},  // one 4-byte character
      {"a\xE2\x82"
       "b",
       "a\xEF\xBF\xBD"
       "b"},  // a truncated 3-byte one: one U+FFFD
      {"\xFF", "\xEF\xBF\xBD"},
      {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},  // a surrogate: three
      {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},                  // overlong
      {"\xE2\x82", "\xEF\xBF\xBD"},                              // cut at the end
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(utf8_replace_invalid(in), want);
  EXPECT_EQ(utf8_length("a\xF0\x9F\x98\x80"
                        "b"),
            3u);
}

}  // namespace
}  // namespace megatron::serve
