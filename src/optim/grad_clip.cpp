// Megatron optimizer/clip_grads.py: clip_grad_norm_fp32 (norm_type 2).
#include "optim/grad_clip.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"

namespace megatron::optim {
namespace {

// Fixed reduction blocks: each block is summed serially, blocks are then added in order, so
// the result does not depend on how OpenMP splits the loop.
constexpr int64_t kBlock = int64_t{1} << 16;

double sum_of_squares(std::span<const float> g) {
  const auto n = static_cast<int64_t>(g.size());
  const int64_t num_blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(num_blocks), 0.0);
  const float* data = g.data();
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < num_blocks; ++b) {
    const int64_t end = std::min(n, (b + 1) * kBlock);
    double s = 0.0;
    for (int64_t i = b * kBlock; i < end; ++i) s += static_cast<double>(data[i]) * data[i];
    partial[static_cast<size_t>(b)] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

std::vector<std::span<const float>> as_const(const std::vector<std::span<float>>& grads) {
  return {grads.begin(), grads.end()};
}

}  // namespace

double grad_sum_of_squares(const std::vector<std::span<const float>>& grads) {
  double total = 0.0;
  for (std::span<const float> g : grads) total += sum_of_squares(g);
  return total;
}

double global_grad_norm(const std::vector<std::span<const float>>& grads) {
  return std::sqrt(grad_sum_of_squares(grads));
}

bool all_finite(const std::vector<std::span<const float>>& grads) {
  for (std::span<const float> g : grads) {
    const float* data = g.data();
    const auto n = static_cast<int64_t>(g.size());
    bool finite = true;
#pragma omp parallel for schedule(static) reduction(&& : finite)
    for (int64_t i = 0; i < n; ++i) finite = finite && std::isfinite(data[i]);
    if (!finite) return false;
  }
  return true;
}

void clip_grads_with_norm(const std::vector<std::span<float>>& grads, double max_norm, double total_norm) {
  const double clip_coeff = max_norm / (total_norm + 1.0e-6);
  if (!(clip_coeff < 1.0)) return;
  const auto coeff = static_cast<float>(clip_coeff);
  for (std::span<float> g : grads) {
    float* data = g.data();
    const auto n = static_cast<int64_t>(g.size());
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) data[i] *= coeff;
  }
}

double clip_grads(const std::vector<std::span<float>>& grads, double max_norm) {
  if (max_norm < 0.0) throw_error("[--clip-grad] must be >= 0 (0 disables clipping), got ", max_norm);
  if (max_norm == 0.0) return 0.0;
  const double total_norm = global_grad_norm(as_const(grads));
  clip_grads_with_norm(grads, max_norm, total_norm);
  return total_norm;
}

}  // namespace megatron::optim
