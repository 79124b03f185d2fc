#include "data/dataset_config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <system_error>

#include "core/error.h"
#include "core/file.h"
#include "data/indexed_dataset.h"
#include "data/mock_sequences.h"

namespace megatron::data {
namespace {

constexpr int64_t kMaxCount = std::numeric_limits<int64_t>::max();

// a * b for counts (a, b >= 0); Error naming `flag` when the product does not fit int64.
int64_t checked_product(int64_t a, int64_t b, const char* flag) {
  if (b != 0 && a > kMaxCount / b) throw_error("[", flag, "] ", a, " x ", b, " samples do not fit a 64-bit count");
  return a * b;
}

// *sum += n for counts; Error naming `flag` past int64.
void add_samples(int64_t* sum, int64_t n, const char* flag) {
  if (n > kMaxCount - *sum) throw_error("[", flag, "] the blend's samples do not fit a 64-bit count");
  *sum += n;
}

std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

void check_dataset_prefix(const std::string& prefix, const char* flag) {
  const bool idx = file_exists(prefix + ".idx"), bin = file_exists(prefix + ".bin");
  if (idx && bin) return;
  const std::string missing = !idx && !bin ? str_cat(prefix, ".idx and ", prefix, ".bin are missing")
                                           : str_cat(prefix, idx ? ".bin" : ".idx", " is missing");
  std::string message = str_cat("[", flag, "] ", prefix, ": no dataset (", missing, ")");
  // preprocess names its output <--output-prefix>_<json key>_<level>: the prefix without them is
  // the usual slip.
  std::error_code ec;
  const std::filesystem::path path(prefix);
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const std::string stem = path.filename().string();
  std::vector<std::string> candidates;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > stem.size() + 5 && name.starts_with(stem + "_") && name.ends_with(".idx")) {
      const std::string candidate = name.substr(0, name.size() - 4);
      if (candidate.ends_with("_document") || candidate.ends_with("_sentence")) {
        if (file_exists((dir / (candidate + ".bin")).string())) {
          candidates.push_back(path.has_parent_path() ? (dir / candidate).string() : candidate);
        }
      }
    }
  }
  std::sort(candidates.begin(), candidates.end());
  if (!candidates.empty()) message += str_cat("; did you mean ", flag, " ", candidates.front(), "?");
  throw_error(message);
}

DataBlend parse_data_path(const std::vector<std::string>& values, const char* flag) {
  DataBlend blend;
  if (values.empty()) throw_error("[", flag, "] no dataset prefix given");
  if (values.size() == 1) {
    blend.prefixes = values;
    return blend;
  }
  if (values.size() % 2 != 0) {
    throw_error("[", flag, "] expected one prefix or (weight, prefix) pairs, got ", values.size(), " values");
  }
  double sum = 0.0;
  for (size_t i = 0; i < values.size(); i += 2) {
    const std::string w = strip(values[i]);
    char* end = nullptr;
    errno = 0;
    const double v = w.empty() ? 0.0 : std::strtod(w.c_str(), &end);
    if (w.empty() || end != w.c_str() + w.size()) {
      throw_error("[", flag, "] '", values[i], "' is not a weight (expected weight prefix pairs)");
    }
    if (!std::isfinite(v) || v < 0) throw_error("[", flag, "] weight '", values[i], "' must be finite and >= 0");
    blend.weights.push_back(v);
    blend.prefixes.push_back(strip(values[i + 1]));  // C23 strips the prefix
    sum += v;
  }
  if (!(sum > 0.0)) throw_error("[", flag, "] the weights sum to 0");
  for (double& w : blend.weights) w /= sum;
  return blend;
}

TargetSamples target_sample_counts(std::optional<int64_t> train_samples, std::optional<int64_t> train_iters,
                                   int64_t global_batch_size, int64_t eval_interval, int64_t eval_iters) {
  MT_CHECK(global_batch_size >= 1 && eval_interval >= 1 && eval_iters >= 0);
  TargetSamples t;
  int64_t iters = 0;
  if (train_samples) {
    t.train = *train_samples;
    iters = *train_samples / global_batch_size;  // update_train_iters without ramp-up
  } else {
    MT_CHECK(train_iters.has_value());
    iters = *train_iters;
    t.train = checked_product(iters, global_batch_size, "--train-iters");
  }
  t.valid = checked_product(checked_product(iters / eval_interval + 1, eval_iters, "--eval-iters"), global_batch_size,
                            "--eval-iters");
  t.test = checked_product(eval_iters, global_batch_size, "--eval-iters");
  return t;
}

