// Megatron-Core's MLP: a column-parallel FC1, the activation, a row-parallel FC2 and the
// bias-dropout-add into the residual stream:
//   x_out = x_mid + dropout(fc2(act(fc1(ln_out) + b_fc1)) + b_fc2)
// act is GELU (fused into FC1's GEMM epilogue, and its backward into FC2's dX GEMM) or, with
// --swiglu, silu(gate) * up where FC1 gives [gate | up] of f each (each half column-parallel:
// rank r holds rows r f/T.. of both); FC2's backward is then not fused with the activation's,
// which goes through ws.act.
#pragma once

#include <cstdint>
#include <string>

#include "model/gpt_config.h"
#include "model/layers/layer_context.h"
#include "model/layers/parallel_linear.h"

namespace megatron::model {

struct MLP {
  ColumnParallelLinear fc1;
  RowParallelLinear fc2;
  bool swiglu = false;
  backend::Gelu gelu = backend::Gelu::kTanh;
  int64_t ffn = 0;        // f (all ranks)
  bool fp8_gelu = false;  // GPTConfig::fp8 without SwiGLU: the FP8 activation path below

  // Saved for backward: FC1's output before the activation (bias included) [n, f1/T] and the
  // activation's output [n, f/T]. With fp8_gelu the activation is not written: FC2 quantizes
  // gelu_of(fc1_out) as it reads it, and act_out is the bytes of the transposed codes its weight
  // gradient reads (Fp8SavedInput): fp8_act_bytes(n) of them, not the activation's.
  struct Saved {
    Tensor fc1_out, act_out;
  };
  // act_out's bytes with fp8_gelu: FC2's [f/T, n] input codes, then the scale_inv at a 16-byte
  // boundary (16 bytes more cover it wherever the buffer starts).
  static int64_t fp8_act_bytes(int64_t n, int64_t local_ffn) { return n * local_ffn + 16; }
  backend::Fp8Source gelu_of(const Tensor& pre) const {
    return backend::Fp8Source(pre, backend::Fp8Prologue::kGelu, gelu);
  }

  // The buffers of Saved for one micro-batch, and the MLP's workspace: ws.f [n, f1/T] and with
  // SwiGLU ws.act [n, f/T].
  Saved allocate_saved(const LayerContext& ctx, DType dtype) const;
  void allocate_workspace(const LayerContext& ctx, DType dtype, LayerWorkspace& ws) const;
  int64_t fc1_local_width(const LayerContext& ctx) const { return (swiglu ? 2 : 1) * ffn / ctx.tp->size(); }

  static MLP declare(ParameterSet& ps, const std::string& prefix, const GPTConfig& config);
  static MLP find(const ParameterSet& ps, const std::string& prefix, const GPTConfig& config);

  // out [n_local, h] = residual + the block's output, from the norm output ln_out [n_local, h].
  void forward(const LayerContext& ctx, const Tensor& ln_out, const Tensor& residual, Tensor& out, Saved& saved,
               const backend::DropoutParams& dropout) const;
  // From g = d(out) [n_local, h] (`taken`: what the norm backward that produced g did for FC2):
  // the parameter gradients and d(ln_out), summed over TP (the return value; partial sums in
  // ws.h2).
  Tensor backward(const LayerContext& ctx, const Tensor& g, const Tensor& ln_out, const Saved& saved,
                  const backend::DropoutParams& dropout, const BranchGradTaken& taken) const;
};

}  // namespace megatron::model
