// CPU backend: causal self-attention over Megatron's fused QKV layout with query groups, one
// (batch, head) at a time, in fp32.
//
// For batch bi and query head hd (H heads of size d in G groups, n = H / G), row i of q is
// read from qkv[i, bi, q_col(hd) + (0..d)], k and v from the columns k_col(g), v_col(g) of its
// group g = hd / n (qkv_layout.h; ops.h, AttentionParams). For G = H: hd*3d + {0, d, 2d}.
// Forward, per query row i (keys lo_i <= j <= i, lo_i = key_start[bi, i] or 0; scale =
// softmax_scale):
//   s_ij = scale q_i . k_j,  lse_i = log sum_j exp(s_ij),  P_ij = exp(s_ij - lse_i),
//   out_i = sum_j P_ij M_ij v_j,  M_ij = dropout multiplier (0 or 1 / (1 - p)).
// Dropout element index: ((bi * H + hd) * s + i) * s + j over the [b, H, s, s] probability
// tensor (keys j > i are masked and draw nothing).
// Backward recomputes P from lse and M from (seed, stream), then
//   dv_j = sum_i P_ij M_ij dout_i,  dP_ij = M_ij (dout_i . v_j),
//   dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik),
//   dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i,
// dk and dv of a group summed over its n query heads in head order (one (batch, group) per
// thread, in double).
// (sum_k P_ik dP_ik equals dout_i . out_i, which flash-attention kernels use; the reference
// computes it from the recomputed P, so a 16-bit `out` costs it no accuracy.)
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"
#include "backend/qkv_layout.h"
#include "core/rng.h"

