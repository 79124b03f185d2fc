#include "serve/batch_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <numeric>
#include <set>
#include <span>

#include "core/error.h"

namespace megatron::serve {

struct BatchEngine::Group {
  std::vector<SequenceRequest> requests;
  std::vector<SequenceResult> results;
  std::promise<std::vector<SequenceResult>> promise;
  size_t remaining = 0;
  bool failed = false;
  int64_t id = 0;
};

namespace {

// The one id `text` encodes to, or -1.
int32_t single_token(const data::Tokenizer& tokenizer, const std::string& text) {
  std::vector<int32_t> ids;
  tokenizer.encode(text, &ids);
  return ids.size() == 1 ? ids[0] : -1;
}

// log(sum(exp(logits[0, vocab)))), in double.
double log_sum_exp(std::span<const float> logits) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
  return mx + std::log(sum);
}

}  // namespace

BatchEngine::BatchEngine(model::GPTGenerator& generator, const data::Tokenizer& tokenizer, int64_t vocab_size,
                         const Options& options, LogLine log)
    : generator_(generator), tokenizer_(tokenizer), vocab_(vocab_size), options_(options), log_(std::move(log)) {
  MT_CHECK(options.max_batch >= 1 && options.max_batch <= generator.max_batch())
      << "max_batch " << options.max_batch << ", generator " << generator.max_batch();
  try {
    eod_ = tokenizer.eod();
  } catch (const Error&) {
    eod_ = -1;  // a tokenizer without one: sequences stop at their other limits
  }
  eol_ = single_token(tokenizer, "\n");
  double_eol_ = single_token(tokenizer, "\n\n");
  colon_ = single_token(tokenizer, ":");
  worker_ = std::thread([this] { work(); });
}

BatchEngine::~BatchEngine() { stop(); }

void BatchEngine::check(const SequenceRequest& r) const {
  MT_CHECK(!r.prompt.empty()) << "empty prompt";
  for (int32_t id : r.prompt) MT_CHECK(id >= 0 && id < vocab_) << "prompt token " << id;
  MT_CHECK(r.max_new_tokens >= 0 && r.top_logprobs >= 0 && r.top_logprobs <= kMaxTopLogprobs);
}

std::future<std::vector<SequenceResult>> BatchEngine::submit(std::vector<SequenceRequest> sequences) {
  for (const SequenceRequest& r : sequences) check(r);
  auto group = std::make_shared<Group>();
  group->requests = std::move(sequences);
  group->results.resize(group->requests.size());
  group->remaining = group->requests.size();
  std::future<std::vector<SequenceResult>> future = group->promise.get_future();
  if (group->requests.empty()) {
    group->promise.set_value({});
    return future;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw ShuttingDown("the server is shutting down");
    if (static_cast<int64_t>(queue_.size() + group->requests.size()) > options_.max_queued) {
      throw QueueFull("the server is busy: " + std::to_string(queue_.size()) + " prompts are queued (at most " +
                      std::to_string(options_.max_queued) + ")");
    }
    group->id = ++stats_.submitted;
    stats_.sequences += static_cast<int64_t>(group->requests.size());
    for (size_t i = 0; i < group->requests.size(); ++i) queue_.push_back(Item{group, i});
    stats_.queued = static_cast<int64_t>(queue_.size());
  }
  cv_.notify_all();
  return future;
}

void BatchEngine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

