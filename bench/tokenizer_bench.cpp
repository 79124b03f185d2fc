// Throughput of a tokenizer's encode (src/data/tokenizer/) over a corpus, at several thread
// counts. Not a test: speed is checked here, never in ctest.
//   tokenizer_bench VOCAB MERGES INPUT [THREADS=1,2,4,8,16] [REPEATS=3]        (GPT-2 BPE)
//   tokenizer_bench --tokenizer-type T [--tokenizer-model F] [--vocab-file V --merge-file M]
//                   [--vocab-size N] [--tiktoken-pattern v1|v2] [--tiktoken-num-special-tokens N]
//                   INPUT [THREADS] [REPEATS]                                  (any type)
// INPUT: *.jsonl (the "text" of each line is one document) or plain text (one file =
// one document per line). For each thread count the documents are cut into that many
// contiguous shares of about equal bytes, one per thread. Fresh threads start each
// run, so every word cache starts cold: pass "cold" is the first encode of the share,
// pass "warm" encodes it again on the same threads (the steady state of a long run).
// Reported per pass: the best of REPEATS runs, as MB/s (10^6 bytes of input text),
// MB/s per thread, parallel efficiency (per-thread MB/s / one-thread MB/s) and tokens/s.
// bench/tiktoken_bench.py prints the same table for tiktoken; bench/tokenizer_crosscheck.py
// times the Python references of every type.
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/json_text.h"
#include "data/tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> read_documents(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) megatron::throw_error(path, ": cannot open");
  const bool jsonl = path.size() >= 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
  std::vector<std::string> docs;
  std::string line, error;
  // The same JSONL reading as megatron preprocess: a list value is its sentences joined.
  megatron::data::JsonTextExtractor extractor({"text"});
  std::vector<megatron::data::Sentences> values;
  int64_t number = 0;
  while (std::getline(f, line)) {
    ++number;
    if (!jsonl) {
      docs.push_back(line);
    } else if (extractor.extract(line, &values, &error)) {
      std::string text;
      for (const std::string& sentence : values[0]) text += sentence;
      docs.push_back(std::move(text));
    } else if (!line.empty()) {
      megatron::throw_error(path, ":", number, ": ", error);
    }
  }
  return docs;
}

std::vector<int> parse_threads(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoi(item));
  return out;
}

struct PassResult {
  double seconds = 1e30;
  int64_t tokens = 0;
};

