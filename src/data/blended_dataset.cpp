#include "data/blended_dataset.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string_view>

#include "core/error.h"
#include "core/file.h"
#include "core/md5.h"

namespace megatron::data {
namespace {

// numpy's pairwise summation of a contiguous float64 array (np.sum), which C23's
// BlendableDataset uses to normalise the weights; a plain loop differs in the last ulp.
double numpy_pairwise_sum(const double* a, int64_t n) {
  if (n < 8) {
    double r = -0.0;
    for (int64_t i = 0; i < n; ++i) r += a[i];
    return r;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    }
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return numpy_pairwise_sum(a, n2) + numpy_pairwise_sum(a + n2, n - n2);
}

}  // namespace

void build_blending_indices(const std::vector<double>& weights, int64_t size, std::vector<uint8_t>* dataset_index,
                            std::vector<int64_t>* dataset_sample_index) {
  const size_t n = weights.size();
  MT_CHECK(n >= 1 && n < 255) << n;
  std::vector<int64_t> count(n, 0);
  dataset_index->assign(static_cast<size_t>(size), 0);
  dataset_sample_index->assign(static_cast<size_t>(size), 0);
  for (int64_t i = 0; i < size; ++i) {
    const double x = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    double best_error = weights[0] * x - static_cast<double>(count[0]);
    for (size_t d = 1; d < n; ++d) {
      const double error = weights[d] * x - static_cast<double>(count[d]);
      if (error > best_error) {  // strict: ties go to the earlier dataset
        best_error = error;
        best = d;
      }
    }
    (*dataset_index)[static_cast<size_t>(i)] = static_cast<uint8_t>(best);
    (*dataset_sample_index)[static_cast<size_t>(i)] = count[best]++;
  }
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const GPTDataset>> datasets, std::vector<double> weights,
                               int64_t size, std::optional<std::string> data_cache_path, std::ostream* log)
    : datasets_(std::move(datasets)), weights_(std::move(weights)), size_(size) {
  MT_CHECK(datasets_.size() == weights_.size() && !datasets_.empty());
  if (datasets_.size() >= 255) throw_error("[--data-path] at most 254 datasets can be blended, got ", datasets_.size());
  const double sum = numpy_pairwise_sum(weights_.data(), static_cast<int64_t>(weights_.size()));
  if (!(sum > 0.0)) throw_error("[--data-path] the blend weights sum to ", sum, "; they must sum to more than 0");
  for (double& w : weights_) w /= sum;

  description_ = "Blended dataset (megatron.cpp)\n\nDatasets:\n";
  for (const auto& d : datasets_) description_ += d->description() + "\n\n";
  description_ += "Weights:";
  for (double w : weights_) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), " %.17g", w);
    description_ += buf;
  }
  description_ += str_cat("\nSize: ", size_, "\n");

  if (data_cache_path) {
    CacheFiles c;
    c.directory = *data_cache_path;
    c.hash = md5_hex(description_);
    const std::string index_path = c.path("_index.npy"), sample_path = c.path("_sample_index.npy");
    std::error_code ec;
    if (std::filesystem::is_regular_file(c.desc_path(), ec) && std::filesystem::is_regular_file(index_path, ec) &&
        std::filesystem::is_regular_file(sample_path, ec)) {
      const std::string fix = str_cat(" (delete ", c.path("*"), " to rebuild it)");
      try {
        MappedFile desc(c.desc_path());
        if (std::string_view(reinterpret_cast<const char*>(desc.data()), static_cast<size_t>(desc.size())) !=
            description_) {
          throw_error(c.desc_path(), ": description differs from this blend's");
        }
        index_file_ = std::make_unique<NpyFile>(index_path);
        index_file_->expect(NpyDType::kUInt8, {size_});
        sample_index_file_ = std::make_unique<NpyFile>(sample_path);
        sample_index_file_->expect(NpyDType::kInt64, {size_});
      } catch (const Error& e) {
        throw_error(e.what(), fix);
      }
      c.loaded = true;
      if (log) *log << " > blend: loaded cached index " << c.path("_*.npy") << "\n";
    } else {
      build_blending_indices(weights_, size_, &index_, &sample_index_);
      make_directories(c.directory);
      AtomicFile index_file(index_path), sample_file(sample_path), desc_file(c.desc_path());
      write_npy(&index_file, NpyDType::kUInt8, {size_}, index_.data());
      write_npy(&sample_file, NpyDType::kInt64, {size_}, sample_index_.data());
      desc_file.write(description_);
      desc_file.finish();
      index_file.commit();
      sample_file.commit();
      desc_file.commit();
      if (log) *log << " > blend: built index, saved " << c.path("_*.npy") << "\n";
    }
    cache_ = c;
  } else {
    build_blending_indices(weights_, size_, &index_, &sample_index_);
  }

  // C23 checks the last blended sample is readable; we check every entry names a sample that
  // exists (a loaded cache may hold anything).
  const std::string fix = cache_ && cache_->loaded ? str_cat(" (delete ", cache_->path("*"), " to rebuild it)") : "";
  std::vector<int64_t> needed(datasets_.size(), 0);
  for (int64_t i = 0; i < size_; ++i) {
    const int64_t d = dataset_index(i);
    if (d < 0 || d >= static_cast<int64_t>(datasets_.size())) {
      throw_error(cache_ ? cache_->path("_index.npy") : "blend", ": entry ", i, " names dataset ", d, " of ",
                  datasets_.size(), fix);
    }
    const int64_t k = dataset_sample_index(i);
    if (k < 0) {
      throw_error(cache_ ? cache_->path("_sample_index.npy") : "blend", ": entry ", i, " = ", k, " is negative", fix);
    }
    needed[static_cast<size_t>(d)] = std::max(needed[static_cast<size_t>(d)], k + 1);
  }
  for (size_t d = 0; d < datasets_.size(); ++d) {
    if (needed[d] > datasets_[d]->size()) {
      throw_error("[--data-path] the blend takes ", needed[d], " samples from ", datasets_[d]->options().prefix, " (",
                  datasets_[d]->options().name, "), which has ", datasets_[d]->size(), fix);
    }
  }
}

void BlendedDataset::sample(int64_t i, std::vector<int64_t>* tokens) const {
  if (i < 0 || i >= size_) throw_error("blended sample ", i, " requested, but the blend has ", size_);
  datasets_[static_cast<size_t>(dataset_index(i))]->sample(dataset_sample_index(i), tokens);
}

}  // namespace megatron::data
