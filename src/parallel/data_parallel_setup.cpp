#include "parallel/data_parallel_setup.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "comm/nccl_communicator.h"
#include "core/error.h"
#include "parallel/grad_buckets.h"

namespace megatron::parallel {

int64_t ddp_bucket_size(const DataParallelFlags& config, int64_t dp_cp_size, int64_t local_params) {
  if (config.ddp_bucket_size) return *config.ddp_bucket_size;
  // Megatron: num_parameters // ddp_num_buckets, at least one element here (0 means no limit).
  if (config.ddp_num_buckets) return std::max<int64_t>(1, local_params / *config.ddp_num_buckets);
  return config.overlap_grad_reduce ? parallel::overlap_bucket_elements(dp_cp_size) : 0;
}

bool copy_engine_requested() {
  const char* v = std::getenv("MEGATRON_DP_COPY_ENGINE");
  if (v == nullptr || *v == '\0' || std::string(v) == "0") return false;
  if (std::string(v) == "1") return true;
  throw_error("MEGATRON_DP_COPY_ENGINE=", v, ": expected 0 or 1");
}

bool copy_engine_planned() { return copy_engine_requested() && comm::copy_engine_supported(); }

int64_t copy_engine_plan_bytes(const MixedPrecisionOptimizer& optimizer) {
  const GradBuffer& gb = optimizer.grad_buffer();
  return gb.copy_engine_on() ? gb.copy_engine_receive_elements() * 4 : 0;
}

bool prepare_copy_engine(const DataParallelFlags& config, const parallel::ProcessGroups& groups) {
  if (!copy_engine_requested() || !config.nccl_collectives || !config.use_distributed_optimizer ||
      groups.dp_cp->size() == 1) {
    return false;
  }
  return comm::use_symmetric_memory();
}

std::string copy_engine_text(bool prepared, const DataParallelFlags& config, MixedPrecisionOptimizer& optimizer) {
  GradBuffer& gb = optimizer.grad_buffer();
  if (prepared) comm::use_symmetric_memory(false);  // the model's buffers are made
  // Asked on every rank that could use it, prepared or not: a rank whose environment lacks the
  // variable then turns it off everywhere (its buffers are not symmetric) instead of skipping
  // a collective the others make.
  const comm::CopyEngineResult r = gb.enable_copy_engine();  // off at once without the distributed optimizer or DP
  if (!copy_engine_requested()) return "";
  if (!prepared) {
    // Without the distributed optimizer the buffer said why (GradBuffer::enable_copy_engine).
    return config.use_distributed_optimizer
               ? " > MEGATRON_DP_COPY_ENGINE: off (needs NCCL 2.28+ collectives on CUDA ranks and more than one "
                 "data-parallel rank)\n"
               : str_cat(" > MEGATRON_DP_COPY_ENGINE: off (", r.why_off, ")\n");
  }
  if (r.on) {
    // The receive buffer the group allocated (Communicator::enable_copy_engine), in the memory plan.
    const double mib = static_cast<double>(gb.copy_engine_receive_elements()) * 4.0 / (1024.0 * 1024.0);
    return str_cat(
        " > MEGATRON_DP_COPY_ENGINE: data-parallel reduce-scatters and parameter gathers on the copy "
        "engines (receive buffer ",
        static_cast<int64_t>(mib + 0.5), " MiB, and one more NCCL communicator)\n");
  }
  return str_cat(" > MEGATRON_DP_COPY_ENGINE: off (", r.why_off, "): the data-parallel collectives stay on the SMs\n");
}

DataParallelOptions data_parallel_options(const DataParallelFlags& config, parallel::ProcessGroups& groups,
                                          model::GPTModel& model) {
  DataParallelOptions dp;
  // Gradients are reduced over dp x cp (docs/megatron-formats.md, "Distributed optimizer and
  // gradient buffers").
  dp.group = groups.dp_cp.get();
  dp.distributed = config.use_distributed_optimizer;
  dp.bucket_size = ddp_bucket_size(config, groups.dp_cp->size(), model.parameters().total_numel());
  dp.model_parallel = groups.model_parallel.get();  // norms and the inf flag span TP x PP
  dp.overlap_param_gather = config.overlap_param_gather;
  dp.grad_dtype = config.grad_dtype;
  for (int64_t c = 1; c < model.num_chunks(); ++c) dp.bucket_starts.push_back(model.chunk_parameters(c).first);
  if (const model::Parameter* tied = model.tied_embedding()) {
    dp.held_param = tied - model.parameters().params().data();
  }
  return dp;
}

void connect_overlap_hooks(const DataParallelFlags& config, model::GPTModel& model,
                           MixedPrecisionOptimizer& optimizer) {
  const bool grads = config.overlap_grad_reduce;
  const bool params = config.overlap_param_gather;
  if (!grads && !params) return;
  GradBuffer& gb = optimizer.grad_buffer();
  model::ParamHooks hooks;
  if (grads) hooks.grads_final_from = [&gb](int64_t k) { gb.grads_final_from(k); };
  if (params) hooks.before_reading = [&gb](int64_t k) { gb.before_reading(k); };
  model.set_param_hooks(std::move(hooks));
}

std::function<void(int64_t chunk, bool on)> grad_sync_callback(model::GPTModel& model,
                                                               MixedPrecisionOptimizer& optimizer) {
  GradBuffer& gb = optimizer.grad_buffer();
  return [&gb, &model](int64_t chunk, bool on) {
    if (!on) {
      gb.disarm_grad_overlap();
      return;
    }
    const auto [first, end] = model.chunk_parameters(chunk);
    gb.arm_grad_overlap(first, end);
  };
}

}  // namespace megatron::parallel
