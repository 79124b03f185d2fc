// The op interface: everything model/ and train/ compute goes through a Backend, so the
// same model code runs on the CPU reference (backend/cpu/) and on CUDA (backend/cuda/).
//
// Conventions for every op:
//  - Tensors are contiguous and live on this backend's device.
//  - Float inputs may be fp32, bf16 or fp16; arithmetic is fp32; outputs are rounded to
//    their own dtype (round-to-nearest-even). Outputs named "(+=)" are parameter gradients
//    (fp32, or bf16/fp16: a 16-bit gradient buffer, parallel/grad_buffer.h), written as the
//    call's GradWrite says (accumulated by default); all others are overwritten. A 16-bit
//    "(+=)" output gets the op's fp32 result plus its old value, added in fp32 and rounded
//    once (Megatron's fused wgrad accumulation into a 16-bit main_grad).
//  - Activations are sequence-first, [s, b, h], as in Megatron (sequence parallelism splits
//    dim 0). "n" below is s*b rows.
//  - Linear weights are [out, in] (PyTorch/Megatron layout): y = x W^T + b.
//  - Dropout: element i of a tensor is kept iff dropout_keep(seed, stream, offset + i, p)
//    (core/rng.h; stream includes the value at DropoutParams::stream_add when set); kept values
//    are scaled by 1/(1-p). p == 0 means no dropout (no RNG drawn).
//    offset (DropoutParams) is 0 except for a shard of a larger tensor: a sequence-parallel
//    rank's [s/T, b, h] rows start at flat index offset = r * (s/T) * b * h of the [s, b, h]
//    tensor, so its mask is the single-process run's at the same global elements.
//  - Shapes are checked with MT_CHECK: a mismatch is a bug in the caller, not user input.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/fp8.h"
#include "core/tensor.h"

