#include "serve/requests.h"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/error.h"
#include "core/json_writer.h"
#include "serve/utf8.h"

namespace megatron::serve {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

[[noreturn]] void refuse(const std::string& message, const std::string& param = "") {
  throw RequestError(400, message, param);
}

// The parsed body, kept alive with its parser.
struct Body {
  simdjson::dom::parser parser;
  simdjson::dom::object object;
};

void parse_body(std::string_view text, Body& body) {
  element root;
  const simdjson::error_code error = body.parser.parse(text.data(), text.size()).get(root);
  if (error != simdjson::SUCCESS) {
    refuse(std::string("Failed to decode JSON object: ") + simdjson::error_message(error));
  }
  if (root.type() != element_type::OBJECT) refuse("the request body must be a JSON object");
  body.object = root.get_object().value_unsafe();
}

std::optional<element> field(const simdjson::dom::object& o, std::string_view key) {
  element e;
  if (o.at_key(key).get(e) != simdjson::SUCCESS) return std::nullopt;
  return e;
}
// Present and not null (the OpenAI API's null means "the default").
std::optional<element> given(const simdjson::dom::object& o, std::string_view key) {
  std::optional<element> e = field(o, key);
  if (e && e->type() == element_type::NULL_VALUE) return std::nullopt;
  return e;
}

// By value: a range-for over value_unsafe() of a temporary result would dangle.
simdjson::dom::array array_of(const element& e) {
  simdjson::dom::array a;
  MT_CHECK(e.get_array().get(a) == simdjson::SUCCESS) << "not an array";
  return a;
}

bool is_int(const element& e) { return e.type() == element_type::INT64 || e.type() == element_type::UINT64; }
bool is_number(const element& e) { return is_int(e) || e.type() == element_type::DOUBLE; }
// An integer beyond int64 reads as int64's largest value: every bound below is far smaller.
int64_t int_of(const element& e) {
  if (e.type() == element_type::UINT64) return std::numeric_limits<int64_t>::max();
  return e.get_int64().value_unsafe();
}
double number_of(const element& e) {
  if (e.type() == element_type::INT64) return static_cast<double>(e.get_int64().value_unsafe());
  if (e.type() == element_type::UINT64) return static_cast<double>(e.get_uint64().value_unsafe());
  return e.get_double().value_unsafe();
}

bool bool_field(const simdjson::dom::object& o, std::string_view key, bool fallback, const std::string& message) {
  const std::optional<element> e = field(o, key);
  if (!e) return fallback;
  if (e->type() != element_type::BOOL) refuse(message, std::string(key));
  return e->get_bool().value_unsafe();
}

int64_t saturating_add(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}

// Megatron's limits on a batch of prompts (generation.py): the longest prompt plus the tokens
// to generate must fit the model's positions, and all of them the token budget.
void check_lengths(const std::vector<SequenceRequest>& seqs, int64_t new_tokens, const ServeSettings& s) {
  int64_t longest = 0;
  for (const SequenceRequest& r : seqs) longest = std::max<int64_t>(longest, static_cast<int64_t>(r.prompt.size()));
  const int64_t total = saturating_add(longest, new_tokens);
  if (total > s.context) {
    refuse("Length of prompt + tokens_to_generate longer than allowed " + std::to_string(total) + " > " +
           std::to_string(s.context));
  }
  const int64_t tokens = total * static_cast<int64_t>(seqs.size());
  if (tokens > s.max_tokens_to_oom) {
    refuse("Too many tokens.  " + std::to_string(tokens) + " is greater than " + std::to_string(s.max_tokens_to_oom));
  }
}

int32_t eod_or_refuse(const data::Tokenizer& tokenizer, const std::string& why) {
  try {
    return tokenizer.eod();
  } catch (const Error&) {
    refuse(why + ": the tokenizer has no end-of-document token");
  }
}

// A double for JSON: non-finite values (a model gone to NaN) are written as null.
void write_real(JsonWriter& w, double v) {
  if (std::isfinite(v)) {
    w.value(v);
  } else {
    w.null();
  }
}

std::string text_of(const data::Tokenizer& tokenizer, std::span<const int32_t> ids) {
  return utf8_replace_invalid(tokenizer.decode(ids));
}

}  // namespace

