// `megatron preprocess` pipeline; see preprocess.h for the contract
// (mirrors Megatron-LM tools/preprocess_data.py: Encoder.encode, Partition.process_json_file).
#include "data/preprocess.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/json_text.h"
#include "data/jsonl_reader.h"
#include "data/tokenizer/tokenizer.h"

namespace megatron::data {

namespace {

constexpr int64_t kMaxSkippedLinesListed = 10;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Python's len() of a line decoded from UTF-8: its code points, i.e. the bytes that
// are not continuation bytes.
int64_t count_code_points(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// One batch of lines after parsing and tokenizing, in the writer's layout.
struct BatchResult {
  int64_t first_line = 1;
  int64_t input_offset = 0;
  std::vector<uint8_t> ok;                              // per line: 1 = a document, 0 = an invalid line
  std::vector<int64_t> chars;                           // per line: len(json_line) incl. the newline
  std::vector<int64_t> bytes;                           // per line: bytes incl. the terminator
  std::vector<std::vector<int32_t>> tokens;             // [key]: all documents' tokens
  std::vector<std::vector<int32_t>> lengths;            // [key]: all documents' sequence lengths
  std::vector<std::vector<int32_t>> doc_seqs;           // [key][document]: sequences of the document
  std::vector<std::pair<int64_t, std::string>> errors;  // (line index in batch, reason)
  std::string fatal;                                    // a reader/worker failure: stop here with this message
};

struct WorkItem {
  int64_t seq = 0;
  std::unique_ptr<LineBatch> batch;
  std::string fatal;
};

// The reader -> workers -> writer queues, under one mutex (batches are ~1 MB, so
// the lock is taken a few hundred times per second at most).
class Pipeline {
 public:
  Pipeline(const PreprocessOptions& options, const Tokenizer& tokenizer, LineReader& reader)
      : options_(options), tokenizer_(tokenizer), reader_(reader), max_in_flight_(2 * options.workers + 2) {}

  ~Pipeline() { stop(); }

  void start() {
    threads_.emplace_back([this] { read_loop(); });
    for (int64_t w = 0; w < options_.workers; ++w) threads_.emplace_back([this] { work_loop(); });
  }

  // Blocks until the result of batch `seq` is ready; false when the input ended before it.
  bool take(int64_t seq, BatchResult* out) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return results_.count(seq) != 0 || (reader_done_ && seq >= batches_read_); });
    auto it = results_.find(seq);
    if (it == results_.end()) return false;
    *out = std::move(it->second);
    results_.erase(it);
    --in_flight_;
    cv_.notify_all();
    return true;
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
    threads_.clear();
  }

