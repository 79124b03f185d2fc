#include "backend/fp8_recipe.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace megatron::backend {

std::string_view fp8_mix_name(Fp8Mix m) { return m == Fp8Mix::kE4M3 ? "e4m3" : "hybrid"; }
std::string_view fp8_recipe_name(Fp8Recipe r) { return r == Fp8Recipe::kTensorwise ? "tensorwise" : "delayed"; }
std::string_view fp8_amax_algo_name(Fp8AmaxAlgo a) { return a == Fp8AmaxAlgo::kMax ? "max" : "most_recent"; }

Fp8Format fp8_format_of(Fp8Mix mix, Fp8Role role) {
  return mix == Fp8Mix::kHybrid && role == Fp8Role::kGradOutput ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
}

void fp8_delayed_update(float* history, int64_t len, float& scale, Fp8AmaxAlgo algo, float fp8_max, int64_t margin) {
  MT_CHECK(len >= 1) << "amax history length " << len;
  const float last = history[0];
  if (last == 0.0f) return;
  float amax = 0.0f;
  for (int64_t i = 0; i < len; ++i) amax = std::fmax(amax, history[i]);  // fmaxf: a NaN entry is skipped
  if (algo == Fp8AmaxAlgo::kMostRecent) amax = last;
  for (int64_t i = 1; i + 1 < len; ++i) history[i] = history[i + 1];
  if (len > 1) history[len - 1] = last;
  history[0] = 0.0f;
  const float scaled_max = fp8_max * std::pow(2.0f, -static_cast<float>(margin));
  if (std::isfinite(amax) && amax > 0.0f) {
    scale = scaled_max / amax;
    if (std::isinf(scale)) scale = std::numeric_limits<float>::max();
  }
}

Fp8ScalingState::Fp8ScalingState(Backend& backend, const Fp8Config& config, int64_t operands, MemoryKind kind)
    : backend_(&backend),
      config_(config),
      operands_(operands),
      history_len_(config.recipe == Fp8Recipe::kDelayed ? config.amax_history_len : 1) {
  MT_CHECK(operands > 0 && history_len_ >= 1)
      << "Fp8ScalingState of " << operands << " operands, history " << history_len_;
  amax_history_ = backend.empty({history_len_, operands}, DType::kF32, kind);
  scale_ = backend.empty({operands}, DType::kF32, kind);
  scale_inv_ = backend.empty({operands, kScaleInvStride}, DType::kF32, kind);
  backend.fill(scale_, 1.0f);
  backend.fill(scale_inv_, 1.0f);
}

Fp8Format Fp8ScalingState::format(int64_t slot) const {
  MT_CHECK(slot >= 0 && slot < operands_) << "FP8 slot " << slot << " of " << operands_;
  return fp8_format_of(config_.format, static_cast<Fp8Role>(slot % kFp8Roles));
}

Fp8Quantization Fp8ScalingState::quantization(int64_t slot) const {
  Fp8Quantization q;
  q.format = format(slot);
  q.current = config_.recipe == Fp8Recipe::kTensorwise;
  q.scale = scale_.flat_view(slot, {1});
  q.scale_inv = scale_inv_.flat_view(slot * kScaleInvStride, {1});
  q.amax = amax_history_.flat_view(slot, {1});
  return q;
}

void Fp8ScalingState::update() {
  Backend& be = *backend_;
  if (config_.recipe == Fp8Recipe::kTensorwise) {
    Tensor row = amax_to_reduce();
    be.fill(row, 0.0f);
    return;
  }
  Tensor history = Tensor::cpu({history_len_, operands_});
  Tensor scale = Tensor::cpu({operands_});
  be.copy(amax_history_, history);
  be.copy(scale_, scale);
  float* h = history.data_as<float>();
  float* s = scale.data_as<float>();
  Tensor scale_inv = Tensor::cpu({operands_, kScaleInvStride});
  float* si = scale_inv.data_as<float>();
  std::vector<float> column(static_cast<size_t>(history_len_));
  for (int64_t j = 0; j < operands_; ++j) {
    for (int64_t i = 0; i < history_len_; ++i) column[static_cast<size_t>(i)] = h[i * operands_ + j];
    fp8_delayed_update(column.data(), history_len_, s[j], config_.amax_compute_algo, fp8_max(format(j)),
                       config_.margin);
    for (int64_t i = 0; i < history_len_; ++i) h[i * operands_ + j] = column[static_cast<size_t>(i)];
    si[j * kScaleInvStride] = 1.0f / s[j];
  }
  be.copy(history, amax_history_);
  be.copy(scale, scale_);
  be.copy(scale_inv, scale_inv_);
}

}  // namespace megatron::backend
