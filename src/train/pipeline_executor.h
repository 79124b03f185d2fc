// Runs a pipeline table (parallel/pipeline_schedule.h) on this rank's stage of the model: each
// kForward / kBackward calls GPTModel::forward_chunk / backward_chunk with activation set
// k mod activation_sets(chunk), each kComm step posts its messages together with one
// Communicator::send_recv over the pipeline group (group rank == pipeline stage):
//   send activation  model.output(chunk, set)        recv activation  model.input_buffer(chunk, set)
//   send gradient    model.input_grad()               recv gradient    model.output_grad_buffer()
// The table keeps the buffers free: input_grad is sent in the exchange right after its
// backward (before another compute can overwrite it); an activation stays in its set until
// the set's backward; a receive is posted in the exchange just before its compute, or before
// the forward that an interleaved steady-state pair runs first (that forward does not touch
// output_grad_buffer).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "model/gpt_model.h"
#include "parallel/pipeline_schedule.h"

namespace megatron::train {

struct PipelineCallbacks {
  // Fills micro-batch k of the iteration (called on the first and last virtual stage only).
  std::function<void(int64_t k, model::MicroBatch* mb)> load;
  // The dropout context of micro-batch k.
  std::function<model::DropoutContext(int64_t k)> dropout;
  // Training: the loss head's backward scales (the table has backwards). Null: forward only.
  const model::HeadBackward* head = nullptr;
};

// Runs `table` and returns the sum of the micro-batch losses (last virtual stage; 0 elsewhere).
double run_pipeline(const std::vector<parallel::PipelineAction>& table, model::GPTModel& model, comm::Communicator& pp,
                    const PipelineCallbacks& callbacks);

}  // namespace megatron::train
