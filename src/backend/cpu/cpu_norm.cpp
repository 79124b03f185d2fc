// CPU backend: layernorm and the token + position embeddings.
//
// LayerNorm over the last dim h of each row r:
//   mean = sum(x) / h, var = sum((x - mean)^2) / h (biased), rstd = 1 / sqrt(var + eps),
//   xhat = (x - mean) rstd, out = xhat gamma + beta.
// Backward, with g = dy gamma:
//   dx = rstd (g - mean(g) - xhat mean(g xhat)), dgamma (+=) sum_r dy xhat, dbeta (+=) sum_r dy.
// RMSNorm (`mean` undefined): rstd = 1 / sqrt(sum(x^2) / h + eps), xhat = x rstd, out = xhat gamma;
//   dx = rstd (g - xhat mean(g xhat)), dgamma (+=) sum_r dy xhat, no beta.
// Row statistics are accumulated in double (two passes), stored as fp32.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace megatron::backend {

using namespace cpu_detail;

void CpuBackend::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& out,
                                   Tensor& mean, Tensor& rstd) {
  const int64_t h = x.dim(-1);
  const int64_t n = rows_of(x, h, "layernorm x");
  const bool rms = !mean.defined();
  MT_CHECK(gamma.numel() == h && (rms ? !beta.defined() : beta.numel() == h))
      << (rms ? "rmsnorm" : "layernorm") << " gamma " << gamma.describe() << ", beta " << beta.describe() << " for x "
      << x.describe() << (rms ? " (RMSNorm has no beta)" : "");
  MT_CHECK(out.numel() == x.numel()) << "layernorm out " << out.describe() << " for x " << x.describe();
  if (!rms) check_f32(mean, "layernorm mean");
  check_f32(rstd, "layernorm rstd");
  MT_CHECK((rms || mean.numel() == n) && rstd.numel() == n)
      << "layernorm mean " << mean.describe() << ", rstd " << rstd.describe() << " for " << n << " rows";
  In xv(x, "layernorm x"), gv(gamma, "layernorm gamma");
  In bv = In::optional(beta, "layernorm beta");
  Out ov(out, "layernorm out");
  float* mp = rms ? nullptr : mean.data_as<float>();
  float* rp = rstd.data_as<float>();
#pragma omp parallel for schedule(static) if (n * h >= kParallelWork)
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = xv.data() + r * h;
    double sum = 0.0;
    if (!rms) {
      for (int64_t j = 0; j < h; ++j) sum += xr[j];
    }
    const float m = static_cast<float>(sum / static_cast<double>(h));  // 0 for RMSNorm
    double sq = 0.0;
    for (int64_t j = 0; j < h; ++j) {
      const double d = static_cast<double>(xr[j]) - m;
      sq += d * d;
    }
    const float s = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(h) + static_cast<double>(eps)));
    float* orow = ov.data() + r * h;
    for (int64_t j = 0; j < h; ++j) orow[j] = (xr[j] - m) * s * gv[j] + (bv ? bv[j] : 0.0f);
    if (mp != nullptr) mp[r] = m;
    rp[r] = s;
  }
  ov.commit();
}

