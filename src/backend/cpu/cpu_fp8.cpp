// CPU backend: FP8 quantization and the FP8 GEMM, emulated (backend/ops.h contracts). The
// quantized codes are decoded to fp32 (exact), so the GEMM's products are exact as on the
// tensor cores and only the fp32 summation order differs from the GPU's.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"
#include "core/fp8.h"

namespace megatron::backend {

using namespace cpu_detail;

namespace {

DType fp8_dtype(Fp8Format f) { return f == Fp8Format::kE4M3 ? DType::kF8E4M3 : DType::kF8E5M2; }
Fp8Format fp8_format(DType d) { return d == DType::kF8E4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2; }

float& scalar(const Tensor& t, const char* what) {
  check_f32(t, what);
  MT_CHECK_EQ(t.numel(), 1) << what << " " << t.describe();
  return t.data_as<float>()[0];
}

// An FP8 operand [rows, last dim] decoded to fp32.
std::vector<float> decode(const Tensor& q, const char* what) {
  check_cpu(q, what);
  MT_CHECK(is_fp8(q.dtype())) << what << " " << q.describe() << " is not FP8";
  const Fp8Format f = fp8_format(q.dtype());
  const int64_t n = q.numel();
  const uint8_t* p = q.data_as<const uint8_t>();
  std::vector<float> out(static_cast<size_t>(n));
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = fp8_to_float(p[i], f);
  return out;
}

}  // namespace

void CpuBackend::fp8_cast(const Fp8Source& src, Tensor& q, Tensor& qt, const Fp8Quantization& s, Tensor& dbias,
                          GradWrite write) {
  const Tensor& x = src.x;
  check_float(x, "fp8_quantize input");
  MT_CHECK(q.defined() || qt.defined()) << "fp8_quantize without an output";
  MT_CHECK(x.ndim() >= 1) << "fp8_quantize input " << x.describe();
  const int64_t n = x.numel(), cols = n == 0 ? 0 : x.dim(-1), rows = cols == 0 ? 0 : n / cols;
  const DType qd = fp8_dtype(s.format);
  for (const Tensor* t : {&q, &qt}) {
    if (!t->defined()) continue;
    check_cpu(*t, "fp8_quantize output");
    MT_CHECK(t->dtype() == qd && t->numel() == n)
        << "fp8_quantize output " << t->describe() << " for " << x.describe() << " as " << dtype_name(qd);
  }
  MT_CHECK(!qt.defined() || (qt.ndim() >= 1 && (n == 0 || qt.dim(-1) == rows)))
      << "fp8_quantize transposed output " << qt.describe() << " for " << x.describe();
  if (src.prologue == Fp8Prologue::kGeluGrad) {
    check_float(src.aux, "fp8_quantize gelu pre-activation");
    MT_CHECK(src.aux.numel() == n && src.aux.dtype() == x.dtype())
        << "fp8_quantize gelu pre-activation " << src.aux.describe() << " for " << x.describe();
  }
  if (dbias.defined()) {
    check_float(dbias, "fp8_quantize dbias");
    MT_CHECK(dbias.numel() == cols) << "fp8_quantize dbias " << dbias.describe() << " for " << x.describe();
  }
  // v in fp32, as the source says: x's own fp32 view for the identity.
  In xv(x, "fp8_quantize input");
  std::vector<float> computed;
  if (!src.identity()) {
    computed.resize(static_cast<size_t>(n));
    In auxv = In::optional(src.aux, "fp8_quantize gelu pre-activation");
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
    for (int64_t i = 0; i < n; ++i) {
      const float e = xv[i];
      float r = e;
      if (src.prologue == Fp8Prologue::kGelu) r = gelu(e, src.gelu);
      if (src.prologue == Fp8Prologue::kGeluGrad) r = e * gelu_grad(auxv[i], src.gelu);
      computed[static_cast<size_t>(i)] = r;
    }
  }
  const float* v = src.identity() ? xv.data() : computed.data();
  float a = 0.0f;
  for (int64_t i = 0; i < n; ++i) a = std::fmax(a, std::fabs(v[i]));  // fmax skips NaN
  if (s.amax.defined()) {
    float& amax = scalar(s.amax, "fp8_quantize amax");
    amax = std::fmax(amax, a);
  }
  float& scale = scalar(s.scale, "fp8_quantize scale");
  if (s.current) scale = fp8_current_scale(a, fp8_max(s.format));
  scalar(s.scale_inv, "fp8_quantize scale_inv") = 1.0f / scale;
  const float sc = scale;
  uint8_t* qp = q.defined() ? q.data_as<uint8_t>() : nullptr;
  uint8_t* qtp = qt.defined() ? qt.data_as<uint8_t>() : nullptr;
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t code = float_to_fp8(v[r * cols + c] * sc, s.format);
      if (qp) qp[r * cols + c] = code;
      if (qtp) qtp[c * rows + r] = code;
    }
  }
  if (dbias.defined()) {
    // The column sums in row order (bias_grad's), from v.
    const bool accumulate = write == GradWrite::kAccumulate;
    Out dbv(dbias, "fp8_quantize dbias", /*load=*/accumulate);
    std::vector<float> acc(static_cast<size_t>(cols), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) acc[static_cast<size_t>(c)] += v[r * cols + c];
    }
    for (int64_t c = 0; c < cols; ++c)
      dbv[c] = accumulate ? dbv[c] + acc[static_cast<size_t>(c)] : acc[static_cast<size_t>(c)];
    dbv.commit();
  }
}

