#include "data/gpt_dataset.h"

#include <algorithm>
#include <cerrno>
#include <cfenv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/file.h"
#include "core/md5.h"

namespace megatron::data {
namespace {

void log_line(std::ostream* log, const std::string& line) {
  if (log != nullptr) *log << line << "\n" << std::flush;
}

// Python os.path.isfile: a regular file (or a link to one), not a directory.
bool is_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

// Python round(): half to even, which nearbyint does under the default rounding mode.
int64_t python_round(double x) {
  MT_CHECK(std::fegetround() == FE_TONEAREST);
  return static_cast<int64_t>(std::nearbyint(x));
}

}  // namespace

std::array<double, 3> parse_and_normalize_split(const std::string& split, const char* flag) {
  // re.findall(r"[.0-9]+", split): maximal runs of digits and dots, each Python float().
  std::vector<double> w;
  for (size_t i = 0; i < split.size();) {
    const auto in_run = [&](size_t k) {
      return k < split.size() && (split[k] == '.' || (split[k] >= '0' && split[k] <= '9'));
    };
    if (!in_run(i)) {
      ++i;
      continue;
    }
    size_t j = i;
    while (in_run(j)) ++j;
    const std::string run = split.substr(i, j - i);
    // float() of a run of digits and dots fails for "." and for more than one dot.
    if (std::count(run.begin(), run.end(), '.') > 1 || run == ".") {
      throw_error("[", flag, "] '", split, "': '", run, "' is not a number");
    }
    w.push_back(std::strtod(run.c_str(), nullptr));
    if (!std::isfinite(w.back())) throw_error("[", flag, "] '", split, "': '", run, "' is not a finite weight");
    i = j;
  }
  if (w.size() > 3)
    throw_error("[", flag, "] '", split, "': expected at most 3 weights (train, valid, test), got ", w.size());
  while (w.size() < 3) w.push_back(0.0);
  double sum = 0.0;  // numpy.sum of 3 float64: left to right
  for (double x : w) sum += x;
  if (!(sum > 0.0)) throw_error("[", flag, "] '", split, "': the weights sum to 0");
  return {w[0] / sum, w[1] / sum, w[2] / sum};
}

std::array<int64_t, 4> train_valid_test_split(const std::string& split, int64_t size, const char* flag) {
  const std::array<double, 3> w = parse_and_normalize_split(split, flag);
  std::array<int64_t, 4> idx{0, 0, 0, 0};
  for (int i = 0; i < 3; ++i) idx[i + 1] = idx[i] + python_round(w[i] * static_cast<double>(size));
  const int64_t diff = idx[3] - size;
  for (int i = 1; i < 4; ++i) idx[i] -= diff;
  return idx;
}

std::array<int64_t, 4> mcore_split_bounds(const std::string& split, int64_t size, const char* flag) {
  const std::array<double, 3> w = parse_and_normalize_split(split, flag);
  const std::array<double, 4> bookends = {0.0, w[0], w[0] + w[1], w[0] + w[1] + w[2]};
  std::array<int64_t, 4> idx{};
  for (int i = 0; i < 4; ++i) idx[i] = python_round(bookends[i] * static_cast<double>(size));
  return idx;
}

std::array<int64_t, 4> split_bounds(SplitRule rule, const std::string& split, int64_t size, const char* flag) {
  return rule == SplitRule::kClassic ? train_valid_test_split(split, size, flag)
                                     : mcore_split_bounds(split, size, flag);
}

int64_t gpt_num_epochs(int64_t tokens_per_epoch, int64_t seq_length, int64_t num_samples) {
  MT_CHECK(seq_length >= 1 && num_samples >= 0);
  if (tokens_per_epoch <= 0) throw_error("the split holds 0 tokens: no sample can be built from it");
  // Smallest E with (E*T - 1) // s >= N, i.e. E*T >= N*s + 1 (same as C23's loop).
  const __int128 need = static_cast<__int128>(num_samples) * seq_length + 1;
  const __int128 e = (need + tokens_per_epoch - 1) / tokens_per_epoch;
  if (e > std::numeric_limits<int64_t>::max()) return std::numeric_limits<int64_t>::max();  // refused by the caller
  return std::max<int64_t>(1, static_cast<int64_t>(e));
}

EpochPlan plan_epochs(int64_t tokens_per_epoch, int64_t seq_length, int64_t num_samples) {
  EpochPlan p;
  const int64_t T = tokens_per_epoch, s = seq_length;
  p.num_epochs = gpt_num_epochs(T, s, num_samples);
  p.total_samples = (p.num_epochs * T - 1) / s;
  p.samples_per_epoch = (T - 1) / s;
  if (p.num_epochs > 1) {
    p.samples_sans_last = ((p.num_epochs - 1) * T - 1) / s;
    p.last_epoch_samples = num_samples - p.samples_sans_last;
    MT_CHECK(p.last_epoch_samples >= 0 && p.last_epoch_samples <= p.samples_per_epoch + 1)
        << p.last_epoch_samples << " of " << p.samples_per_epoch;
    // C23: int(0.80 * num_samples_per_epoch), a double product truncated.
    p.separate_last_epoch =
        p.last_epoch_samples < static_cast<int64_t>(0.80 * static_cast<double>(p.samples_per_epoch));
  }
  p.shuffle_first = p.separate_last_epoch ? p.samples_sans_last : p.total_samples;
  return p;
}

std::vector<int32_t> build_doc_idx(std::span<const int32_t> documents, int64_t num_epochs, bool separate_last_epoch,
                                   NumpyRandomState* rng) {
  const int64_t D = static_cast<int64_t>(documents.size());
  if (num_epochs * D > std::numeric_limits<int32_t>::max()) {
    throw_error("doc_idx would have ", num_epochs * D, " entries (", num_epochs, " epochs x ", D,
                " documents); Megatron's int32 sample index cannot address more than 2^31-1");
  }
  std::vector<int32_t> out(static_cast<size_t>(num_epochs * D));
  for (int64_t e = 0; e < num_epochs; ++e) std::copy(documents.begin(), documents.end(), out.begin() + e * D);
  if (!separate_last_epoch || num_epochs == 1) {
    rng->shuffle(std::span<int32_t>(out));
  } else {
    rng->shuffle(std::span<int32_t>(out.data(), static_cast<size_t>((num_epochs - 1) * D)));
    rng->shuffle(std::span<int32_t>(out.data() + (num_epochs - 1) * D, static_cast<size_t>(D)));
  }
  return out;
}

std::vector<int32_t> build_sample_idx(std::span<const int32_t> sizes, std::span<const int32_t> doc_idx,
                                      int64_t seq_length, int64_t num_epochs, int64_t tokens_per_epoch) {
  MT_CHECK(seq_length >= 1 && num_epochs >= 1 && tokens_per_epoch >= 1);
  const int64_t num_samples = (num_epochs * tokens_per_epoch - 1) / seq_length;
  std::vector<int32_t> out(static_cast<size_t>(2 * (num_samples + 1)));
  int64_t di = 0;   // index into doc_idx
  int64_t off = 0;  // token offset inside doc_idx[di]
  out[0] = 0;
  out[1] = 0;
  for (int64_t i = 1; i <= num_samples; ++i) {
    // s+1 tokens per sample; the last one is re-used as the first of the next sample.
    int64_t remaining = seq_length + 1;
    while (remaining != 0) {
      MT_CHECK(di < static_cast<int64_t>(doc_idx.size())) << "sample " << i << " runs past doc_idx";
      const int64_t doc_length = sizes[static_cast<size_t>(doc_idx[static_cast<size_t>(di)])] - off;
      remaining -= doc_length;
      if (remaining <= 0) {
        off += remaining + doc_length - 1;
        remaining = 0;
      } else {
        ++di;
        off = 0;
      }
    }
    out[static_cast<size_t>(2 * i)] = static_cast<int32_t>(di);
    out[static_cast<size_t>(2 * i + 1)] = static_cast<int32_t>(off);
  }
  return out;
}

NpyDType shuffle_idx_dtype(int64_t total) {
  return total >= int64_t{0xffffffff} - 1 ? NpyDType::kInt64 : NpyDType::kUInt32;
}

std::vector<int64_t> build_shuffle_idx(int64_t n_first, int64_t total, NumpyRandomState* rng) {
  MT_CHECK(0 <= n_first && n_first <= total);
  std::vector<int64_t> out(static_cast<size_t>(total));
  std::iota(out.begin(), out.end(), int64_t{0});
  // The permutation does not depend on the element type, so int64 stands in for uint32.
  rng->shuffle(std::span<int64_t>(out.data(), static_cast<size_t>(n_first)));
  if (n_first < total) rng->shuffle(std::span<int64_t>(out.data() + n_first, static_cast<size_t>(total - n_first)));
  return out;
}

std::string default_index_cache_dir(const std::string& prefix) {
  // os.path.dirname: everything up to the last '/', trailing slashes removed unless all slashes.
  size_t slash = prefix.rfind('/');
  std::string head = slash == std::string::npos ? "" : prefix.substr(0, slash + 1);
  if (!head.empty() && head.find_first_not_of('/') != std::string::npos) {
    while (head.back() == '/') head.pop_back();
  }
  if (head.empty()) return "index-cache";
  return head.back() == '/' ? head + "index-cache" : head + "/index-cache";
}

std::string GPTDataset::describe(const GPTDatasetOptions& o) {
  return str_cat("GPT Dataset\n\n", "Data prefix ", o.prefix, "\n", "Dataset name ", o.name, "\n", "Number of samples ",
                 o.num_samples, "\n", "Sequence length ", o.seq_length, "\n", "Random seed ", o.seed, "\n", "Split ",
                 o.split_string, "\n", o.split_rule.empty() ? "" : str_cat("Split rule ", o.split_rule, "\n"));
}

GPTDataset::GPTDataset(std::shared_ptr<const SequenceSource> sequences, GPTDatasetOptions options)
    : sequences_(std::move(sequences)), options_(std::move(options)) {
  const GPTDatasetOptions& o = options_;
  if (o.seq_length < 1) throw_error("[--seq-length] must be >= 1, got ", o.seq_length);
  check_numpy_seed(o.seed, "--seed");
  MT_CHECK(o.num_samples >= 0) << o.num_samples;
  const int64_t S = sequences_->sequence_count();
  if (S > std::numeric_limits<int32_t>::max()) {
    throw_error(sequences_->prefix(), ": ", S, " sequences; Megatron's int32 doc_idx cannot address them");
  }
  MT_CHECK(0 <= o.doc_begin && o.doc_begin < o.doc_end && o.doc_end <= S)
      << "split [" << o.doc_begin << ", " << o.doc_end << ") of " << S;
  const std::vector<int32_t> sizes = sequences_->sequence_lengths();
  tokens_per_epoch_ = 0;
  for (int64_t k = o.doc_begin; k < o.doc_end; ++k) tokens_per_epoch_ += sizes[static_cast<size_t>(k)];
  if (tokens_per_epoch_ == 0) {
    throw_error(o.prefix, ": the ", o.name, " split (sequences [", o.doc_begin, ", ", o.doc_end,
                ")) holds 0 tokens, so no sample of --seq-length ", o.seq_length, " can be built from it");
  }
  // sample_idx column 0 indexes doc_idx and is int32 in Megatron; offsets fit since sizes are int32.
  // Checked before the plan: it also bounds epochs * tokens (< 2^31 * D * 2^31 / D) for it.
  const int64_t epochs = gpt_num_epochs(tokens_per_epoch_, o.seq_length, o.num_samples);
  if (epochs > std::numeric_limits<int32_t>::max() / (o.doc_end - o.doc_begin)) {
    throw_error(o.prefix, ": the ", o.name, " split needs ", epochs, " epochs of ", o.doc_end - o.doc_begin,
                " documents for ", o.num_samples, " samples, more doc_idx entries than Megatron's int32 sample_idx ",
                "can address");
  }
  plan_ = plan_epochs(tokens_per_epoch_, o.seq_length, o.num_samples);
  description_ = describe(o);
  cache_.hash = md5_hex(description_);

  if (!o.cache) {
    cache_.loaded = false;
    hold_in_memory(build(sizes));
    validate(sizes);
    log_line(o.log, str_cat(" > ", o.name, ": built index in memory (", plan_.total_samples, " samples)"));
    return;
  }
  // C23: look in dirname(prefix)/index-cache, then --data-cache-path; build into the last looked in.
  std::vector<std::string> dirs = {default_index_cache_dir(o.prefix)};
  if (o.data_cache_path) dirs.push_back(*o.data_cache_path);
  bool found = false;
  for (const std::string& dir : dirs) {
    cache_.directory = dir;
    if (is_file(cache_.desc_path()) && is_file(cache_.path("_doc_idx.npy")) &&
        is_file(cache_.path("_sample_idx.npy")) && is_file(cache_.path("_shuffle_idx.npy"))) {
      found = true;
      break;
    }
  }
  cache_.loaded = found;
  if (!found) {
    make_cache_directory();  // before the build, which can take minutes on a large dataset
    write_cache(build(sizes));
  }
  try {
    load_cache();
    validate(sizes);
  } catch (const Error& e) {
    if (!found) throw;  // a file we just wrote is wrong: a bug or a disk fault, say so as is
    throw_error(e.what(), " (delete ", cache_.path("*"), " to rebuild it)");
  }
  log_line(o.log,
           str_cat(" > ", o.name, found ? ": loaded cached index " : ": built index, saved ", cache_.path("_*.npy")));
}

GPTDataset::Arrays GPTDataset::build(const std::vector<int32_t>& sizes) const {
  const GPTDatasetOptions& o = options_;
  NumpyRandomState rng(static_cast<uint32_t>(o.seed));  // fresh per split dataset, as C23
  std::vector<int32_t> documents(static_cast<size_t>(o.doc_end - o.doc_begin));
  std::iota(documents.begin(), documents.end(), static_cast<int32_t>(o.doc_begin));
  Arrays a;
  a.doc_idx = build_doc_idx(documents, plan_.num_epochs, plan_.separate_last_epoch, &rng);
  a.sample_idx = build_sample_idx(sizes, a.doc_idx, o.seq_length, plan_.num_epochs, tokens_per_epoch_);
  const int64_t total = static_cast<int64_t>(a.sample_idx.size() / 2) - 1;
  MT_CHECK_EQ(total, plan_.total_samples);
  a.shuffle_idx = build_shuffle_idx(plan_.shuffle_first, total, &rng);
  return a;
}

void GPTDataset::make_cache_directory() const {
  try {
    make_directories(cache_.directory);
  } catch (const Error& e) {
    throw_error(e.what(), " (the index cache goes to dirname(prefix)/index-cache or --data-cache-path;",
                " give a writable --data-cache-path)");
  }
}

void GPTDataset::write_cache(const Arrays& a) {
  const int64_t total = plan_.total_samples;
  // All four files are written to temporaries and renamed together, the description last, so an
  // interrupted build never leaves a set that looks complete.
  AtomicFile doc_file(cache_.path("_doc_idx.npy"));
  write_npy(&doc_file, NpyDType::kInt32, {static_cast<int64_t>(a.doc_idx.size())}, a.doc_idx.data());
  AtomicFile sample_file(cache_.path("_sample_idx.npy"));
  write_npy(&sample_file, NpyDType::kInt32, {total + 1, 2}, a.sample_idx.data());
  AtomicFile shuffle_file(cache_.path("_shuffle_idx.npy"));
  if (shuffle_idx_dtype(total) == NpyDType::kUInt32) {
    std::vector<uint32_t> narrow(a.shuffle_idx.begin(), a.shuffle_idx.end());
    write_npy(&shuffle_file, NpyDType::kUInt32, {total}, narrow.data());
  } else {
    write_npy(&shuffle_file, NpyDType::kInt64, {total}, a.shuffle_idx.data());
  }
  AtomicFile desc_file(cache_.desc_path());
  desc_file.write(description_);
  desc_file.finish();
  doc_file.commit();
  sample_file.commit();
  shuffle_file.commit();
  desc_file.commit();
}

namespace {

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

}  // namespace

void GPTDataset::hold_in_memory(const Arrays& a) {
  const int64_t total = plan_.total_samples;
  const std::string name = str_cat(options_.prefix, " ", options_.name, " ");
  doc_idx_ = NpyFile::in_memory(name + "doc_idx", NpyDType::kInt32, {static_cast<int64_t>(a.doc_idx.size())},
                                bytes_of(a.doc_idx));
  sample_idx_ = NpyFile::in_memory(name + "sample_idx", NpyDType::kInt32, {total + 1, 2}, bytes_of(a.sample_idx));
  if (shuffle_idx_dtype(total) == NpyDType::kUInt32) {
    shuffle_idx_ = NpyFile::in_memory(name + "shuffle_idx", NpyDType::kUInt32, {total},
                                      bytes_of(std::vector<uint32_t>(a.shuffle_idx.begin(), a.shuffle_idx.end())));
  } else {
    shuffle_idx_ = NpyFile::in_memory(name + "shuffle_idx", NpyDType::kInt64, {total}, bytes_of(a.shuffle_idx));
  }
}

void GPTDataset::load_cache() {
  {
    MappedFile desc(cache_.desc_path());
    std::string_view text(reinterpret_cast<const char*>(desc.data()), static_cast<size_t>(desc.size()));
    if (text != description_) throw_error(cache_.desc_path(), ": description differs from this dataset's");
  }
  doc_idx_ = NpyFile(cache_.path("_doc_idx.npy"));
  sample_idx_ = NpyFile(cache_.path("_sample_idx.npy"));
  shuffle_idx_ = NpyFile(cache_.path("_shuffle_idx.npy"));
}

void GPTDataset::validate(const std::vector<int32_t>& sizes) const {
  const GPTDatasetOptions& o = options_;
  const int64_t n_doc = plan_.num_epochs * (o.doc_end - o.doc_begin);
  doc_idx_.expect(NpyDType::kInt32, {n_doc});
  for (int64_t k = 0; k < n_doc; ++k) {
    const int64_t d = doc_idx_.at(k);
    if (d < o.doc_begin || d >= o.doc_end) {
      throw_error(doc_idx_.path(), ": entry ", k, " = ", d, " is outside the split's sequences [", o.doc_begin, ", ",
                  o.doc_end, ")");
    }
  }
  const int64_t total = plan_.total_samples;
  sample_idx_.expect(NpyDType::kInt32, {total + 1, 2});
  // Row r = (di, off) starts sample r at token `off` of document doc_idx[di]; its position in
  // the doc_idx-ordered token stream is (tokens of doc_idx[0, di)) + off. sample() reads rows
  // r .. r+1 inclusive, so consecutive rows must be exactly seq_length apart. The di never
  // decrease, so one walk along doc_idx gives every position: O(rows + documents).
  int64_t prev_di = 0, prev_off = 0, prev_pos = 0;
  int64_t walked = 0, walked_tokens = 0;  // doc_idx[0, walked) holds walked_tokens tokens
  for (int64_t r = 0; r <= total; ++r) {
    const int64_t di = sample_idx_.at(2 * r), off = sample_idx_.at(2 * r + 1);
    const bool ok = di >= prev_di && di < n_doc && off >= 0 &&
                    (r == 0 ? (di == 0 && off == 0) : off < sizes[static_cast<size_t>(doc_idx_.at(di))]);
    if (!ok) throw_error(sample_idx_.path(), ": row ", r, " = (", di, ", ", off, ") is inconsistent with doc_idx");
    for (; walked < di; ++walked) walked_tokens += sizes[static_cast<size_t>(doc_idx_.at(walked))];
    const int64_t pos = walked_tokens + off;
    if (r > 0 && pos - prev_pos != o.seq_length) {
      throw_error(sample_idx_.path(), ": rows ", r - 1, " = (", prev_di, ", ", prev_off, ") and ", r, " = (", di, ", ",
                  off, ") are ", pos - prev_pos, " tokens apart in doc_idx order, not --seq-length ", o.seq_length);
    }
    prev_di = di;
    prev_off = off;
    prev_pos = pos;
  }
  shuffle_idx_.expect(shuffle_idx_dtype(total), {total});
  for (int64_t k = 0; k < total; ++k) {
    const int64_t v = shuffle_idx_.at(k);
    if (v < 0 || v >= total) throw_error(shuffle_idx_.path(), ": entry ", k, " = ", v, " is not below ", total);
  }
}

void GPTDataset::sample(int64_t i, std::vector<int64_t>* tokens) const {
  if (i < 0 || i >= size()) {
    throw_error(options_.prefix, ": ", options_.name, " sample ", i, " requested, but the dataset has ", size());
  }
  tokens->clear();
  const int64_t r = shuffle_idx_.at(i);
  const int64_t d0 = sample_idx_.at(2 * r), o0 = sample_idx_.at(2 * r + 1);
  const int64_t d1 = sample_idx_.at(2 * r + 2), o1 = sample_idx_.at(2 * r + 3);
  if (d0 == d1) {
    sequences_->get(doc_idx_.at(d0), o0, o1 - o0 + 1, tokens);
  } else {
    sequences_->get(doc_idx_.at(d0), o0, -1, tokens);  // the rest of the first document
    for (int64_t d = d0 + 1; d < d1; ++d) sequences_->get(doc_idx_.at(d), 0, -1, tokens);
    sequences_->get(doc_idx_.at(d1), 0, o1 + 1, tokens);  // the head of the last, one extra token
  }
  MT_CHECK_EQ(static_cast<int64_t>(tokens->size()), options_.seq_length + 1);
}

}  // namespace megatron::data
