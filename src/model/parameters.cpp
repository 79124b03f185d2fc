#include "model/parameters.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"

namespace megatron::model {

void ParameterSet::set_tensor_parallel(int64_t rank, int64_t size) {
  MT_CHECK(params_.empty() && size >= 1 && rank >= 0 && rank < size)
      << "set_tensor_parallel(" << rank << ", " << size << ")";
  tp_rank_ = rank;
  tp_size_ = size;
}

void ParameterSet::apply_weight_decay_to_qk_layernorm() {
  for (Parameter& p : params_) {
    if (p.name.find("q_layernorm.") != std::string::npos || p.name.find("k_layernorm.") != std::string::npos) {
      p.no_weight_decay = false;
    }
  }
}

int64_t ParameterSet::add(std::string name, Shape shape, Init init, int partition_dim, int64_t chunks) {
  MT_CHECK(!values_.defined()) << "add() after allocate()";
  Parameter p;
  p.no_weight_decay = shape.size() == 1 || (name.size() >= 5 && name.ends_with(".bias"));
  p.name = std::move(name);
  p.partition = tensor_parallel::Partition{partition_dim, tp_rank_, tp_size_, chunks};
  p.global_shape = std::move(shape);
  p.shape = tensor_parallel::local_shape(p.global_shape, p.partition);
  p.init = init;
  p.init_stream = next_init_stream_++;
  p.offset = total_numel_;
  total_numel_ += p.numel();
  params_.push_back(std::move(p));
  return static_cast<int64_t>(params_.size()) - 1;
}

void ParameterSet::allocate(backend::Backend& backend, DType dtype, DType grad_dtype) {
  MT_CHECK(grad_dtype == DType::kF32 || grad_dtype == DType::kBF16 || grad_dtype == DType::kF16)
      << "gradient buffer in " << dtype_name(grad_dtype);
  values_ = backend.empty({total_numel_}, dtype, MemoryKind::kParams);
  grads_ = backend.empty({total_numel_}, grad_dtype, MemoryKind::kGrads);
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

int64_t ParameterSet::index_of(const std::string& name) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].name == name) return static_cast<int64_t>(i);
  }
  return -1;
}

int64_t ParameterSet::require(const std::string& name) const {
  const int64_t i = index_of(name);
  MT_CHECK(i >= 0) << "no parameter " << name;
  return i;
}

// Each parameter's values are computed on its backend (a GPU writes its shard directly: no
// host staging, ~2.7e9 Box-Mullers took ~10 s of a 2.7B model's start-up on 16 host cores).
void ParameterSet::initialize(backend::Backend& backend, uint64_t seed, float std, int64_t num_layers) {
  MT_CHECK(values_.defined()) << "initialize() before allocate()";
  const float scaled_std = std / std::sqrt(2.0f * static_cast<float>(num_layers));
  const DType dt = values_.dtype();
  MT_CHECK(dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16) << "parameters of dtype " << dtype_name(dt);
  for (Parameter& p : params_) {
    if (p.numel() == 0) continue;
    switch (p.init) {
      case Init::kZeros:
        backend.fill(p.value, 0.0f);
        break;
      case Init::kOnes:
        backend.fill(p.value, 1.0f);
        break;
      case Init::kNormal:
      case Init::kScaledNormal: {
        backend::NormalInit init = tensor_parallel::shard_index_map(p.global_shape, p.partition);
        init.seed = seed;
        init.stream = static_cast<uint64_t>(p.init_stream);
        init.scale = p.init == Init::kNormal ? std : scaled_std;
        backend.init_normal(p.value, init);
        break;
      }
    }
  }
}

}  // namespace megatron::model
