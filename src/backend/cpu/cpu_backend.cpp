// CPU backend: memory, GEMM (OpenBLAS) and whole-tensor reductions. See cpu_backend.h.
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_util.h"
#include "core/fp8.h"
#include "core/rng.h"

namespace megatron::backend {

using namespace cpu_detail;

namespace cpu_detail {

void to_f32(const void* src, DType dtype, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_float(s[i]);
      return;
    }
    default:
      MT_CHECK(false) << "to_f32 of " << dtype_name(dtype);
  }
}

void from_f32(const float* src, DType dtype, int64_t n, void* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memmove(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
      return;
    }
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_fp16(src[i]);
      return;
    }
    default:
      MT_CHECK(false) << "from_f32 to " << dtype_name(dtype);
  }
}

}  // namespace cpu_detail

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

// ---- memory ------------------------------------------------------------------------------

Tensor CpuBackend::empty(Shape shape, DType dtype, MemoryKind kind) {
  return Tensor::cpu(std::move(shape), dtype, kind);
}

void CpuBackend::fill(Tensor& t, float value) {
  check_cpu(t, "fill target");
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kF32:
      std::fill_n(t.data_as<float>(), n, value);
      break;
    case DType::kBF16:
      std::fill_n(t.data_as<uint16_t>(), n, float_to_bf16(value));
      break;
    case DType::kF16:
      std::fill_n(t.data_as<uint16_t>(), n, float_to_fp16(value));
      break;
    case DType::kI32:
      std::fill_n(t.data_as<int32_t>(), n, static_cast<int32_t>(value));
      break;
    case DType::kI64:
      std::fill_n(t.data_as<int64_t>(), n, static_cast<int64_t>(value));
      break;
    case DType::kF8E4M3:
      std::fill_n(t.data_as<uint8_t>(), n, float_to_fp8(value, Fp8Format::kE4M3));
      break;
    case DType::kF8E5M2:
      std::fill_n(t.data_as<uint8_t>(), n, float_to_fp8(value, Fp8Format::kE5M2));
      break;
  }
}

void CpuBackend::init_normal(Tensor& t, const NormalInit& init) {
  check_float(t, "init_normal target");
  const DType dt = t.dtype();
  MT_CHECK(init.local_cols > 0 && init.global_cols >= init.local_cols)
      << "init_normal columns " << init.local_cols << " of " << init.global_cols;
  const int64_t n = t.numel();
  void* const out = t.data();
#pragma omp parallel for schedule(static) if (n >= 4096)
  for (int64_t k = 0; k < n; ++k) {
    const int64_t g = (k / init.local_cols) * init.global_cols + init.offset + k % init.local_cols;
    const float v = init.scale * philox_normal(init.seed, init.stream, static_cast<uint64_t>(g));
    if (dt == DType::kF32) {
      static_cast<float*>(out)[k] = v;
    } else {
      static_cast<uint16_t*>(out)[k] = dt == DType::kBF16 ? float_to_bf16(v) : float_to_fp16(v);
    }
  }
}

Tensor CpuBackend::host_staging(Shape shape, DType dtype) { return Tensor::cpu(std::move(shape), dtype); }

void CpuBackend::copy_to_host_async(const Tensor& src, Tensor& dst) {
  MT_CHECK(dst.defined() && src.dtype() == dst.dtype())
      << "copy_to_host_async: " << src.describe() << " -> " << (dst.defined() ? dst.describe() : "undefined");
  copy(src, dst);
}

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  check_cpu(src, "copy source");
  check_cpu(dst, "copy destination");
  MT_CHECK_EQ(src.numel(), dst.numel()) << src.describe() << " -> " << dst.describe();
  if (src.dtype() == dst.dtype()) {
    std::memmove(dst.data(), src.data(), static_cast<size_t>(src.nbytes()));
    return;
  }
  MT_CHECK(is_float(src.dtype()) && is_float(dst.dtype())) << "copy " << src.describe() << " -> " << dst.describe();
  if (dst.dtype() == DType::kF32) {
    to_f32(src.data(), src.dtype(), src.numel(), dst.data_as<float>());
  } else {
    In s(src, "copy source");
    from_f32(s.data(), dst.dtype(), dst.numel(), dst.data());
  }
}

