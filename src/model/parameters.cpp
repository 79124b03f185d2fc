#include "model/parameters.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"

namespace megatron::model {

void ParameterSet::set_tensor_parallel(int64_t rank, int64_t size) {
  MT_CHECK(params_.empty() && size >= 1 && rank >= 0 && rank < size) << "set_tensor_parallel(" << rank << ", " << size << ")";
  tp_rank_ = rank;
  tp_size_ = size;
}

int64_t ParameterSet::add(std::string name, Shape shape, Init init, int partition_dim) {
  MT_CHECK(!values_.defined()) << "add() after allocate()";
  Parameter p;
  p.no_weight_decay = shape.size() == 1 || (name.size() >= 5 && name.ends_with(".bias"));
  p.name = std::move(name);
  p.partition = tensor_parallel::Partition{partition_dim, tp_rank_, tp_size_};
  p.global_shape = std::move(shape);
  p.shape = tensor_parallel::local_shape(p.global_shape, p.partition);
  p.init = init;
  p.init_stream = next_init_stream_++;
  p.offset = total_numel_;
  total_numel_ += p.numel();
  params_.push_back(std::move(p));
  return static_cast<int64_t>(params_.size()) - 1;
}

void ParameterSet::allocate(backend::Backend& backend, DType dtype) {
  values_ = backend.empty({total_numel_}, dtype, MemoryKind::kParams);
  grads_ = backend.empty({total_numel_}, DType::kF32, MemoryKind::kGrads);
  for (Parameter& p : params_) {
    p.value = values_.flat_view(p.offset, p.shape);
    p.grad = grads_.flat_view(p.offset, p.shape);
  }
}

void ParameterSet::forget_grads() {
  for (Parameter& p : params_) p.grad_stale = true;
}

backend::GradWrite ParameterSet::claim_grad(int64_t i) {
  Parameter& p = params_[static_cast<size_t>(i)];
  const bool stale = p.grad_stale;
  p.grad_stale = false;
  return stale ? backend::GradWrite::kOverwrite : backend::GradWrite::kAccumulate;
}

int64_t ParameterSet::first_stale_grad() const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].grad_stale) return static_cast<int64_t>(i);
  }
  return -1;
}

std::vector<bool> ParameterSet::stale_grads() const {
  std::vector<bool> stale(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) stale[i] = params_[i].grad_stale;
  return stale;
}

void ParameterSet::set_stale_grads(const std::vector<bool>& stale) {
  MT_CHECK(stale.size() == params_.size()) << stale.size() << " stale flags for " << params_.size() << " parameters";
  for (size_t i = 0; i < params_.size(); ++i) params_[i].grad_stale = stale[i];
}

const Parameter* ParameterSet::find(const std::string& name) const {
  for (const Parameter& p : params_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

float philox_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  // Two uniforms per normal, words 2*index and 2*index + 1 of the stream (philox_uniform's
  // numbering): u1 in (0, 1] (so log is finite), u2 in [0, 1). Both lie in one Philox block
  // (block index/2, words 2*(index&1) and the next), evaluated once.
  const uint64_t block = index >> 1;
  const PhiloxBlock out = philox4x32_10(
      {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), static_cast<uint32_t>(stream),
       static_cast<uint32_t>(stream >> 32)},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  const int w = 2 * static_cast<int>(index & 1);
  const float u1 = 1.0f - static_cast<float>(out[static_cast<size_t>(w)] >> 8) * (1.0f / 16777216.0f);
  const float u2 = static_cast<float>(out[static_cast<size_t>(w) + 1] >> 8) * (1.0f / 16777216.0f);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.283185307179586f * u2);
}

// Values are computed on the host in fp32, rounded to the model dtype there (round to nearest
// even, as the device's conversion) and copied to the device in chunks of `chunk` (64M)
// elements (a bounded host buffer: every data-parallel rank of a node initialises a full
// replica at once): a 1.3B model's start-up was dominated by per-parameter staging buffers
// and conversions.
void ParameterSet::initialize(backend::Backend& backend, uint64_t seed, float std, int64_t num_layers,
                              int64_t chunk) {
  MT_CHECK(values_.defined()) << "initialize() before allocate()";
  const float scaled_std = std / std::sqrt(2.0f * static_cast<float>(num_layers));
  const DType dt = values_.dtype();
  MT_CHECK(dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16) << "parameters of dtype " << dtype_name(dt);
  MT_CHECK(chunk > 0) << "initialize: chunk " << chunk;
  const int64_t kChunk = chunk;
  Tensor host = Tensor::cpu({std::min(total_numel_, kChunk)}, dt, MemoryKind::kOther);
  char* const base = static_cast<char*>(host.data());
  for (int64_t c0 = 0; c0 < total_numel_; c0 += kChunk) {
    const int64_t c1 = std::min(total_numel_, c0 + kChunk);
    for (const Parameter& p : params_) {
      // This parameter's elements [k0, k1) that fall in the chunk [c0, c1) of the flat buffer.
      const int64_t k0 = std::max<int64_t>(0, c0 - p.offset), k1 = std::min(p.numel(), c1 - p.offset);
      if (k0 >= k1) continue;
      const float s = p.init == Init::kNormal ? std : p.init == Init::kScaledNormal ? scaled_std : 0.0f;
#pragma omp parallel for schedule(static) if (k1 - k0 >= 4096)
      for (int64_t k = k0; k < k1; ++k) {
        float v = p.init == Init::kOnes ? 1.0f : 0.0f;
        if (p.init == Init::kNormal || p.init == Init::kScaledNormal) {
          const int64_t g = tensor_parallel::global_index(p.global_shape, p.partition, k);
          v = s * philox_normal(seed, static_cast<uint64_t>(p.init_stream), static_cast<uint64_t>(g));
        }
        const int64_t i = p.offset + k - c0;
        if (dt == DType::kF32) {
          reinterpret_cast<float*>(base)[i] = v;
        } else {
          reinterpret_cast<uint16_t*>(base)[i] = dt == DType::kBF16 ? float_to_bf16(v) : float_to_fp16(v);
        }
      }
    }
    Tensor dst = values_.flat_view(c0, {c1 - c0});
    backend.copy(host.flat_view(0, {c1 - c0}), dst);
  }
}

}  // namespace megatron::model
