#include "model/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace megatron::model {

int32_t sample_token(std::span<const float> logits, int64_t vocab, const SamplingParams& p, uint64_t step) {
  if (p.temperature < 0.0f) throw_error("[--temperature] must be >= 0, got ", p.temperature);
  if (p.top_k < 0) throw_error("[--top-k] must be >= 0, got ", p.top_k);
  if (p.top_p < 0.0f || p.top_p > 1.0f) throw_error("[--top-p] must be in [0, 1], got ", p.top_p);
  MT_CHECK(vocab > 0 && vocab <= static_cast<int64_t>(logits.size())) << "vocab " << vocab;
  if (p.temperature == 0.0f) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + vocab) - logits.begin());
  }
  // Candidates by decreasing logit (ties: lower id first, so the order is deterministic).
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  int64_t keep = vocab;
  if (p.top_k > 0) keep = std::min(keep, p.top_k);
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
  order.resize(static_cast<size_t>(keep));

  const double mx = logits[order[0]];
  std::vector<double> prob(order.size());
  double sum = 0.0;
  for (size_t i = 0; i < order.size(); ++i) {
    prob[i] = std::exp((logits[order[i]] - mx) / p.temperature);
    sum += prob[i];
  }
  for (double& x : prob) x /= sum;
  if (p.top_p > 0.0f) {
    // The smallest prefix whose probability reaches top_p (always at least one token).
    double cum = 0.0;
    size_t n = 0;
    while (n < prob.size() && (n == 0 || cum < p.top_p)) cum += prob[n++];
    prob.resize(n);
    order.resize(n);
    for (double& x : prob) x /= cum;
  }
  const double u = philox_uniform(p.seed, /*stream=*/0x5a4d504cULL, step);
  double cum = 0.0;
  for (size_t i = 0; i < prob.size(); ++i) {
    cum += prob[i];
    if (u < cum) return order[i];
  }
  return order.back();
}

}  // namespace megatron::model
