// CPU backend: attention over a KV cache (generation). For batch bi, query head hd of group
// g = hd / (heads / G) and new row r at absolute position i = past + r: append group g's k_i,
// v_i to the caches [b, G, max_seq, d], then
//   out_i = sum_{j <= i} softmax_j(scale q_i . k_j) v_j      (fp32, max-subtracted).
// The same arithmetic as attention_forward without dropout (double dot products and sums), so incremental decoding
// reproduces the training forward's logits.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"
#include "backend/qkv_layout.h"

namespace megatron::backend {

using namespace cpu_detail;

void CpuBackend::attention_kv_cache(const Tensor& qkv, Tensor& k_cache, Tensor& v_cache, int64_t past, Tensor& out,
                                    const AttentionParams& params) {
  const int64_t heads = params.heads, d = params.head_dim;
  const QkvLayout L(heads, params.groups(), d);
  const int64_t groups = L.groups;
  MT_CHECK(params.softmax_scale > 0.0f) << "attention softmax_scale unset";
  MT_CHECK(qkv.ndim() == 3 && qkv.dim(2) == L.width()) << "attention_kv_cache qkv " << qkv.describe();
  const int64_t t = qkv.dim(0), b = qkv.dim(1);
  check_f32(k_cache, "attention k_cache");
  check_f32(v_cache, "attention v_cache");
  MT_CHECK(k_cache.ndim() == 4 && k_cache.dim(0) == b && k_cache.dim(1) == groups && k_cache.dim(3) == d &&
           v_cache.shape() == k_cache.shape())
      << "attention caches " << k_cache.describe() << " / " << v_cache.describe();
  const int64_t max_seq = k_cache.dim(2);
  MT_CHECK(past >= 0 && past + t <= max_seq) << "attention_kv_cache past " << past << " + " << t << " > " << max_seq;
  MT_CHECK(out.numel() == t * b * heads * d) << "attention_kv_cache out " << out.describe();

  In q_in(qkv, "attention qkv");
  Out o(out, "attention out");
  float* kc = k_cache.data_as<float>();
  float* vc = v_cache.data_as<float>();
  const int64_t row = L.width();
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t bi = 0; bi < b; ++bi) {
      for (int64_t g = 0; g < groups; ++g) {
        const float* src = q_in.data() + (r * b + bi) * row;
        float* kdst = kc + ((bi * groups + g) * max_seq + past + r) * d;
        float* vdst = vc + ((bi * groups + g) * max_seq + past + r) * d;
        std::copy(src + L.k_col(g), src + L.k_col(g) + d, kdst);
        std::copy(src + L.v_col(g), src + L.v_col(g) + d, vdst);
      }
    }
  }
#pragma omp parallel for collapse(2) schedule(static) if (t * b * heads * (past + t) * d >= kParallelWork)
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hd = 0; hd < heads; ++hd) {
      std::vector<float> scores(static_cast<size_t>(past + t));
      std::vector<double> acc(static_cast<size_t>(d));
      const float* kbase = kc + (bi * groups + L.group_of(hd)) * max_seq * d;
      const float* vbase = vc + (bi * groups + L.group_of(hd)) * max_seq * d;
      for (int64_t r = 0; r < t; ++r) {
        const int64_t i = past + r;
        const float* q = q_in.data() + (r * b + bi) * row + L.q_col(hd);
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0.0;
          for (int64_t e = 0; e < d; ++e) dot += static_cast<double>(q[e]) * kbase[j * d + e];
          scores[static_cast<size_t>(j)] = static_cast<float>(dot) * params.softmax_scale;
          mx = std::max(mx, scores[static_cast<size_t>(j)]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(static_cast<double>(scores[static_cast<size_t>(j)] - mx));
        const float lse = mx + static_cast<float>(std::log(sum));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j <= i; ++j) {
          const double pj = std::exp(scores[static_cast<size_t>(j)] - lse);
          for (int64_t e = 0; e < d; ++e) acc[static_cast<size_t>(e)] += pj * vbase[j * d + e];
        }
        float* dst = o.data() + (r * b + bi) * heads * d + hd * d;
        for (int64_t e = 0; e < d; ++e) dst[e] = static_cast<float>(acc[static_cast<size_t>(e)]);
      }
    }
  }
  o.commit();
}

}  // namespace megatron::backend