std::vector<std::string> token_segments(const data::Tokenizer& tokenizer, std::span<const int32_t> tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const size_t from = i >= 8 ? i - 8 : 0;
    const std::string base = tokenizer.decode(tokens.subspan(from, i - from));
    const std::string full = tokenizer.decode(tokens.subspan(from, i + 1 - from));
    out.push_back(full.compare(0, base.size(), base) == 0 ? full.substr(base.size())
                                                          : tokenizer.decode(tokens.subspan(i, 1)));
  }
  return out;
}

// ---- PUT /api ---------------------------------------------------------------------------------

ApiRequest parse_api_request(std::string_view text, const ServeSettings& s, uint64_t seed) {
  Body body;
  parse_body(text, body);
  const simdjson::dom::object& o = body.object;
  // In Megatron's order (text_generation_server.py, MegatronGenerate.put), with its messages.
  const std::optional<element> prompts_field = field(o, "prompts");
  if (!prompts_field) refuse("prompts argument required");
  if (field(o, "max_len")) refuse("max_len is no longer used.  Replace with tokens_to_generate");
  if (field(o, "sentences")) refuse("sentences is no longer used.  Replace with prompts");
  if (prompts_field->type() != element_type::ARRAY) refuse("prompts is not a list of strings");
  std::vector<std::string_view> prompts;
  for (element p : array_of(*prompts_field)) {
    if (p.type() != element_type::STRING) refuse("prompts is not a list of strings");
    prompts.push_back(p.get_string().value_unsafe());
  }
  if (prompts.empty()) refuse("prompts is empty");
  if (static_cast<int64_t>(prompts.size()) > s.max_prompts) {
    refuse("Maximum number of prompts is " + std::to_string(s.max_prompts));
  }

  ApiRequest r;
  r.tokens_to_generate = s.tokens_to_generate;
  if (const std::optional<element> e = field(o, "tokens_to_generate")) {
    if (!is_int(*e)) refuse("tokens_to_generate must be an integer greater than 0");
    r.tokens_to_generate = int_of(*e);
    if (r.tokens_to_generate < 0) refuse("tokens_to_generate must be an integer greater than or equal to 0");
  }
  r.logprobs = bool_field(o, "logprobs", false, "logprobs must be a boolean value");
  if (r.tokens_to_generate == 0 && !r.logprobs) refuse("tokens_to_generate=0 implies logprobs should be True");

  model::SamplingParams sp = s.sampling;
  if (const std::optional<element> e = field(o, "temperature")) {
    if (!is_number(*e)) refuse("temperature must be a positive number less than or equal to 1000.0");
    const double t = number_of(*e);
    if (!(t > 0.0 && t <= 100.0)) refuse("temperature must be a positive number less than or equal to 100.0");
    sp.temperature = static_cast<float>(t);
  }
  const std::optional<element> top_k = field(o, "top_k"), top_p = field(o, "top_p");
  if (top_k) {
    if (!is_int(*top_k)) {
      refuse("top_k must be an integer equal to or greater than 0 and less than or equal to 1000");
    }
    sp.top_k = int_of(*top_k);
    if (!(sp.top_k >= 0 && sp.top_k <= 1000)) {
      refuse("top_k must be equal to or greater than 0 and less than or equal to 1000");
    }
    if (!top_p) sp.top_p = 0.0f;  // the request's choice replaces the server's default
  }
  if (top_p) {
    if (!is_number(*top_p)) refuse("top_p must be a positive float less than or equal to 1.0");
    const double p = number_of(*top_p);
    if (!top_k) sp.top_k = 0;
    if (p > 0.0 && sp.top_k > 0) refuse("cannot set both top-k and top-p samplings.");
    if (!(p >= 0.0 && p <= 1.0)) refuse("top_p must be less than or equal to 1.0");
    sp.top_p = static_cast<float>(p);
  }
  float top_p_decay = 0.0f, top_p_bound = 0.0f;
  if (const std::optional<element> e = field(o, "top_p_decay")) {
    if (!is_number(*e)) refuse("top_p_decay must be a positive float less than or equal to 1.0");
    if (sp.top_p == 0.0f) refuse("top_p_decay cannot be set without top_p");
    const double d = number_of(*e);
    if (!(d >= 0.0 && d <= 1.0)) refuse("top_p_decay must be less than or equal to 1.0");
    top_p_decay = static_cast<float>(d);
  }
  if (const std::optional<element> e = field(o, "top_p_bound")) {
    if (!is_number(*e)) refuse("top_p_bound must be a positive float less than or equal to top_p");
    if (sp.top_p == 0.0f) refuse("top_p_bound cannot be set without top_p");
    const double b = number_of(*e);
    if (!(b > 0.0 && b <= sp.top_p)) refuse("top_p_bound must be greater than 0 and less than top_p");
    top_p_bound = static_cast<float>(b);
  }
  const bool add_bos = bool_field(o, "add_BOS", false, "add_BOS must be a boolean value");
  for (std::string_view p : prompts) {
    if (p.empty() && !add_bos) refuse("Empty prompts require add_BOS=true");
  }
  const bool stop_on_double_eol =
      bool_field(o, "stop_on_double_eol", false, "stop_on_double_eol must be a boolean value");
  const bool stop_on_eol = bool_field(o, "stop_on_eol", false, "stop_on_eol must be a boolean value");
  const bool no_newline_after_colon =
      bool_field(o, "prevent_newline_after_colon", false, "prevent_newline_after_colon must be a boolean value");
  sp.seed = seed;
  if (const std::optional<element> e = field(o, "random_seed")) {
    if (!is_int(*e)) refuse("random_seed must be integer");
    const int64_t v = int_of(*e);
    if (v < 0) refuse("random_seed must be a positive integer");
    sp.seed = static_cast<uint64_t>(v);
  }
  r.no_log = bool_field(o, "no_log", false, "no_log must be a boolean value");
  if (const std::optional<element> e = field(o, "beam_width")) {
    if (!is_int(*e)) refuse("beam_width must be integer");
    if (int_of(*e) < 1) refuse("beam_width must be an integer > 1");
    if (prompts.size() > 1) refuse("When doing beam_search, batch size must be 1");
  }
  if (const std::optional<element> e = field(o, "stop_token")) {
    if (!is_int(*e)) refuse("stop_token must be an integer");
  }
  if (const std::optional<element> e = field(o, "length_penalty")) {
    if (e->type() != element_type::DOUBLE) refuse("length_penalty must be a float");
  }
  if (field(o, "beam_width")) refuse("beam_width: beam search is not supported by megatron serve");

  const data::Tokenizer& tokenizer = *s.tokenizer;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SequenceRequest q;
    // Megatron's BOS is the end-of-document token (tokenization.py, _tokenize_prompts_and_batch).
    if (add_bos) q.prompt.push_back(eod_or_refuse(tokenizer, "add_BOS"));
    tokenizer.encode(prompts[i], &q.prompt);
    if (q.prompt.empty()) refuse("Empty prompts require add_BOS=true");
    q.max_new_tokens = r.tokens_to_generate;
    q.sampling = sp;
    q.draw_base = static_cast<uint64_t>(i) << 32;
    q.top_p_decay = top_p_decay;
    q.top_p_bound = top_p_bound;
    q.logprobs = r.logprobs;
    q.stop_on_eol = stop_on_eol;
    q.stop_on_double_eol = stop_on_double_eol;
    q.prevent_newline_after_colon = no_newline_after_colon;
    r.sequences.push_back(std::move(q));
  }
  check_lengths(r.sequences, r.tokens_to_generate, s);
  return r;
}

