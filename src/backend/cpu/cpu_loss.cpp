// CPU backend: softmax cross-entropy over logits[n, V], one row at a time, max-subtracted:
//   lse = m + log sum_v exp(l_v - m) (m = max_v l_v, fp32 exp, sum in double), loss = lse - l_label,
//   dl_v = (exp(l_v - lse) - [v == label]) * dloss. Labels outside [0, V) are another
// vocab-parallel rank's ids: a NaN loss forward, no one-hot term backward (ops.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace megatron::backend {

using namespace cpu_detail;

namespace {

// Rows n and vocabulary V of the logits; checks labels[n] (int32) and the fp32 per-row tensors.
std::pair<int64_t, int64_t> check_loss(const Tensor& logits, const Tensor& labels, const Tensor& per_row,
                                       const char* what) {
  const int64_t vocab = logits.dim(-1);
  const int64_t n = rows_of(logits, vocab, "cross_entropy logits");
  check_i32(labels, "cross_entropy labels");
  MT_CHECK(labels.numel() == n) << "cross_entropy labels " << labels.describe() << " for " << n << " rows";
  check_f32(per_row, what);
  MT_CHECK(per_row.numel() == n) << "cross_entropy " << what << " " << per_row.describe() << " for " << n << " rows";
  return {n, vocab};
}

}  // namespace

void CpuBackend::cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& losses, Tensor& lse) {
  const auto [n, vocab] = check_loss(logits, labels, losses, "losses");
  check_f32(lse, "cross_entropy lse");
  MT_CHECK(lse.numel() == n) << "cross_entropy lse " << lse.describe();
  In lv(logits, "cross_entropy logits");
  const int32_t* lab = labels.data_as<const int32_t>();
  float* lossp = losses.data_as<float>();
  float* lsep = lse.data_as<float>();
#pragma omp parallel for schedule(static) if (n * vocab >= kParallelWork)
  for (int64_t r = 0; r < n; ++r) {
    const float* row = lv.data() + r * vocab;
    const int32_t t = lab[r];
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t v = 0; v < vocab; ++v) mx = std::max(mx, row[v]);
    // fp32 exp (the libm double exp costs twice as much per element); each term is in (0, 1]
    // and summed in double, so the sum keeps full precision.
    double sum = 0.0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - mx);
    // A row of -inf logits only (a vocab-parallel slice can be one) has lse -inf, as on the
    // GPU, not the NaN of -inf - -inf above.
    const float row_lse = std::isinf(mx) && mx < 0 ? mx : mx + static_cast<float>(std::log(sum));
    lsep[r] = row_lse;
    // A label outside [0, V): another vocab-parallel rank's id (ops.h).
    lossp[r] = t >= 0 && t < vocab ? row_lse - row[t] : std::numeric_limits<float>::quiet_NaN();
  }
}

void CpuBackend::cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& lse,
                                        const Tensor& dlosses, Tensor& dlogits) {
  const auto [n, vocab] = check_loss(logits, labels, lse, "lse");
  check_f32(dlosses, "cross_entropy dlosses");
  MT_CHECK(dlosses.numel() == n) << "cross_entropy dlosses " << dlosses.describe();
  MT_CHECK(dlogits.numel() == logits.numel()) << "cross_entropy dlogits " << dlogits.describe();
  // In-place safe: In copies 16-bit logits before Out writes; for fp32 each element is read
  // before it is written.
  In lv(logits, "cross_entropy logits");
  Out dv(dlogits, "cross_entropy dlogits");
  const int32_t* lab = labels.data_as<const int32_t>();
  const float* lsep = lse.data_as<const float>();
  const float* dlp = dlosses.data_as<const float>();
#pragma omp parallel for schedule(static) if (n * vocab >= kParallelWork)
  for (int64_t r = 0; r < n; ++r) {
    const float* row = lv.data() + r * vocab;
    float* drow = dv.data() + r * vocab;
    const int32_t t = lab[r];  // outside [0, V): no one-hot term (vocab-parallel)
    const float row_lse = lsep[r], g = dlp[r];
    for (int64_t v = 0; v < vocab; ++v) drow[v] = (std::exp(row[v] - row_lse) - (v == t ? 1.0f : 0.0f)) * g;
  }
  dv.commit();
}

// The reference is the two ops in turn: the forward reads the logits before the backward
// writes dlogits (which may alias them), so the values are the pair's.
void CpuBackend::cross_entropy_fused(const Tensor& logits, const Tensor& labels, const Tensor& dlosses, Tensor& losses,
                                     Tensor& lse, Tensor& dlogits) {
  cross_entropy_forward(logits, labels, losses, lse);
  cross_entropy_backward(logits, labels, lse, dlosses, dlogits);
}

namespace {

// n of the vocab-parallel cross-entropy's per-row tensors: max_lse, lse and losses fp32 [n].
int64_t check_vocab_parallel_rows(const Tensor& max_lse, const Tensor& lse, const Tensor& losses, const char* op) {
  check_f32(max_lse, op);
  check_f32(lse, op);
  check_f32(losses, op);
  const int64_t n = max_lse.numel();
  MT_CHECK(lse.numel() == n && losses.numel() == n)
      << op << ": max_lse " << max_lse.describe() << ", lse " << lse.describe() << ", losses " << losses.describe();
  return n;
}

}  // namespace

void CpuBackend::vocab_parallel_ce_terms(const Tensor& max_lse, const Tensor& labels, Tensor& lse, Tensor& losses) {
  const int64_t n = check_vocab_parallel_rows(max_lse, lse, losses, "vocab_parallel_ce_terms");
  check_i32(labels, "vocab_parallel_ce_terms labels");
  MT_CHECK(labels.numel() == n) << "vocab_parallel_ce_terms labels " << labels.describe() << " for " << n << " rows";
  const float* m = max_lse.data_as<const float>();
  const int32_t* lab = labels.data_as<const int32_t>();
  float* l = lse.data_as<float>();
  float* loss = losses.data_as<float>();
  for (int64_t i = 0; i < n; ++i) {
    const double li = l[i], mi = m[i];
    loss[i] = lab[i] >= 0 ? static_cast<float>(li - static_cast<double>(loss[i])) : 0.0f;
    // A slice of -inf logits only adds exp(-inf) = 0, or 1 where every slice is -inf (m too).
    l[i] = std::isinf(mi) && mi < 0 ? (li == mi ? 1.0f : 0.0f) : static_cast<float>(std::exp(li - mi));
  }
}

void CpuBackend::vocab_parallel_ce_finish(const Tensor& max_lse, Tensor& lse, Tensor& losses) {
  const int64_t n = check_vocab_parallel_rows(max_lse, lse, losses, "vocab_parallel_ce_finish");
  const float* m = max_lse.data_as<const float>();
  float* l = lse.data_as<float>();
  float* loss = losses.data_as<float>();
  for (int64_t i = 0; i < n; ++i) {
    const double total = static_cast<double>(m[i]) + std::log(static_cast<double>(l[i]));
    l[i] = static_cast<float>(total);
    loss[i] = static_cast<float>(total - static_cast<double>(loss[i]));
  }
}

}  // namespace megatron::backend
