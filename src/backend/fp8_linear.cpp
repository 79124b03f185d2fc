#include "backend/fp8_linear.h"

namespace megatron::backend {

namespace {

DType fp8_dtype(Fp8Format f) { return f == Fp8Format::kE4M3 ? DType::kF8E4M3 : DType::kF8E5M2; }

// `slot` when it is defined, else a new workspace buffer of `shape` in the format's dtype.
Tensor buffer(Backend& be, Tensor* slot, Shape shape, Fp8Format f) {
  if (slot && slot->defined()) return *slot;
  return be.empty(std::move(shape), fp8_dtype(f), MemoryKind::kWorkspace);
}

}  // namespace

void fp8_linear_forward(Backend& be, const Fp8Source& xs, const Tensor& w, const Tensor& bias, Tensor& y,
                        const Fp8LinearScaling& s, Fp8LinearBuffers* buffers) {
  const Tensor& x = xs.x;
  MT_CHECK_EQ(w.ndim(), 2) << "fp8 linear weight " << w.describe();
  const int64_t out = w.dim(0), in = w.dim(1);
  MT_CHECK(in > 0 && x.numel() % in == 0) << "fp8 linear input " << x.describe() << " for " << w.describe();
  const int64_t n = x.numel() / in;
  Tensor qx = buffer(be, buffers ? &buffers->x : nullptr, {n, in}, s.input.format);
  Tensor qw = buffer(be, buffers ? &buffers->w : nullptr, {out, in}, s.weight.format);
  Tensor none;
  Tensor qwt = buffers ? buffers->saved_wt : Tensor();
  Tensor qxt = buffers ? buffers->saved_xt : Tensor();
  be.fp8_cast(xs, qx, qxt, s.input, none);
  if (qxt.defined()) {
    MT_CHECK(buffers->saved_x_scale_inv.defined()) << "fp8 linear saved x^T codes without their scale_inv";
    be.copy(s.input.scale_inv, buffers->saved_x_scale_inv);
  }
  be.fp8_quantize(w, qw, qwt, s.weight);
  be.fp8_gemm(qx, s.input.scale_inv, qw, s.weight.scale_inv, bias, y, GradWrite::kOverwrite, Fp8Accumulation::kFast);
}

void fp8_linear_backward(Backend& be, const Fp8Source& dys, const Fp8Source& xs, const Tensor& w, Tensor& dx,
                         Tensor& dw, Tensor& dbias, const Fp8LinearScaling& s, GradWrite write,
                         Fp8LinearBuffers* buffers) {
  const Tensor& dy = dys.x;
  const Tensor& x = xs.x;
  MT_CHECK_EQ(w.ndim(), 2) << "fp8 linear weight " << w.describe();
  const int64_t out = w.dim(0), in = w.dim(1);
  MT_CHECK(in > 0 && x.numel() % in == 0) << "fp8 linear input " << x.describe() << " for " << w.describe();
  const int64_t n = x.numel() / in;
  MT_CHECK(dy.numel() == n * out && dy.dim(-1) == out) << "fp8 linear dy " << dy.describe();
  Tensor qdy = dx.defined() ? buffer(be, buffers ? &buffers->dy : nullptr, {n, out}, s.grad_output.format) : Tensor();
  Tensor qdyt = buffer(be, buffers ? &buffers->dyt : nullptr, {out, n}, s.grad_output.format);
  Tensor none;
  be.fp8_cast(dys, qdy, qdyt, s.grad_output, dbias, write);
  if (dx.defined()) {
    const bool saved = buffers && buffers->saved_wt.defined();
    Tensor qwt = saved ? buffers->saved_wt : buffer(be, buffers ? &buffers->wt : nullptr, {in, out}, s.weight.format);
    if (!saved) be.fp8_quantize(w, none, qwt, s.weight);
    be.fp8_gemm(qdy, s.grad_output.scale_inv, qwt, s.weight.scale_inv, Tensor(), dx);
  }
  if (buffers && buffers->saved_xt.defined()) {
    be.fp8_gemm(qdyt, s.grad_output.scale_inv, buffers->saved_xt, buffers->saved_x_scale_inv, Tensor(), dw, write);
    return;
  }
  Tensor qxt = buffer(be, buffers ? &buffers->xt : nullptr, {in, n}, s.input.format);
  be.fp8_cast(xs, none, qxt, s.input, none);
  be.fp8_gemm(qdyt, s.grad_output.scale_inv, qxt, s.input.scale_inv, Tensor(), dw, write);
}

}  // namespace megatron::backend