namespace megatron::backend {

using namespace cpu_detail;

namespace {

struct Dims {
  int64_t s, b, heads, d;
  QkvLayout layout;
  const int32_t* key_start = nullptr;  // [b, s] (AttentionParams::key_start) or null
  // The first key query i of batch row bi sees.
  int64_t lo(int64_t bi, int64_t i) const { return key_start != nullptr ? key_start[bi * s + i] : 0; }
};

Dims check_attention(const Tensor& qkv, const Tensor& lse, const AttentionParams& p) {
  MT_CHECK(p.heads > 0 && p.head_dim > 0) << "attention heads " << p.heads << ", head_dim " << p.head_dim;
  MT_CHECK(p.softmax_scale > 0.0f) << "attention softmax_scale " << p.softmax_scale << " (unset?)";
  MT_CHECK(p.dropout.p >= 0.0f && p.dropout.p < 1.0f) << "attention dropout " << p.dropout.p;
  const QkvLayout layout(p.heads, p.groups(), p.head_dim);
  MT_CHECK(qkv.ndim() == 3 && qkv.dim(2) == layout.width())
      << "attention qkv " << qkv.describe() << " for " << p.heads << " heads in " << layout.groups
      << " query groups of " << p.head_dim;
  Dims dims{qkv.dim(0), qkv.dim(1), p.heads, p.head_dim, layout};
  if (p.key_start.defined()) {
    check_i32(p.key_start, "attention key_start");
    MT_CHECK(p.key_start.ndim() == 2 && p.key_start.dim(0) == dims.b && p.key_start.dim(1) == dims.s)
        << "attention key_start " << p.key_start.describe() << ", expected [" << dims.b << ", " << dims.s << "]";
    dims.key_start = p.key_start.data_as<const int32_t>();
    for (int64_t bi = 0; bi < dims.b; ++bi) {
      for (int64_t i = 0; i < dims.s; ++i) {
        const int64_t lo = dims.lo(bi, i);
        MT_CHECK(lo >= 0 && lo <= i && (i == 0 || lo >= dims.lo(bi, i - 1)))
            << "attention key_start[" << bi << ", " << i << "] = " << lo
            << ": must lie in [0, i] and not decrease along the row";
      }
    }
  }
  check_f32(lse, "attention lse");
  MT_CHECK(lse.numel() == dims.b * dims.heads * dims.s)
      << "attention lse " << lse.describe() << ", expected [" << dims.b << ", " << dims.heads << ", " << dims.s << "]";
  return dims;
}

// Dropout multiplier of probability (bi, hd, i, j).
// bh = bi * heads + hd is the local (batch, head) pair; the index uses the global head
// dropout_head0 + hd of dropout_total_heads() (ops.h), so tensor-parallel ranks draw the
// single-process masks.
inline float attention_dropout(const AttentionParams& p, const Dims& dims, int64_t bh, int64_t i, int64_t j) {
  const DropoutParams& dp = p.dropout;
  if (dp.p == 0.0f) return 1.0f;
  const int64_t global_bh = (bh / dims.heads) * p.dropout_total_heads() + p.dropout_head0 + bh % dims.heads;
  const uint64_t index = static_cast<uint64_t>((global_bh * dims.s + i) * dims.s + j);
  return dropout_keep(dp.seed, dp.host_stream(), index, dp.p) ? 1.0f / (1.0f - dp.p) : 0.0f;
}

}  // namespace

void CpuBackend::attention_forward(const Tensor& qkv, Tensor& out, Tensor& lse, const AttentionParams& params) {
  const Dims dims = check_attention(qkv, lse, params);
  const int64_t s = dims.s, b = dims.b, heads = dims.heads, d = dims.d;
  MT_CHECK(out.numel() == s * b * heads * d) << "attention out " << out.describe();
  In qv(qkv, "attention qkv");
  Out ov(out, "attention out");
  float* lp = lse.data_as<float>();
  const QkvLayout& L = dims.layout;
  const int64_t qkv_row = L.width(), out_row = heads * d;

#pragma omp parallel for schedule(dynamic) if (b * heads * s * s * d >= kParallelWork)
  for (int64_t bh = 0; bh < b * heads; ++bh) {
    const int64_t bi = bh / heads, hd = bh % heads, g = L.group_of(hd);
    const float* base = qv.data() + bi * qkv_row;  // batch row bi of position 0; position i at + i * b * qkv_row
    auto q = [&](int64_t i) { return base + i * b * qkv_row + L.q_col(hd); };
    auto k = [&](int64_t j) { return base + j * b * qkv_row + L.k_col(g); };
    auto v = [&](int64_t j) { return base + j * b * qkv_row + L.v_col(g); };
    std::vector<float> score(static_cast<size_t>(s));
    std::vector<double> acc(static_cast<size_t>(d));
    for (int64_t i = 0; i < s; ++i) {
      const int64_t lo = dims.lo(bi, i);
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = lo; j <= i; ++j) {
        double dot = 0.0;
        for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(q(i)[c]) * k(j)[c];
        score[j] = static_cast<float>(dot) * params.softmax_scale;
        mx = std::max(mx, score[j]);
      }
      double sum = 0.0;
      for (int64_t j = lo; j <= i; ++j) sum += std::exp(static_cast<double>(score[j]) - mx);
      const float row_lse = mx + static_cast<float>(std::log(sum));
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = lo; j <= i; ++j) {
        const float pm = std::exp(score[j] - row_lse) * attention_dropout(params, dims, bh, i, j);
        if (pm == 0.0f) continue;
        for (int64_t c = 0; c < d; ++c) acc[c] += static_cast<double>(pm) * v(j)[c];
      }
      float* o = ov.data() + (i * b + bi) * out_row + hd * d;
      for (int64_t c = 0; c < d; ++c) o[c] = static_cast<float>(acc[c]);
      lp[bh * s + i] = row_lse;
    }
  }
  ov.commit();
}