void CpuBackend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                    const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta, GradWrite write,
                                    GradWrite dx_write) {
  if (dx_write == GradWrite::kAccumulate) {
    // The definition of the fused form: the LayerNorm gradient in dx's dtype, then the add.
    MT_CHECK(!overlaps(dx, dy)) << "layernorm backward adding into dx: dx " << dx.describe() << " must not alias dy";
    Tensor ln_dx = Tensor::cpu(dx.shape(), dx.dtype());
    layernorm_backward(dy, x, gamma, mean, rstd, ln_dx, dgamma, dbeta, write, GradWrite::kOverwrite);
    add(dx, ln_dx, dx);
    return;
  }
  const int64_t h = x.dim(-1);
  const int64_t n = rows_of(x, h, "layernorm x");
  const bool rms = !mean.defined();
  MT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel())
      << "layernorm dy " << dy.describe() << ", dx " << dx.describe() << " for x " << x.describe();
  MT_CHECK(gamma.numel() == h && dgamma.numel() == h && (rms ? !dbeta.defined() : dbeta.numel() == h))
      << (rms ? "rmsnorm" : "layernorm") << " gamma " << gamma.describe() << ", dgamma " << dgamma.describe()
      << ", dbeta " << dbeta.describe() << (rms ? " (RMSNorm has no beta)" : "");
  if (!rms) check_f32(mean, "layernorm mean");
  check_f32(rstd, "layernorm rstd");
  MT_CHECK((rms || mean.numel() == n) && rstd.numel() == n) << "layernorm mean/rstd for " << n << " rows";
  In dyv(dy, "layernorm dy"), xv(x, "layernorm x"), gv(gamma, "layernorm gamma");
  const float* mp = rms ? nullptr : mean.data_as<const float>();
  const float* rp = rstd.data_as<const float>();
  auto row_mean = [mp](int64_t r) { return mp != nullptr ? mp[r] : 0.0f; };

  // dgamma, dbeta first (dx may alias dy): column chunks, rows in order.
  {
    const bool accumulate = write == GradWrite::kAccumulate;
    Out dgv(dgamma, "layernorm dgamma", /*load=*/accumulate);
    Out dbv = Out::optional(dbeta, "layernorm dbeta", /*load=*/accumulate);
    const int64_t chunks = (h + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel for schedule(static) if (n * h >= kParallelWork)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t c0 = c * kColumnChunk, c1 = std::min(h, c0 + kColumnChunk);
      float ag[kColumnChunk] = {}, ab[kColumnChunk] = {};
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t j = c0; j < c1; ++j) {
          const float d = dyv[r * h + j];
          ag[j - c0] += d * (xv[r * h + j] - row_mean(r)) * rp[r];
          ab[j - c0] += d;
        }
      }
      for (int64_t j = c0; j < c1; ++j) {
        dgv[j] = accumulate ? dgv[j] + ag[j - c0] : ag[j - c0];
        if (dbv) dbv[j] = accumulate ? dbv[j] + ab[j - c0] : ab[j - c0];
      }
    }
    dgv.commit();
    if (dbv) dbv.commit();
  }

  Out dxv(dx, "layernorm dx");
#pragma omp parallel for schedule(static) if (n * h >= kParallelWork)
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = xv.data() + r * h;
    const float* dyr = dyv.data() + r * h;
    const float m = row_mean(r), s = rp[r];
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t j = 0; j < h; ++j) {
      const float g = dyr[j] * gv[j];
      sum_g += g;
      sum_gx += static_cast<double>(g) * ((xr[j] - m) * s);
    }
    const float mean_g = rms ? 0.0f : static_cast<float>(sum_g / static_cast<double>(h));
    const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(h));
    float* dxr = dxv.data() + r * h;
    for (int64_t j = 0; j < h; ++j) {
      const float xhat = (xr[j] - m) * s;
      dxr[j] = s * (dyr[j] * gv[j] - mean_g - xhat * mean_gx);
    }
  }
  dxv.commit();
}

// The reference is the pair: the fused CUDA kernel sums the same stored values in its own order.
void CpuBackend::layernorm_backward_colsum(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                           const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                                           Tensor& dx_colsum, GradWrite write, GradWrite dx_write,
                                           GradWrite colsum_write) {
  layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, write, dx_write);
  bias_grad(dx, dx_colsum, colsum_write);
}

// Likewise the three ops the CUDA kernel fuses.
void CpuBackend::layernorm_backward_dropout_colsum(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                                   const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dgamma,
                                                   Tensor& dbeta, Tensor& dz, Tensor& dz_colsum,
                                                   const DropoutParams& dropout, GradWrite write, GradWrite dx_write,
                                                   GradWrite colsum_write) {
  MT_CHECK(dz.numel() == x.numel() && dz.dtype() == dx.dtype() && !overlaps(dz, dx) && !overlaps(dz, dy))
      << "layernorm dz " << dz.describe() << " for dx " << dx.describe() << " (same shape and dtype, its own memory)";
  layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, write, dx_write);
  dropout_backward(dx, dz, dropout);
  bias_grad(dz, dz_colsum, colsum_write);
}

namespace {

// Position ids [b, s] (int32, each in [0, P)), or null for 0..s-1 in every batch row.
const int32_t* checked_positions(const Tensor& positions, int64_t b, int64_t s, int64_t P) {
  if (!positions.defined()) {
    MT_CHECK(s <= P) << "sequence length " << s << " exceeds the position table's " << P << " rows";
    return nullptr;
  }
  check_i32(positions, "embedding positions");
  MT_CHECK(positions.ndim() == 2 && positions.dim(0) == b && positions.dim(1) == s)
      << "embedding positions " << positions.describe() << ", expected [" << b << ", " << s << "]";
  const int32_t* pos = positions.data_as<const int32_t>();
  for (int64_t i = 0; i < b * s; ++i) {
    MT_CHECK(pos[i] >= 0 && pos[i] < P) << "embedding position id " << pos[i] << " at [" << i / s << ", " << i % s
                                        << "] outside the position table's " << P << " rows";
  }
  return pos;
}

}  // namespace