// One run at `threads` threads: returns {cold, warm} timings.
std::pair<PassResult, PassResult> run(const megatron::data::Tokenizer& tok, const std::vector<std::string>& docs,
                                      const std::vector<size_t>& bounds, int threads) {
  std::barrier sync(threads + 1);
  std::vector<int64_t> tokens_cold(threads), tokens_warm(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<int32_t> ids;
      for (int pass = 0; pass < 2; ++pass) {
        sync.arrive_and_wait();  // start together
        int64_t count = 0;
        for (size_t d = bounds[t]; d < bounds[t + 1]; ++d) {
          ids.clear();
          tok.encode(docs[d], &ids);
          count += static_cast<int64_t>(ids.size());
        }
        (pass == 0 ? tokens_cold : tokens_warm)[t] = count;
        sync.arrive_and_wait();  // all done
      }
    });
  }
  std::pair<PassResult, PassResult> r;
  for (int pass = 0; pass < 2; ++pass) {
    sync.arrive_and_wait();
    const auto start = Clock::now();
    sync.arrive_and_wait();
    PassResult& p = pass == 0 ? r.first : r.second;
    p.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    for (int t = 0; t < threads; ++t) p.tokens += (pass == 0 ? tokens_cold : tokens_warm)[t];
  }
  for (auto& th : pool) th.join();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  // The tokenizer flags ("--flag value" pairs) come first; then INPUT [THREADS] [REPEATS].
  megatron::data::TokenizerOptions options;
  std::vector<std::string> rest;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || i + 1 >= argc) {
      rest.push_back(a);
      continue;
    }
    const std::string v = argv[++i];
    if (a == "--tokenizer-type") {
      options.type = v;
    } else if (a == "--tokenizer-model") {
      options.tokenizer_model = v;
    } else if (a == "--vocab-file") {
      options.vocab_file = v;
    } else if (a == "--merge-file") {
      options.merge_file = v;
    } else if (a == "--vocab-size") {
      options.vocab_size = std::stoll(v);
    } else if (a == "--tiktoken-pattern") {
      options.tiktoken_pattern = v;
    } else if (a == "--tiktoken-num-special-tokens") {
      options.tiktoken_num_special_tokens = std::stoll(v);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (!options.vocab_file && !options.tokenizer_model && rest.size() >= 3) {  // VOCAB MERGES INPUT ...
    options.vocab_file = rest[0];
    options.merge_file = rest[1];
    rest.erase(rest.begin(), rest.begin() + 2);
  }
  if (rest.empty()) {
    std::fprintf(stderr,
                 "usage: %s (VOCAB MERGES | --tokenizer-type T ...) INPUT(.jsonl|text) [THREADS=1,2,4,8,16] "
                 "[REPEATS=3]\n",
                 argv[0]);
    return 2;
  }
  try {
    const auto load_start = Clock::now();
    const std::unique_ptr<megatron::data::Tokenizer> tok_ptr = megatron::data::make_tokenizer(options);
    const megatron::data::Tokenizer& tok = *tok_ptr;
    const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
    const std::vector<std::string> docs = read_documents(rest[0]);
    const std::vector<int> thread_counts = parse_threads(rest.size() > 1 ? rest[1] : "1,2,4,8,16");
    const int repeats = rest.size() > 2 ? std::stoi(rest[2]) : 3;
    int64_t bytes = 0;
    for (const auto& d : docs) bytes += static_cast<int64_t>(d.size());
    std::printf("tokenizer_bench: megatron %s, %zu documents, %.1f MB of text, load %.0f ms, %u hardware threads\n",
                options.type.c_str(), docs.size(), bytes / 1e6, load_s * 1e3, std::thread::hardware_concurrency());
    std::printf("%8s %5s %10s %12s %11s %12s\n", "threads", "pass", "MB/s", "MB/s/thread", "efficiency", "Mtokens/s");
    double base[2] = {0, 0};
    for (const int threads : thread_counts) {
      // Contiguous shares of about bytes/threads each.
      std::vector<size_t> bounds = {0};
      int64_t acc = 0;
      for (size_t d = 0; d < docs.size(); ++d) {
        acc += static_cast<int64_t>(docs[d].size());
        if (acc * threads >= bytes * static_cast<int64_t>(bounds.size()) && static_cast<int>(bounds.size()) < threads) {
          bounds.push_back(d + 1);
        }
      }
      while (static_cast<int>(bounds.size()) <= threads) bounds.push_back(docs.size());
      bounds.back() = docs.size();
      PassResult best[2];
      for (int r = 0; r < repeats; ++r) {
        auto [cold, warm] = run(tok, docs, bounds, threads);
        if (cold.seconds < best[0].seconds) best[0] = cold;
        if (warm.seconds < best[1].seconds) best[1] = warm;
      }
      for (int pass = 0; pass < 2; ++pass) {
        const double mbs = bytes / 1e6 / best[pass].seconds;
        if (threads == 1) base[pass] = mbs;
        const double eff = base[pass] > 0 ? mbs / threads / base[pass] : 0.0;
        std::printf("%8d %5s %10.2f %12.2f %11.2f %12.2f\n", threads, pass == 0 ? "cold" : "warm", mbs, mbs / threads,
                    eff, best[pass].tokens / 1e6 / best[pass].seconds);
      }
    }
  } catch (const megatron::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