namespace megatron::backend {

// GELU as Megatron's fused bias-GELU (tanh approximation) or exact (erf, --openai-gelu off).
enum class Gelu { kTanh, kExact };

// How an op writes its "(+=)" outputs (parameter gradients): added to what they hold
// (gradient accumulation over micro-batches, and every later writer of a step), or written
// over it by the first writer of a step. Overwriting gives the same values as accumulating
// into zeros and lets the step skip the zero fill of the whole fp32 gradient buffer, and the
// weight-gradient GEMMs skip reading C (Megatron zeroes main_grad and accumulates).
enum class GradWrite { kAccumulate, kOverwrite };

struct DropoutParams {
  float p = 0.0f;
  uint64_t seed = 0;
  // Distinct per use site and step (layer, micro-batch, iteration): this value, plus the one at
  // stream_add when that is set.
  uint64_t stream = 0;
  uint64_t offset = 0;  // global flat index of element 0 (sequence-parallel shards; see above)
  // Optional: the address, in this backend's memory, of a value added to `stream` when the op
  // runs (not when it is issued). Recorded work (begin_recording) then draws, at each replay,
  // the masks of the value written there before it. Null: `stream` alone.
  const uint64_t* stream_add = nullptr;
  // The stream of a host backend's op (its memory is the host's).
  uint64_t host_stream() const { return stream_add != nullptr ? stream + *stream_add : stream; }
};

// Causal self-attention over Megatron's fused QKV projection output, with grouped-query
// attention (GQA): G = query_groups key/value heads shared by heads / G query heads each
// (G = heads: multi-head attention; G = 1: multi-query attention). With n = heads / G and
// head_dim d, qkv is [s, b, G * (n + 2) * d]; group g owns the columns
// [g*(n+2)*d, (g+1)*(n+2)*d): its n queries (query head j = g*n + i at g*(n+2)*d + i*d), then
// its key (at g*(n+2)*d + n*d), then its value (at g*(n+2)*d + (n+1)*d), d columns each
// (Megatron-Core's [s, b, ng, (np/ng + 2) * hn] view of linear_qkv's output). For G = heads this
// is [q, k, v] per head, Megatron's [s, b, np, 3*hn] (qkv_layout.h has the column arithmetic).
// e.g. heads 4, G 2, d 8: group 0 = q0 [0, 8), q1 [8, 16), k0 [16, 24), v0 [24, 32); group 1
// starts at 32; query head 3 reads columns [40, 48) and the key at [48, 56).
// out: [s, b, heads * head_dim], query head j in columns [j*d, (j+1)*d).
// softmax(q k^T * scale + causal mask) (fp32), dropout on the probabilities, times v; query
// head j uses the key and value of its group j / n.
// Dropout element index of probability (batch bi, head hd, query i, key j) is
// ((bi * H + h0 + hd) * s + i) * s + j, the flat index in a [b, H, s, s] tensor, with
// H = dropout_heads (0: heads) and h0 = dropout_head0: a tensor-parallel rank computing the
// global heads [h0, h0 + heads) of H passes them, so its masks are the single-process run's.
// (hd is the query head.) Masked keys (j > i) draw nothing.
// One exception: a backend may draw the attention mask from another generator where a fused
// kernel needs its own (the CUDA backend's cuDNN path: cuDNN's Philox keyed by (seed, stream),
// cudnn_attention.h), still a pure function of (seed, stream, bi, hd, i, j), so the same call
// gives the same mask, the backward the forward's, and recompute the original's; only the
// bits differ from the index rule above. Cases with h0 != 0 or H != heads keep the rule.
// One AdamW update (Megatron --optimizer adam = apex FusedAdam, adam_w_mode, bias correction),
// elementwise over fp32 tensors, step t >= 1:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= lr * ((m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd p)
// with the bias corrections 1-b^t computed in double and rounded to fp32 once (apex's host
// side), the rest in fp32 in that order (optim/adamw.h is the tested host reference).
struct AdamWStep {
  // The gradient (fp32, or a 16-bit gradient buffer's values, widened exactly) is first
  // multiplied by grad_unscale, then by grad_scale (one fp32 rounding each; 1 is the identity):
  // the fp16 loss scaler's 1/scale for a 16-bit buffer, which cannot be unscaled in place
  // without rounding (parallel/optimizer.h), and gradient clipping's factor, applied here
  // instead of in separate passes over the gradients.
  float grad_unscale = 1.0f;
  float grad_scale = 1.0f;
  float lr = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;
};

// Counter-based normal initialisation (Megatron's init_method: N(0, std)): element k of the
// destination is scale * philox_normal(seed, stream, g(k)) (core/rng.h; computed in fp32 as
// one multiply, rounded to the destination's dtype), g(k) = (k / local_cols) * global_cols +
// offset + k % local_cols: the element's flat index in the whole (unsharded) parameter
// (tensor_parallel/partition.h global_index: a replicated tensor or a row block sets
// local_cols = global_cols and offset = its first element; a column shard of [R, C] its C / T
// columns, C and rank * C / T). Every backend writes the same bits (the GPU computes Box-
// Muller with the host's operations, core/normal_math.h).
struct NormalInit {
  uint64_t seed = 0;
  uint64_t stream = 0;
  float scale = 1.0f;
  int64_t offset = 0;
  int64_t local_cols = 1;
  int64_t global_cols = 1;
};

struct AttentionParams {
  int64_t heads = 0;         // query heads of this call
  int64_t query_groups = 0;  // G key/value heads (0: heads, multi-head attention); heads % G == 0
  int64_t head_dim = 0;
  float softmax_scale = 0.0f;  // usually 1/sqrt(head_dim)
  DropoutParams dropout;       // its offset is unused: heads are placed by the two fields below
  int64_t dropout_heads = 0;   // H of the dropout index (0: heads; TP: all heads of the model)
  int64_t dropout_head0 = 0;   // global index of this call's head 0 (TP: rank * heads)
  // Documents packed into one sequence (Megatron's --reset-attention-mask): int32 [b, s], the
  // first key query i of batch row bi may see; keys key_start[bi, i] <= j <= i are visible.
  // Non-decreasing along each row with 0 <= key_start[bi, i] <= i (a row's first position
  // of its document). Undefined: every query sees keys 0..i (the causal mask alone).
  Tensor key_start;
  int64_t dropout_total_heads() const { return dropout_heads > 0 ? dropout_heads : heads; }
  int64_t groups() const { return query_groups > 0 ? query_groups : heads; }
  // Columns of one qkv row: G * (heads / G + 2) * head_dim (3 * heads * head_dim for MHA).
  int64_t qkv_width() const { return groups() * (heads / groups() + 2) * head_dim; }
};

// Rotary position embeddings (RoPE) as Megatron-Core applies them (rotate-half convention,
// not interleaved; Transformer Engine's fused kernel, Megatron's default): for each q and k
// head vector x of width head_dim, with r = rot_dim (even, <= head_dim), x1 = x[0, r/2),
// x2 = x[r/2, r) and a_i = p_scaled * inv_freq[i] (i < r/2, fp32 product):
//   out1 = x1 cos(a) - x2 sin(a),  out2 = x2 cos(a) + x1 sin(a),  x[r, head_dim) unchanged,
// in fp32, rounded once to the tensor's dtype. p_scaled = p * position_scale (fp32), p the
// token's position: positions[bi, si] when `positions` is defined (int32 [b, s], e.g.
// documents restarting at 0), else si + position_offset (generation: the KV cache's past).
// Megatron-Core's standard RoPE (BSHD) uses 0..s-1 and ignores --reset-position-ids; a caller
// that matches it passes no positions. inv_freq comes from rotary_frequencies.h.
struct RotaryParams {
  int64_t heads = 0;         // query heads (AttentionParams::heads)
  int64_t query_groups = 0;  // as AttentionParams::query_groups (0: heads)
  int64_t head_dim = 0;
  int64_t rot_dim = 0;          // r: even, 0 < r <= head_dim
  Tensor inv_freq;              // fp32 [rot_dim / 2] on this backend's device
  float position_scale = 1.0f;  // 1 / seq_len_interpolation_factor
  Tensor positions;             // int32 [b, s] on this backend's device, or undefined
  int64_t position_offset = 0;
  int64_t groups() const { return query_groups > 0 ? query_groups : heads; }
};

// One FP8 operand's per-tensor scaling (backend/fp8_recipe.h): fp32 [1] tensors on this
// backend's device, usually views into an Fp8ScalingState. A quantization of x
//  - takes a = max |x| (NaN elements skipped) and records amax := max(amax, a) (amax undefined:
//    not recorded);
//  - current (the tensorwise recipe): writes scale := fp8_current_scale(a, fp8_max(format))
//    first; otherwise (delayed) reads scale;
//  - writes scale_inv := 1 / scale (fp32 division) and q = float_to_fp8(x * scale) (the product
//    rounded to fp32, then RNE to the format with saturation: core/fp8.h).
struct Fp8Quantization {
  Fp8Format format = Fp8Format::kE4M3;
  bool current = false;
  Tensor scale;
  Tensor scale_inv;
  Tensor amax;
};

// What Backend::fp8_cast quantizes: v, computed in fp32 from x (and aux) as it is read, so the
// operand never exists in the activation dtype (TE fuses its casts into the producing kernels
// for the same reason: the cast then costs no extra pass over HBM).
//   kIdentity  v = x
//   kGelu      v = gelu(x): linear_fc2's input, from linear_fc1's output (its bias included)
//   kGeluGrad  v = x * gelu'(aux): linear_fc1's output gradient, from d(gelu output) x and the
//              pre-activation aux (same shape and dtype as x)
enum class Fp8Prologue { kIdentity, kGelu, kGeluGrad };
struct Fp8Source {
  Tensor x;
  Fp8Prologue prologue = Fp8Prologue::kIdentity;
  Gelu gelu = Gelu::kTanh;
  Tensor aux;
  Fp8Source() = default;
  Fp8Source(Tensor t) : x(std::move(t)) {}  // NOLINT(google-explicit-constructor): v = x
  Fp8Source(Tensor t, Fp8Prologue p, Gelu g, Tensor a = Tensor())
      : x(std::move(t)), prologue(p), gelu(g), aux(std::move(a)) {}
  bool identity() const { return prologue == Fp8Prologue::kIdentity; }
};

// How an FP8 GEMM sums on Hopper's tensor cores: kSplit promotes the partial sums to fp32
// every few k-steps (full fp32 accumulation); kFast keeps them in the tensor core's narrower
// accumulator (about 14 mantissa bits) for the whole k loop, which is faster. TE uses kFast for
// the forward GEMM and kSplit for dgrad and wgrad, as the FP8 linear does (backend/fp8_linear.h).
// The CPU emulation sums in fp32 either way.
enum class Fp8Accumulation { kSplit, kFast };

// Device work recorded once and queued again as a whole (a CUDA graph): see
// Backend::begin_recording.
class Recording {
 public:
  virtual ~Recording() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  // ---- memory --------------------------------------------------------------------------
  // A new zero-filled tensor on this device, counted under `kind`.
  virtual Tensor empty(Shape shape, DType dtype, MemoryKind kind) = 0;
  virtual void fill(Tensor& t, float value) = 0;
  // t = normals as NormalInit says (float dtypes).
  virtual void init_normal(Tensor& t, const NormalInit& init) = 0;
  // dst = src (same numel; any float dtypes, converted with RNE; or the same integer dtype).
  // Either side may be a host tensor: this is also the host <-> device transfer.
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  // Blocks until all queued work on this backend is done (no-op on the CPU).
  virtual void synchronize() = 0;
  // A host tensor that copy_to_host_async() fills without blocking (page-locked on CUDA; plain
  // host memory on the CPU). Not counted as device memory.
  virtual Tensor host_staging(Shape shape, DType dtype) = 0;
  // Queues dst = src (src on this device, dst a host tensor of the same dtype and numel) and
  // returns at once: dst holds the values after the next synchronize() or blocking copy().
  // src may be overwritten by ops queued after this call (the copy reads it first). With dst
  // from host_staging() the CUDA copy does not stall the host; any other host tensor works too
  // (the copy then blocks). The CPU backend copies at once.
  virtual void copy_to_host_async(const Tensor& src, Tensor& dst) = 0;