// ---- dense algebra -----------------------------------------------------------------------

void CpuBackend::matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha,
                        float beta) {
  // 2-D views: [rows, last dim].
  const int64_t a_cols = a.dim(-1), a_rows = rows_of(a, a_cols, "matmul a");
  const int64_t b_cols = b.dim(-1), b_rows = rows_of(b, b_cols, "matmul b");
  const int64_t m = trans_a ? a_cols : a_rows, k = trans_a ? a_rows : a_cols;
  const int64_t kb = trans_b ? b_cols : b_rows, n = trans_b ? b_rows : b_cols;
  MT_CHECK_EQ(k, kb) << "matmul " << a.describe() << (trans_a ? "^T" : "") << " @ " << b.describe()
                     << (trans_b ? "^T" : "");
  MT_CHECK(c.ndim() >= 1 && c.dim(-1) == n && c.numel() == m * n)
      << "matmul output " << c.describe() << ", expected [" << m << ", " << n << "]";
  In av(a, "matmul a"), bv(b, "matmul b");
  Out cv(c, "matmul c", /*load=*/beta != 0.0f);
  if (m > 0 && n > 0) {
    if (k == 0) {
      for (int64_t i = 0; i < m * n; ++i) cv[i] = beta == 0.0f ? 0.0f : beta * cv[i];
    } else {
      cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                  static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, av.data(),
                  static_cast<int>(a_cols), bv.data(), static_cast<int>(b_cols), beta, cv.data(), static_cast<int>(n));
    }
  }
  cv.commit();
}

void CpuBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y) {
  MT_CHECK_EQ(w.ndim(), 2) << "linear weight " << w.describe();
  const int64_t out = w.dim(0), in = w.dim(1);
  const int64_t n = rows_of(x, in, "linear input");
  MT_CHECK(y.dim(-1) == out && y.numel() == n * out) << "linear output " << y.describe();
  if (bias.defined()) {
    MT_CHECK_EQ(bias.numel(), out) << "linear bias " << bias.describe();
  }
  In xv(x, "linear input"), wv(w, "linear weight");
  In bv = In::optional(bias, "linear bias");
  Out yv(y, "linear output");
  if (n > 0 && out > 0) {
    if (in > 0) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(out),
                  static_cast<int>(in), 1.0f, xv.data(), static_cast<int>(in), wv.data(), static_cast<int>(in), 0.0f,
                  yv.data(), static_cast<int>(out));
    } else {
      std::fill_n(yv.data(), n * out, 0.0f);
    }
  }
  if (bv) {
#pragma omp parallel for schedule(static) if (n * out >= kParallelWork)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = 0; o < out; ++o) yv[r * out + o] += bv[o];
  }
  yv.commit();
}

void CpuBackend::linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                                 Tensor& dbias, GradWrite write) {
  MT_CHECK_EQ(w.ndim(), 2) << "linear weight " << w.describe();
  const int64_t out = w.dim(0), in = w.dim(1);
  const int64_t n = rows_of(x, in, "linear input");
  MT_CHECK(dy.dim(-1) == out && dy.numel() == n * out) << "linear dy " << dy.describe();
  MT_CHECK(dw.numel() == out * in) << "linear dw " << dw.describe() << " for weight " << w.describe();
  In dyv(dy, "linear dy"), xv(x, "linear input");
  if (dx.defined()) {
    MT_CHECK_EQ(dx.numel(), n * in) << "linear dx " << dx.describe();
    In wv(w, "linear weight");
    Out dxv(dx, "linear dx");
    if (n > 0 && in > 0) {
      if (out > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(in),
                    static_cast<int>(out), 1.0f, dyv.data(), static_cast<int>(out), wv.data(), static_cast<int>(in),
                    0.0f, dxv.data(), static_cast<int>(in));
      } else {
        std::fill_n(dxv.data(), n * in, 0.0f);
      }
    }
    dxv.commit();
  }
  {
    const bool accumulate = write == GradWrite::kAccumulate;
    Out dwv(dw, "linear dw", /*load=*/accumulate);
    if (n > 0 && out > 0 && in > 0) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(out), static_cast<int>(in),
                  static_cast<int>(n), 1.0f, dyv.data(), static_cast<int>(out), xv.data(), static_cast<int>(in),
                  accumulate ? 1.0f : 0.0f, dwv.data(), static_cast<int>(in));
    } else if (!accumulate) {
      std::fill_n(dwv.data(), out * in, 0.0f);
    }
    dwv.commit();
  }
  if (dbias.defined()) bias_grad(dy, dbias, write);
}