std::string api_response(const ApiRequest& request, const std::vector<SequenceResult>& results,
                         const ServeSettings& s) {
  const data::Tokenizer& tokenizer = *s.tokenizer;
  JsonWriter w;
  w.begin_object();
  w.key("text").begin_array();
  for (const SequenceResult& r : results) w.value(text_of(tokenizer, r.tokens));
  w.end_array();
  w.key("segments").begin_array();
  for (const SequenceResult& r : results) {
    w.begin_array();
    for (const std::string& seg : token_segments(tokenizer, r.tokens)) w.value(utf8_replace_invalid(seg));
    w.end_array();
  }
  w.end_array();
  w.key("logprobs");
  if (request.logprobs) {
    w.begin_array();
    for (const SequenceResult& r : results) {
      w.begin_array();
      for (float lp : r.logprobs) write_real(w, lp);
      w.end_array();
    }
    w.end_array();
  } else {
    w.null();
  }
  w.key("tokens").begin_array();
  for (const SequenceResult& r : results) {
    w.begin_array();
    for (int32_t id : r.tokens) w.value(int64_t{id});
    w.end_array();
  }
  w.end_array();
  w.end_object();
  return w.take();
}

// ---- POST /v1/completions ------------------------------------------------------------------------

CompletionRequest parse_completion_request(std::string_view text, const ServeSettings& s, uint64_t seed) {
  Body body;
  parse_body(text, body);
  const simdjson::dom::object& o = body.object;
  const data::Tokenizer& tokenizer = *s.tokenizer;
  CompletionRequest r;
  r.model = s.model_name;
  if (const std::optional<element> e = given(o, "model")) {
    if (e->type() != element_type::STRING) refuse("model must be a string", "model");
    r.model = std::string(e->get_string().value_unsafe());
  }

  // The prompts: a string, strings, token ids, or lists of token ids.
  std::vector<std::vector<int32_t>> prompts;
  const std::optional<element> prompt = given(o, "prompt");
  if (!prompt) refuse("'prompt' is a required property", "prompt");
  const std::string kinds =
      "prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids";
  auto ids_of = [&](element list) {
    std::vector<int32_t> ids;
    for (element id : array_of(list)) {
      if (!is_int(id)) refuse(kinds, "prompt");
      const int64_t v = int_of(id);
      if (v < 0 || v >= s.vocab_size) {
        refuse("token id " + std::to_string(v) + " is outside the vocabulary [0, " + std::to_string(s.vocab_size) + ")",
               "prompt");
      }
      ids.push_back(static_cast<int32_t>(v));
    }
    return ids;
  };
  auto add_text = [&](std::string_view p) {
    r.prompts.emplace_back(p);
    prompts.emplace_back();
    tokenizer.encode(p, &prompts.back());
  };
  if (prompt->type() == element_type::STRING) {
    add_text(prompt->get_string().value_unsafe());
  } else if (prompt->type() == element_type::ARRAY) {
    const simdjson::dom::array items = array_of(*prompt);
    if (items.size() == 0) refuse("prompt contains no items", "prompt");
    const element first = *items.begin();
    if (first.type() == element_type::STRING) {
      for (element p : items) {
        if (p.type() != element_type::STRING) refuse(kinds, "prompt");
        if (static_cast<int64_t>(prompts.size()) >= s.max_prompts) {
          refuse("Maximum number of prompts is " + std::to_string(s.max_prompts), "prompt");
        }
        add_text(p.get_string().value_unsafe());
      }
    } else if (is_int(first)) {
      prompts.push_back(ids_of(*prompt));
      r.prompts.push_back(tokenizer.decode(prompts.back()));
    } else if (first.type() == element_type::ARRAY) {
      for (element p : items) {
        if (p.type() != element_type::ARRAY) refuse(kinds, "prompt");
        if (static_cast<int64_t>(prompts.size()) >= s.max_prompts) {
          refuse("Maximum number of prompts is " + std::to_string(s.max_prompts), "prompt");
        }
        prompts.push_back(ids_of(p));
        r.prompts.push_back(tokenizer.decode(prompts.back()));
      }
    } else {
      refuse(kinds, "prompt");
    }
  } else {
    refuse(kinds, "prompt");
  }

  r.max_tokens = s.max_tokens;
  if (const std::optional<element> e = given(o, "max_tokens")) {
    if (!is_int(*e) || int_of(*e) < 0) refuse("max_tokens must be a non-negative integer", "max_tokens");
    r.max_tokens = int_of(*e);
  }
  model::SamplingParams sp = s.sampling;
  if (const std::optional<element> e = given(o, "temperature")) {
    const double t = is_number(*e) ? number_of(*e) : -1.0;
    if (!(t >= 0.0 && t <= 100.0)) refuse("temperature must be a number between 0 and 100", "temperature");
    sp.temperature = static_cast<float>(t);  // 0: greedy
  }
  const std::optional<element> top_p = given(o, "top_p"), top_k = given(o, "top_k");
  if (top_k) {
    if (!is_int(*top_k) || int_of(*top_k) < -1) refuse("top_k must be an integer >= -1 (-1 or 0: off)", "top_k");
    sp.top_k = std::max<int64_t>(0, int_of(*top_k));
    if (!top_p) sp.top_p = 0.0f;
  }
  if (top_p) {
    const double p = is_number(*top_p) ? number_of(*top_p) : -1.0;
    if (!(p >= 0.0 && p <= 1.0)) refuse("top_p must be a number between 0 and 1", "top_p");
    if (!top_k) sp.top_k = 0;
    if (p == 0.0) {
      sp.top_k = 1;  // only the most likely token
      sp.top_p = 0.0f;
    } else {
      sp.top_p = p == 1.0 ? 0.0f : static_cast<float>(p);
    }
  }
  if (const std::optional<element> e = given(o, "n")) {
    if (!is_int(*e) || int_of(*e) < 1) refuse("n must be a positive integer", "n");
    if (int_of(*e) > 1) refuse("n > 1 not supported", "n");
  }
  if (const std::optional<element> e = given(o, "best_of")) {
    if (!is_int(*e) || int_of(*e) < 1) refuse("best_of must be a positive integer", "best_of");
    if (int_of(*e) > 1) refuse("best_of > 1 not supported", "best_of");
  }
  if (bool_field(o, "stream", false, "stream must be a boolean")) refuse("stream=true is not supported", "stream");
  r.echo = bool_field(o, "echo", false, "echo must be a boolean");
  if (const std::optional<element> e = given(o, "logprobs")) {
    if (!is_int(*e) || int_of(*e) < 0 || int_of(*e) > 5) {
      refuse("logprobs must be an integer between 0 and 5", "logprobs");
    }
    r.logprobs = int_of(*e);
  }
  if (const std::optional<element> e = given(o, "stop")) {
    const std::string message = "stop must be a string or a list of at most 4 strings";
    if (e->type() == element_type::STRING) {
      r.stop.emplace_back(e->get_string().value_unsafe());
    } else if (e->type() == element_type::ARRAY) {
      for (element x : array_of(*e)) {
        if (x.type() != element_type::STRING || r.stop.size() == 4) refuse(message, "stop");
        r.stop.emplace_back(x.get_string().value_unsafe());
      }
    } else {
      refuse(message, "stop");
    }
    r.stop.erase(std::remove(r.stop.begin(), r.stop.end(), std::string()), r.stop.end());
  }
  sp.seed = seed;
  if (const std::optional<element> e = given(o, "seed")) {
    if (!is_int(*e)) refuse("seed must be an integer", "seed");
    sp.seed = static_cast<uint64_t>(int_of(*e));
  }
  for (const char* penalty : {"presence_penalty", "frequency_penalty"}) {
    if (const std::optional<element> e = given(o, penalty)) {
      if (!is_number(*e)) refuse(std::string(penalty) + " must be a number", penalty);
      if (number_of(*e) != 0.0) refuse(std::string(penalty) + " is not supported", penalty);
    }
  }
  if (const std::optional<element> e = given(o, "logit_bias")) {
    if (e->type() != element_type::OBJECT || e->get_object().value_unsafe().size() != 0) {
      refuse("logit_bias is not supported", "logit_bias");
    }
  }
  if (const std::optional<element> e = given(o, "suffix")) {
    if (e->type() != element_type::STRING || !e->get_string().value_unsafe().empty()) {
      refuse("suffix is not supported", "suffix");
    }
  }
  if (!r.echo && r.max_tokens == 0) refuse("echo=False not supported when tokens_to_generate == 0", "max_tokens");

  for (size_t i = 0; i < prompts.size(); ++i) {
    SequenceRequest q;
    q.prompt = std::move(prompts[i]);
    // An empty prompt starts a new document, as `megatron generate` and OpenAI's models do.
    if (q.prompt.empty()) q.prompt.push_back(eod_or_refuse(tokenizer, "an empty prompt"));
    const int64_t length = static_cast<int64_t>(q.prompt.size());
    if (saturating_add(length, r.max_tokens) > s.context) {
      refuse("This model's maximum context length is " + std::to_string(s.context) + " tokens, however you requested " +
                 std::to_string(saturating_add(length, r.max_tokens)) + " tokens (" + std::to_string(length) +
                 " in your prompt; " + std::to_string(r.max_tokens) +
                 " for the completion). Please reduce your prompt; or completion length.",
             "max_tokens");
    }
    q.max_new_tokens = r.max_tokens;
    q.sampling = sp;
    q.draw_base = static_cast<uint64_t>(i) << 32;
    q.logprobs = r.logprobs.has_value();
    q.top_logprobs = r.logprobs.value_or(0);
    q.stop = r.stop;
    r.sequences.push_back(std::move(q));
  }
  check_lengths(r.sequences, r.max_tokens, s);
  return r;
}

