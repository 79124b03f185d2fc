// The model's parameters: named tensors carved out of one flat buffer per role, so that the
// optimizer, gradient clipping, checkpoints and (later) bucketed all-reduce see contiguous
// memory, and so that every byte is planned (model/memory_plan.h).
//
//   values:  one buffer in the model dtype (fp32, bf16 or fp16), MemoryKind::kParams
//   grads:   one buffer (Megatron's main_grad), MemoryKind::kGrads, same offsets: fp32, or the
//            16-bit dtype of Megatron's DDP buffer without --accumulate-allreduce-grads-in-fp32
//            (parallel/grad_buffer.h, "Gradient dtype")
//
// Names follow Megatron-core's GPTModel state dict ("decoder.layers.0.mlp.linear_fc1.weight"),
// so checkpoints and conversions can map them one to one.
//
// Tensor parallelism: a parameter is declared with its global shape and a partition
// (tensor_parallel/partition.h); this rank allocates only its shard (`shape`), and element k
// of the shard is initialised with the value of global element global_index(k), so every TP
// size starts from the single-process weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/tensor.h"
#include "tensor_parallel/partition.h"

namespace megatron::model {

enum class Init {
  kNormal,        // N(0, std): embeddings, QKV, FC1 (init_method)
  kScaledNormal,  // N(0, std / sqrt(2 * num_layers)): attention proj and FC2 (output_layer_init_method)
  kZeros,         // biases, LayerNorm beta
  kOnes,          // LayerNorm gamma
};

struct Parameter {
  std::string name;
  Shape shape;         // this rank's shard
  Shape global_shape;  // the whole tensor (== shape without tensor parallelism)
  tensor_parallel::Partition partition;
  // The gradient is a partial sum over the TP ranks, all-reduced over TP before the DP
  // reduction (GPTModel::reduce_layernorm_grads): Megatron's sequence_parallel attribute (under
  // --sequence-parallel each TP rank sees only its sequence rows: the norms), and with TP the
  // query/key norms of --qk-layernorm (each TP rank sees only its heads).
  bool sum_grad_over_tp = false;
  Init init = Init::kZeros;
  // Biases and 1-D parameters (docs/megatron-formats.md, "Weight-decay exclusion").
  bool no_weight_decay = false;
  // Megatron's `shared` attribute: the last pipeline stage's copy of the tied word embedding.
  // Its gradient is summed with the first stage's (embedding group); it is left out of the
  // norms (the first stage's copy counts) and of checkpoints (the first stage saves it).
  bool pipeline_shared = false;
  // Megatron's is_embedding_or_output_parameter: the word embedding (first stage) and the
  // output layer's weight (last stage: the untied one, or the tied embedding's copy there),
  // the parameters --decoupled-lr gives their own learning rate (not the position embedding).
  bool embedding_or_output = false;
  // The counter-based init stream (initialize()): the parameter's index in the single-process
  // model, so that every pipeline stage starts from the single-process weights.
  int64_t init_stream = 0;
  // The gradient does not hold this step's value yet (ParameterSet::forget_grads).
  bool grad_stale = false;
  int64_t offset = 0;  // into the flat buffers, in elements
  Tensor value;        // view of the values buffer
  Tensor grad;         // view of the grads buffer (its dtype: fp32 or 16-bit)
  int64_t numel() const { return shape_numel(shape); }
  // Replicated over TP and not on TP rank 0: left out of the grad norm (Megatron's
  // param_is_not_tensor_parallel_duplicate), so each value counts once.
  bool tensor_parallel_duplicate() const { return !partition.split() && partition.rank != 0; }
  // Counts in the grad norm, --log-num-zeros-in-grad and the parameter norm (each value once
  // over the model-parallel group).
  bool counted_in_norms() const { return !tensor_parallel_duplicate() && !pipeline_shared; }
};

class ParameterSet {
 public:
  // This rank's place in the tensor-parallel group (before add(); default 0 of 1).
  void set_tensor_parallel(int64_t rank, int64_t size);
  // Declares a parameter of global shape `shape` (before allocate()), split along
  // `partition_dim` (-1: replicated) over the tensor-parallel group, row blocks `chunks`
  // (tensor_parallel/partition.h); returns its index.
  // Its init stream is the next one (0, 1, ... unless set_next_init_stream moved it).
  int64_t add(std::string name, Shape shape, Init init, int partition_dim = -1, int64_t chunks = 1);
  // The init stream of the next add() (a pipeline stage skips the other stages' parameters).
  void set_next_init_stream(int64_t stream) { next_init_stream_ = stream; }
  // Allocates the flat buffers on `backend` (values in `dtype`, gradients in `grad_dtype`: fp32,
  // bf16 or fp16) and points every Parameter at its views.
  void allocate(backend::Backend& backend, DType dtype, DType grad_dtype = DType::kF32);
  // Fills the values per their Init from a counter-based normal stream: global element k of
  // parameter p is a pure function of (seed, p.init_stream, k), independent of the backend and of how
  // the tensors are sharded (a shard takes its elements' global indices). std is the init_method_std; num_layers scales
  // kScaledNormal. Computed where the values live (Backend::init_normal: on the GPU, the CPU's bits).
  void initialize(backend::Backend& backend, uint64_t seed, float std, int64_t num_layers);
  // --apply-wd-to-qk-layernorm: the parameters of every q_layernorm and k_layernorm (weight and
  // bias) get weight decay, all other 1-D parameters and biases stay excluded (Megatron-Core's
  // get_standard_config_overrides). Before the optimizer is built.
  void apply_weight_decay_to_qk_layernorm();

  std::vector<Parameter>& params() { return params_; }
  const std::vector<Parameter>& params() const { return params_; }
  Parameter& operator[](int64_t i) { return params_[static_cast<size_t>(i)]; }
  const Parameter& operator[](int64_t i) const { return params_[static_cast<size_t>(i)]; }
  int64_t total_numel() const { return total_numel_; }
  // The parameter called `name`, or nullptr.
  const Parameter* find(const std::string& name) const;
  // The index of the parameter called `name`: -1 when there is none (index_of), an error naming
  // it (require).
  int64_t index_of(const std::string& name) const;
  int64_t require(const std::string& name) const;
  // A step's gradients without a zero fill (backend::GradWrite): forget_grads() marks every
  // gradient stale; claim_grad(i) answers kOverwrite for the first writer of a stale one (and
  // marks it written), kAccumulate afterwards; first_stale_grad() is -1 once the backward has
  // written them all (the buffer starts zero-filled, so a new set's gradients are written).
  void forget_grads();
  backend::GradWrite claim_grad(int64_t i);
  int64_t first_stale_grad() const;
  // Every parameter's stale flag, in order, and setting them back (recorded work,
  // GPTModel: a replay writes the gradients its recording claimed without claiming them).
  std::vector<bool> stale_grads() const;
  void set_stale_grads(const std::vector<bool>& stale);

  const Tensor& values() const { return values_; }  // [total_numel], model dtype
  const Tensor& grads() const { return grads_; }    // [total_numel], fp32 or 16-bit (allocate)

 private:
  std::vector<Parameter> params_;
  int64_t total_numel_ = 0;
  int64_t tp_rank_ = 0, tp_size_ = 1;
  int64_t next_init_stream_ = 0;
  Tensor values_;
  Tensor grads_;
};

}  // namespace megatron::model