  // ---- recorded work (CUDA graphs) --------------------------------------------------------
  // Whether this backend records (the CPU one does not; CUDA unless MEGATRON_CUDA_GRAPHS=0).
  virtual bool can_record() const { return false; }
  // Between begin_recording() and end_recording() the ops are recorded, not run: nothing they
  // compute exists until replay(). They must not wait for the device, copy from or to the
  // host, or allocate tensors. end_recording() returns the recording, or null when one of the
  // ops could not be recorded (or an op threw: call end_recording() anyway, which then ends
  // the recording and clears the failure). replay() queues the recorded work again: the same
  // kernels with the same arguments, reading and writing the same addresses.
  virtual void begin_recording() { throw_error("this backend does not record device work"); }
  virtual std::unique_ptr<Recording> end_recording() { return nullptr; }
  virtual void replay(const Recording&) { throw_error("this backend does not replay device work"); }

  // ---- dense algebra --------------------------------------------------------------------
  // c = alpha * op(a) @ op(b) + beta * c, with op(x) = x or x^T on the 2-D views
  // a: [m, k] (or [k, m] if trans_a), b: [k, n] (or [n, k] if trans_b), c: [m, n].
  // Tensors of higher rank are read as 2-D [numel / last_dim, last_dim].
  virtual void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha = 1.0f,
                      float beta = 0.0f) = 0;
  // y[n, out] = x[n, in] @ w[out, in]^T + bias[out] (bias may be undefined).
  virtual void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y) = 0;
  // From dy[n, out]: dx[n, in] = dy @ w (skipped if dx undefined), dw[out, in] (+=) dy^T @ x,
  // dbias[out] (+=) column sums of dy (skipped if undefined); `write` applies to dw and dbias.
  virtual void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                               Tensor& dbias, GradWrite write = GradWrite::kAccumulate) = 0;

  // A row-parallel linear followed by Megatron's bias-dropout-add without dropout, in one pass
  // (cuBLASLt with C = residual, beta = 1 and the bias epilogue on CUDA): with
  // z = x[n, in] @ w[out, in]^T in fp32, y[n, out] = residual + (z + bias[out]) computed in
  // fp32 and rounded once to y's dtype (bias may be undefined; y may be residual). The unfused
  // pair rounds z to the activation dtype first; in fp32 the two are the same bits on the CPU.
  // Only where nothing sits between the GEMM and the add: no tensor-parallel reduction, no
  // dropout.
  virtual void linear_residual_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                                       Tensor& y) = 0;

  // Megatron's linear_fc1 followed by its bias-GELU, in one pass (cuBLASLt's GELU_AUX_BIAS
  // epilogue on CUDA): with z = x[n, in] @ w[out, in]^T + bias[out] in fp32 (bias may be
  // undefined), pre[n, out] = z rounded to pre's dtype (saved for backward) and
  // y[n, out] = gelu(z) rounded to y's dtype. A backend that cannot fuse a case may run the
  // unfused ops instead (y from the rounded pre: one extra rounding; the tests allow for it).
  virtual void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& pre, Tensor& y,
                                   Gelu kind) = 0;
  // The backward of linear_fc2 with linear_fc1's GELU folded in (cuBLASLt's DGELU epilogue):
  // from dy[n, out] of the linear whose input x[n, in] = gelu(pre[n, in]),
  // dpre[n, in] = (dy @ w)[n, in] * gelu'(pre) (the product kept in fp32, rounded once),
  // dw[out, in] (+=) dy^T @ x, dbias[out] (+=) column sums of dy (skipped if undefined).
  // Unfused, the product is rounded to dpre's dtype before the multiplication.
  virtual void linear_dgelu_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& pre,
                                     Tensor& dpre, Tensor& dw, Tensor& dbias, Gelu kind,
                                     GradWrite write = GradWrite::kAccumulate) = 0;

  // ---- FP8 (backend/fp8_recipe.h, backend/fp8_linear.h) -------------------------------------
  // Quantizes x (any float dtype, read as [rows, cols] = [numel / last, last]) as `s` says into
  // q [rows, cols] and/or qt [cols, rows] (its transpose, the k-major layout of the other GEMM
  // operand order; Transformer Engine's cast_transpose), of the format's dtype (kF8E4M3 /
  // kF8E5M2). Either may be undefined, not both.
  void fp8_quantize(const Tensor& x, Tensor& q, Tensor& qt, const Fp8Quantization& s) {
    Tensor none;
    fp8_cast(Fp8Source(x), q, qt, s, none);
  }
  // fp8_quantize of the source's v (Fp8Source; x's dtype, aux the same), whose max |v| gives
  // the amax and current scale; with dbias defined also dbias[cols] (+=, `write`) = column sums
  // of v before scaling (fp32, rounded once: the bias gradient TE fuses into its dy cast).
  virtual void fp8_cast(const Fp8Source& src, Tensor& q, Tensor& qt, const Fp8Quantization& s, Tensor& dbias,
                        GradWrite write = GradWrite::kAccumulate) = 0;
  // c[m, n] = (a[m, k] @ b[n, k]^T) * (a_scale_inv * b_scale_inv) (+ bias[n]) for FP8 a and b,
  // both k-major (cuBLASLt's FP8 TN layout on Hopper; not both E5M2), each read as [rows, last
  // dim]: the codes' products are exact, summed in fp32 (order unspecified); the sum times the
  // fp32 product of the two scale_inv ([1] fp32 tensors on this device), plus bias, is rounded
  // once to c's dtype (fp32, bf16 or fp16). kAccumulate adds c's old value (no bias) before that
  // rounding: the weight gradient into the main gradient (fp32, or a 16-bit gradient buffer).
  // `acc` as Fp8Accumulation says (kFast: the GPU's sum is less exact, never the CPU's).
  virtual void fp8_gemm(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv,
                        const Tensor& bias, Tensor& c, GradWrite write = GradWrite::kOverwrite,
                        Fp8Accumulation acc = Fp8Accumulation::kSplit) = 0;

  // ---- elementwise ----------------------------------------------------------------------
  // out = a + b (same shapes; out may be a or b).
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  // x *= alpha (in place): in fp32, rounded once to x's dtype (a 16-bit gradient buffer's
  // 1/dp scaling, torch's multiply of a 16-bit tensor).
  virtual void scale(Tensor& x, float alpha) = 0;
  // Megatron's bias-dropout-add: out[n, h] = residual + dropout(x + bias) (bias may be undefined).
  virtual void bias_dropout_add(const Tensor& x, const Tensor& bias, const Tensor& residual, Tensor& out,
                                const DropoutParams& dropout) = 0;
  // dx = dropout'(dy): dy where kept, scaled by 1/(1-p), 0 elsewhere (the mask regenerated).
  virtual void dropout_backward(const Tensor& dy, Tensor& dx, const DropoutParams& dropout) = 0;
  // out = dropout(x).
  virtual void dropout_forward(const Tensor& x, Tensor& out, const DropoutParams& dropout) = 0;
  // dbias[k] (+=) sum over rows of dy[n, k].
  virtual void bias_grad(const Tensor& dy, Tensor& dbias, GradWrite write = GradWrite::kAccumulate) = 0;
  // out[n, f] = gelu(x + bias) (bias may be undefined); tanh approximation or exact erf.
  virtual void bias_gelu_forward(const Tensor& x, const Tensor& bias, Tensor& out, Gelu kind) = 0;
  // dx[n, f] = dy * gelu'(x + bias).
  virtual void bias_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx, Gelu kind) = 0;

  // out[n, f] = silu(gate) * up with x[n, 2f] = [gate | up] per row (Megatron's --swiglu: the
  // two halves of linear_fc1's output, its bias included), in fp32, rounded once to out's dtype.
  virtual void swiglu_forward(const Tensor& x, Tensor& out) = 0;
  // dx[n, 2f] = [dy * up * silu'(gate) | dy * silu(gate)] from dy[n, f] and the saved x, in fp32,
  // each half rounded once to dx's dtype; silu'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g))).
  virtual void swiglu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) = 0;

  // ---- normalisation --------------------------------------------------------------------
  // out[n, h] = (x - mean) * rstd * gamma + beta; mean[n], rstd[n] (fp32) saved for backward.
  // RMSNorm (Megatron's --normalization RMSNorm) is the same ops with `mean` undefined in the
  // forward and every backward: out = x * rstd * gamma with rstd = 1 / sqrt(mean(x^2) + eps),
  // beta and dbeta undefined; the backward's dx = rstd * (gamma * dy - xhat * mean(gamma * dy *
  // xhat)) with xhat = x * rstd (no centring term).
  virtual void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& out,
                                 Tensor& mean, Tensor& rstd) = 0;
  // dx[n, h], dgamma[h] (+=), dbeta[h] (+=). dx_write kOverwrite: dx = the LayerNorm input
  // gradient (dx may alias dy). kAccumulate: dx holds the residual path's gradient on entry and
  // gets dx + LayerNorm gradient with the bits of the unfused pair (the LayerNorm gradient
  // rounded to dx's dtype, then the sum rounded, as layernorm_backward into a temporary followed
  // by add); dx must not overlap dy. It saves the residual add's separate pass over three tensors.
  virtual void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                  const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                                  GradWrite write = GradWrite::kAccumulate,
                                  GradWrite dx_write = GradWrite::kOverwrite) = 0;
  // layernorm_backward (the same dx, dgamma and dbeta), and dx_colsum[h] (+=, by
  // `colsum_write`) the column sums of dx as it leaves it (the sum with the residual gradient
  // under dx_write = kAccumulate, in dx's dtype): what bias_grad(dx) gives, in its own order.
  // That is the bias gradient of a linear whose output went straight into the residual stream
  // this LayerNorm read (no dropout, no tensor-parallel reduction in between); the CUDA
  // backend sums it in the same pass, saving the bias gradient's own read of dx.
  virtual void layernorm_backward_colsum(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                         const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                                         Tensor& dx_colsum, GradWrite write, GradWrite dx_write,
                                         GradWrite colsum_write) = 0;
  // layernorm_backward (the same dx, dgamma and dbeta), then dz = dropout_backward(dx as it
  // leaves it, dropout) and dz_colsum[h] (+=, by `colsum_write`) the column sums of dz: what
  // dropout_backward followed by bias_grad(dz) give, in its own order. dx is the gradient of a
  // residual stream that a linear's output entered through dropout (Megatron's
  // bias-dropout-add): dz is that linear's output gradient, dz_colsum its bias gradient. The
  // CUDA backend does it in the LayerNorm backward's pass. dz: dx's shape and dtype, its own
  // memory.
  virtual void layernorm_backward_dropout_colsum(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                                 const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dgamma,
                                                 Tensor& dbeta, Tensor& dz, Tensor& dz_colsum,
                                                 const DropoutParams& dropout, GradWrite write, GradWrite dx_write,
                                                 GradWrite colsum_write) = 0;

  // ---- embeddings -----------------------------------------------------------------------
  // out[s, b, h] = wte[tokens[b, s]] + wpe[positions[b, s]] (int32 ids). `positions`
  // undefined: position s for every batch row (0..s-1); defined (Megatron's
  // --reset-position-ids): ids in [0, P) of wpe[P, h], checked on the host backend only. A
  // token outside [0, V) takes a zero word row and wpe may be undefined (no position term):
  // the pieces of Megatron's VocabParallelEmbedding, where wte holds one rank's vocabulary
  // slice, the caller shifts the ids into it and sums the ranks' outputs.
  virtual void embedding_forward(const Tensor& tokens, const Tensor& positions, const Tensor& wte, const Tensor& wpe,
                                 Tensor& out) = 0;
  // dwte[V, h] (+=) and dwpe[P, h] (+=) from dout[s, b, h], positions as in the forward;
  // tokens outside [0, V) add nothing to dwte. dwpe undefined: no position table (rotary or no
  // position embeddings).
  virtual void embedding_backward(const Tensor& tokens, const Tensor& positions, const Tensor& dout, Tensor& dwte,
                                  Tensor& dwpe) = 0;

  // ---- attention ------------------------------------------------------------------------
  // out[s, b, heads*d] from qkv (see AttentionParams); lse[b, heads, s] (fp32) receives the
  // log-sum-exp of each softmax row (of the scaled, masked scores, before dropout) so that
  // backward recomputes the probabilities instead of storing [s, s] of them.
  virtual void attention_forward(const Tensor& qkv, Tensor& out, Tensor& lse, const AttentionParams& params) = 0;
  // dqkv (overwritten; qkv's shape and layout) from dout, with the forward's qkv, out and lse.
  // A group's key and value gradients are the sums over its heads / G query heads.
  virtual void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                  Tensor& dqkv, const AttentionParams& params) = 0;

  // Attention for generation with a KV cache. The keys and values of qkv[t, b, width] (new
  // positions past .. past+t-1, layout as above, G groups) are written into k_cache and v_cache
  // [b, G, max_seq, d] (fp32), then out[t, b, heads*d] = causal softmax attention of the new
  // queries over cached positions [0, past + t), each query head over its group's cache. No
  // dropout (inference). past + t <= max_seq.
  virtual void attention_kv_cache(const Tensor& qkv, Tensor& k_cache, Tensor& v_cache, int64_t past, Tensor& out,
                                  const AttentionParams& params) = 0;

  // ---- rotary position embeddings -----------------------------------------------------------
  // In place on the q and k columns of qkv [s, b, width] (the attention layout above with
  // params.query_groups; v untouched), as RotaryParams says. Applied before attention_forward
  // (and before attention_kv_cache, with position_offset = past).
  virtual void rotary_forward(Tensor& qkv, const RotaryParams& params) = 0;
  // Its backward, in place on dqkv (qkv's layout): the inverse rotation of the q and k columns,
  //   dx1 = dy1 cos(a) + dy2 sin(a),  dx2 = dy2 cos(a) - dy1 sin(a),
  // the rest (v, and dims past rot_dim) untouched. Run after attention_backward.
  virtual void rotary_backward(Tensor& dqkv, const RotaryParams& params) = 0;

  // ---- loss -----------------------------------------------------------------------------
  // Per-row cross-entropy of logits[n, V] against labels[n] (int32): losses[n] (fp32) =
  // lse - logits[label]; lse[n] (fp32) saved. A label outside [0, V) gives a NaN loss (its
  // lse is still right: tensor_parallel/vocab_parallel.h combines the ranks' lse).
  virtual void cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& losses, Tensor& lse) = 0;
  // dlogits[n, V] = (softmax(logits) - onehot(label)) * dlosses[n] (dlosses fp32; dlogits may
  // alias logits to save the [n, V] buffer). A label outside [0, V) has no one-hot term (the
  // vocab-parallel case: another rank holds that id); lse may be the whole vocabulary's.
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& lse,
                                      const Tensor& dlosses, Tensor& dlogits) = 0;
  // Both at once, for a loss head whose loss weights dlosses[n] are known before the loss
  // (training, one vocabulary shard): losses and lse as cross_entropy_forward, dlogits as
  // cross_entropy_backward with that lse, the same values. dlogits may alias logits (after the
  // call the buffer holds the gradient). One read of the logits instead of two.
  virtual void cross_entropy_fused(const Tensor& logits, const Tensor& labels, const Tensor& dlosses, Tensor& losses,
                                   Tensor& lse, Tensor& dlogits) = 0;
  // The per-row steps of the vocab-parallel cross-entropy between its all-reduces
  // (tensor_parallel/vocab_parallel.h), in place on fp32 [n] tensors, each value computed in
  // double from the fp32 inputs and rounded once. Given max_lse[n] (the all-reduced MAX of the
  // ranks' slice lse), this rank's slice lse and losses (cross_entropy_forward on its logits
  // columns) and its local labels (-1: another rank's id):
  //   vocab_parallel_ce_terms:   losses[i] := labels[i] >= 0 ? lse[i] - losses[i] : 0  (the target logit)
  //                              lse[i]    := exp(lse[i] - max_lse[i])  (1 where both are -inf)
  // then, after both are all-reduced SUM over the ranks:
  //   vocab_parallel_ce_finish:  lse[i]    := max_lse[i] + log(lse[i]),  losses[i] := lse[i] - losses[i]
  virtual void vocab_parallel_ce_terms(const Tensor& max_lse, const Tensor& labels, Tensor& lse, Tensor& losses) = 0;
  virtual void vocab_parallel_ce_finish(const Tensor& max_lse, Tensor& lse, Tensor& losses) = 0;

  // ---- reductions (for the optimizer step) ----------------------------------------------
  // Sum of squares of all elements, accumulated in double.
  virtual double sum_squares(const Tensor& x) = 0;
  // sum_squares of each tensor (the same values), waiting for the device once for all of them:
  // the gradient norm over a rank's many counted ranges (a TP rank > 0 skips the replicated
  // parameters, ~2 ranges per layer) would otherwise wait once per range. Default: one by one.
  virtual std::vector<double> sum_squares_each(const std::vector<Tensor>& xs) {
    std::vector<double> out;
    out.reserve(xs.size());
    for (const Tensor& x : xs) out.push_back(sum_squares(x));
    return out;
  }
  // True if every element is finite.
  virtual bool all_finite(const Tensor& x) = 0;
  // Number of elements equal to zero (--log-num-zeros-in-grad).
  virtual int64_t count_zeros(const Tensor& x) = 0;

  // ---- optimizer ------------------------------------------------------------------------
  // AdamW on fp32 param, exp_avg, exp_avg_sq and a grad of any float dtype, of equal numel (in
  // place).
  virtual void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                            const AdamWStep& step) = 0;
  // AdamW over many parameters of flat fp32 buffers (grad: any float dtype) in one pass (apex's
  // multi-tensor form).
  // segments: int64 [S, 3] on this device, rows (offset, numel, decay) sorted by offset and
  // disjoint within [0, P): elements of a segment get adamw_update with step.weight_decay if
  // decay != 0, else with 0. model_copy (undefined, or [P] of any float dtype) then receives
  // param rounded to its dtype at the same elements (the bf16/fp16 model weights). Elements
  // outside every segment are untouched.
  virtual void adamw_update_segments(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                                     const Tensor& segments, const AdamWStep& step, Tensor& model_copy) = 0;
};

// The CPU reference backend (OpenBLAS GEMM, OpenMP loops).
std::unique_ptr<Backend> make_cpu_backend();
// The CUDA backend on GPU `device` (backend/cuda/). Throws megatron::Error when this build has
// no CUDA or the device cannot be used.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);

}  // namespace megatron::backend
