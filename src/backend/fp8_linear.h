// The linear layer's three GEMMs in FP8 (Transformer Engine's Linear under fp8_autocast with a
// per-tensor recipe), composed of the two FP8 ops of backend/ops.h, so the CPU backend's
// emulation and the CUDA backend's kernels run the same sequence:
//   forward  y[n, out]   = fp8(x)[n, in] . fp8(w)[out, in]^T (+ bias)
//   dgrad    dx[n, in]   = fp8(dy)[n, out] . fp8(w)^T[in, out]^T
//   wgrad    dw[out, in] (+=) fp8(dy)^T[out, n] . fp8(x)^T[in, n]^T
// Every GEMM is in the k-major ("TN") layout that Hopper's FP8 tensor cores take, so w, dy and
// x are also quantized transposed (one pass gives both layouts, TE's cast_transpose). The bias
// gradient is the column sums of the unquantized dy, summed by dy's cast (TE's bgrad_cast).
// x and dy are Fp8Sources: the MLP passes fc2's input as gelu(fc1 output) and fc1's output
// gradient as d(act) * gelu'(pre), so neither is written in the activation dtype. The forward
// GEMM uses fast accumulation, dgrad and wgrad split accumulation (TE's defaults:
// Fp8Accumulation). Shapes as Backend's linear ops.
#pragma once

#include "backend/ops.h"

namespace megatron::backend {

// The three operands' scalings (Fp8ScalingState::quantization of a layer's slots).
struct Fp8LinearScaling {
  Fp8Quantization input, weight, grad_output;
};

// FP8 buffers of one linear's GEMMs (kF8E4M3 / kF8E5M2, the numel of the tensor they quantize);
// any left undefined are allocated by the call (MemoryKind::kWorkspace).
// saved_wt (optional, [in, out]): the forward writes fp8(w)^T there in the same pass as fp8(w),
// and the backward reads it instead of quantizing w again. That holds while w and its scale are
// those of the forward: within an iteration (tensorwise recomputes the same scale from the same
// w; delayed changes it only in update()), so every micro-batch's backward may read the last
// forward's codes.
// saved_xt (optional, [in, n]) with saved_x_scale_inv (fp32 [1]): the forward writes fp8(x)^T
// there in the same pass as fp8(x), and the scale_inv it used; the backward of the same
// micro-batch reads both instead of quantizing x again (the forward's scale, whatever later
// forwards wrote into the slot). The MLP keeps FC2's there, in the bytes of the activation it
// no longer writes.
struct Fp8LinearBuffers {
  Tensor x, xt, w, wt, dy, dyt;
  Tensor saved_wt;
  Tensor saved_xt, saved_x_scale_inv;
};

// y = x w^T + bias with x and w quantized as `s.input` / `s.weight` say (their amax recorded).
void fp8_linear_forward(Backend& be, const Fp8Source& x, const Tensor& w, const Tensor& bias, Tensor& y,
                        const Fp8LinearScaling& s, Fp8LinearBuffers* buffers = nullptr);

// dx (if defined) and dw (+= by `write`), dbias (+=, if defined) from dy, quantized as
// `s.grad_output` says (amax recorded). x and w are quantized again as the forward did: s.input
// and s.weight must be the forward's (tensorwise recomputes the same scale from the same
// tensor; delayed reads the scale, which no update() may have changed in between).
void fp8_linear_backward(Backend& be, const Fp8Source& dy, const Fp8Source& x, const Tensor& w, Tensor& dx, Tensor& dw,
                         Tensor& dbias, const Fp8LinearScaling& s, GradWrite write = GradWrite::kAccumulate,
                         Fp8LinearBuffers* buffers = nullptr);

}  // namespace megatron::backend