 private:
  void read_loop() {
    int64_t seq = 0;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || in_flight_ < max_in_flight_; });
        if (stopping_) break;
      }
      WorkItem item;
      item.seq = seq;
      bool more = false;
      try {
        item.batch = std::make_unique<LineBatch>();
        more = reader_.next(item.batch.get());
      } catch (const std::exception& e) {
        item.fatal = e.what();
        item.batch.reset();
        more = true;  // deliver the failure in input order, then stop reading
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (!more) break;
      ++in_flight_;
      ++seq;
      batches_read_ = seq;
      const bool failed = !item.fatal.empty();
      work_.push_back(std::move(item));
      cv_.notify_all();
      if (failed) break;
    }
    std::lock_guard<std::mutex> lock(mu_);
    reader_done_ = true;
    cv_.notify_all();
  }

  void work_loop() {
    JsonTextExtractor extractor(options_.json_keys);
    std::vector<Sentences> sentences;
    while (true) {
      WorkItem item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !work_.empty() || reader_done_; });
        if (stopping_ || work_.empty()) return;
        item = std::move(work_.front());
        work_.pop_front();
      }
      BatchResult result;
      if (!item.fatal.empty()) {
        result.fatal = std::move(item.fatal);
      } else {
        try {
          encode_batch(*item.batch, extractor, &sentences, &result);
        } catch (const std::exception& e) {
          result.fatal = e.what();
        }
      }
      std::lock_guard<std::mutex> lock(mu_);
      results_.emplace(item.seq, std::move(result));
      cv_.notify_all();
    }
  }

  // Megatron's Encoder.encode over every line of the batch.
  void encode_batch(const LineBatch& batch, JsonTextExtractor& extractor, std::vector<Sentences>* sentences,
                    BatchResult* r) const {
    const size_t num_keys = options_.json_keys.size();
    r->first_line = batch.first_line;
    r->input_offset = batch.input_offset;
    r->tokens.resize(num_keys);
    r->lengths.resize(num_keys);
    r->doc_seqs.resize(num_keys);
    const int64_t n = batch.size();
    r->ok.reserve(static_cast<size_t>(n));
    r->chars.reserve(static_cast<size_t>(n));
    for (auto& t : r->tokens) t.reserve(batch.data.size() / 4);  // ~4 bytes per GPT-2 token
    std::string error;
    for (int64_t i = 0; i < n; ++i) {
      const std::string_view line = batch.line(i);
      r->chars.push_back(count_code_points(line) + batch.terminated[i]);
      // The batch's data ends right after the last line's terminator.
      const int64_t next_start = i + 1 < n ? batch.starts[i + 1] : static_cast<int64_t>(batch.data.size());
      r->bytes.push_back(next_start - batch.starts[i]);
      if (!extractor.extract(line, sentences, &error)) {
        r->ok.push_back(0);
        r->errors.emplace_back(i, error);
        if (!options_.skip_invalid_lines) return;  // the writer stops at this line
        continue;
      }
      r->ok.push_back(1);
      for (size_t k = 0; k < num_keys; ++k) {
        std::vector<int32_t>& tokens = r->tokens[k];
        std::vector<int32_t>& lengths = r->lengths[k];
        int32_t seqs = 0;
        for (const std::string& sentence : (*sentences)[k]) {
          const size_t before = tokens.size();
          tokenizer_.encode(sentence, &tokens);
          if (tokens.size() > before) {  // empty token lists are dropped
            lengths.push_back(static_cast<int32_t>(tokens.size() - before));
            ++seqs;
          }
        }
        if (seqs > 0 && options_.append_eod) {
          tokens.push_back(tokenizer_.eod());
          lengths.back() += 1;
        }
        r->doc_seqs[k].push_back(seqs);
      }
    }
  }

  const PreprocessOptions& options_;
  const Tokenizer& tokenizer_;
  LineReader& reader_;
  const int64_t max_in_flight_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<WorkItem> work_;
  std::map<int64_t, BatchResult> results_;
  int64_t in_flight_ = 0;     // batches read and not yet taken by the writer
  int64_t batches_read_ = 0;  // batches handed to the workers
  bool reader_done_ = false;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return buf;
}

}  // namespace

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto sci = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  const std::string s(buf, sci.ptr);
  const int exponent = std::atoi(s.c_str() + s.find('e') + 1);
  // Python's repr switches to exponent notation outside 1e-4 <= |v| < 1e16.
  if (v != 0 && (exponent < -4 || exponent >= 16)) return s;
  auto fixed = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed);
  std::string f(buf, fixed.ptr);
  if (f.find('.') == std::string::npos) f += ".0";
  return f;
}

std::string preprocess_output_prefix(const std::string& output_prefix, const std::string& key) {
  return str_cat(output_prefix, "_", key, "_document");
}