void CpuBackend::embedding_forward(const Tensor& tokens, const Tensor& positions, const Tensor& wte, const Tensor& wpe,
                                   Tensor& out) {
  check_i32(tokens, "embedding tokens");
  MT_CHECK(tokens.ndim() == 2) << "embedding tokens " << tokens.describe() << " must be [b, s]";
  MT_CHECK(wte.ndim() == 2 && (!wpe.defined() || (wpe.ndim() == 2 && wte.dim(1) == wpe.dim(1))))
      << "embedding tables wte " << wte.describe() << ", wpe " << wpe.describe();
  const int64_t b = tokens.dim(0), s = tokens.dim(1), vocab = wte.dim(0), h = wte.dim(1);
  const int32_t* pos = wpe.defined() ? checked_positions(positions, b, s, wpe.dim(0)) : nullptr;
  MT_CHECK(out.numel() == s * b * h) << "embedding out " << out.describe() << ", expected [" << s << ", " << b << ", "
                                     << h << "]";
  const int32_t* tok = tokens.data_as<const int32_t>();
  In tv(wte, "embedding wte");
  In pv = In::optional(wpe, "embedding wpe");
  Out ov(out, "embedding out");
#pragma omp parallel for schedule(static) if (s * b * h >= kParallelWork)
  for (int64_t row = 0; row < s * b; ++row) {
    const int64_t si = row / b, bi = row % b;
    const int32_t t = tok[bi * s + si];
    const int64_t p = pos != nullptr ? pos[bi * s + si] : si;
    // Outside this table's ids: a zero word row (vocab-parallel masking, ops.h).
    const bool in = t >= 0 && t < vocab;
    for (int64_t j = 0; j < h; ++j) {
      const float w = in ? tv[t * h + j] : 0.0f;
      ov[row * h + j] = pv ? w + pv[p * h + j] : w;
    }
  }
  ov.commit();
}

void CpuBackend::embedding_backward(const Tensor& tokens, const Tensor& positions, const Tensor& dout, Tensor& dwte,
                                    Tensor& dwpe) {
  check_i32(tokens, "embedding tokens");
  MT_CHECK(tokens.ndim() == 2) << "embedding tokens " << tokens.describe() << " must be [b, s]";
  const bool with_positions = dwpe.defined();
  MT_CHECK(dwte.ndim() == 2 && (!with_positions || (dwpe.ndim() == 2 && dwte.dim(1) == dwpe.dim(1))))
      << "embedding grads dwte " << dwte.describe() << ", dwpe " << dwpe.describe();
  const int64_t b = tokens.dim(0), s = tokens.dim(1), vocab = dwte.dim(0), h = dwte.dim(1);
  const int32_t* pos = with_positions ? checked_positions(positions, b, s, dwpe.dim(0)) : nullptr;
  MT_CHECK(dout.numel() == s * b * h) << "embedding dout " << dout.describe();
  const int32_t* tok = tokens.data_as<const int32_t>();
  In dv(dout, "embedding dout");
  Tensor no_table = Tensor::cpu({1, h});  // stands in for an absent dwpe (never written back)
  Out tv(dwte, "embedding dwte", /*load=*/true), pv(with_positions ? dwpe : no_table, "embedding dwpe", /*load=*/true);
  // Token and position rows repeat, so the scatters are split by column chunks; each chunk
  // walks the rows in (s, b) order, a fixed accumulation order per element.
  const int64_t chunks = (h + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel for schedule(static) if (s * b * h >= kParallelWork)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t c0 = c * kColumnChunk, c1 = std::min(h, c0 + kColumnChunk);
    for (int64_t row = 0; row < s * b; ++row) {
      const int64_t si = row / b, bi = row % b;
      const int32_t t = tok[bi * s + si];
      const int64_t p = pos != nullptr ? pos[bi * s + si] : si;
      if (with_positions) {
        for (int64_t j = c0; j < c1; ++j) pv[p * h + j] += dv[row * h + j];
      }
      if (t < 0 || t >= vocab) continue;  // another vocab-parallel rank's id
      for (int64_t j = c0; j < c1; ++j) tv[t * h + j] += dv[row * h + j];
    }
  }
  tv.commit();
  if (with_positions) pv.commit();
}

}  // namespace megatron::backend
