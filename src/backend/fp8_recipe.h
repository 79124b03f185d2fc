// FP8 per-tensor scaling as Megatron-Core configures Transformer Engine (--fp8-format,
// --fp8-recipe tensorwise|delayed, --fp8-amax-history-len, --fp8-amax-compute-algo,
// --fp8-margin): which format each GEMM operand takes, how its scale follows its amax, and the
// state that carries scales and amax histories between steps.
//
// A quantized operand is q = fp8(x * scale) (core/fp8.h: RNE, saturating); the GEMM multiplies
// codes and dequantizes its fp32 sum by scale_inv = 1 / scale of each operand.
//
// Recipes (TE's transformer_engine/common/recipe/):
//  - tensorwise (Float8CurrentScaling): each quantization first takes amax = max |x| of the
//    tensor itself, then scale = fp8_current_scale(amax) (compute_scale_from_amax with TE's
//    defaults: epsilon 0, no power-of-two rounding, no margin).
//  - delayed (DelayedScaling): the scale comes from earlier amaxes. Each operand has an amax
//    history of L entries; the quantizations since the last update record max |x| into entry 0
//    (a running max), and the update (fp8_delayed_update) rolls the history and sets
//    scale = (fp8_max * 2^-margin) / amax of the history (its max, or the most recent entry).
#pragma once

#include <cstdint>
#include <string_view>

#include "backend/ops.h"
#include "core/fp8.h"

namespace megatron::backend {

// --fp8-format: e4m3 for every operand, or hybrid (e4m3 for inputs and weights, e5m2 for the
// output gradients, whose range is wider).
enum class Fp8Mix : uint8_t { kE4M3, kHybrid };
// --fp8-recipe (the two per-tensor ones; mxfp8 and blockwise are other quantizations).
enum class Fp8Recipe : uint8_t { kTensorwise, kDelayed };
// --fp8-amax-compute-algo.
enum class Fp8AmaxAlgo : uint8_t { kMostRecent, kMax };

struct Fp8Config {
  Fp8Mix format = Fp8Mix::kHybrid;
  Fp8Recipe recipe = Fp8Recipe::kDelayed;  // Megatron's default --fp8-recipe
  int64_t amax_history_len = 1;            // --fp8-amax-history-len (delayed)
  Fp8AmaxAlgo amax_compute_algo = Fp8AmaxAlgo::kMostRecent;
  int64_t margin = 0;  // --fp8-margin (delayed)
};

// Megatron's spellings ("e4m3", "hybrid", "tensorwise", "delayed", "max", "most_recent").
std::string_view fp8_mix_name(Fp8Mix m);
std::string_view fp8_recipe_name(Fp8Recipe r);
std::string_view fp8_amax_algo_name(Fp8AmaxAlgo a);

// The operands of a linear layer's three GEMMs (forward y = x W^T, dgrad dx = dy W, wgrad
// dW = dy^T x): TE's fprop input, weight and bprop grad-output tensors.
enum class Fp8Role : uint8_t { kInput = 0, kWeight = 1, kGradOutput = 2 };
constexpr int64_t kFp8Roles = 3;
Fp8Format fp8_format_of(Fp8Mix mix, Fp8Role role);

// (The tensorwise scale from a tensor's amax is core/fp8.h's fp8_current_scale.)

// One operand's delayed-scaling update (TE's amax_and_scale_update_after_reduction, per
// tensor), in place on its history[0, len) and scale. history[0] is the amax recorded since
// the last update (after any reduction over ranks). If it is 0 (no quantization, or an all-zero
// tensor) nothing changes. Otherwise, with a = history[0]:
//   amax  = max(history[0, len)) (kMax) or a (kMostRecent);
//   history := [0, history[2], ..., history[len-1], a]   (TE's roll by -1, entry 0 cleared;
//                                                         len 1: [0])
//   scale = (fp8_max * 2^-margin) / amax if amax is finite and > 0 (FLT_MAX if that
//           overflows), else unchanged.
void fp8_delayed_update(float* history, int64_t len, float& scale, Fp8AmaxAlgo algo, float fp8_max, int64_t margin);

// The scaling state of `operands` quantized operands (slot i = a linear layer's operand,
// e.g. 3 * layer + role), on one backend's device:
//   amax_history fp32 [L, operands]: row 0 is the amax being recorded (the quantize ops'
//                running max), the contiguous buffer to all-reduce (MAX) over the amax
//                reduction group before update();
//   scale fp32 [operands], scale_inv fp32 [operands, kScaleInvStride] (slot i's value in
//                column 0: each in its own 16-byte slot, the alignment cuBLASLt's FP8 GEMMs
//                read scale pointers at): the scales the next quantizations use (delayed) or
//                the last ones used (tensorwise: each quantization writes its own).
// L = --fp8-amax-history-len for the delayed recipe, 1 for tensorwise. Initial state: scales 1,
// history 0 (TE's). The three tensors are what a checkpoint must hold to resume exactly.
class Fp8ScalingState {
 public:
  static constexpr int64_t kScaleInvStride = 4;
  Fp8ScalingState(Backend& backend, const Fp8Config& config, int64_t operands, MemoryKind kind = MemoryKind::kOther);

  const Fp8Config& config() const { return config_; }
  int64_t operands() const { return operands_; }
  int64_t history_len() const { return history_len_; }
  // Slot of `role` of linear layer `layer` (3 slots per layer).
  static int64_t slot(int64_t layer, Fp8Role role) { return layer * kFp8Roles + static_cast<int64_t>(role); }
  Fp8Format format(int64_t slot) const;

  // What a quantize op of slot `slot` takes (views into this state's tensors): tensorwise
  // computes its own scale (current) and writes it, delayed reads it; both record amax.
  Fp8Quantization quantization(int64_t slot) const;

  // Row 0 of the history [operands]: all-reduce it with MAX over the amax reduction group
  // (Megatron's: the ranks of a pipeline stage, TP x DP x CP) before update(), so that every
  // rank computes the same scales.
  Tensor amax_to_reduce() const { return amax_history_.flat_view(0, {operands_}); }

  // Delayed: fp8_delayed_update for every slot, scale_inv = 1 / scale. Tensorwise: clears the
  // recorded amax (the scales are per quantization). Runs on the host through copies (the
  // backend is synchronised): a handful of floats per layer.
  void update();

  Tensor& amax_history() { return amax_history_; }
  Tensor& scale() { return scale_; }
  Tensor& scale_inv() { return scale_inv_; }

 private:
  Backend* backend_;
  Fp8Config config_;
  int64_t operands_, history_len_;
  Tensor amax_history_, scale_, scale_inv_;
};

}  // namespace megatron::backend