// The fused forms compute the GEMM into an fp32 tensor with the unfused ops, so the only
// difference from the unfused sequence is the rounding they skip.
void CpuBackend::linear_residual_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                                         Tensor& y) {
  MT_CHECK(residual.numel() == y.numel())
      << "linear_residual_forward: residual " << residual.describe() << " vs y " << y.describe();
  Tensor z = Tensor::cpu(y.shape(), DType::kF32);
  linear_forward(x, w, Tensor(), z);                        // z = x w^T in fp32
  bias_dropout_add(z, bias, residual, y, DropoutParams{});  // residual + (z + bias), one rounding
}

void CpuBackend::linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& pre, Tensor& y,
                                     Gelu kind) {
  MT_CHECK(pre.numel() == y.numel()) << "linear_gelu_forward: pre " << pre.describe() << " vs y " << y.describe();
  Tensor z = Tensor::cpu(y.shape(), DType::kF32);
  linear_forward(x, w, bias, z);  // z = x w^T + bias in fp32
  copy(z, pre);
  float* zp = z.data_as<float>();
  const int64_t n = z.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t i = 0; i < n; ++i) zp[i] = gelu(zp[i], kind);
  copy(z, y);
}

void CpuBackend::linear_dgelu_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& pre,
                                       Tensor& dpre, Tensor& dw, Tensor& dbias, Gelu kind, GradWrite write) {
  MT_CHECK(pre.numel() == x.numel() && dpre.numel() == x.numel())
      << "linear_dgelu_backward: pre " << pre.describe() << ", dpre " << dpre.describe() << " for input "
      << x.describe();
  Tensor dx = Tensor::cpu(x.shape(), DType::kF32);
  linear_backward(dy, x, w, dx, dw, dbias, write);  // dx = dy w in fp32
  In pv(pre, "linear_dgelu_backward pre");
  float* d = dx.data_as<float>();
  const int64_t n = dx.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t i = 0; i < n; ++i) d[i] *= gelu_grad(pv[i], kind);
  copy(dx, dpre);
}

// ---- reductions --------------------------------------------------------------------------

double CpuBackend::sum_squares(const Tensor& x) {
  // Fixed-size chunks summed in parallel, then combined in chunk order: the same result for
  // any thread count.
  constexpr int64_t kChunk = 1 << 16;
  In xv(x, "sum_squares input");
  const int64_t n = x.numel();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t c = 0; c < chunks; ++c) {
    double s = 0.0;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) s += static_cast<double>(xv[i]) * xv[i];
    partial[static_cast<size_t>(c)] = s;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

bool CpuBackend::all_finite(const Tensor& x) {
  check_cpu(x, "all_finite input");
  const int64_t n = x.numel();
  bool ok = true;
  switch (x.dtype()) {
    case DType::kF32: {
      const float* p = x.data_as<const float>();
#pragma omp parallel for schedule(static) reduction(&& : ok) if (n >= kParallelWork)
      for (int64_t i = 0; i < n; ++i) ok = ok && std::isfinite(p[i]);
      break;
    }
    case DType::kBF16: {  // exponent bits all ones: inf or NaN
      const uint16_t* p = x.data_as<const uint16_t>();
#pragma omp parallel for schedule(static) reduction(&& : ok) if (n >= kParallelWork)
      for (int64_t i = 0; i < n; ++i) ok = ok && (p[i] & 0x7f80u) != 0x7f80u;
      break;
    }
    case DType::kF16: {
      const uint16_t* p = x.data_as<const uint16_t>();
#pragma omp parallel for schedule(static) reduction(&& : ok) if (n >= kParallelWork)
      for (int64_t i = 0; i < n; ++i) ok = ok && (p[i] & 0x7c00u) != 0x7c00u;
      break;
    }
    default:
      break;  // integers are always finite
  }
  return ok;
}

}  // namespace megatron::backend