std::string completion_response(const CompletionRequest& request, const std::vector<SequenceResult>& results,
                                const ServeSettings& s, const std::string& id, int64_t created) {
  const data::Tokenizer& tokenizer = *s.tokenizer;
  JsonWriter w;
  w.begin_object();
  w.key("id").value(id);
  w.key("object").value("text_completion");
  w.key("created").value(created);
  w.key("model").value(request.model);
  w.key("choices").begin_array();
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (size_t c = 0; c < results.size(); ++c) {
    const SequenceResult& r = results[c];
    const int64_t L = r.prompt_length, n = static_cast<int64_t>(r.tokens.size());
    prompt_tokens += L;
    completion_tokens += n - L;
    // The completion's tokens: the end-of-document token is the reason it stopped, not text.
    const int64_t end = r.finish == FinishReason::kEndOfText ? n - 1 : n;
    const std::vector<std::string> segments = token_segments(tokenizer, r.tokens);
    std::string completion;      // bytes
    std::vector<size_t> starts;  // of the completion's tokens in it
    for (int64_t i = L; i < end; ++i) {
      starts.push_back(completion.size());
      completion += segments[static_cast<size_t>(i)];
    }
    // Cut at the first stop string (the engine stopped at the token that completed it).
    size_t cut = completion.size();
    for (const std::string& stop : request.stop) cut = std::min(cut, completion.find(stop));
    completion.resize(cut);
    int64_t shown_end = L;  // tokens [.., shown_end) are in the text
    while (shown_end < end && starts[static_cast<size_t>(shown_end - L)] < cut) ++shown_end;
    const std::string& prompt_text = request.prompts[c];
    w.begin_object();
    w.key("text").value(utf8_replace_invalid(request.echo ? prompt_text + completion : completion));
    w.key("index").value(static_cast<int64_t>(c));
    w.key("logprobs");
    if (request.logprobs) {
      // Offsets in characters of prompt + completion, as Megatron's tokenizer.offsets.
      const int64_t first = request.echo ? 0 : L;
      std::string before;
      for (int64_t i = 0; i < first; ++i) before += segments[static_cast<size_t>(i)];
      w.begin_object();
      w.key("tokens").begin_array();
      for (int64_t i = first; i < shown_end; ++i) w.value(utf8_replace_invalid(segments[static_cast<size_t>(i)]));
      w.end_array();
      w.key("token_logprobs").begin_array();
      for (int64_t i = first; i < shown_end; ++i) {
        if (i == 0) {
          w.null();
        } else {
          write_real(w, r.logprobs[static_cast<size_t>(i - 1)]);
        }
      }
      w.end_array();
      w.key("top_logprobs").begin_array();
      for (int64_t i = first; i < shown_end; ++i) {
        if (i == 0 || r.top_logprobs.empty()) {
          w.null();
          continue;
        }
        w.begin_object();
        std::map<std::string, bool> seen;
        for (const auto& [tok, lp] : r.top_logprobs[static_cast<size_t>(i - 1)]) {
          std::string key = text_of(tokenizer, std::span<const int32_t>(&tok, 1));
          if (!seen.emplace(key, true).second) continue;  // two ids of one spelling: the likelier
          w.key(key);
          write_real(w, lp);
        }
        w.end_object();
      }
      w.end_array();
      w.key("text_offset").begin_array();
      for (int64_t i = first; i < shown_end; ++i) {
        w.value(static_cast<int64_t>(utf8_length(utf8_replace_invalid(before))));
        before += segments[static_cast<size_t>(i)];
      }
      w.end_array();
      w.end_object();
    } else {
      w.null();
    }
    w.key("finish_reason").value(r.finish == FinishReason::kLength ? "length" : "stop");
    w.end_object();
  }
  w.end_array();
  w.key("usage").begin_object();
  w.key("prompt_tokens").value(prompt_tokens);
  w.key("completion_tokens").value(completion_tokens);
  w.key("total_tokens").value(prompt_tokens + completion_tokens);
  w.end_object();
  w.end_object();
  return w.take();
}

std::string megatron_error_body(const std::string& message) {
  JsonWriter w;
  w.begin_object().key("message").value(utf8_replace_invalid(message)).end_object();
  return w.take();
}

std::string openai_error_body(int status, const std::string& message, const std::string& param) {
  JsonWriter w;
  w.begin_object().key("error").begin_object();
  w.key("message").value(utf8_replace_invalid(message));
  w.key("type").value(status >= 500 ? "server_error" : "invalid_request_error");
  w.key("param");
  if (param.empty()) {
    w.null();
  } else {
    w.value(param);
  }
  w.key("code").null();
  w.end_object().end_object();
  return w.take();
}

}  // namespace megatron::serve