int64_t blend_member_samples(int64_t n, double weight) {
  // Python: int(math.ceil(val * weight * 1.005)), evaluated left to right in doubles.
  const double v = std::ceil(static_cast<double>(n) * weight * 1.005);
  if (!(v < 0x1p63)) {
    throw_error("[--data-path] ", n, " samples x weight ", weight, " x 1.005 do not fit a 64-bit count");
  }
  return static_cast<int64_t>(v);
}

namespace {

// --mock-data: one source, Megatron-Core's split, no blend, no cache.
GPTDatasets build_mock_datasets(const GPTDataConfig& config) {
  if (!config.data_path.empty()) throw_error("[--mock-data] cannot be combined with --data-path (give one)");
  if (config.has_split_data_path()) {
    throw_error("[--mock-data] cannot be combined with --train-data-path, --valid-data-path or --test-data-path");
  }
  MT_CHECK(config.eod >= 0 && config.vocab_size > config.eod)
      << "the mock data needs the tokenizer's end-of-document id and vocabulary";
  GPTDatasets out;
  auto mock = std::make_shared<const MockSequences>(config.eod, config.vocab_size);
  out.blend.prefixes = {mock->prefix()};
  // Megatron-Core replaces the split of mock data by an even one.
  const std::string split = MockSequences::kSplit;
  if (config.log != nullptr) {
    *config.log << " > mock data: " << mock->sequence_count() << " documents split " << split
                << " (Megatron-Core's split for mock data; --split does not apply)\n";
  }
  const auto bounds = mcore_split_bounds(split, mock->sequence_count());
  const std::array<int64_t, 3> wanted = {config.targets.train, config.targets.valid, config.targets.test};
  std::array<std::shared_ptr<const GPTDataset>, 3> parts;
  for (int s = 0; s < 3; ++s) {
    out.requested[s] = wanted[s];
    if (bounds[s + 1] <= bounds[s]) continue;
    GPTDatasetOptions o;
    o.name = kSplitNames[s];
    o.prefix = mock->prefix();
    o.doc_begin = bounds[s];
    o.doc_end = bounds[s + 1];
    o.num_samples = wanted[s];
    o.seq_length = config.seq_length;
    o.seed = config.seed;
    o.split_string = split;
    o.cache = false;
    o.log = config.log;
    parts[s] = std::make_shared<const GPTDataset>(mock, o);
    out.splits[s] = parts[s];
  }
  out.sources.push_back(mock);
  out.bounds.push_back(bounds);
  out.parts.push_back(parts);
  return out;
}

// --train/valid/test-data-path (C23 build_dataset / _build_dataset): each given split is built
// from all sequences of its prefix, or blended from its prefixes with their own weights.
GPTDatasets build_per_split_datasets(const GPTDataConfig& config) {
  GPTDatasets out;
  if (config.log != nullptr) {
    *config.log << " > separate data paths provided for train, valid & test: each split reads all sequences of "
                   "its own datasets (--split is ignored)\n";
  }
  const std::array<int64_t, 3> wanted = {config.targets.train, config.targets.valid, config.targets.test};
  for (int s = 0; s < 3; ++s) {
    if (config.split_data_path[s].empty()) continue;
    const char* flag = kSplitDataPathFlags[s];
    const DataBlend blend = parse_data_path(config.split_data_path[s], flag);
    std::vector<std::shared_ptr<const GPTDataset>> members;
    int64_t size = 0;
    for (size_t p = 0; p < blend.prefixes.size(); ++p) {
      const std::string& prefix = blend.prefixes[p];
      check_dataset_prefix(prefix, flag);
      auto indexed = std::make_shared<const IndexedDataset>(prefix);
      const int64_t sequences = indexed->sequence_count();
      if (sequences == 0) throw_error("[", flag, "] ", prefix, ": the dataset holds no sequences");
      // Split s spans every sequence; the splits before it end at 0, those after start at the end.
      std::array<int64_t, 4> bounds{};
      for (int k = 0; k < 4; ++k) bounds[k] = k <= s ? 0 : sequences;
      GPTDatasetOptions o;
      o.name = kSplitNames[s];
      o.prefix = prefix;
      o.doc_begin = 0;
      o.doc_end = sequences;
      o.num_samples = blend.blended() ? blend_member_samples(wanted[s], blend.weights[p]) : wanted[s];
      o.seq_length = config.seq_length;
      o.seed = config.seed;
      o.split_string = config.split;  // C23 passes args.split along: part of the cache description
      o.data_cache_path = config.data_cache_path;
      o.log = config.log;
      auto dataset = std::make_shared<const GPTDataset>(indexed, o);
      std::array<std::shared_ptr<const GPTDataset>, 3> parts;
      parts[s] = dataset;
      out.sources.push_back(indexed);
      out.bounds.push_back(bounds);
      out.parts.push_back(parts);
      members.push_back(dataset);
      add_samples(&size, o.num_samples, flag);
    }
    out.requested[s] = size;
    if (!blend.blended()) {
      out.splits[s] = members[0];
      continue;
    }
    auto blended =
        std::make_shared<const BlendedDataset>(members, blend.weights, size, config.data_cache_path, config.log);
    out.blends[s] = blended;
    out.splits[s] = blended;
  }
  return out;
}

}  // namespace