PreprocessStats preprocess_jsonl(const PreprocessOptions& opts_in) {
  PreprocessOptions options = opts_in;
  {
    std::vector<std::string> keys;
    for (const std::string& k : options.json_keys) {
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
    options.json_keys = std::move(keys);
  }
  if (options.json_keys.empty()) throw_error("[--json-keys] expected at least one key");
  if (options.workers < 1) throw_error("[--workers] must be at least 1, got ", options.workers);
  if (options.log_interval < 1) throw_error("[--log-interval] must be at least 1, got ", options.log_interval);

  if (options.info != nullptr) std::fprintf(options.info, "Opening %s\n", options.input.c_str());
  const Clock::time_point startup_start = Clock::now();
  const std::unique_ptr<Tokenizer> tokenizer_ptr = make_tokenizer(options.tokenizer);
  LineReader reader(options.input, options.batch_bytes);
  const Tokenizer& tokenizer = *tokenizer_ptr;
  const TokenDType dtype = optimal_token_dtype(tokenizer.vocab_size());
  if (options.append_eod) tokenizer.eod();  // a tokenizer without one fails here, before any work
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const std::string& key : options.json_keys) {
    writers.push_back(
        std::make_unique<IndexedDatasetWriter>(preprocess_output_prefix(options.output_prefix, key), dtype));
  }
  if (options.info != nullptr) {
    std::fprintf(options.info, "Time to startup: %s\n", python_float_repr(seconds_since(startup_start)).c_str());
    std::fflush(options.info);
  }

  PreprocessStats stats;
  const Clock::time_point proc_start = Clock::now();
  Pipeline pipeline(options, tokenizer, reader);
  pipeline.start();
  BatchResult batch;
  const int64_t file_size = reader.file_size();
  std::vector<size_t> token_pos, length_pos;  // per key: where the next document starts in the batch
  for (int64_t seq = 0; pipeline.take(seq, &batch); ++seq) {
    if (!batch.fatal.empty()) throw Error(batch.fatal);
    size_t next_error = 0;
    token_pos.assign(writers.size(), 0);
    length_pos.assign(writers.size(), 0);
    int64_t doc = 0;
    for (size_t i = 0; i < batch.ok.size(); ++i) {
      const int64_t line_number = batch.first_line + static_cast<int64_t>(i);
      if (batch.ok[i] == 0) {
        const std::string& reason = batch.errors[next_error++].second;
        if (!options.skip_invalid_lines) throw_error(options.input, ":", line_number, ": ", reason);
        if (stats.skipped_lines == 0) stats.first_skip_reason = reason;
        if (stats.skipped_lines < kMaxSkippedLinesListed) stats.skipped_line_numbers.push_back(line_number);
        ++stats.skipped_lines;
        continue;
      }
      for (size_t k = 0; k < writers.size(); ++k) {
        const int32_t seqs = batch.doc_seqs[k][static_cast<size_t>(doc)];
        int64_t total = 0;
        for (int32_t s = 0; s < seqs; ++s) total += batch.lengths[k][length_pos[k] + static_cast<size_t>(s)];
        writers[k]->add_document(
            std::span<const int32_t>(batch.tokens[k].data() + token_pos[k], static_cast<size_t>(total)),
            std::span<const int32_t>(batch.lengths[k].data() + length_pos[k], static_cast<size_t>(seqs)));
        token_pos[k] += static_cast<size_t>(total);
        length_pos[k] += static_cast<size_t>(seqs);
      }
      ++doc;
      ++stats.documents;
      stats.characters += batch.chars[i];
      stats.input_bytes += batch.bytes[i];
      if (stats.documents % options.log_interval == 0 && options.progress != nullptr) {
        const double elapsed = seconds_since(proc_start);
        const double mbs = static_cast<double>(stats.characters) / elapsed / 1024 / 1024;
        std::string line = str_cat("Processed ", stats.documents, " documents (",
                                   python_float_repr(static_cast<double>(stats.documents) / elapsed), " docs/s, ",
                                   python_float_repr(mbs), " MB/s).");
        if (file_size > 0) {
          const double done = std::min(1.0, static_cast<double>(batch.input_offset) / static_cast<double>(file_size));
          char pct[32];
          std::snprintf(pct, sizeof(pct), "%.1f%%", 100.0 * done);
          line += str_cat(" [", pct, " of input, ETA ", format_duration(elapsed * (1 - done) / done), "]");
        }
        std::fprintf(options.progress, "%s\n", line.c_str());
        std::fflush(options.progress);
      }
    }
  }
  pipeline.stop();
  if (stats.documents == 0 && stats.skipped_lines > 0) {
    throw_error(options.input, ": all ", stats.skipped_lines, " lines are invalid and were skipped (line ",
                stats.skipped_line_numbers.front(), ": ", stats.first_skip_reason, "); no dataset written");
  }
  for (auto& w : writers) {
    stats.sequences += w->sequence_count();
    stats.tokens += w->token_count();
  }
  // All outputs are complete on disk before the first rename (see the report: a
  // failure between two keys' renames is the only window for a mixed state).
  for (auto& w : writers) w->finalize();
  stats.seconds = seconds_since(proc_start);

  if (options.progress != nullptr && stats.skipped_lines > 0) {
    std::string lines;
    for (int64_t n : stats.skipped_line_numbers) lines += str_cat(lines.empty() ? "" : ", ", n);
    std::fprintf(options.progress, "warning: skipped %lld invalid line(s) of %s (first: %s%s; line %lld: %s)\n",
                 static_cast<long long>(stats.skipped_lines), options.input.c_str(), lines.c_str(),
                 stats.skipped_lines > kMaxSkippedLinesListed ? ", ..." : "",
                 static_cast<long long>(stats.skipped_line_numbers.front()), stats.first_skip_reason.c_str());
  }
  if (options.info != nullptr) {
    const double mbs = static_cast<double>(stats.input_bytes) / std::max(stats.seconds, 1e-9) / 1e6;
    std::fprintf(options.info,
                 "Done: %lld documents, %lld sequences, %lld tokens from %lld bytes in %.2f s (%.1f MB/s, %.0f docs/s)",
                 static_cast<long long>(stats.documents), static_cast<long long>(stats.sequences),
                 static_cast<long long>(stats.tokens), static_cast<long long>(stats.input_bytes), stats.seconds, mbs,
                 static_cast<double>(stats.documents) / std::max(stats.seconds, 1e-9));
    if (stats.skipped_lines > 0)
      std::fprintf(options.info, ", %lld invalid lines skipped", static_cast<long long>(stats.skipped_lines));
    std::fprintf(options.info, " -> %s\n",
                 preprocess_output_prefix(options.output_prefix, options.json_keys.front()).c_str());
    std::fflush(options.info);
  }
  return stats;
}

}  // namespace megatron::data