EngineStats BatchEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void BatchEngine::work() {
  const size_t max_batch = static_cast<size_t>(options_.max_batch);
  for (;;) {
    std::vector<Item> items;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (!stopping_ && queue_.size() < max_batch && options_.batch_wait.count() > 0) {
        cv_.wait_for(lock, options_.batch_wait, [&] { return stopping_ || queue_.size() >= max_batch; });
      }
      if (stopping_) {
        // Refuse what is queued; the groups of a batch already run are complete.
        std::set<Group*> refused;
        for (Item& item : queue_) {
          if (item.group->failed || !refused.insert(item.group.get()).second) continue;
          item.group->failed = true;
          item.group->promise.set_exception(std::make_exception_ptr(ShuttingDown("the server is shutting down")));
        }
        queue_.clear();
        stats_.queued = 0;
        return;
      }
      while (!queue_.empty() && items.size() < max_batch) {
        items.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      stats_.queued = static_cast<int64_t>(queue_.size());
    }
    std::vector<const SequenceRequest*> batch;
    std::set<int64_t> groups;
    for (const Item& item : items) {
      batch.push_back(&item.group->requests[item.index]);
      groups.insert(item.group->id);
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<SequenceResult> results;
    std::exception_ptr failure;
    try {
      results = run_batch(batch);
    } catch (...) {
      failure = std::current_exception();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    int64_t generated = 0, shortest = INT64_MAX, longest = 0;
    for (const SequenceRequest* r : batch) {
      shortest = std::min<int64_t>(shortest, static_cast<int64_t>(r->prompt.size()));
      longest = std::max<int64_t>(longest, static_cast<int64_t>(r->prompt.size()));
    }
    for (const SequenceResult& r : results) generated += static_cast<int64_t>(r.tokens.size()) - r.prompt_length;
    int64_t batch_number = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      batch_number = ++stats_.batches;
      stats_.largest_batch = std::max<int64_t>(stats_.largest_batch, static_cast<int64_t>(items.size()));
      if (groups.size() > 1) ++stats_.multi_request_batches;
      stats_.generated_tokens += generated;
      for (size_t i = 0; i < items.size(); ++i) {
        Group& g = *items[i].group;
        if (g.failed) continue;
        if (failure) {
          g.failed = true;
          g.promise.set_exception(failure);
          continue;
        }
        g.results[items[i].index] = std::move(results[i]);
        if (--g.remaining == 0) g.promise.set_value(std::move(g.results));
      }
    }
    if (options_.log_batches && log_) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "batch %lld: %zu sequence%s from %zu request%s, prompts of %lld-%lld tokens, "
                    "%lld tokens generated in %.3f s%s",
                    static_cast<long long>(batch_number), items.size(), items.size() == 1 ? "" : "s", groups.size(),
                    groups.size() == 1 ? "" : "s", static_cast<long long>(shortest), static_cast<long long>(longest),
                    static_cast<long long>(generated), seconds, failure ? " (failed)" : "");
      log_(line);
    }
  }
}