void CpuBackend::attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                    Tensor& dqkv, const AttentionParams& params) {
  const Dims dims = check_attention(qkv, lse, params);
  const int64_t s = dims.s, b = dims.b, heads = dims.heads, d = dims.d;
  MT_CHECK(dout.numel() == s * b * heads * d) << "attention dout " << dout.describe();
  MT_CHECK(out.numel() == s * b * heads * d) << "attention out " << out.describe();
  MT_CHECK(dqkv.numel() == qkv.numel()) << "attention dqkv " << dqkv.describe() << " for qkv " << qkv.describe();
  In qv(qkv, "attention qkv"), dov(dout, "attention dout");
  Out dv_out(dqkv, "attention dqkv");
  const float* lp = lse.data_as<const float>();
  const QkvLayout& L = dims.layout;
  const int64_t qkv_row = L.width(), out_row = heads * d, groups = L.groups, n = L.per_group();
  const float scale = params.softmax_scale;

#pragma omp parallel for schedule(dynamic) if (b * heads * s * s * d >= kParallelWork)
  for (int64_t bg = 0; bg < b * groups; ++bg) {
    const int64_t bi = bg / groups, g = bg % groups;
    const float* base = qv.data() + bi * qkv_row;
    auto k = [&](int64_t j) { return base + j * b * qkv_row + L.k_col(g); };
    auto v = [&](int64_t j) { return base + j * b * qkv_row + L.v_col(g); };
    // dk, dv of this (batch, group), [s, d] each, summed over its query heads in double.
    std::vector<double> dk(static_cast<size_t>(s * d)), dv(dk.size()), dq(dk.size());
    std::vector<float> prob(static_cast<size_t>(s)), dprob(static_cast<size_t>(s));
    for (int64_t hd = g * n; hd < (g + 1) * n; ++hd) {
      const int64_t bh = bi * heads + hd;
      auto q = [&](int64_t i) { return base + i * b * qkv_row + L.q_col(hd); };
      auto go = [&](int64_t i) { return dov.data() + (i * b + bi) * out_row + hd * d; };
      std::fill(dq.begin(), dq.end(), 0.0);
      for (int64_t i = 0; i < s; ++i) {
        const float row_lse = lp[bh * s + i];
        const int64_t lo = dims.lo(bi, i);
        double row_dot = 0.0;  // sum_j P_ij dP_ij
        for (int64_t j = lo; j <= i; ++j) {
          double dot = 0.0;
          for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(q(i)[c]) * k(j)[c];
          const float p = std::exp(static_cast<float>(dot) * scale - row_lse);
          const float m = attention_dropout(params, dims, bh, i, j);
          double gv = 0.0;  // dout_i . v_j
          for (int64_t c = 0; c < d; ++c) gv += static_cast<double>(go(i)[c]) * v(j)[c];
          prob[j] = p;
          dprob[j] = static_cast<float>(gv) * m;
          row_dot += static_cast<double>(p) * dprob[j];
          if (m != 0.0f) {
            const double pm = static_cast<double>(p) * m;
            for (int64_t c = 0; c < d; ++c) dv[j * d + c] += pm * go(i)[c];
          }
        }
        for (int64_t j = lo; j <= i; ++j) {
          const double ds = static_cast<double>(prob[j]) * (dprob[j] - row_dot) * scale;
          for (int64_t c = 0; c < d; ++c) {
            dq[i * d + c] += ds * k(j)[c];
            dk[j * d + c] += ds * q(i)[c];
          }
        }
      }
      for (int64_t i = 0; i < s; ++i) {
        float* gq = dv_out.data() + (i * b + bi) * qkv_row + L.q_col(hd);
        for (int64_t c = 0; c < d; ++c) gq[c] = static_cast<float>(dq[i * d + c]);
      }
    }
    for (int64_t i = 0; i < s; ++i) {
      float* gk = dv_out.data() + (i * b + bi) * qkv_row + L.k_col(g);
      float* gv = dv_out.data() + (i * b + bi) * qkv_row + L.v_col(g);
      for (int64_t c = 0; c < d; ++c) {
        gk[c] = static_cast<float>(dk[i * d + c]);
        gv[c] = static_cast<float>(dv[i * d + c]);
      }
    }
  }
  dv_out.commit();
}

}  // namespace megatron::backend