void CpuBackend::fp8_gemm(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv,
                          const Tensor& bias, Tensor& c, GradWrite write, Fp8Accumulation) {
  MT_CHECK(a.ndim() >= 1 && b.ndim() >= 1 && a.dim(-1) == b.dim(-1))
      << "fp8_gemm " << a.describe() << " @ " << b.describe() << "^T";
  MT_CHECK(!(a.dtype() == DType::kF8E5M2 && b.dtype() == DType::kF8E5M2)) << "fp8_gemm of two E5M2 operands";
  const int64_t k = a.dim(-1);
  const int64_t m = k == 0 ? 0 : a.numel() / k, n = k == 0 ? 0 : b.numel() / k;
  check_float(c, "fp8_gemm output");
  MT_CHECK(c.ndim() >= 1 && c.dim(-1) == n && c.numel() == m * n)
      << "fp8_gemm output " << c.describe() << ", expected [" << m << ", " << n << "]";
  const bool accumulate = write == GradWrite::kAccumulate;
  MT_CHECK(!accumulate || !bias.defined()) << "fp8_gemm accumulates without bias, not " << c.describe();
  if (bias.defined()) {
    MT_CHECK_EQ(bias.numel(), n) << "fp8_gemm bias " << bias.describe();
  }
  const std::vector<float> av = decode(a, "fp8_gemm a"), bv = decode(b, "fp8_gemm b");
  const float s = scalar(a_scale_inv, "fp8_gemm a_scale_inv") * scalar(b_scale_inv, "fp8_gemm b_scale_inv");
  In biasv = In::optional(bias, "fp8_gemm bias");
  Out cv(c, "fp8_gemm output", /*load=*/accumulate);
  std::vector<float> acc(static_cast<size_t>(m * n), 0.0f);
  if (m > 0 && n > 0 && k > 0) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                1.0f, av.data(), static_cast<int>(k), bv.data(), static_cast<int>(k), 0.0f, acc.data(),
                static_cast<int>(n));
  }
#pragma omp parallel for schedule(static) if (m * n >= kParallelWork)
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float v = acc[static_cast<size_t>(i * n + j)] * s;
      if (biasv) v += biasv[j];
      if (accumulate) v += cv[i * n + j];
      cv[i * n + j] = v;
    }
  }
  cv.commit();
}

}  // namespace megatron::backend