std::vector<SequenceResult> BatchEngine::run_batch(const std::vector<const SequenceRequest*>& batch) {
  const int64_t b = static_cast<int64_t>(batch.size());
  MT_CHECK(b >= 1 && b <= generator_.max_batch()) << "batch of " << b;
  const int64_t V = generator_.padded_vocab_size();
  std::vector<SequenceResult> out(static_cast<size_t>(b));
  std::vector<int64_t> length(static_cast<size_t>(b)), generated(static_cast<size_t>(b), 0);
  std::vector<bool> stopped(static_cast<size_t>(b), false);
  std::vector<float> top_p(static_cast<size_t>(b));
  int64_t shortest = INT64_MAX;
  bool any_logprobs = false;
  for (int64_t i = 0; i < b; ++i) {
    const SequenceRequest& r = *batch[static_cast<size_t>(i)];
    check(r);
    out[i].tokens = r.prompt;
    out[i].prompt_length = length[i] = static_cast<int64_t>(r.prompt.size());
    top_p[i] = r.sampling.top_p;
    shortest = std::min(shortest, length[i]);
    any_logprobs = any_logprobs || r.logprobs;
  }
  // Row i has nothing left to do at position `pos` (the next token to choose).
  auto finished = [&](int64_t i, int64_t pos) {
    return pos >= length[i] && (stopped[i] || generated[i] >= batch[static_cast<size_t>(i)]->max_new_tokens);
  };
  auto all_finished = [&](int64_t pos) {
    for (int64_t i = 0; i < b; ++i) {
      if (!finished(i, pos)) return false;
    }
    return true;
  };
  std::vector<float> scratch;
  // The log-probabilities at one position from its logits row (the model's padded vocabulary;
  // only ids below vocab_ count): that of `token`, and the top ones.
  auto record = [&](int64_t i, std::span<const float> row, int32_t token) {
    const SequenceRequest& r = *batch[static_cast<size_t>(i)];
    if (!r.logprobs) return;
    const std::span<const float> real = row.subspan(0, static_cast<size_t>(vocab_));
    const double lse = log_sum_exp(real);
    out[i].logprobs.push_back(static_cast<float>(real[static_cast<size_t>(token)] - lse));
    if (r.top_logprobs <= 0) return;
    std::vector<int32_t> ids(static_cast<size_t>(vocab_));
    std::iota(ids.begin(), ids.end(), 0);
    const size_t k = static_cast<size_t>(std::min<int64_t>(r.top_logprobs, vocab_));
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), [&](int32_t a, int32_t c) {
      return real[static_cast<size_t>(a)] > real[static_cast<size_t>(c)] ||
             (real[static_cast<size_t>(a)] == real[static_cast<size_t>(c)] && a < c);
    });
    std::vector<std::pair<int32_t, float>> top;
    for (size_t j = 0; j < k; ++j)
      top.emplace_back(ids[j], static_cast<float>(real[static_cast<size_t>(ids[j])] - lse));
    out[i].top_logprobs.push_back(std::move(top));
  };
  // Megatron's prevent_newline_after_colon: no "\n" right after ":" (on a copy of the row).
  auto adjusted = [&](int64_t i, std::span<const float> row, int64_t pos) -> std::span<const float> {
    const SequenceRequest& r = *batch[static_cast<size_t>(i)];
    if (!r.prevent_newline_after_colon || colon_ < 0 || eol_ < 0 || pos == 0 ||
        out[i].tokens[static_cast<size_t>(pos - 1)] != colon_) {
      return row;
    }
    scratch.assign(row.begin(), row.end());
    scratch[static_cast<size_t>(eol_)] = -1e10f;
    return scratch;
  };

  generator_.reset();
  // Prefill: positions [0, shortest) of every row at once; with log-probabilities, in chunks
  // whose logits stay near 64 MiB.
  std::vector<float> logits;  // [b, V]: each row's prediction of position `pos`
  const int64_t chunk = any_logprobs ? std::max<int64_t>(1, (int64_t{1} << 24) / (b * V)) : shortest;
  for (int64_t begin = 0; begin < shortest;) {
    const int64_t end = std::min(shortest, begin + chunk), t = end - begin;
    std::vector<int32_t> tokens(static_cast<size_t>(b * t));
    for (int64_t i = 0; i < b; ++i) {
      std::copy(out[i].tokens.begin() + begin, out[i].tokens.begin() + end, tokens.begin() + i * t);
    }
    std::vector<float> all = generator_.append(tokens, b, any_logprobs);
    if (any_logprobs) {
      // [t, b, V]: position begin + p predicts begin + p + 1 (the prompt's own tokens below
      // `shortest`; the last position's prediction is `logits`).
      for (int64_t p = 0; p < t; ++p) {
        const int64_t pos = begin + p + 1;
        if (pos >= shortest) break;
        for (int64_t i = 0; i < b; ++i) {
          const std::span<const float> row(all.data() + (p * b + i) * V, static_cast<size_t>(V));
          record(i, adjusted(i, row, pos), out[i].tokens[static_cast<size_t>(pos)]);
        }
      }
      logits.assign(all.end() - b * V, all.end());
    } else {
      logits = std::move(all);
    }
    begin = end;
  }

  std::vector<int32_t> column(static_cast<size_t>(b));
  for (int64_t pos = shortest; !all_finished(pos);) {
    for (int64_t i = 0; i < b; ++i) {
      const SequenceRequest& r = *batch[static_cast<size_t>(i)];
      // A finished row is fed any valid token: its later positions are never read.
      column[i] = out[i].tokens.back();
      if (finished(i, pos)) continue;
      const std::span<const float> row =
          adjusted(i, std::span<const float>(logits.data() + i * V, static_cast<size_t>(V)), pos);
      if (pos < length[i]) {  // the row's own prompt token
        column[i] = out[i].tokens[static_cast<size_t>(pos)];
        record(i, row, column[i]);
        continue;
      }
      model::SamplingParams sp = r.sampling;
      sp.top_p = top_p[i];
      const int32_t next = model::sample_token(row, vocab_, sp, r.draw_base + static_cast<uint64_t>(generated[i]));
      record(i, row, next);
      if (r.top_p_decay > 0.0f && top_p[i] > 0.0f) top_p[i] = std::max(top_p[i] * r.top_p_decay, r.top_p_bound);
      const int32_t previous = out[i].tokens.back();
      out[i].tokens.push_back(next);
      column[i] = next;
      ++generated[i];
      if (next == eod_) {
        stopped[i] = true;
        out[i].finish = FinishReason::kEndOfText;
      } else if ((r.stop_on_eol || r.stop_on_double_eol) &&
                 ((next == double_eol_ && double_eol_ >= 0) ||
                  (next == eol_ && eol_ >= 0 && (r.stop_on_eol || previous == eol_)))) {
        stopped[i] = true;
        out[i].finish = FinishReason::kEndOfLine;
      } else if (!r.stop.empty()) {
        // The generated text so far, decoded after a few prompt tokens (SentencePiece drops the
        // word-initial space of a text's first piece).
        const size_t keep = std::min<size_t>(8, static_cast<size_t>(length[i]));
        const std::vector<int32_t> window(out[i].tokens.begin() + (length[i] - static_cast<int64_t>(keep)),
                                          out[i].tokens.end());
        const std::string base = tokenizer_.decode(std::span<const int32_t>(window.data(), keep));
        const std::string full = tokenizer_.decode(window);
        const std::string text =
            full.compare(0, base.size(), base) == 0
                ? full.substr(base.size())
                : tokenizer_.decode(std::span<const int32_t>(window.data() + keep, window.size() - keep));
        for (const std::string& s : r.stop) {
          if (!s.empty() && text.find(s) != std::string::npos) {
            stopped[i] = true;
            out[i].finish = FinishReason::kStopString;
            break;
          }
        }
      }
    }
    ++pos;
    if (all_finished(pos)) break;
    logits = generator_.append(column, b, false);
  }
  return out;
}

}  // namespace megatron::serve