GPTDatasets build_gpt_datasets(const GPTDataConfig& config) {
  if (config.mock) return build_mock_datasets(config);
  if (config.data_path.empty() && config.has_split_data_path()) return build_per_split_datasets(config);
  if (config.has_split_data_path() && config.log != nullptr) {
    // C23 build_train_valid_test_datasets takes --data-path whenever it is given.
    *config.log << " > WARNING: --data-path is given, so --train-data-path, --valid-data-path and "
                   "--test-data-path are ignored (as in Megatron)\n";
  }
  GPTDatasets out;
  out.blend = parse_data_path(config.data_path);
  const DataBlend& blend = out.blend;
  const std::array<int64_t, 3> wanted = {config.targets.train, config.targets.valid, config.targets.test};
  const size_t n = blend.prefixes.size();
  std::vector<std::array<int64_t, 3>> member_samples(n);
  for (size_t p = 0; p < n; ++p) {
    for (int s = 0; s < 3; ++s) {
      member_samples[p][s] = blend.blended() ? blend_member_samples(wanted[s], blend.weights[p]) : wanted[s];
    }
  }
  for (size_t p = 0; p < n; ++p) {
    const std::string& prefix = blend.prefixes[p];
    check_dataset_prefix(prefix, "--data-path");
    auto indexed = std::make_shared<const IndexedDataset>(prefix);
    const int64_t sequences = indexed->sequence_count();
    const auto bounds = split_bounds(config.split_rule, config.split, sequences);
    const auto classic = train_valid_test_split(config.split, sequences);
    std::array<std::shared_ptr<const GPTDataset>, 3> parts;
    for (int s = 0; s < 3; ++s) {
      if (bounds[s + 1] <= bounds[s]) continue;  // no dataset for an empty split
      GPTDatasetOptions o;
      o.name = kSplitNames[s];
      o.prefix = prefix;
      o.doc_begin = bounds[s];
      o.doc_end = bounds[s + 1];
      o.num_samples = member_samples[p][s];
      o.seq_length = config.seq_length;
      o.seed = config.seed;
      o.split_string = config.split;
      o.data_cache_path = config.data_cache_path;
      if (bounds[s] != classic[s] || bounds[s + 1] != classic[s + 1]) o.split_rule = "Megatron-Core";
      o.log = config.log;
      parts[s] = std::make_shared<const GPTDataset>(indexed, o);
    }
    out.sources.push_back(indexed);
    out.bounds.push_back(bounds);
    out.parts.push_back(parts);
  }
  for (int s = 0; s < 3; ++s) {
    if (!blend.blended()) {
      out.splits[s] = out.parts[0][s];
      out.requested[s] = wanted[s];
      continue;
    }
    std::vector<std::shared_ptr<const GPTDataset>> members;
    int64_t size = 0;
    for (size_t p = 0; p < n; ++p) {
      if (out.parts[p][s]) members.push_back(out.parts[p][s]);
      add_samples(&size, member_samples[p][s], "--data-path");
    }
    out.requested[s] = size;
    if (members.empty()) continue;
    if (members.size() != n) {
      // C23 asserts here (BlendableDataset: len(datasets) == len(weights)).
      for (size_t p = 0; p < n; ++p) {
        if (!out.parts[p][s]) {
          throw_error("[--split] '", config.split, "' leaves the ", kSplitNames[s], " split of ", blend.prefixes[p],
                      " empty while other blended datasets have one");
        }
      }
    }
    auto blended =
        std::make_shared<const BlendedDataset>(members, blend.weights, size, config.data_cache_path, config.log);
    out.blends[s] = blended;
    out.splits[s] = blended;
  }
  return out;
}

}  // namespace megatron::data
